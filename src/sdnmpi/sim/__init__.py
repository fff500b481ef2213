"""Flow-level simulation: how long a routed communication pattern takes.

Split like SimGrid: :mod:`~sdnmpi.sim.maxmin` (the max-min fair sharing solver),
:mod:`~sdnmpi.sim.platform` (capacities and latencies of the arcs),
:mod:`~sdnmpi.sim.flowset` (flows, paths, dependencies),
:mod:`~sdnmpi.sim.engine` (the event loop) and :mod:`~sdnmpi.sim.report`
(results, JSON and CSV; the only module that writes files).

Model.  Each demand row is a flow of ``size_bytes * 8`` bits on its path.  It
pays its path latency (the sum of its arcs' ``latency_s``) and then shares the
arcs' capacities max-min fairly with the other transmitting flows (Bertsekas and
Gallager, *Data Networks*, section 6.5.2; the CM02 model of SimGrid, Velho and
Legrand 2009, with equal weights).  A lone flow takes ``L + 8 * size_bytes / C``.
Paying the latency first (rather than adding it after the last bit) is SimGrid's
choice; the two differ only in how contending flows with different path
latencies overlap, and this one makes the SimGrid reference check exact.

Modes.

* ``phases`` (default): phase p starts when every flow of phase p-1 has
  completed (a barrier between phases).  A phase with ``repeat`` r counts r
  times: it is simulated once and its time multiplied, which is exact because
  every occurrence starts from the same idle network with the same flows and
  the simulation is deterministic.
* ``ranks``: dependency-driven, without barriers.  Every occurrence of a phase
  is a step (repeats are unrolled, up to ``max_flows`` flow occurrences).  The
  flow from rank a to rank b of step s is released when both a and b have
  completed all the flows they sent or received in the previous step in which
  each took part (see :mod:`sdnmpi.sim.flowset`).  Phases listed as a loop
  body with a common repeat (A, B with repeat r) are unrolled in the order of
  the data, A r times then B r times: phase-synchronous totals do not depend on
  that order, dependency-driven ones may.  Above ``max_flows`` occurrences
  :class:`~sdnmpi.errors.ConfigError` says to use ``phases``.  Host-level
  demands (ranks ``-1``) have no ranks to synchronize: they fall back to
  ``phases`` with a note in the result.

Protocol.  ``protocol`` (:mod:`sdnmpi.sim.protocol`) models the MPI
library's point-to-point protocol: under a protocol such as ``openmpi``, a
rank pair that exchanges messages above the eager limit both ways in one phase
(or step) sends one direction after the other.  The default, ``ideal``, is the
plain flow model above.  Host-level demands have no rank pairs: the protocol
does not apply to them (noted in the result).

Goodput.  ``goodput`` scales every capacity (:meth:`Platform.scaled`), e.g.
0.95 for the TCP payload carried by a shaped line at 1500-byte frames.

Tolerance: completions and starts closer than ``rtol`` (relative to the time
step) are processed as one event.
"""

from __future__ import annotations

from typing import Literal

from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.errors import ConfigError
from sdnmpi.sim.engine import (
    DEFAULT_SAMPLES,
    ORDERS,
    Order,
    PhaseRun,
    Progress,
    Trace,
    run,
    run_phases,
    run_ranks,
)
from sdnmpi.sim.flowset import FlowSet, serialized_exchanges, with_partial_exchanges
from sdnmpi.sim.maxmin import RTOL, incidence_matrix, maxmin_rates
from sdnmpi.sim.platform import Platform
from sdnmpi.sim.protocol import IDEAL, PROTOCOLS, Protocol, parse_protocol
from sdnmpi.sim.report import PhaseResult, SimResult, Timeline, phases_result, ranks_result

Mode = Literal["phases", "ranks"]
MODES: tuple[str, ...] = ("phases", "ranks")

#: Default bound on the flow occurrences of a ``ranks`` run once repeats are unrolled.
MAX_RANK_FLOWS = 4_000_000

__all__ = [
    "DEFAULT_SAMPLES",
    "IDEAL",
    "MAX_RANK_FLOWS",
    "MODES",
    "ORDERS",
    "PROTOCOLS",
    "RTOL",
    "FlowSet",
    "Mode",
    "Order",
    "PhaseResult",
    "PhaseRun",
    "Platform",
    "Progress",
    "Protocol",
    "SimResult",
    "Timeline",
    "Trace",
    "incidence_matrix",
    "maxmin_rates",
    "parse_protocol",
    "run",
    "simulate",
    "simulate_workload",
]


def simulate(
    fabric: Fabric,
    demands: Demands,
    routing: Routing,
    *,
    mode: Mode = "phases",
    timeline: bool = False,
    max_flows: int = MAX_RANK_FLOWS,
    rtol: float = RTOL,
    protocol: Protocol | None = None,
    goodput: float = 1.0,
    order: Order = "random",
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    progress: Progress | None = None,
) -> SimResult:
    """Predict the communication time of ``demands`` routed by ``routing`` on ``fabric``.

    ``timeline=True`` also records the arc rates over time
    (:attr:`SimResult.timeline`).  ``protocol`` is the MPI library's
    point-to-point protocol (``None``: :data:`IDEAL`, every exchange
    concurrent); ``goodput`` scales the capacities (:meth:`Platform.scaled`).
    A serialized exchange's first direction is a race: ``order="random"``
    draws it (``seed``) and a phase's time is the mean over ``samples`` draws;
    ``"lower-first"`` fixes it.  ``progress(done, total)`` hears how many of
    the flows (``phases`` mode) have completed.
    Raises :class:`~sdnmpi.errors.ConfigError` for an unknown mode or a bad
    goodput and :class:`~sdnmpi.errors.RoutingError` when the routing does not
    match the demands or the fabric.
    """
    platform = Platform.from_fabric(fabric).scaled(goodput)
    flowset = FlowSet.from_demands(platform, demands, routing)
    return simulate_workload(
        platform,
        flowset,
        mode=mode,
        timeline=timeline,
        max_flows=max_flows,
        rtol=rtol,
        protocol=protocol,
        order=order,
        samples=samples,
        seed=seed,
        progress=progress,
    )


def simulate_workload(
    platform: Platform,
    flowset: FlowSet,
    *,
    mode: Mode = "phases",
    timeline: bool = False,
    max_flows: int = MAX_RANK_FLOWS,
    rtol: float = RTOL,
    protocol: Protocol | None = None,
    order: Order = "random",
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    progress: Progress | None = None,
) -> SimResult:
    """:func:`simulate` on an already built platform and flowset."""
    if order not in ORDERS:
        raise ConfigError(f"unknown exchange order {order!r} (want one of {', '.join(ORDERS)})")
    if samples < 1:
        raise ConfigError(f"samples must be >= 1, got {samples!r}")
    if mode not in MODES:
        raise ConfigError(f"unknown simulation mode {mode!r} (want one of {', '.join(MODES)})")
    if not 0 < rtol < 1e-3:
        raise ConfigError(f"rtol must be in (0, 1e-3), got {rtol!r}")
    proto = IDEAL if protocol is None else protocol
    flowset, slowed = with_partial_exchanges(flowset, proto)
    notes = _protocol_notes(flowset, proto, slowed)
    if mode == "ranks" and flowset.has_ranks:
        steps, trace = run_ranks(
            platform,
            flowset,
            max_flows=max_flows,
            protocol=proto,
            order=order,
            seed=seed,
            timeline=timeline,
            rtol=rtol,
        )
        return ranks_result(platform, flowset, steps, trace, timeline=timeline, notes=notes)
    if mode == "ranks":
        notes = ("host-level demands have no ranks: simulated in phases mode", *notes)
    runs = run_phases(
        platform,
        flowset,
        protocol=proto,
        order=order,
        samples=samples,
        seed=seed,
        timeline=timeline,
        rtol=rtol,
        progress=progress,
    )
    return phases_result(platform, flowset, runs, timeline=timeline, notes=notes)


def _protocol_notes(flowset: FlowSet, protocol: Protocol, slowed: int) -> tuple[str, ...]:
    """What the protocol changed, for the result's notes (nothing under ``ideal``):
    the serialized exchanges, or the ``slowed`` partial ones."""
    if not (protocol.serializes or protocol.slows_exchanges):
        return ()
    ranked = (flowset.src_rank >= 0) & (flowset.dst_rank >= 0)
    if len(flowset) and not ranked.any():
        return (f"host-level demands have no rank pairs: protocol {protocol.spec} not applied",)
    if protocol.serializes:
        n, effect = serialized_exchanges(flowset, protocol), "run one direction after the other"
    elif slowed:
        n, effect = slowed, f"move x{protocol.duplex} of one direction's rate together"
    else:
        return ()
    return (
        f"protocol {protocol.spec}: {n} rank-pair exchange(s) (counted once per phase) "
        f"with messages above {protocol.eager_limit_bytes} bytes both ways {effect}",
    )
