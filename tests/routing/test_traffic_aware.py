"""The traffic-aware baselines: SDN Allreduce (per-pair Dijkstra) and the greedy manager.

The contending pattern: four flows from pod 1 to pod 2 of a k=4 fat-tree (and two
flows between the leaves of a 2-spine leaf-spine) have link-disjoint shortest
paths; a router that tracks what it placed must find them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.routing import Fabric, Routing, paths, route, validate
from sdnmpi.core.routing import allreduce as allreduce_module
from sdnmpi.core.routing.greedy import _best
from sdnmpi.core.topology import Host, Link, Switch, Topology
from sdnmpi.errors import ConfigError, RoutingError
from tests.routing.flows import demands, flows_per_arc, host_bridge

TRAFFIC_AWARE = ("allreduce", "greedy", "greedy_bottleneck")


def _switch_load(f: Fabric, r: Any) -> np.ndarray:
    load = flows_per_arc(f, r)
    return load[(f.arc_src >= f.nhosts) & (f.arc_dst >= f.nhosts)]


@pytest.mark.parametrize("router", TRAFFIC_AWARE)
def test_contending_flows_get_disjoint_paths_on_fat_tree(router: str) -> None:
    f = Fabric(fat_tree(4))
    d = demands([(0, 4), (1, 5), (2, 6), (3, 7)], 10**6)
    r = route(router, f, d)
    validate(f, d, r, shortest=True, valley_free=True)
    assert _switch_load(f, r).max() == 1
    assert len({r.node_path(f, i)[3] for i in range(4)}) == 4  # four different cores


@pytest.mark.parametrize("router", TRAFFIC_AWARE)
def test_contending_flows_get_disjoint_paths_on_leaf_spine(router: str) -> None:
    f = Fabric(leaf_spine(2, 2, 2))
    d = demands([(0, 2), (1, 3)], 10**6)
    r = route(router, f, d)
    assert {r.node_path(f, 0)[2], r.node_path(f, 1)[2]} == {"spine1", "spine2"}


def test_allreduce_runs_one_dijkstra_per_distinct_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    real = paths.dijkstra

    def counting(fabric: Fabric, cost: Any, src: int, dst: int, allowed: Any = None) -> Any:
        calls.append((src, dst))
        return real(fabric, cost, src, dst, allowed)

    monkeypatch.setattr(allreduce_module, "dijkstra", counting)
    f = Fabric(leaf_spine(2, 2, 2))
    d = demands([(1, 3), (0, 2), (1, 3), (2, 0)])
    r = route("allreduce", f, d)
    assert calls == [(1, 3), (0, 2), (2, 0)]  # order of first appearance
    assert r.path(0) == r.path(2)
    # the first pair takes the first spine; the second avoids the link it loaded
    assert r.node_path(f, 0)[2] == "spine1"
    assert r.node_path(f, 1)[2] == "spine2"


@pytest.mark.parametrize("router", [*TRAFFIC_AWARE, "netsa", "ecmp", "minhop", "single"])
def test_never_transits_a_host(router: str) -> None:
    f = Fabric(host_bridge())
    d = demands([(0, 2)], 10**6)
    r = route(router, f, d)
    validate(f, d, r, shortest=True)
    assert r.node_path(f, 0) == ("h1", "s1", "s3", "s4", "s2", "h3")


def test_greedy_places_heaviest_pair_first() -> None:
    f = Fabric(leaf_spine(2, 2, 2))
    d = demands([(0, 2), (1, 3)], [1, 100])
    r = route("greedy", f, d)
    assert r.node_path(f, 1)[2] == "spine1"  # the heavy pair gets the first candidate
    assert r.node_path(f, 0)[2] == "spine2"
    assert r.router == "greedy"
    assert route("greedy_bottleneck", f, d).router == "greedy_bottleneck"


def test_greedy_weighs_phase_repeats() -> None:
    f = Fabric(leaf_spine(2, 2, 2))
    base = demands([(0, 2), (1, 3)], [10, 20])
    # pair (0, 2) sits in a phase repeated 5 times: 50 bytes beat 20
    d = type(base)(
        base.src,
        base.dst,
        base.size_bytes,
        np.array([1, 0]),
        base.src_rank,
        base.dst_rank,
        ("once", "five times"),
        np.array([1, 5]),
    )
    r = route("greedy", f, d)
    assert r.node_path(f, 0)[2] == "spine1"


def test_score_sum_versus_bottleneck() -> None:
    # two 2-arc paths, capacity 1: A loads (0.5, 0.5), B loads (0.9, 0.0)
    # sum: A 1.0, B 0.9 -> B.  bottleneck with demand 0.1: A max 0.6, B max 1.0 -> A.
    paths = np.array([[0, 1], [2, 3]])
    load = np.array([0.5, 0.5, 0.9, 0.0])
    cap = np.ones(4)
    assert _best(paths, load, cap, 0.1, bottleneck=False) == 1
    assert _best(paths, load, cap, 0.1, bottleneck=True) == 0
    # equal bottleneck: ties by the sum, then first
    load = np.array([0.5, 0.0, 0.5, 0.2])
    assert _best(paths, load, cap, 0.1, bottleneck=True) == 0
    assert _best(paths, np.zeros(4), cap, 0.1, bottleneck=True) == 0


def test_unknown_variant_and_unreachable() -> None:
    from sdnmpi.core.routing.greedy import route_variant

    f = Fabric(leaf_spine(2, 2, 2))
    with pytest.raises(ConfigError, match="unknown greedy variant"):
        route_variant("greedy_max", f, demands([(0, 2)]))
    hosts = tuple(Host(f"h{i}", f"02:00:00:00:00:0{i}") for i in (1, 2, 3))
    switches = (Switch("s1", 1, 1), Switch("s2", 2, 1))
    links = (
        Link("h1", "s1", 1, 1, 1e9),
        Link("h2", "s1", 1, 2, 1e9),
        Link("h2", "s2", 2, 1, 1e9),
        Link("h3", "s2", 1, 2, 1e9),
    )
    cut = Fabric(Topology("cut", hosts, switches, links))
    with pytest.raises(RoutingError, match="no path from h1 to h3"):
        route("allreduce", cut, demands([(0, 2)]))
    with pytest.raises(RoutingError, match="no path from h1 to h3"):
        route("greedy", cut, demands([(0, 2)]))


@pytest.mark.parametrize("variant", ["greedy", "greedy_bottleneck"])
@pytest.mark.parametrize(
    ("spec", "placement", "per_host"),
    [
        ("alltoall:nprocs=64,bytes=65536", "block", 1),
        ("ft:nprocs=64", "random", 4),
        ("cg:nprocs=32", "random", 2),
        ("stencil3d:nprocs=64", "cyclic", 1),
    ],
)
def test_listwise_greedy_chooses_the_numpy_paths(variant: str, spec, placement, per_host) -> None:
    # The fast placement (candidates unranked per chunk, scores in Python floats) and
    # the one-pair-at-a-time numpy placement choose the same path for every pair.
    from sdnmpi import catalog
    from sdnmpi.core.routing import Demands
    from sdnmpi.core.routing import greedy as g

    topo = fat_tree(8)
    pattern = catalog.load_pattern(spec)
    place = catalog.resolve_placement(pattern, topo, placement, ranks_per_host=per_host, seed=2)
    f = Fabric(topo)
    d = Demands.from_pattern(f, pattern, place)
    pairs, _, pair_bytes = d.host_pairs()
    order = np.argsort(-pair_bytes, kind="stable")
    bottleneck = variant == "greedy_bottleneck"
    cand = paths.ShortestPaths(f, 7)  # a cap that spreads: 16 paths between pods
    fast = g._place_listwise(f, pairs, pair_bytes, order, cand, bottleneck)
    slow = g._place(f, pairs, pair_bytes, order, paths.ShortestPaths(f, 7), bottleneck)
    assert fast == slow
    assert route(variant, f, d).arcs.shape[0] == len(d)


@pytest.mark.parametrize("cap", [7, 32])
@pytest.mark.parametrize(
    ("topo_name", "spec", "placement", "per_host"),
    [
        ("fat_tree(8)", "alltoall:nprocs=128,bytes=65536", "block", 1),
        ("fat_tree(8)", "ft:nprocs=64", "random", 4),
        ("fat_tree(8)", "cg:nprocs=32", "random", 2),
        ("fat_tree(4)", "stencil3d:nprocs=16", "cyclic", 1),
        ("leaf_spine", "alltoall:nprocs=18,bytes=1000", "random", 1),
    ],
)
def test_greedy_by_leaves_chooses_the_listwise_paths(
    cap: int, topo_name: str, spec: str, placement: str, per_host: int
) -> None:
    # Candidates unranked once per leaf pair (single-homed hosts) give the same path
    # for every pair as candidates unranked per host pair.
    from sdnmpi import catalog
    from sdnmpi.core.routing import Demands
    from sdnmpi.core.routing import greedy as g
    from sdnmpi.core.routing.candidates import attachment

    topo = {
        "fat_tree(8)": lambda: fat_tree(8),
        "fat_tree(4)": lambda: fat_tree(4),
        "leaf_spine": lambda: leaf_spine(4, 3, 6),
    }[topo_name]()
    pattern = catalog.load_pattern(spec)
    place = catalog.resolve_placement(pattern, topo, placement, ranks_per_host=per_host, seed=3)
    f = Fabric(topo)
    d = Demands.from_pattern(f, pattern, place)
    pairs, _, pair_bytes = d.host_pairs()
    order = np.argsort(-pair_bytes, kind="stable")
    att = attachment(f)
    assert att is not None
    fast = g._place_by_leaves(f, att, pairs, pair_bytes, order, paths.ShortestPaths(f, cap))
    slow = g._place_listwise(f, pairs, pair_bytes, order, paths.ShortestPaths(f, cap), False)
    assert _rows(pairs, fast) == slow
    assert (
        g.route_variant("greedy", f, d, max_candidates=cap).arcs.tolist()
        == Routing.from_pair_paths("g", d, slow).arcs.tolist()
    )


def test_greedy_by_leaves_on_random_demands() -> None:
    # Random pairs and byte counts (many ties and near-ties) on a fat-tree and a
    # leaf-spine: the same choices as the listwise placement.
    from sdnmpi.core.routing import greedy as g
    from sdnmpi.core.routing.candidates import attachment

    rng = np.random.default_rng(7)
    for topo in (fat_tree(4), fat_tree(6), leaf_spine(3, 4, 5)):
        f = Fabric(topo)
        att = attachment(f)
        assert att is not None
        for _ in range(5):
            n = int(rng.integers(1, 300))
            src = rng.integers(0, f.nhosts, n)
            dst = (src + rng.integers(1, f.nhosts, n)) % f.nhosts
            key = np.unique(src * f.nhosts + dst)
            pairs = np.stack([key // f.nhosts, key % f.nhosts], axis=1)
            pair_bytes = rng.choice([1, 3, 1000, 65536, 7777777], pairs.shape[0])
            order = np.argsort(-pair_bytes, kind="stable")
            cand = paths.ShortestPaths(f, 5)
            fast = g._place_by_leaves(f, att, pairs, pair_bytes, order, cand)
            slow = g._place_listwise(f, pairs, pair_bytes, order, cand, False)
            assert _rows(pairs, fast) == slow


def _rows(pairs: np.ndarray, table: np.ndarray) -> dict[tuple[int, int], list[int]]:
    assert table.shape[0] == pairs.shape[0]
    return {
        (int(s), int(d)): [a for a in row if a >= 0]
        for (s, d), row in zip(pairs, table.tolist(), strict=True)
    }
