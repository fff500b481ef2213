"""Single spanning tree: one tree, rooted at the lowest-dpid top switch, LAG members hashed."""

from __future__ import annotations

import pytest

from sdnmpi.catalog import load_topology
from sdnmpi.core.generators import fat_tree, leaf_spine, xgft
from sdnmpi.core.routing import Demands, Fabric, route, validate
from sdnmpi.core.routing.single import spanning_tree
from sdnmpi.core.topology import Host, Link, Switch, Topology
from sdnmpi.errors import RoutingError
from tests.routing.flows import demands


def _switch_links_used(f: Fabric, r: object) -> set[frozenset[str]]:
    arcs = r.arcs  # type: ignore[attr-defined]
    used = {int(a) for a in arcs[arcs >= 0]}
    return {
        frozenset((f.names[int(f.arc_src[a])], f.names[int(f.arc_dst[a])]))
        for a in used
        if f.arc_src[a] >= f.nhosts and f.arc_dst[a] >= f.nhosts
    }


@pytest.mark.parametrize(
    "topo",
    [fat_tree(4), leaf_spine(3, 4, 2, uplinks_per_pair=2), xgft(3, [2, 2, 3], [2, 2, 2])],
    ids=lambda t: t.name,
)
def test_all_traffic_on_one_tree(topo: Topology) -> None:
    f = Fabric(topo)
    d = Demands.all_pairs(f)
    r = route("single", f, d)
    validate(f, d, r, shortest=True, valley_free=True)
    tree = spanning_tree(f)
    assert (
        f.names[tree.root]
        == min(
            (s for s in topo.switches if f.level[f.index[s.name]] == f.level.max()),
            key=lambda s: s.dpid,
        ).name
    )
    # only tree edges carry traffic: fewer switch pairs than switches
    assert len(_switch_links_used(f, r)) < len(topo.switches)


def test_fat_tree_root_and_paths() -> None:
    f = Fabric(fat_tree(4))
    r = route("single", f, demands([(0, 15), (2, 6)]))
    assert r.meta["root"] == "core1"
    assert r.node_path(f, 0) == ("h01", "edge1_1", "agg1_1", "core1", "agg4_1", "edge4_2", "h16")
    assert r.node_path(f, 1) == ("h03", "edge1_2", "agg1_1", "core1", "agg2_1", "edge2_2", "h07")


def test_netsa_shortcut_unused_so_not_shortest() -> None:
    f = Fabric(load_topology("netsa"))
    d = demands([(8, 0)])
    r = route("single", f, d)
    assert r.node_path(f, 0) == ("i9", "tor2", "spine1", "tor1", "i1")
    validate(f, d, r, valley_free=True)
    with pytest.raises(RoutingError, match="longer than a shortest path"):
        validate(f, d, r, shortest=True)


def test_parallel_links_blocked_but_one() -> None:
    f = Fabric(leaf_spine(2, 2, 4, uplinks_per_pair=3))
    r = route("single", f, Demands.all_pairs(f))
    arcs = {int(a) for a in r.arcs[r.arcs >= 0] if f.arc_src[a] >= f.nhosts}
    switch_arcs = [a for a in arcs if f.arc_dst[a] >= f.nhosts]
    assert len(switch_arcs) == 4  # leaf1 <-> spine1 <-> leaf2, one cable each


def test_lag_member_hashed_per_flow() -> None:
    topo = load_topology("unisonflow")
    f = Fabric(topo)
    pairs = [(s, t) for s in range(6) for t in range(6, 12)]
    d = demands(pairs, ranks=[(i, 100 + i) for i in range(len(pairs))])
    r = route("single", f, d, seed=2)
    lag = [a.lag for a in topo.arcs]
    members: set[int] = set()
    for i in range(len(r)):
        groups = [lag[a] for a in r.path(i) if lag[a] is not None]
        assert len(groups) == len(set(groups)) == 2  # up one LAG, down another, one member each
        members.update(a for a in r.path(i) if lag[a] == "leaf1-spine1")
    assert len(members) >= 3  # flows spread over the LAG's members
    other = route("single", f, d, seed=3)
    assert {x for i in range(len(r)) for x in r.node_path(f, i)} == {
        x for i in range(len(other)) for x in other.node_path(f, i)
    }  # the seed moves flows between members only


def test_host_cut_off_from_root_is_an_error() -> None:
    # s2 reaches s1 only through host h2 (two NICs): not a switched path
    hosts = (Host("h1", "02:00:00:00:00:01"), Host("h2", "02:00:00:00:00:02"))
    switches = (Switch("s1", 1, 2), Switch("s2", 2, 1))
    links = (
        Link("h1", "s1", 1, 1, 1e9),
        Link("h2", "s1", 1, 2, 1e9),
        Link("h2", "s2", 2, 1, 1e9),
    )
    topo = Topology("cut", hosts, switches, links)
    r = route("single", Fabric(topo), demands([(0, 1)]))
    assert r.node_path(Fabric(topo), 0) == ("h1", "s1", "h2")
    hosts3 = (*hosts, Host("h3", "02:00:00:00:00:03"))
    topo3 = Topology("cut3", hosts3, switches, (*links, Link("h3", "s2", 1, 2, 1e9)))
    with pytest.raises(RoutingError, match=r"cannot reach the root s1"):
        route("single", Fabric(topo3), demands([(0, 2)]))
