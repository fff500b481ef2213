"""ECMP: seeded per-flow hashing over shortest next hops, logical next hop before LAG member."""

from __future__ import annotations

import numpy as np

from sdnmpi.catalog import load_topology
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.routing import Demands, Fabric, route, validate
from sdnmpi.core.routing.flowhash import (
    EPHEMERAL_PORTS,
    LISTEN_PORTS,
    PROTO_TCP,
    five_tuple,
    flow_key,
    node_salt,
)
from sdnmpi.core.topology import Topology
from tests.routing.flows import all_shifts, demands, flows_per_arc_and_phase


def _rank_flows(pairs: list[tuple[int, int]], per_pair: int) -> Demands:
    """``per_pair`` MPI connections (distinct rank pairs) for every host pair."""
    rows = [p for p in pairs for _ in range(per_pair)]
    ranks = [(2 * i, 2 * i + 1) for i in range(len(rows))]
    return demands(rows, ranks=ranks)


def test_same_seed_same_routes_other_seed_other_routes() -> None:
    f = Fabric(fat_tree(8))
    d = Demands.all_pairs(f)
    a, b = route("ecmp", f, d, seed=3), route("ecmp", f, d, seed=3)
    assert np.array_equal(a.arcs, b.arcs)
    c = route("ecmp", f, d, seed=4)
    changed = (a.arcs != c.arcs).any(axis=1).mean()
    assert 0.3 < changed < 1.0  # intra-edge pairs have one path whatever the seed
    validate(f, d, c, shortest=True, valley_free=True)


def test_each_connection_hashed_separately() -> None:
    # 64 connections between h01 (pod 1) and h16 (pod 4) use several of the 4 core paths
    f = Fabric(fat_tree(4))
    d = _rank_flows([(0, 15)], 64)
    r = route("ecmp", f, d)
    cores = {r.node_path(f, i)[3] for i in range(len(r))}
    assert len(cores) >= 3


def test_flow_on_lag_uses_exactly_one_member() -> None:
    topo = load_topology("unisonflow")  # 4 x 1 GbE LAG per leaf-spine pair
    f = Fabric(topo)
    pairs = [(s, t) for s in range(6) for t in range(6, 24)]
    d = _rank_flows(pairs, 4)
    r = route("ecmp", f, d, seed=7)
    validate(f, d, r, shortest=True, valley_free=True)
    lag = [a.lag for a in topo.arcs]
    used: dict[str, set[int]] = {}
    for i in range(len(r)):
        groups = [(lag[a], int(f.arc_src[a])) for a in r.path(i) if lag[a] is not None]
        assert len(groups) == len(set(groups)), "a flow crossed two members of one LAG"
        for a in r.path(i):
            if lag[a] is not None:
                used.setdefault(f"{lag[a]}@{int(f.arc_src[a])}", set()).add(a)
    # the member hash spreads flows: every uplink LAG of leaf1 sees several members
    leaf1 = [k for k in used if k.startswith("leaf1-") and k.endswith(f"@{f.index['leaf1']}")]
    assert leaf1
    assert all(len(used[k]) >= 3 for k in leaf1)


def _uneven(lag: bool) -> Topology:
    """2 leaves x 8 hosts; 3 cables to spine1, 1 cable to spine2 (LAGs or parallel links)."""
    base = leaf_spine(2, 2, 8, uplinks_per_pair=3, lag=lag)
    links = [
        ln
        for ln in base.links
        if not (ln.dst == "spine2" and ln.src.startswith("leaf") and ln.src_port % 3 != 0)
    ]
    return base.with_links(links, f"uneven-{'lag' if lag else 'parallel'}")


def _share_via_spine2(topo: Topology) -> float:
    f = Fabric(topo)
    pairs = [(s, t) for s in range(8) for t in range(8, 16)]
    d = _rank_flows(pairs, 16)
    r = route("ecmp", f, d, seed=11)
    validate(f, d, r, shortest=True, valley_free=True)
    spine2 = f.index["spine2"]
    return float(np.mean([spine2 in set(f.arc_dst[list(r.path(i))]) for i in range(len(r))]))


def test_lag_is_one_logical_next_hop() -> None:
    # spine1 (3-member LAG) and spine2 (1 cable) are two logical next hops: about 1/2 each
    assert abs(_share_via_spine2(_uneven(lag=True)) - 0.5) < 0.08


def test_parallel_links_are_separate_next_hops() -> None:
    # without LAG there are four next hops, one of them to spine2: about 1/4
    assert abs(_share_via_spine2(_uneven(lag=False)) - 0.25) < 0.08


def test_ecmp_collides_on_shifts_unlike_dmodk() -> None:
    f = Fabric(fat_tree(8))
    d = all_shifts(f)
    assert flows_per_arc_and_phase(f, d, route("ecmp", f, d)).max() > 1


def test_five_tuple_model() -> None:
    f = Fabric(fat_tree(4))
    d = demands([(0, 5), (0, 5), (0, 5)], ranks=[(0, 9), (0, 9), (1, 9)])
    t = five_tuple(f, d, seed=0)
    assert t.proto.tolist() == [PROTO_TCP] * 3
    assert t.src_ip[0] == 0x0A000001 and t.dst_ip[0] == 0x0A000006  # 10.0.0.1, 10.0.0.6
    assert (t.sport >= EPHEMERAL_PORTS[0]).all() and (t.sport <= EPHEMERAL_PORTS[1]).all()
    assert (t.dport >= LISTEN_PORTS[0]).all() and (t.dport <= LISTEN_PORTS[1]).all()
    # one connection per rank pair; the listening port is the destination rank's
    assert t.sport[0] == t.sport[1] != t.sport[2]
    assert t.dport[0] == t.dport[1] == t.dport[2]
    keys = flow_key(t)
    assert keys[0] == keys[1] != keys[2]
    # the seed re-draws the ports
    assert five_tuple(f, d, seed=1).sport[0] != t.sport[0]


def test_host_level_demands_hash_the_host_pair() -> None:
    f = Fabric(fat_tree(4))
    d = demands([(0, 5), (0, 5), (1, 5)])
    keys = flow_key(five_tuple(f, d))
    assert keys[0] == keys[1] != keys[2]
    r = route("ecmp", f, d)
    assert r.path(0) == r.path(1)


def test_switch_salts_depend_on_dpid_and_seed() -> None:
    f = Fabric(fat_tree(4))
    a, b = node_salt(f, 0), node_salt(f, 1)
    assert len(set(a.tolist())) == f.nnodes
    assert (a != b).all()
