"""Replication trees (sdnmpi.core.routing.multicast): every receiver once, no link twice."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.catalog import load_topology
from sdnmpi.core.generators import fat_tree, leaf_spine, xgft
from sdnmpi.core.routing import Fabric
from sdnmpi.core.routing.multicast import ReplicationTree, build_tree, check_tree
from sdnmpi.errors import RoutingError

TOPOLOGIES = [
    fat_tree(4),
    leaf_spine(2, 4, 2),
    leaf_spine(3, 4, 2, uplinks_per_pair=2),
    leaf_spine(2, 3, 2, lag=True),
    xgft(3, [2, 2, 3], [2, 2, 2]),
]


def _links(fabric: Fabric, tree: ReplicationTree) -> list[frozenset[int]]:
    return [frozenset((int(fabric.arc_src[a]), int(fabric.arc_dst[a]))) for a in tree.arcs]


@pytest.mark.parametrize("topo", TOPOLOGIES, ids=lambda t: t.name)
def test_a_broadcast_to_every_host_reaches_each_once_over_shortest_paths(topo) -> None:
    fabric = Fabric(topo)
    everyone = range(fabric.nhosts)
    tree = build_tree(fabric, 0, everyone)
    check_tree(fabric, tree)
    assert tree.receivers == tuple(range(1, fabric.nhosts))
    heads = [int(fabric.arc_dst[a]) for a in tree.arcs]
    assert len(heads) == len(set(heads))  # every node entered once
    links = _links(fabric, tree)
    assert len(links) == len(set(links))  # no cable carries the data twice (or back)
    for r in tree.receivers:  # on an idle fabric, every receiver is as close as unicast
        assert len(tree.path_to(fabric, r)) == int(fabric.hops_to(r)[0])


def test_a_leaf_spine_tree_uses_one_spine_and_each_leaf_once() -> None:
    fabric = Fabric(leaf_spine(2, 4, 2))
    tree = build_tree(fabric, 0, range(8))
    switches = {fabric.names[int(fabric.arc_dst[a])] for a in tree.arcs} - set(
        fabric.names[: fabric.nhosts]
    )
    assert len([s for s in switches if "spine" in s]) == 1
    assert tree.nlinks == 1 + 1 + 3 + 7  # root up, leaf up, spine to 3 leaves, 7 hosts down
    assert tree.depth(fabric) == 4
    branches = tree.branches(fabric)
    spine = next(n for n in branches if "spine" in fabric.names[n])
    assert len(branches[spine]) == 3  # the group at the spine copies to the other leaves


def test_load_steers_the_tree_to_the_idle_spine() -> None:
    fabric = Fabric(leaf_spine(2, 4, 2))
    idle = build_tree(fabric, 0, range(8))
    used = {int(fabric.arc_dst[a]) for a in idle.arcs if fabric.arc_dst[a] >= fabric.nhosts}
    busy = [name for name in fabric.names if "spine" in name and fabric.index[name] in used]
    load = np.zeros(fabric.narcs)
    for a in range(fabric.narcs):  # load every arc into or out of the spine it chose
        if (
            fabric.names[int(fabric.arc_src[a])] in busy
            or fabric.names[int(fabric.arc_dst[a])] in busy
        ):
            load[a] = 0.9 * fabric.capacity_bps[a]
    steered = build_tree(fabric, 0, range(8), load_bps=load.tolist())
    check_tree(fabric, steered)
    assert not any(load[a] for a in steered.arcs)
    assert steered.nlinks == idle.nlinks


def test_a_subset_of_receivers_gets_a_pruned_tree() -> None:
    fabric = Fabric(fat_tree(4))
    tree = build_tree(fabric, 0, [1, 5, 5, 0, 15])
    check_tree(fabric, tree)
    assert tree.receivers == (1, 5, 15)  # deduplicated, the root dropped
    hosts_reached = {int(fabric.arc_dst[a]) for a in tree.arcs} & set(range(fabric.nhosts))
    assert hosts_reached == {1, 5, 15}
    assert tree.latency_s(fabric) == pytest.approx(
        max(sum(fabric.latency_s[a] for a in tree.path_to(fabric, r)) for r in (1, 5, 15))
    )


def test_no_receiver_is_an_empty_tree() -> None:
    fabric = Fabric(leaf_spine(1, 1, 2))
    tree = build_tree(fabric, 1, [1])
    assert tree.arcs == () and tree.depth(fabric) == 0
    check_tree(fabric, tree)


def test_the_milk_cluster_tree_spans_its_hosts() -> None:
    fabric = Fabric(load_topology("milk"))
    tree = build_tree(fabric, 3, range(fabric.nhosts))
    check_tree(fabric, tree)
    assert len({int(fabric.arc_dst[a]) for a in tree.arcs} & set(range(fabric.nhosts))) == (
        fabric.nhosts - 1
    )


@pytest.mark.parametrize(
    ("root", "receivers", "load", "why"),
    [
        (99, [1], None, "not a host"),
        (0, [-1], None, "not a host"),
        (0, [100], None, "not a host"),
        (0, [1], [0.0], "load for 1 arcs"),
    ],
)
def test_bad_requests(root: int, receivers: list[int], load: list[float] | None, why: str) -> None:
    fabric = Fabric(leaf_spine(2, 2, 2))
    with pytest.raises(RoutingError, match=why):
        build_tree(fabric, root, receivers, load_bps=load)


def test_check_tree_names_what_is_wrong() -> None:
    fabric = Fabric(leaf_spine(2, 2, 2))
    good = build_tree(fabric, 0, [1, 2, 3])
    cases = {
        "misses": dataclasses.replace(good, arcs=good.arcs[:-1]),
        "not reached": dataclasses.replace(good, arcs=good.arcs[1:]),
        "twice": dataclasses.replace(good, arcs=(*good.arcs, good.arcs[-1])),
        "not a receiver": dataclasses.replace(good, receivers=good.receivers[:-1]),
    }
    for why, bad in cases.items():
        with pytest.raises(RoutingError, match=why):
            check_tree(fabric, bad)
    # a path through another host: h2's uplink used to send on
    transit = ReplicationTree(0, (1,), (*good.path_to(fabric, 2), *_host_up(fabric, 2)))
    with pytest.raises(RoutingError, match="transits host"):
        check_tree(fabric, transit)


def _host_up(fabric: Fabric, host: int) -> tuple[int, ...]:
    return tuple(a for a in fabric.out_arcs[host])


@settings(max_examples=60, deadline=None)
@given(
    topo=st.sampled_from(TOPOLOGIES),
    data=st.data(),
)
def test_any_root_receivers_and_load_give_a_valid_tree(topo, data) -> None:
    fabric = Fabric(topo)
    root = data.draw(st.integers(0, fabric.nhosts - 1))
    receivers = data.draw(st.lists(st.integers(0, fabric.nhosts - 1), max_size=fabric.nhosts))
    load = data.draw(
        st.lists(st.floats(0, 2e9), min_size=fabric.narcs, max_size=fabric.narcs) | st.none()
    )
    tree = build_tree(fabric, root, receivers, load_bps=load)
    check_tree(fabric, tree)
    assert set(tree.receivers) == set(receivers) - {root}
    links = _links(fabric, tree)
    assert len(links) == len(set(links))
