"""Replicated broadcasts in rank-level workloads (sdnmpi.sim.replicas).

A replicated phase's flows become one flow on the tree; it completes for every
receiving rank at once and is released when the root and every receiving host's
leader rank are there.  Hand-solvable cases on a star (one switch, 1 Gbit/s, no
latency: a lone flow of B bytes takes 8 B / 1e9 s).
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi import catalog
from sdnmpi.core import broadcasts
from sdnmpi.core.broadcasts import broadcast_phase, replicated
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import Demands, Fabric
from sdnmpi.core.routing import bound as lp
from sdnmpi.core.routing.replication import route_replicated
from sdnmpi.sim import Platform, parse_protocol, simulate
from sdnmpi.sim.calibration import Calibration
from sdnmpi.sim.engine import run_ranks
from sdnmpi.sim.flowset import FlowSet, rank_steps
from sdnmpi.sim.replicated import replicated_flowset, transfer_times

MIB = 1 << 20
T = 8 * MIB / 1e9  # one MiB over one 1 Gbit/s link


def _star(nhosts: int = 6) -> Fabric:
    return Fabric(leaf_spine(1, 1, nhosts, latency_s=0.0))


def _flows(fabric: Fabric, phases: list[Phase], hosts: list[int]) -> tuple[Demands, FlowSet]:
    place = Placement(tuple(fabric.names[h] for h in hosts))
    demands = Demands.from_pattern(fabric, Pattern("w", len(hosts), tuple(phases)), place)
    routing = route_replicated("dmodk", fabric, demands)
    return demands, FlowSet.from_demands(Platform.from_fabric(fabric), demands, routing)


def _finish(
    fabric: Fabric, flows: FlowSet, protocol: str = "ideal"
) -> dict[tuple[int, int], float]:
    steps, trace = run_ranks(
        Platform.from_fabric(fabric), flows, max_flows=10_000, protocol=parse_protocol(protocol)
    )
    src, dst = flows.src_rank[steps.flow], flows.dst_rank[steps.flow]
    return {(int(s), int(d)): float(t) for s, d, t in zip(src, dst, trace.finish_s, strict=True)}


def test_the_group_is_one_flow_and_the_next_step_waits_for_it() -> None:
    fabric = _star()
    bcast = broadcast_phase(0, [1, 2, 3], MIB)
    after = Phase.from_cells("after", [(2, 3, MIB), (4, 5, MIB)])
    _, flows = _flows(fabric, [bcast, after], [0, 1, 2, 3, 4, 5])
    assert len(flows) == 3 and flows.replicas is not None
    assert flows.incidence[[0]].nnz == 4  # the root's link and the three receivers'
    done = _finish(fabric, flows)
    assert done[(0, 0)] == pytest.approx(T)  # the tree: each link once
    assert done[(2, 3)] == pytest.approx(2 * T)  # rank 2 received in the tree's step
    assert done[(4, 5)] == pytest.approx(T)  # ranks 4, 5 are not in the broadcast


def test_co_located_ranks_get_the_data_from_their_leader_and_wait_for_the_tree() -> None:
    fabric = _star()
    # ranks 1 and 2 share host 1 (rank 1 leads); rank 3 shares the root's host 0
    bcast = broadcast_phase(0, [1, 2, 3, 4], MIB)
    after = Phase.from_cells("after", [(2, 4, MIB), (5, 3, MIB)])
    _, flows = _flows(fabric, [bcast, after], [0, 1, 1, 0, 2, 3])
    assert flows.replicas is not None
    assert flows.replicas.ranks.tolist() == [1, 2, 4]  # rank 3 is served on the root's host
    assert flows.replicas.leader.tolist() == [True, False, True]
    done = _finish(fabric, flows)
    assert done[(0, 0)] == pytest.approx(T)  # host 1's link carries it once for both ranks
    assert done[(2, 4)] == pytest.approx(2 * T)
    assert done[(5, 3)] == pytest.approx(T)  # rank 3 synchronizes nothing, as intra-host


def test_the_tree_waits_for_every_leader_but_not_for_co_located_ranks() -> None:
    fabric = _star()
    busy = Phase.from_cells("busy", [(1, 5, 2 * MIB), (2, 4, 3 * MIB)])
    bcast = broadcast_phase(0, [1, 2, 3], MIB)
    # rank 1 leads host 1, rank 2 shares it; rank 3 is alone on host 2
    _, flows = _flows(fabric, [busy, bcast], [0, 1, 1, 2, 3, 4])
    done = _finish(fabric, flows)
    # host 1's uplink carries 1->5 and 2->4 at half rate each until 1->5 ends (2 MiB:
    # 4T); 2->4 has 1 MiB left, alone: 5T.  The tree waits for leader rank 1 (4T), not
    # for rank 2, and uses host 1's downlink, which nothing else does: 1 MiB, 5T.
    assert done[(1, 5)] == pytest.approx(4 * T)
    assert done[(2, 4)] == pytest.approx(5 * T)
    assert done[(0, 0)] == pytest.approx(5 * T)  # released at 4T, 1 MiB into host 1 and 2


def test_phases_mode_and_the_direct_tree_agree() -> None:
    fabric = Fabric(leaf_spine(2, 4, 2, latency_s=1e-6))
    pattern = replicated(catalog.load_pattern("bcast:nprocs=8,bytes=1048576,library=openmpi"))
    place = Placement(tuple(fabric.names[:8]))
    demands = Demands.from_pattern(fabric, pattern, place)
    routing = route_replicated("dmodk", fabric, demands)
    platform = Platform.from_fabric(fabric)
    direct = transfer_times(
        replicated_flowset(platform, fabric, route_replicated_trees(fabric, demands), [MIB]),
        platform,
    )
    for mode in ("phases", "ranks"):
        got = simulate(fabric, demands, routing, mode=mode).total_s
        assert got == pytest.approx(float(direct[0]))
    sim = simulate(fabric, demands, routing)
    assert sim.arc_bytes.max() == MIB  # no arc carries it twice
    assert lp.max_link_busy(fabric, demands, routing).total_s == pytest.approx(T)


def route_replicated_trees(fabric: Fabric, demands: Demands) -> list:
    from sdnmpi.core.routing.replication import Multicasts

    return Multicasts.of(demands).trees(fabric, demands)


def test_protocols_leave_the_replicated_transfer_alone() -> None:
    fabric = _star()
    bcast = broadcast_phase(0, [1, 2, 3], 4 * MIB)
    back = Phase.from_cells("back", [(1, 0, 4 * MIB)])
    _, flows = _flows(fabric, [bcast, back], [0, 1, 2, 3])
    for name in ("openmpi", "mpich"):
        proto = parse_protocol(name)
        assert not flows.rendezvous(proto)[0]
        done = _finish(fabric, flows, name)
        assert done[(0, 0)] == pytest.approx(4 * T)  # neither slowed nor released early
        assert done[(1, 0)] == pytest.approx(8 * T)
    cal = Calibration(link_scale=1.0, goodput=0.5, exchange_efficiency={1: 0.8})
    place = Placement(tuple(fabric.names[:4]))
    demands = Demands.from_pattern(fabric, Pattern("w", 4, (bcast,)), place)
    routing = route_replicated("dmodk", fabric, demands)
    assert cal.simulate(fabric, demands, routing, "openmpi", mode="ranks").total_s == (
        pytest.approx(8 * T)
    )


def test_a_wide_broadcast_does_not_widen_the_dependency_columns() -> None:
    fabric = Fabric(fat_tree(8))  # 128 hosts, 4 ranks each
    n = 512
    hosts = [h for h in range(fabric.nhosts) for _ in range(4)]
    ring = Phase.from_cells("ring", [(r, (r + 4) % n, 4096) for r in range(n)])
    _, flows = _flows(fabric, [broadcast_phase(0, range(n), 65536), ring], hosts)
    steps = rank_steps(flows, 100_000)
    assert steps.deps.member.shape[1] == 2 and steps.deps.more_member is not None
    assert steps.deps.more_member[0].size == n - 4  # every rank off the root's host
    done = _finish(fabric, flows)
    assert min(t for (s, _), t in done.items() if s != 0 or _ != 0) > done[(0, 0)]


LIBS = ("openmpi", "mpich")


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from([leaf_spine(2, 4, 2), leaf_spine(2, 5, 4), fat_tree(4)]),
    st.integers(1, 16 * MIB),
    st.sampled_from(LIBS),
    st.data(),
)
def test_replicated_is_never_slower_than_the_library_and_never_beats_the_bound(
    topo: object, nbytes: int, library: str, data: st.DataObject
) -> None:
    fabric = Fabric(topo)  # type: ignore[arg-type]
    n = fabric.nhosts
    hosts = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=n, unique=True))
    root = data.draw(st.integers(0, len(hosts) - 1))
    spec = f"bcast:nprocs={len(hosts)},bytes={nbytes},library={library},root={root}"
    pattern = catalog.load_pattern(spec)
    place = Placement(tuple(fabric.names[h] for h in hosts))
    times = {}
    for name, pat in (("library", pattern), ("replicated", replicated(pattern))):
        demands = Demands.from_pattern(fabric, pat, place)
        routing = route_replicated("dmodk", fabric, demands)
        times[name] = simulate(fabric, demands, routing, mode="ranks").total_s
        barriers = simulate(fabric, demands, routing).total_s
        assert lp.pattern_bound(fabric, demands).lower_bound_s <= barriers * (1 + 1e-6)
    assert times["replicated"] <= times["library"] * (1 + 1e-6)
    alone = lp.pattern_bound(
        fabric, Demands.from_pattern(fabric, replicated(pattern), place)
    ).lower_bound_s
    # on these idle fabrics the tree reaches the bound up to its latency
    assert times["replicated"] == pytest.approx(alone, rel=1e-3, abs=1e-5)


def test_doctests() -> None:
    from sdnmpi.sim import flowset, replicas

    for module in (flowset, replicas, broadcasts):
        assert doctest.testmod(module).failed == 0
    assert np.__name__ == "numpy"
