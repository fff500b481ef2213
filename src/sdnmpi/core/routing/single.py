"""Single spanning tree: every pair uses the tree path, the no-multipath baseline.

What a plain Ethernet fabric running the Spanning Tree Protocol does.  The root
is the top-level switch with the lowest dpid (STP elects the lowest bridge id;
an operator sets priorities so that a core switch wins).  Every other switch
keeps the *root port* of IEEE 802.1D: the port towards a neighbor nearest the
root, ties broken by that neighbor's dpid, then its port number, then the own
port number; every other switch-to-switch port is blocked.  Hosts attach by
their port nearest the root.  An aggregated link (same ``Arc.lag``) is one
logical port for STP: a flow crosses it on one member chosen by the switch's
L3/L4 hash of the flow's 5-tuple (:mod:`~sdnmpi.core.routing.flowhash`, salted
by ``seed``), so only member choice depends on ``seed``.  Parallel links without
a LAG are blocked but for one.

Paths go up the tree to the lowest common ancestor and down again, so they are
loop-free and, with the root at the top level of a fat-tree, valley-free.  They
are *not shortest in general*: links outside the tree are never used (the
NetSA testbed's ToR-to-ToR link, or any fabric where the root is not a common
ancestor of all leaves, e.g. a pruned fat-tree).  On the complete fat-trees,
XGFTs and leaf-spines of :mod:`sdnmpi.core.generators` every top switch is a
common ancestor of all hosts and the tree's paths happen to be shortest; the
cost there is that all traffic shares the tree's links.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from sdnmpi.core.routing.flowhash import (
    five_tuple,
    flow_key,
    lag_hash,
    node_salt,
    pick,
    switch_hash,
)
from sdnmpi.core.routing.model import Demands, Fabric, IntArray, Routing
from sdnmpi.core.routing.paths import lag_leader, lag_members, memo, readonly, routing, walk
from sdnmpi.errors import RoutingError

NAME = "single"
DESCRIPTION = "one spanning tree (STP-like, rooted at a top switch): the no-multipath baseline"
CITATION = (
    "IEEE 802.1D spanning tree (Perlman, An algorithm for distributed computation of a "
    "spanning tree in an extended LAN, SIGCOMM 1985)"
)


@dataclass(frozen=True, eq=False)
class SpanningTree:
    """Root node, each node's (logical) arc to its parent, and the tree's forwarding table."""

    root: int
    parent_arc: IntArray  # (nnodes,) -1 for the root and nodes outside the tree
    table: IntArray  # (nnodes, nhosts) logical arc (first LAG member) towards each host


def route(fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing:
    """Route every flow along the spanning tree; ``seed`` only salts the LAG member hash."""
    tree = spanning_tree(fabric)
    key = flow_key(five_tuple(fabric, demands, seed))
    salt = node_salt(fabric, seed)
    members, size = lag_members(fabric)
    dst = demands.dst

    def step(flows: IntArray, cur: IntArray, hop: int) -> IntArray:
        logical = tree.table[cur, dst[flows]]
        safe = np.where(logical >= 0, logical, 0)
        h = lag_hash(switch_hash(key[flows], salt[cur]))
        out: IntArray = np.where(logical >= 0, members[safe, pick(h, size[safe])], -1)
        return out

    arcs = walk(fabric, demands.src, dst, step, router=NAME)
    return routing(NAME, arcs, {"root": fabric.names[tree.root], "seed": seed})


def spanning_tree(fabric: Fabric) -> SpanningTree:
    """The (cached) spanning tree of a fabric."""
    return memo(fabric, "spanning_tree", lambda: _build(fabric))


def _build(fabric: Fabric) -> SpanningTree:
    root = _root(fabric)
    dist = _switch_distances(fabric, root)
    parent = _parents(fabric, dist)
    missing = [fabric.names[h] for h in range(fabric.nhosts) if parent[h] < 0]
    if missing:
        raise RoutingError(
            f"{NAME}: hosts {missing[:5]} of topology {fabric.topology.name!r} cannot reach "
            f"the root {fabric.names[root]} through switches"
        )
    table = _table(fabric, root, parent)
    return SpanningTree(root, readonly(parent), readonly(table))


def _root(fabric: Fabric) -> int:
    switches = np.arange(fabric.nhosts, fabric.nnodes)
    if not switches.size:
        raise RoutingError(f"{NAME}: topology {fabric.topology.name!r} has no switch")
    top = switches[fabric.level[switches] == fabric.level[switches].max()]
    dpid = [fabric.topology.switches[int(s) - fabric.nhosts].dpid for s in top]
    return int(top[int(np.argmin(dpid))])


def _switch_distances(fabric: Fabric, root: int) -> list[int]:
    dist = [-1] * fabric.nnodes
    dist[root] = 0
    queue = deque([root])
    heads = fabric.arc_dst.tolist()
    while queue:
        node = queue.popleft()
        for arc in fabric.out_arcs[node]:
            nxt = heads[arc]
            if nxt >= fabric.nhosts and dist[nxt] < 0:
                dist[nxt] = dist[node] + 1
                queue.append(nxt)
    return dist


def _dpid(fabric: Fabric, node: int) -> int:
    return fabric.topology.switches[node - fabric.nhosts].dpid


def _parents(fabric: Fabric, dist: list[int]) -> IntArray:
    """Root port of every node: 802.1D's order (root distance, bridge id, port ids)."""
    arcs = fabric.topology.arcs
    leader = lag_leader(fabric)
    parent = np.full(fabric.nnodes, -1, dtype=np.int64)
    for node in range(fabric.nnodes):
        best: tuple[int, int, int, int] | None = None
        for a in fabric.out_arcs[node]:
            up = int(fabric.arc_dst[a])
            if leader[a] != a or up < fabric.nhosts or dist[up] < 0:
                continue
            if node >= fabric.nhosts and dist[up] != dist[node] - 1:
                continue
            rank = (dist[up], _dpid(fabric, up), arcs[a].dst_port, arcs[a].src_port)
            if best is None or rank < best:
                best, parent[node] = rank, a
    return parent


def _down_arcs(fabric: Fabric, parent: IntArray) -> IntArray:
    """For every child, the logical arc from its parent back to it (same cable if duplex)."""
    leader = lag_leader(fabric)
    by_link: dict[int, list[int]] = {}
    for arc in fabric.topology.arcs:
        by_link.setdefault(arc.link, []).append(arc.index)
    down = np.full(fabric.nnodes, -1, dtype=np.int64)
    for child in np.flatnonzero(parent >= 0).tolist():
        up = int(parent[child])
        back = [a for a in by_link[fabric.topology.arcs[up].link] if a != up]
        if not back:
            back = [
                a for a in fabric.out_arcs[int(fabric.arc_dst[up])] if fabric.arc_dst[a] == child
            ]
        if not back:
            raise RoutingError(
                f"{NAME}: no link back from the tree parent of {fabric.names[child]}"
            )
        down[child] = leader[back[0]]
    return down


def _table(fabric: Fabric, root: int, parent: IntArray) -> IntArray:
    nh = fabric.nhosts
    up_node = np.where(parent >= 0, fabric.arc_dst[np.where(parent >= 0, parent, 0)], -1)
    down = _down_arcs(fabric, parent)
    table = np.repeat(parent[:, None], nh, axis=1)
    child = np.arange(nh)
    dest = np.arange(nh)
    while child.size:
        above = up_node[child]
        table[above, dest] = down[child]
        keep = above != root
        child, dest = above[keep], dest[keep]
    return table
