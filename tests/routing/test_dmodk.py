"""D-mod-K: hand-computed up-ports, Zahavi's shift property, structure from meta or wiring."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from sdnmpi.catalog import load_topology
from sdnmpi.core.generators import fat_tree, leaf_spine, xgft
from sdnmpi.core.routing import Demands, Fabric, route, validate
from sdnmpi.core.routing.dmodk import forwarding_table, meta_widths
from sdnmpi.core.topology import Host, Link, Switch, Topology
from sdnmpi.errors import RoutingError
from tests.routing.flows import (
    all_shifts,
    demands,
    flows_per_arc,
    flows_per_arc_and_phase,
    node,
)


def test_fat_tree_hand_computed_path() -> None:
    # fat_tree(4) = XGFT(3; 2,2,4; 1,2,2): host index d = 15 (h16).
    # edge up-port = d mod w2 = 15 mod 2 = 1 -> agg1_2 (port order: agg1_1, agg1_2);
    # agg up-port = floor(d / (w1 w2)) mod w3 = 7 mod 2 = 1 -> core (2*1 + 1) + 1 = core4;
    # down: core4 -> agg4_2 -> edge4_2 -> h16 (unique).
    f = Fabric(fat_tree(4))
    d = demands([(0, 15)])
    r = route("dmodk", f, d)
    assert r.node_path(f, 0) == ("h01", "edge1_1", "agg1_2", "core4", "agg4_2", "edge4_2", "h16")


@pytest.mark.parametrize(
    ("dst", "agg", "core"),
    # d=4: edge 4 mod 2 = 0 -> agg1_1; agg floor(4/2) mod 2 = 0 -> core1
    # d=6: edge 0 -> agg1_1; agg 3 mod 2 = 1 -> core2
    # d=9: edge 1 -> agg1_2; agg 4 mod 2 = 0 -> core3
    [(4, "agg1_1", "core1"), (6, "agg1_1", "core2"), (9, "agg1_2", "core3")],
)
def test_fat_tree_up_ports_follow_destination(dst: int, agg: str, core: str) -> None:
    f = Fabric(fat_tree(4))
    path = route("dmodk", f, demands([(1, dst)])).node_path(f, 0)
    assert path[2:4] == (agg, core)


def test_leaf_spine_parallel_links_hand_computed_ports() -> None:
    # 2 spines x 2 parallel links: leaf up-ports (port order) are spine1#0, spine1#1,
    # spine2#0, spine2#1 (leaf ports 3..6).  d = 2 (h3 on leaf2): up index d mod 4 = 2
    # -> spine2 member 0 = leaf port 2 + 1*2 + 0 + 1 = 5; down member d mod 2 = 0
    # -> spine2 port 1*2 + 0 + 1 = 3 towards leaf2.
    topo = leaf_spine(2, 2, 2, uplinks_per_pair=2)
    f = Fabric(topo)
    r = route("dmodk", f, demands([(0, 2), (0, 3)]))
    arcs = topo.arcs
    up, down = arcs[r.path(0)[1]], arcs[r.path(0)[2]]
    assert (up.src, up.src_port, up.dst) == ("leaf1", 5, "spine2")
    assert (down.src, down.src_port, down.dst) == ("spine2", 3, "leaf2")
    # d = 3: index 3 -> spine2 member 1 (leaf port 6), down member 1 (spine port 4)
    up, down = arcs[r.path(1)[1]], arcs[r.path(1)[2]]
    assert (up.src_port, down.src_port) == (6, 4)


@pytest.mark.parametrize(
    "make",
    [
        lambda: fat_tree(4),
        lambda: fat_tree(8),
        lambda: xgft(3, [4, 4, 4], [1, 4, 4]),
        lambda: xgft(2, [4, 3], [2, 4]),
        lambda: leaf_spine(4, 4, 4),
        lambda: leaf_spine(2, 4, 4, uplinks_per_pair=2),
        lambda: leaf_spine(2, 3, 8, uplinks_per_pair=4, lag=True),
    ],
)
def test_shift_permutations_are_contention_free(make: object) -> None:
    """Zahavi: on a non-blocking fat-tree every shift puts at most one flow on a link."""
    f = Fabric(make())  # type: ignore[operator]
    d = all_shifts(f)
    r = route("dmodk", f, d)
    validate(f, d, r, shortest=True, valley_free=True)
    assert flows_per_arc_and_phase(f, d, r).max() == 1


def test_all_pairs_spread_evenly_on_fat_tree() -> None:
    f = Fabric(fat_tree(8))
    r = route("dmodk", f, Demands.all_pairs(f))
    load = flows_per_arc(f, r)
    level = f.level
    for lo, hi in [(1, 2), (2, 3)]:
        for a, b in [(lo, hi), (hi, lo)]:
            sel = (level[f.arc_src] == a) & (level[f.arc_dst] == b)
            assert load[sel].min() == load[sel].max()


def test_widths_from_meta_match_wiring() -> None:
    for topo in (
        fat_tree(6),
        xgft(3, [2, 2, 3], [2, 2, 2]),
        leaf_spine(3, 2, 2, uplinks_per_pair=2),
    ):
        f = Fabric(topo)
        r = route("dmodk", f, Demands.all_pairs(f))
        assert tuple(r.meta["widths"]) == meta_widths(topo.meta)  # type: ignore[arg-type]


def test_stale_meta_is_logged_and_wiring_used(caplog: pytest.LogCaptureFixture) -> None:
    topo = fat_tree(4)
    lying = Topology(topo.name, topo.hosts, topo.switches, topo.links, {"kind": "fat_tree", "k": 8})
    with caplog.at_level(logging.WARNING, logger="sdnmpi.core.routing.dmodk"):
        r = route("dmodk", Fabric(lying), demands([(0, 15)]))
    assert "using the wiring" in caplog.text
    assert r.meta["widths"] == [1, 2, 2, 0]


def test_milk_without_parameters_uses_levels_and_port_order() -> None:
    topo = load_topology("milk")
    f = Fabric(topo)
    r = route("dmodk", f, Demands.all_pairs(f))
    assert r.meta["widths"] == [1, 2, 0]
    # edge1's up-ports in port order: 9 -> core1, 11 -> core2; even d -> core1, odd -> core2
    for flow in range(len(r)):
        path = r.node_path(f, flow)
        if len(path) == 5:
            dst = node(f, path[-1])
            assert path[2] == ("core1" if dst % 2 == 0 else "core2")


def test_lateral_link_is_ignored_on_netsa_testbed() -> None:
    f = Fabric(load_topology("netsa"))
    r = route("dmodk", f, demands([(0, 8)]))
    assert r.meta["lateral_arcs_ignored"] == 2
    assert r.node_path(f, 0) == ("i1", "tor1", "spine1", "tor2", "i9")


def _line() -> Topology:
    """h1 - s1 - s2 - h2 with both switches at level 1: no up*/down* path."""
    hosts = (Host("h1", "02:00:00:00:00:01"), Host("h2", "02:00:00:00:00:02"))
    switches = (Switch("s1", 1, 1), Switch("s2", 2, 1))
    links = (
        Link("h1", "s1", 1, 1, 1e9),
        Link("s1", "s2", 2, 1, 1e9),
        Link("s2", "h2", 2, 1, 1e9),
    )
    return Topology("line", hosts, switches, links)


def test_not_a_tree_is_rejected_with_a_clear_message() -> None:
    f = Fabric(_line())
    with pytest.raises(RoutingError, match=r"no up\*/down\* path from h1 to h2.*multi-rooted tree"):
        route("dmodk", f, demands([(0, 1)]))
    # the others route it
    for router in ("single", "ecmp", "minhop", "allreduce", "greedy", "netsa"):
        validate(f, demands([(0, 1)]), route(router, f, demands([(0, 1)])), shortest=True)


def test_forwarding_table_is_destination_based_and_cached() -> None:
    f = Fabric(fat_tree(4))
    table, structure, widths = forwarding_table(f)
    assert table is forwarding_table(f)[0]
    assert table.shape == (f.nnodes, f.nhosts)
    assert widths == (1, 2, 2, 0)
    # every edge switch sends destination d to up-port d mod 2 when d is in another edge
    edge = node(f, "edge1_1")
    ups = [int(f.arc_dst[a]) for a in table[edge, 2:]]
    expect = [node(f, "agg1_1" if d % 2 == 0 else "agg1_2") for d in range(2, f.nhosts)]
    assert ups == expect
    assert not np.any(structure.hops[: f.nhosts, : f.nhosts] < 0)
