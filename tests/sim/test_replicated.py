"""Replicated transfers (sdnmpi.sim.replicated): one flow at the rate of its slowest branch."""

from __future__ import annotations

import pytest

from sdnmpi.core import collectives
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import Fabric
from sdnmpi.core.routing.multicast import build_tree
from sdnmpi.core.routing.paths import dijkstra
from sdnmpi.errors import RoutingError
from sdnmpi.sim.platform import Platform
from sdnmpi.sim.replicated import predict_bcast, replicated_flowset, transfer_times

MIB = 1024 * 1024
GBPS = 1e9


@pytest.fixture
def fabric() -> Fabric:
    return Fabric(leaf_spine(2, 4, 2, latency_s=0.0))


def _path(fabric: Fabric, src: int, dst: int) -> list[int]:
    path = dijkstra(fabric, [1.0] * fabric.narcs, src, dst)
    assert path is not None
    return path


def test_a_broadcast_to_seven_hosts_takes_as_long_as_one_unicast(fabric: Fabric) -> None:
    platform = Platform.from_fabric(fabric)
    tree = build_tree(fabric, 0, range(8))
    alone = transfer_times(replicated_flowset(platform, fabric, [tree], [MIB]), platform)
    assert alone[0] == pytest.approx(MIB * 8 / GBPS)
    # the same bytes sent by the root to each host at once share its one uplink: 7x
    flat = [_path(fabric, 0, r) for r in range(1, 8)]
    unicast = transfer_times(
        replicated_flowset(platform, fabric, [], [], flat, [MIB] * 7), platform
    )
    assert unicast.max() == pytest.approx(7 * alone[0])


def test_a_loaded_branch_slows_every_branch(fabric: Fabric) -> None:
    platform = Platform.from_fabric(fabric)
    tree = build_tree(fabric, 0, range(8))
    down = tree.path_to(fabric, 7)[-2:]  # the last leaf's link and host 7's, on the tree
    other = _path(fabric, 6, 7)  # host 6 into host 7: shares host 7's link
    assert down[-1] in other
    flows = replicated_flowset(platform, fabric, [tree], [MIB], [other], [4 * MIB])
    done = transfer_times(flows, platform)
    # both get half of host 7's link while the tree lasts: twice as long as alone
    assert done[0] == pytest.approx(2 * MIB * 8 / GBPS)
    assert done[1] == pytest.approx((4 * MIB + MIB) * 8 / GBPS)


def test_latency_is_the_longest_root_to_receiver_path() -> None:
    fabric = Fabric(leaf_spine(2, 4, 2, latency_s=1e-3))
    platform = Platform.from_fabric(fabric)
    near = build_tree(fabric, 0, [1])  # same leaf: 2 arcs
    far = build_tree(fabric, 0, [1, 7])  # another leaf: 4 arcs
    flows = replicated_flowset(platform, fabric, [near, far], [1.0, 1.0])
    assert flows.latency_s.tolist() == pytest.approx([2e-3, 4e-3])


@pytest.mark.parametrize(
    ("trees", "sizes", "why"),
    [
        ("one", [], "1 trees with 0 sizes"),
        ("one", [0.0], "finite and positive"),
        ("one", [float("nan")], "finite and positive"),
        ("empty", [1.0], "has no receiver"),
    ],
)
def test_bad_transfers(fabric: Fabric, trees: str, sizes: list[float], why: str) -> None:
    platform = Platform.from_fabric(fabric)
    tree = build_tree(fabric, 0, [] if trees == "empty" else [3])
    with pytest.raises(RoutingError, match=why):
        replicated_flowset(platform, fabric, [tree], sizes)


def test_a_path_without_arcs_and_a_foreign_platform_are_refused(fabric: Fabric) -> None:
    platform = Platform.from_fabric(fabric)
    with pytest.raises(RoutingError, match="no arc"):
        replicated_flowset(platform, fabric, [], [], [[]], [1.0])
    small = Platform.from_fabric(Fabric(leaf_spine(1, 1, 2)))
    with pytest.raises(RoutingError, match="arcs, the fabric"):
        replicated_flowset(small, fabric, [], [])


@pytest.mark.parametrize("library", ["openmpi", "mpich"])
def test_the_predicted_gain_over_the_libraries_bcast(library: str) -> None:
    """8 hosts, one rank each, 4 MiB: every library algorithm sends the data over the
    network more than once from the root's side, the replicated one once."""
    fabric = Fabric(leaf_spine(2, 4, 2))
    placement = Placement(tuple(fabric.names[: fabric.nhosts]))
    pred = predict_bcast(fabric, placement, 4 * MIB, library=library)
    assert pred.replicated_s == pytest.approx(4 * MIB * 8 / GBPS, rel=0.01)
    assert pred.gain > 1.5, pred
    assert pred.algorithm in collectives.algorithms("bcast")
    assert pred.tree_links == 12
    same_host = Placement(("h1", "h1"))
    alone = predict_bcast(fabric, same_host, MIB, library=library)
    assert alone.library_s == alone.replicated_s == 0.0  # nothing crosses the network
