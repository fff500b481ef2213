"""Routes of a job on a loaded fabric: properties and hand-checked loads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.manager import planning
from sdnmpi.manager.model import Process, RoutePair

TOPO = leaf_spine(2, 2, 4)
HOSTS = [h.name for h in TOPO.hosts]
UP = ("h1", "leaf1", "spine1", "leaf2", "h5")


def test_relative_load_reduces_capacity_per_direction():
    """One job at its peak on h1 -> h5 via spine1: those 4 arcs count n = 1, so they offer
    half their capacity; the reverse direction is untouched."""
    fab = planning.loaded(TOPO, [[RoutePair("h1", "h5", UP, 1000.0)]])
    plain = Fabric(TOPO)
    used = planning.arc_bytes(plain, [RoutePair("h1", "h5", UP, 1.0)]) > 0
    assert used.sum() == 4
    assert np.allclose(fab.capacity_bps[used], plain.capacity_bps[used] / 2)
    assert np.allclose(fab.capacity_bps[~used], plain.capacity_bps[~used])


def test_two_jobs_add_up_and_weights_are_relative():
    """Job A: 100 bytes on UP.  Job B: 10 bytes on UP and 40 on h2 -> h6 via spine1.
    On the uplink leaf1 -> spine1, A is at its peak (1) and so is B (10 + 40 = 50 of a
    peak of 50): n = 2, a third of the capacity.  On h1 -> leaf1: 1 + 10/50."""
    other = ("h2", "leaf1", "spine1", "leaf2", "h6")
    a = [RoutePair("h1", "h5", UP, 100.0)]
    b = [RoutePair("h1", "h5", UP, 10.0), RoutePair("h2", "h6", other, 40.0)]
    n = planning.background(Fabric(TOPO), [a, b])
    arcs = {(x.src, x.dst): x.index for x in TOPO.arcs}
    assert n[arcs[("leaf1", "spine1")]] == pytest.approx(2.0)
    assert n[arcs[("h1", "leaf1")]] == pytest.approx(1.0 + 10 / 50)
    assert n[arcs[("h2", "leaf1")]] == pytest.approx(40 / 50)


def test_idle_job_adds_no_load():
    assert not planning.background(Fabric(TOPO), [[]]).any()


@settings(max_examples=40, deadline=None)
@given(
    placement=st.lists(st.sampled_from(HOSTS), min_size=2, max_size=8),
    busy=st.lists(st.tuples(st.sampled_from(HOSTS), st.sampled_from(HOSTS)), max_size=4),
    router=st.sampled_from(["ours", "greedy", "dmodk", "ecmp"]),
)
def test_routes_join_the_pairs_with_traffic(placement, busy, router):
    """Every pair that sends gets one path from its source to its destination over
    existing arcs, with the pair's bytes; the busy jobs never change that."""
    n = len(placement)
    cells = [(r, (r + 1) % n, 1000 * (r + 1)) for r in range(n)]
    pattern = Pattern("ring", n, (Phase.from_cells("ring", cells),))
    procs = [Process(r, h) for r, h in enumerate(placement)]
    others = [
        planning.plan(
            TOPO,
            Pattern("x", 2, (Phase.from_cells("x", [(0, 1, 5)]),)),
            [Process(0, s), Process(1, d)],
            "ours",
        )
        for s, d in busy
        if s != d
    ]
    routes = planning.plan(TOPO, pattern, procs, router, others)
    arcs = {(a.src, a.dst) for a in TOPO.arcs}
    want: dict[tuple[str, str], float] = {}
    for s, d, b in cells:
        if placement[s] != placement[d]:
            key = (placement[s], placement[d])
            want[key] = want.get(key, 0.0) + b
    assert {(r.src, r.dst): r.size_bytes for r in routes} == want
    for r in routes:
        assert r.path[0] == r.src and r.path[-1] == r.dst
        assert len(set(r.path)) == len(r.path)
        assert all((u, v) in arcs for u, v in zip(r.path, r.path[1:], strict=False))


def test_routes_over_parallel_links_name_the_cable_they_take():
    """leaf_spine(1, 2, 1, uplinks_per_pair=2): each leaf reaches the spine by two
    cables.  Two pairs crossing the spine at once are routed over both cables, the
    paths say which (``leaf1:3``), and the load lands on those arcs only; a plain
    name had made the controller put every route on the lowest port."""
    topo = leaf_spine(1, 2, 2, uplinks_per_pair=2)
    cells = [(0, 2, 1000), (1, 3, 1000)]  # h1, h2 on leaf1 -> h3, h4 on leaf2
    pattern = Pattern("two", 4, (Phase.from_cells("two", cells),))
    procs = [Process(r, h) for r, h in enumerate(("h1", "h2", "h3", "h4"))]
    routes = planning.plan(topo, pattern, procs, "ours")
    uplinks = {r.path[1] for r in routes}
    assert len(uplinks) == 2 and all(u.startswith("leaf1:") for u in uplinks)
    fabric = Fabric(topo)
    load = planning.arc_bytes(fabric, routes)
    up = [a for a in topo.arcs if a.src == "leaf1" and a.dst == "spine1"]
    assert sorted(load[a.index] for a in up) == [1000.0, 1000.0]
    first = routes[0]
    assert sorted(planning.arc_bytes(fabric, [first])[a.index] for a in up) == [0.0, 1000.0]
    plain = RoutePair(first.src, first.dst, tuple(n.split(":")[0] for n in first.path), 1000.0)
    assert [planning.arc_bytes(fabric, [plain])[a.index] for a in up] == [500.0, 500.0]


@settings(max_examples=40, deadline=None)
@given(
    placement=st.lists(st.sampled_from(HOSTS), min_size=2, max_size=12),
    phases=st.lists(
        st.lists(
            st.tuples(st.integers(0, 11), st.integers(0, 11), st.integers(1, 2**40)),
            min_size=1,
            max_size=20,
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_the_manager_routes_host_pairs_not_rank_pairs(placement, phases):
    """The flows the manager routes are one per host pair and phase (the switches hold
    one path per host pair): each carries the bytes and messages of its ranks' flows,
    and a router that ignores ranks (D-mod-K) installs the same routes either way."""
    n = len(placement)
    pattern = Pattern(
        "p",
        n,
        tuple(
            Phase.from_cells(f"p{i}", [(s % n, d % n, b) for s, d, b in cells if s % n != d % n])
            for i, cells in enumerate(phases)
        ),
    )
    procs = [Process(r, h) for r, h in enumerate(placement)]
    fabric = Fabric(TOPO)
    per_rank = Demands.from_pattern(fabric, pattern, Placement(tuple(placement)))
    merged = planning.demands_for(fabric, pattern, procs)

    def totals(d: Demands) -> dict[tuple[int, int, int], tuple[int, int]]:
        out: dict[tuple[int, int, int], tuple[int, int]] = {}
        for i in range(len(d)):
            key = (int(d.phase[i]), int(d.src[i]), int(d.dst[i]))
            b, m = out.get(key, (0, 0))
            out[key] = (b + int(d.size_bytes[i]), m + int(d.message_counts[i]))
        return out

    assert totals(merged) == totals(per_rank)
    assert len(merged) == len(totals(per_rank))  # one flow per key
    assert (merged.src_rank == -1).all() and (merged.dst_rank == -1).all()
    by_rank = planning.pair_routes(fabric, per_rank, route("dmodk", fabric, per_rank))
    assert planning.plan(TOPO, pattern, procs, "dmodk") == by_rank
