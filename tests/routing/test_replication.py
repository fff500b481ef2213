"""Replicated broadcasts in patterns, demands, routes, link loads and the LP bound.

sdnmpi.core.broadcasts finds a collective expansion's MPI_Bcast calls and puts one
replicated phase in place of each; sdnmpi.core.routing.replication groups its flows
and routes them on a tree; the metric and the LP bound load each tree arc once.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi import catalog
from sdnmpi.core import broadcasts, collectives
from sdnmpi.core.broadcasts import bcast_calls, broadcast_phase, is_replicated, replicated
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.pattern import Pattern, Phase, concat
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import Demands, Fabric, validate
from sdnmpi.core.routing import bound as lp
from sdnmpi.core.routing import multicast_bound as mb
from sdnmpi.core.routing.multicast import ReplicationTree, build_tree, check_tree
from sdnmpi.core.routing.paths import dijkstra
from sdnmpi.core.routing.replication import Multicasts, route_replicated
from sdnmpi.core.topology import Topology
from sdnmpi.errors import PatternError

MIB = 1 << 20
GBPS = 1e9


def _pattern(nprocs: int, nbytes: int, root: int = 0, **kw: str) -> Pattern:
    return collectives.expand("bcast", nprocs, nbytes, root=root, **kw).to_pattern()  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 40),
    st.integers(1, 3 * MIB),
    st.data(),
    st.sampled_from(collectives.algorithms("bcast")),
)
def test_every_algorithms_call_is_found_with_its_root_size_and_receivers(
    nprocs: int, nbytes: int, data: st.DataObject, algorithm: str
) -> None:
    root = data.draw(st.integers(0, nprocs - 1))
    pattern = _pattern(nprocs, nbytes, root, algorithm=algorithm)
    (call,) = bcast_calls(pattern)
    assert (call.first, call.last) == (0, len(pattern.phases) - 1)
    assert (call.algorithm, call.root, call.nbytes) == (algorithm, root, nbytes)
    assert call.receivers == tuple(r for r in range(nprocs) if r != root)
    (phase,) = replicated(pattern).phases
    assert is_replicated(phase.label) and algorithm in phase.label
    assert broadcasts.replicated_root(phase) == (root, nbytes)
    assert phase.dst.tolist() == list(call.receivers)


def test_only_the_bcast_calls_of_a_workload_are_replaced_and_repeats_are_kept() -> None:
    allreduce = catalog.load_pattern("allreduce:nprocs=8,bytes=4096")
    bcast = catalog.load_pattern("bcast:nprocs=8,bytes=65536,root=3,iterations=5")
    both = concat("mix", [allreduce, bcast, allreduce, _pattern(8, 1000, 7)])
    calls = bcast_calls(both)
    assert [(c.root, c.nbytes, c.repeat) for c in calls] == [(3, 65536, 5), (7, 1000, 1)]
    out = replicated(both)
    n = len(allreduce.phases)
    assert out.phases[:n] == allreduce.phases and out.phases[n + 1 : 2 * n + 1] == allreduce.phases
    assert [is_replicated(p.label) for p in out.phases].count(True) == 2
    assert out.phases[n].repeat == 5
    assert replicated(allreduce) is allreduce  # nothing to replicate


def test_an_incomplete_run_of_steps_is_not_a_call() -> None:
    pattern = _pattern(8, MIB, algorithm="binomial")
    cut = pattern.replace(phases=pattern.phases[:-1])
    assert bcast_calls(cut) == []


def test_a_marked_phase_with_two_senders_is_refused() -> None:
    fabric = Fabric(leaf_spine(2, 4, 2))
    bad = Phase.from_cells(f"{broadcasts.REPLICATED}: root 0", [(0, 1, 5), (2, 3, 5)])
    place = Placement(tuple(fabric.names[:4]))
    demands = Demands.from_pattern(fabric, Pattern("x", 4, (bad,)), place)
    with pytest.raises(PatternError, match=r"several (hosts|ranks)"):
        Multicasts.of(demands)


def test_doctests() -> None:
    for module in (broadcasts,):
        assert doctest.testmod(module).failed == 0


# -- groups and trees ------------------------------------------------------------------


def _demands(fabric: Fabric, phases: list[Phase], hosts: list[int]) -> Demands:
    place = Placement(tuple(fabric.names[h] for h in hosts))
    nprocs = len(hosts)
    return Demands.from_pattern(fabric, Pattern("w", nprocs, tuple(phases)), place)


def test_co_located_ranks_make_one_group_and_the_tree_reaches_each_host_once() -> None:
    fabric = Fabric(leaf_spine(2, 4, 2))
    hosts = [0, 0, 1, 1, 5, 5, 6, 7]  # two ranks on hosts 0, 1 and 5
    phase = broadcast_phase(0, range(8), MIB)
    demands = _demands(fabric, [phase], hosts)
    assert len(demands) == 6  # rank 1 shares the root's host: no flow
    groups = Multicasts.of(demands)
    assert len(groups) == 1 and groups.receivers(demands, 0) == (1, 5, 6, 7)
    routing = route_replicated("dmodk", fabric, demands)
    validate(fabric, demands, routing)
    arcs = sorted({a for i in range(len(demands)) for a in routing.path(i)})
    tree = ReplicationTree(0, (1, 5, 6, 7), tuple(arcs))
    check_tree(fabric, _ordered(fabric, tree))
    util = lp.max_link_busy(fabric, demands, routing)
    assert util.total_s == pytest.approx(8 * MIB / GBPS)  # every arc carries it once


def _ordered(fabric: Fabric, tree: ReplicationTree) -> ReplicationTree:
    """The tree's arcs, a parent's first (what check_tree wants)."""
    arcs, reached, left = [], {tree.root}, set(tree.arcs)
    while left:
        ready = sorted(a for a in left if int(fabric.arc_src[a]) in reached)
        assert ready, "the arcs do not form a tree"
        arcs += ready
        reached |= {int(fabric.arc_dst[a]) for a in ready}
        left -= set(ready)
    return ReplicationTree(tree.root, tree.receivers, tuple(arcs))


def test_other_traffic_steers_the_tree_and_a_marked_phase_holds_one_root() -> None:
    fabric = Fabric(leaf_spine(2, 4, 2))
    demands = _demands(fabric, [broadcast_phase(0, range(3), MIB)], [0, 4, 5])
    idle = route_replicated("dmodk", fabric, demands)
    spine = {int(fabric.arc_dst[a]) for a in idle.path(0) if fabric.level[fabric.arc_dst[a]] == 2}
    load = np.zeros(fabric.narcs)
    load[[a for a in range(fabric.narcs) if int(fabric.arc_dst[a]) in spine]] = 1e9
    steered = route_replicated("dmodk", fabric, demands, load_bps=load)
    validate(fabric, demands, steered)
    other = {
        int(fabric.arc_dst[a]) for a in steered.path(0) if fabric.level[fabric.arc_dst[a]] == 2
    }
    assert other and other != spine
    assert steered.meta["trees"] == 1
    mixed = Phase.from_arrays(
        f"{broadcasts.REPLICATED}: root 0", [0, 0, 1], [1, 2, 2], [MIB, MIB, MIB]
    )
    with pytest.raises(PatternError, match=r"several (hosts|ranks)"):
        Multicasts.of(_demands(fabric, [mixed], [0, 4, 5]))


# -- the bound ------------------------------------------------------------------------


def test_on_a_star_the_bound_and_the_tree_meet() -> None:
    """One switch, 1 Gbit/s: the root's link carries the buffer once, so does each
    receiver's: lambda = 8 B / C, certified by the tree and by the LP alike."""
    fabric = Fabric(leaf_spine(1, 1, 6, latency_s=0.0))
    demands = _demands(fabric, [broadcast_phase(0, range(6), MIB)], list(range(6)))
    bound = lp.pattern_bound(fabric, demands)
    (ph,) = bound.phases
    assert ph.status == "certified"
    assert ph.lp_s == ph.nic_s == ph.single_path_s == pytest.approx(8 * MIB / GBPS)
    z = np.zeros(0, np.int64)
    m = mb.Multicast(0, tuple(range(1, 6)), float(MIB))
    problem = mb._Problem(fabric, float(MIB))
    problem.multicast(m)
    assert problem.solve() == pytest.approx(8 * MIB / GBPS, rel=1e-6)
    # the unicast LP of the same bytes, one copy per receiver, says five times that
    unicast = Phase.from_cells("u", [(0, r, MIB) for r in range(1, 6)])
    five = lp.pattern_bound(fabric, _demands(fabric, [unicast], list(range(6))))
    assert five.lp_max_link_busy_s == pytest.approx(
        5 * mb.multicast_lambda(fabric, z, z, z, [m])[0]
    )


TOPOS = [leaf_spine(2, 4, 2), leaf_spine(3, 3, 2, uplink_bps=2e9), fat_tree(4)]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(TOPOS), st.data())
def test_the_bound_never_exceeds_a_tree_on_a_loaded_fabric(
    topo: Topology, data: st.DataObject
) -> None:
    """With other flows in the phase (another job's, on shortest paths), the multicast
    LP is at least the NIC bound and at most the busiest link of the tree grown over
    those flows' load; alone, the pattern's bound says the same."""
    fabric = Fabric(topo)
    n = fabric.nhosts
    hosts = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=n, unique=True))
    nbytes = data.draw(st.integers(1, 4 * MIB))
    drawn = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=6))
    pairs = [(a, b) for a, b in drawn if a != b]
    s = np.array([a for a, _ in pairs], np.int64)
    t = np.array([b for _, b in pairs], np.int64)
    b = np.full(len(pairs), 2 * MIB, np.int64)
    m = mb.Multicast(hosts[0], tuple(hosts[1:]), float(nbytes))
    lam, status, _ = mb.multicast_lambda(fabric, s, t, b, [m])
    assert lam >= mb.nic_bound(fabric, s, t, b, [m]) * (1 - 1e-6)
    load = np.zeros(fabric.narcs)
    for src, dst in pairs:
        path = dijkstra(fabric, [1.0] * fabric.narcs, src, dst)
        assert path is not None
        load[path] += 8.0 * 2 * MIB
    tree = build_tree(fabric, m.root, m.receivers, load)
    load[list(tree.arcs)] += 8.0 * nbytes
    peak = float((load / fabric.capacity_bps).max())
    assert lam <= peak * (1 + 1e-6), (lam, peak, status)
    alone = _demands(fabric, [broadcast_phase(0, range(len(hosts)), nbytes)], hosts)
    ph = lp.pattern_bound(fabric, alone).phases[0]
    lam_alone = mb.multicast_lambda(fabric, s[:0], t[:0], b[:0], [m])[0]
    assert ph.lp_s == pytest.approx(lam_alone, rel=1e-6)
    assert ph.single_path_s >= ph.lp_s * (1 - 1e-9)
    assert lam >= lam_alone * (1 - 1e-6)
