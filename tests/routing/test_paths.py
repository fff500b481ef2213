"""The shared path machinery: distances, choices, walks, path sets, Dijkstra, LAGs, doctests."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

from sdnmpi.catalog import load_topology
from sdnmpi.core.generators import fat_tree, leaf_spine, xgft
from sdnmpi.core.routing import Fabric
from sdnmpi.core.routing.paths import (
    UNREACHABLE,
    ShortestPaths,
    dijkstra,
    first_shortest_table,
    follow_table,
    host_hops,
    lag_leader,
    lag_members,
    shortest_choices,
)
from sdnmpi.core.routing.updown import updown
from sdnmpi.core.topology import Topology
from sdnmpi.errors import RoutingError
from tests.routing.flows import host_bridge

TOPOS = [
    fat_tree(4),
    xgft(2, [3, 2], [2, 2]),  # hosts with two uplinks
    load_topology("milk"),
    load_topology("netsa"),
    load_topology("unisonflow"),
    host_bridge(),
]


@pytest.mark.parametrize("topo", TOPOS, ids=lambda t: t.name)
def test_host_hops_match_fabric_bfs(topo: Topology) -> None:
    f = Fabric(topo)
    table = host_hops(f)
    for d in range(f.nhosts):
        ref = f.hops_to(d)
        assert np.array_equal(np.where(ref < 0, UNREACHABLE, ref), table[:, d])


@pytest.mark.parametrize("topo", TOPOS, ids=lambda t: t.name)
def test_choices_are_exactly_the_shortest_next_hops(topo: Topology) -> None:
    f = Fabric(topo)
    c = shortest_choices(f)
    dist = host_hops(f)
    for d in range(f.nhosts):
        for u in range(f.nnodes):
            want = [
                a
                for a in f.out_arcs[u]
                if dist[f.arc_dst[a], d] == dist[u, d] - 1
                and (f.arc_dst[a] >= f.nhosts or f.arc_dst[a] == d)
            ]
            got = c.arcs[d, u, : c.count[d, u]].tolist()
            assert got == want
    first = first_shortest_table(f)
    assert all(
        first[u, d] == (c.arcs[d, u, 0] if c.count[d, u] else -1)
        for u in range(f.nnodes)
        for d in range(f.nhosts)
    )


def test_logical_choices_list_one_member_per_lag() -> None:
    f = Fabric(load_topology("unisonflow"))
    c = shortest_choices(f, logical=True)
    leaf1, h7 = f.index["leaf1"], 6  # h7 is on leaf2: two logical next hops (the spines)
    assert c.count[h7, leaf1] == 2
    leaders = lag_leader(f)
    members, size = lag_members(f)
    for a in c.arcs[h7, leaf1, :2].tolist():
        assert leaders[a] == a
        assert size[a] == 4
        assert sorted(members[a].tolist()) == sorted(x for x in range(f.narcs) if leaders[x] == a)


def test_shortest_paths_count_and_spread() -> None:
    f = Fabric(fat_tree(4))
    sp = ShortestPaths(f, limit=16)
    assert sp.count(0, 15) == 4  # another pod: 2 aggs x 2 cores
    assert sp.count(0, 2) == 2  # same pod, other edge: 2 aggs
    assert sp.count(0, 1) == 1
    all4 = sp.paths(0, 15)
    assert len({tuple(p) for p in all4.tolist()}) == 4
    capped = ShortestPaths(f, limit=2).paths(0, 15)
    assert capped.tolist() == all4[[0, 2]].tolist()  # ranks 0 and 2 of 4: one per agg
    with pytest.raises(RoutingError, match="limit must be >= 1"):
        ShortestPaths(f, 0)


def test_dijkstra_costs_and_allowed_arcs() -> None:
    f = Fabric(leaf_spine(2, 2, 2))
    cost = [1.0] * f.narcs
    first = dijkstra(f, cost, 0, 2)
    assert first is not None
    assert f.names[int(f.arc_dst[first[1]])] == "spine1"
    cost[first[1]] = 5.0
    second = dijkstra(f, cost, 0, 2)
    assert second is not None
    assert f.names[int(f.arc_dst[second[1]])] == "spine2"
    allowed = [f.names[int(f.arc_dst[a])] != "spine2" for a in range(f.narcs)]
    third = dijkstra(f, cost, 0, 2, allowed)
    assert third == first
    none = [False] * f.narcs
    assert dijkstra(f, cost, 0, 2, none) is None


def test_walk_reports_missing_hops_and_loops() -> None:
    f = Fabric(leaf_spine(1, 2, 1))  # h1 - leaf1 - spine1 - leaf2 - h2
    src, dst = np.array([0]), np.array([1])
    table = np.full((f.nnodes, f.nhosts), -1, dtype=np.int64)
    with pytest.raises(RoutingError, match="forwarding at h1 towards host h2 has no next hop"):
        follow_table(f, table, src, dst, router="t")
    leaf1, spine = f.index["leaf1"], f.index["spine1"]
    up = next(a for a in f.out_arcs[leaf1] if f.arc_dst[a] == spine)
    down = next(a for a in f.out_arcs[spine] if f.arc_dst[a] == leaf1)
    table[0, 1], table[leaf1, 1], table[spine, 1] = f.out_arcs[0][0], up, down
    with pytest.raises(RoutingError, match="loops"):
        follow_table(f, table, src, dst, router="t")
    with pytest.raises(RoutingError, match="goes from h1 to itself"):
        follow_table(f, table, src, src, router="t")


def test_updown_structure() -> None:
    f = Fabric(fat_tree(4))
    s = updown(f)
    assert s.widths == (1, 2, 2, 0)
    assert s.lateral == 0
    assert np.array_equal(s.hops, host_hops(f))  # up*/down* is shortest on a fat-tree
    assert updown(Fabric(load_topology("netsa"))).lateral == 2


@pytest.mark.parametrize(
    "module",
    [
        "paths",
        "updown",
        "flowhash",
        "ecmp",
        "dmodk",
        "minhop",
        "single",
        "allreduce",
        "greedy",
        "netsa",
    ],
)
def test_doctests(module: str) -> None:
    mod = importlib.import_module(f"sdnmpi.core.routing.{module}")
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
