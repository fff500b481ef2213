"""Fakes shipped with sdnmpi for tests of code that drives switches or needs a clock.

* :class:`FakeOFNetwork`: per-switch flow tables that apply the planner's rules and
  follow packets through them (faucet's ``FakeOFTable`` for a whole fabric);
* :class:`FakeClock`: time that moves only when told;
* :func:`discover`: the events of a whole model topology fed to a planner.
"""

from __future__ import annotations

from sdnmpi.testing.clock import FakeClock
from sdnmpi.testing.discovery import discover
from sdnmpi.testing.ofnetwork import (
    FakeOFNetwork,
    FakeOFNetworkError,
    Spread,
    Step,
    Trace,
    matches,
)

__all__ = [
    "FakeClock",
    "FakeOFNetwork",
    "FakeOFNetworkError",
    "Spread",
    "Step",
    "Trace",
    "discover",
    "matches",
]
