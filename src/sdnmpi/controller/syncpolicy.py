"""When the os-ken shim syncs the planner: pure, with the time passed in.

Switch, link and re-connection events are recorded without syncing (:meth:`touch`);
one sync follows once the events have been quiet for ``quiet_s`` (LLDP discovery
comes in bursts).  The first sync after start-up also waits until discovery is
complete (every switch of the model connected, every switch link seen both ways,
every switch's report of the rules it holds received) or ``hold_s`` has passed since
the first switch connected: a restarted controller must not route a
half-discovered fabric and tear down default routes that still carry traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdnmpi.controller.inventory import Inventory
from sdnmpi.core.topology import Topology


def discovery_complete(inventory: Inventory) -> bool:
    """Every model switch connected and every model switch link seen both ways (True
    without a model: nothing to wait for)."""
    model = inventory.model
    if model is None:
        return True
    if not {s.dpid for s in model.switches} <= inventory.switches_up:
        return False
    links = sum(not model.is_host(ln.src) and not model.is_host(ln.dst) for ln in model.links)
    return len(inventory.duplex_links()) >= links


@dataclass
class SyncPolicy:
    """The shim's sync timing (see the module docstring); times in seconds of one clock.

    >>> p = SyncPolicy(quiet_s=0.5, hold_s=20.0, now=0.0)
    >>> p.touch(1.0); p.due(1.2, complete=True, reports_pending=False)
    False
    >>> p.due(1.6, complete=False, reports_pending=False)  # first sync: discovery not done
    False
    >>> p.due(1.6, complete=True, reports_pending=False)
    True
    """

    quiet_s: float
    hold_s: float
    now: float
    dirty: bool = False
    synced_once: bool = False

    def __post_init__(self) -> None:
        self.last_event = self.started = self.now

    def switch_connected(self, now: float, first: bool) -> None:
        """A switch connected; the first one starts the first sync's ``hold_s``."""
        if first and not self.synced_once:
            self.started = now

    def touch(self, now: float) -> None:
        """Something changed that a sync must take in."""
        self.dirty, self.last_event = True, now

    def due(self, now: float, complete: bool, reports_pending: bool) -> bool:
        """Whether to sync now: events quiet, and before the first sync, discovery
        ``complete`` with no switch's rule report pending (or ``hold_s`` passed)."""
        if not self.dirty or now - self.last_event < self.quiet_s:
            return False
        if self.synced_once:
            return True
        waiting = reports_pending or not complete
        return not waiting or now - self.started > self.hold_s

    def synced(self) -> None:
        """The sync :meth:`due` asked for was made."""
        self.dirty, self.synced_once = False, True


@dataclass(frozen=True)
class LldpTiming:
    """os-ken's LLDP link refresh (:mod:`os_ken.topology.switches`): one refresh frame
    every ``guard_s`` (``LLDP_SEND_GUARD``), a link not refreshed for ``timeout_s`` is
    deleted (``LINK_TIMEOUT``)."""

    guard_s: float
    timeout_s: float


#: os-ken's own values: 20 refresh frames per second, links time out after 10 s.
OSKEN_GUARD_S = 0.05
OSKEN_LINK_TIMEOUT_S = 10.0
#: The fastest refresh allowed: each frame comes back as a packet-in to the controller.
MIN_GUARD_S = 0.005


def lldp_timing(ports: int) -> LldpTiming:
    """LLDP timing for a fabric of ``ports`` switch ports (0: unknown, os-ken's).

    os-ken refreshes one port per guard, so a round over every port takes
    ``ports * guard_s``: with its defaults a fabric of more than 200 ports loses every
    link to the timeout before the round comes back to it (fat_tree(16): 5,120 ports,
    256 s per round against 10 s), and links flap.  Up to 100 ports os-ken's values
    hold (a round in 5 s); above, the guard shrinks so a round still takes 5 s, down
    to :data:`MIN_GUARD_S` (200 frames per second); beyond that the timeout grows to
    two rounds.

    >>> lldp_timing(16)
    LldpTiming(guard_s=0.05, timeout_s=10.0)
    >>> lldp_timing(500)
    LldpTiming(guard_s=0.01, timeout_s=10.0)
    >>> lldp_timing(5120)
    LldpTiming(guard_s=0.005, timeout_s=51.2)
    """
    if ports <= 0:
        return LldpTiming(OSKEN_GUARD_S, OSKEN_LINK_TIMEOUT_S)
    guard = min(OSKEN_GUARD_S, max(MIN_GUARD_S, 5.0 / ports))
    return LldpTiming(guard, max(OSKEN_LINK_TIMEOUT_S, round(2 * ports * guard, 3)))


def switch_ports(model: Topology | None) -> int:
    """Switch ports of ``model`` (0 without one): what LLDP refreshes."""
    if model is None:
        return 0
    return sum((not model.is_host(ln.src)) + (not model.is_host(ln.dst)) for ln in model.links)
