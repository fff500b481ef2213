"""Test inputs for the routers: demand builders, link loads and the topologies used."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from sdnmpi.catalog import load_topology
from sdnmpi.core.generators import fat_tree, leaf_spine, xgft
from sdnmpi.core.routing.model import Demands, Fabric, IntArray, Routing
from sdnmpi.core.topology import Host, Link, Switch, Topology

#: Routers under test (``ours`` belongs to another module's tests).
ROUTER_NAMES = (
    "single",
    "ecmp",
    "dmodk",
    "minhop",
    "allreduce",
    "greedy",
    "greedy_bottleneck",
    "netsa",
    "ours",
)
#: Routers whose paths are shortest on every topology (ECMP, min-hop, greedy).
ALWAYS_SHORTEST = ("ecmp", "minhop", "greedy", "greedy_bottleneck")

TOPOLOGIES: dict[str, Callable[[], Topology]] = {
    "leaf-spine-lag": lambda: leaf_spine(2, 4, 4, uplinks_per_pair=3, lag=True),
    "leaf-spine-parallel": lambda: leaf_spine(2, 4, 4, uplinks_per_pair=2),
    "fat-tree-4": lambda: fat_tree(4),
    "xgft": lambda: xgft(3, [2, 2, 3], [2, 2, 2]),
    "milk": lambda: load_topology("milk"),
    "unisonflow": lambda: load_topology("unisonflow"),
    "allreduce28": lambda: load_topology("allreduce28"),
    "netsa": lambda: load_topology("netsa"),
}
#: Topologies that are multi-rooted trees (every path shortest and valley-free).
TREES = tuple(n for n in TOPOLOGIES if n != "netsa")


def demands(
    pairs: Sequence[tuple[int, int]],
    size_bytes: int | Sequence[int] = 1,
    *,
    ranks: Sequence[tuple[int, int]] | None = None,
    kind: Sequence[int] | None = None,
    max_hops: Sequence[int] | None = None,
) -> Demands:
    """One flow per ``(src host, dst host)`` pair, one phase."""
    cols = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    n = len(cols)
    size = np.broadcast_to(np.asarray(size_bytes, dtype=np.int64), (n,)).copy()
    r = np.array(ranks, dtype=np.int64).reshape(-1, 2) if ranks is not None else None
    minus = np.full(n, -1, dtype=np.int64)
    return Demands(
        cols[:, 0],
        cols[:, 1],
        size,
        np.zeros(n, dtype=np.int64),
        r[:, 0] if r is not None else minus,
        r[:, 1] if r is not None else minus,
        ("test",),
        np.array([1], dtype=np.int64),
        np.array(kind, dtype=np.int64) if kind is not None else None,
        np.array(max_hops, dtype=np.int64) if max_hops is not None else None,
    )


def shift(fabric: Fabric, c: int) -> Demands:
    """The shift permutation ``d = s + c mod N`` over all hosts."""
    s = np.arange(fabric.nhosts)
    return demands(list(zip(s.tolist(), ((s + c) % fabric.nhosts).tolist(), strict=True)))


def all_shifts(fabric: Fabric) -> Demands:
    """Every shift permutation ``d = s + c mod N`` (``c = 1 .. N-1``), shift ``c`` as phase c-1."""
    n = fabric.nhosts
    s = np.tile(np.arange(n), n - 1)
    c = np.repeat(np.arange(1, n), n)
    minus = np.full(s.size, -1, dtype=np.int64)
    return Demands(
        s,
        (s + c) % n,
        np.ones(s.size, dtype=np.int64),
        c - 1,
        minus,
        minus,
        tuple(f"shift {i}" for i in range(1, n)),
        np.ones(n - 1, dtype=np.int64),
    )


def flows_per_arc_and_phase(fabric: Fabric, demands: Demands, routing: Routing) -> IntArray:
    """Flows crossing each arc in each phase, shape (phases, arcs)."""
    mask = routing.arcs >= 0
    phase = np.broadcast_to(demands.phase[:, None], routing.arcs.shape)[mask]
    key = phase * fabric.narcs + routing.arcs[mask]
    counts = np.bincount(key, minlength=demands.nphases * fabric.narcs)
    out: IntArray = counts.reshape(demands.nphases, fabric.narcs).astype(np.int64)
    return out


def flows_per_arc(fabric: Fabric, routing: Routing) -> IntArray:
    """How many flows cross each arc."""
    arcs = routing.arcs[routing.arcs >= 0]
    out: IntArray = np.bincount(arcs, minlength=fabric.narcs).astype(np.int64)
    return out


def node(fabric: Fabric, name: str) -> int:
    """Node index of a host or switch name."""
    return fabric.index[name]


def arc_between(fabric: Fabric, a: str, b: str) -> list[int]:
    """Arcs from node ``a`` to node ``b``, in port order."""
    i, j = fabric.index[a], fabric.index[b]
    return [x for x in fabric.out_arcs[i] if fabric.arc_dst[x] == j]


def host_bridge() -> Topology:
    """h2 has NICs on s1 and s2; the switched path s1-s3-s4-s2 is longer than via h2."""
    hosts = tuple(Host(f"h{i}", f"02:00:00:00:00:0{i}") for i in (1, 2, 3))
    switches = tuple(Switch(f"s{i}", i, 1) for i in (1, 2, 3, 4))
    links = (
        Link("h1", "s1", 1, 1, 1e9),
        Link("h2", "s1", 1, 2, 1e9),
        Link("h2", "s2", 2, 1, 1e9),
        Link("h3", "s2", 1, 2, 1e9),
        Link("s1", "s3", 3, 1, 1e9),
        Link("s3", "s4", 2, 1, 1e9),
        Link("s4", "s2", 2, 3, 1e9),
    )
    return Topology("host-bridge", hosts, switches, links)
