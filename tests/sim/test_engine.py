"""Event loop and modes: hand-solved completion times (derivations in comments).

Engine-level cases use ``Platform.from_arrays`` with capacities of ``8 * c`` bit/s,
so that a size in bytes over ``c`` gives seconds directly.
"""

from __future__ import annotations

import numpy as np
import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.errors import ConfigError, RoutingError
from sdnmpi.sim import FlowSet, Platform, SimResult, simulate, simulate_workload
from sdnmpi.sim.engine import run
from tests.sim.routes import host_demands, shortest_routing


def sim(
    capacity: list[float],
    paths: list[list[int]],
    sizes: list[float],
    latency: list[float] | None = None,
    phase: list[int] | None = None,
    phase_repeat: list[int] | None = None,
) -> SimResult:
    platform = Platform.from_arrays([8.0 * c for c in capacity], latency)
    flowset = FlowSet.from_paths(platform, paths, sizes, phase=phase, phase_repeat=phase_repeat)
    return simulate_workload(platform, flowset)


def test_one_link_completion_order_changes_rates():
    # One link of 1 byte/s, flows of 1, 2, 3 bytes.  All three share 1/3 until the
    # first has sent 1 byte: t1 = 3.  Then two share 1/2 with 1 and 2 bytes left:
    # the second is done after 2 more seconds, t2 = 5.  The last has 1 byte left,
    # alone at 1 byte/s: t3 = 6 (= 6 bytes / 1 byte/s: the link never idles).
    r = sim([1.0], [[0], [0], [0]], [1, 2, 3])
    assert r.flow_finish_s.tolist() == pytest.approx([3.0, 5.0, 6.0], rel=1e-14)
    assert r.total_s == pytest.approx(6.0, rel=1e-14)


def test_completion_frees_a_bottleneck_for_another_link():
    # Link 0 (2 B/s) carries A and B, link 1 (3 B/s) carries B and C.
    # Stage: link 0 gives A = B = 1, C gets 3 - 1 = 2.  A (1 byte) ends at t = 1,
    # leaving B with 3 bytes, C with 4.  Now link 0 carries only B (share 2) and
    # link 1 B and C (share 3/2): B = C = 3/2.  B ends at 1 + 3 / 1.5 = 3, C then
    # has 4 - 3 = 1 byte left, alone at 3 B/s: t = 3 + 1/3.
    r = sim([2.0, 3.0], [[0], [0, 1], [1]], [1, 4, 6])
    assert r.flow_finish_s.tolist() == pytest.approx([1.0, 3.0, 10 / 3], rel=1e-14)


def test_latency_is_paid_before_the_transfer():
    # One flow over 3 arcs of 1 B/s with latencies 1, 2, 3: 6 s of latency, then
    # 5 bytes at 1 B/s.
    r = sim([1.0, 1.0, 1.0], [[0, 1, 2]], [5], latency=[1.0, 2.0, 3.0])
    assert r.total_s == pytest.approx(11.0)
    assert r.flow_start_s[0] == pytest.approx(6.0)


def test_latency_staggers_contending_flows():
    # A uses arcs 0, 2 (latency 0), B uses arcs 1, 2 (latency 2); all 1 B/s, 4 bytes
    # each.  A is alone on arc 2 for 2 s (2 bytes sent), then A and B share 1/2:
    # A ends at 2 + 2 / 0.5 = 6 having let B send 2 bytes; B ends at 6 + 2 = 8.
    r = sim([1.0, 1.0, 1.0], [[0, 2], [1, 2]], [4, 4], latency=[0.0, 2.0, 0.0])
    assert r.flow_finish_s.tolist() == pytest.approx([6.0, 8.0])


def test_coinciding_completions_are_one_event():
    # 10 identical flows on one link: one transmission start, one completion event.
    r = sim([1.0], [[0]] * 10, [3] * 10)
    assert r.total_s == pytest.approx(30.0) and r.events == 2


def test_phases_add_up_and_repeats_multiply():
    # Phase 0: two flows of 2 bytes on the 1 B/s link -> 4 s; phase 1: one flow of
    # 3 bytes -> 3 s.  With repeats (2, 3): 2 * 4 + 3 * 3 = 17 s.
    r = sim([1.0], [[0], [0], [0]], [2, 2, 3], phase=[0, 0, 1], phase_repeat=[2, 3])
    assert [p.duration_s for p in r.phases] == pytest.approx([4.0, 3.0])
    assert [p.total_s for p in r.phases] == pytest.approx([8.0, 9.0])
    assert [p.start_s for p in r.phases] == pytest.approx([0.0, 8.0])
    assert r.total_s == pytest.approx(17.0)
    assert r.arc_bytes.tolist() == [2 * 4 + 3 * 3]


def test_zero_size_flow_completes_after_its_latency():
    r = sim([1.0], [[0], [0]], [0, 2], latency=[0.5])
    assert r.flow_finish_s.tolist() == pytest.approx([0.5, 2.5])


def test_empty_demands_take_no_time():
    fabric = Fabric(leaf_spine(1, 2, 2))
    demands = host_demands([])
    routing = Routing.from_paths("none", [])
    for mode in ("phases", "ranks"):
        r = simulate(fabric, demands, routing, mode=mode, timeline=True)
        assert r.total_s == 0.0 and r.arc_bytes.sum() == 0 and r.events == 0
        assert r.timeline is not None and len(r.timeline) == 0


def test_trace_records_flow_rates():
    platform = Platform.from_arrays([8.0, 8.0])
    inc = FlowSet.from_paths(platform, [[0], [0, 1]], [1, 1]).incidence
    trace = run(platform, inc, np.array([8.0, 8.0]), np.zeros(2), flow_rates=True, timeline=True)
    assert trace.flow_rate_bps.toarray().tolist() == [[4.0, 4.0]]
    assert trace.arc_rate_bps.toarray().tolist() == [[8.0, 4.0]]


# -- modes on a real topology ------------------------------------------------------

U = 1_000_000  # bytes: 8 ms at 1 Gbit/s
LAT = 1e-6  # per arc; host -> leaf -> host paths have 2 arcs


def star() -> Fabric:
    return Fabric(leaf_spine(1, 1, 4, latency_s=LAT))


def rank_demands(fabric: Fabric, phases: list[Phase]) -> Demands:
    pattern = Pattern("t", 4, tuple(phases))
    placement = Placement(tuple(h.name for h in fabric.topology.hosts))
    return Demands.from_pattern(fabric, pattern, placement)


def test_ranks_mode_releases_flows_per_rank():
    # Every rank has its own host link, so flows never share an arc; a flow of
    # b bytes takes L + 8b / 1e9 with L = 2 us.  Phase 1: A = 0->1 (10U), B = 2->3 (U);
    # phase 2: C = 2->3 (10U).
    # ranks: C waits only for ranks 2 and 3 (B), released at L + u, done at
    #   2L + 11u; A is done at L + 10u -> total 2L + 11u (u = 8 ms per U).
    # phases: (L + 10u) + (L + 10u) = 2L + 20u.
    fabric = star()
    demands = rank_demands(
        fabric,
        [
            Phase.from_cells("p1", [(0, 1, 10 * U), (2, 3, U)]),
            Phase.from_cells("p2", [(2, 3, 10 * U)]),
        ],
    )
    routing = shortest_routing(fabric, demands)
    u = 8 * U / 1e9
    ranks = simulate(fabric, demands, routing, mode="ranks")
    phases = simulate(fabric, demands, routing, mode="phases")
    assert ranks.mode == "ranks" and phases.mode == "phases"
    assert ranks.total_s == pytest.approx(4 * LAT + 11 * u, rel=1e-12)
    assert phases.total_s == pytest.approx(4 * LAT + 20 * u, rel=1e-12)
    assert ranks.flow_release_s.tolist() == pytest.approx([0.0, 0.0, 2 * LAT + u])


def test_ranks_mode_unrolls_repeats():
    # Same as above with phase 1 repeated twice.  Ranks 2 and 3 do B, B, C back to
    # back: B1 ends at L + u, B2 at 2L + 2u, C at 3L + 12u.  Ranks 0 and 1 do A, A:
    # A1 ends at L + 10u, A2 at 2L + 20u, the total.  The second occurrence of
    # phase 1 runs from B2's release (L + u) to A2's end: its window is L + 19u.
    # phases: 2 (L + 10u) + (L + 10u) = 3L + 30u.
    fabric = star()
    demands = rank_demands(
        fabric,
        [
            Phase.from_cells("p1", [(0, 1, 10 * U), (2, 3, U)], repeat=2),
            Phase.from_cells("p2", [(2, 3, 10 * U)]),
        ],
    )
    routing = shortest_routing(fabric, demands)
    u = 8 * U / 1e9
    ranks = simulate(fabric, demands, routing, mode="ranks")
    assert ranks.total_s == pytest.approx(4 * LAT + 20 * u, rel=1e-12)
    assert ranks.flow_finish_s.tolist() == pytest.approx(
        [4 * LAT + 20 * u, 4 * LAT + 2 * u, 6 * LAT + 12 * u], rel=1e-12
    )
    p1, p2 = ranks.phases
    assert (p1.start_s, p1.end_s) == pytest.approx((0.0, 4 * LAT + 20 * u))
    assert p1.duration_s == pytest.approx(2 * LAT + 19 * u)
    assert (p2.start_s, p2.end_s) == pytest.approx((4 * LAT + 2 * u, 6 * LAT + 12 * u))
    phases = simulate(fabric, demands, routing)
    assert phases.total_s == pytest.approx(6 * LAT + 30 * u, rel=1e-12)
    with pytest.raises(ConfigError, match="unrolls"):
        simulate(fabric, demands, routing, mode="ranks", max_flows=4)


def test_host_level_demands_fall_back_to_phases():
    fabric = star()
    demands = host_demands([(0, 1, U, 0), (2, 3, U, 1)], repeats=(1, 1))
    r = simulate(fabric, demands, shortest_routing(fabric, demands), mode="ranks")
    assert r.mode == "phases" and "phases mode" in r.notes[0]


def test_bad_inputs_are_rejected():
    fabric = star()
    demands = host_demands([(0, 1, U, 0)])
    routing = shortest_routing(fabric, demands)
    with pytest.raises(ConfigError, match="mode"):
        simulate(fabric, demands, routing, mode="fast")  # type: ignore[arg-type]
    with pytest.raises(RoutingError, match="paths for"):
        simulate(fabric, demands, Routing.from_paths("x", []))
    with pytest.raises(RoutingError, match="uses arc"):
        simulate(fabric, demands, Routing.from_paths("x", [[999]]))


def test_doctests_pass():
    import doctest
    import importlib

    for name in ("maxmin", "platform", "flowset", "engine", "report"):
        module = importlib.import_module(f"sdnmpi.sim.{name}")
        failed, _ = doctest.testmod(module)
        assert failed == 0, name
