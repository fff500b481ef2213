"""Replication trees: the switches copy a broadcast so that its root sends each byte once.

An OpenFlow 1.3 group of type ALL copies a packet to several ports.  A switch-replicated
``MPI_Bcast`` (issue 14; Dashdavaa et al., 2013) needs, per group, a tree from the root's
host to every receiving host: each switch on it forwards to its tree children.

:func:`build_tree` grows the tree from the root.  Each step finds, by one Dijkstra
started from every node already in the tree, the receiver cheapest to reach, and adds
the path that reaches it (the shortest-path heuristic for Steiner trees of Takahashi
and Matsuyama, 1980).  A path may not enter a node already in the tree, so every node
is entered by exactly one arc: no link carries the data twice, and there are no loops.
An arc costs one hop plus the share of its capacity other traffic already uses
(``load_bps``), so a tree avoids loaded links when an idle one is as short.  Hosts are
never transited.

:func:`check_tree` checks what the controller relies on before it installs a tree.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sdnmpi.core.routing.model import Fabric, FloatArray
from sdnmpi.core.routing.paths import adjacency
from sdnmpi.errors import RoutingError


@dataclass(frozen=True)
class ReplicationTree:
    """A broadcast's tree: ``arcs`` in the order they were added (a parent's arc first).

    ``root`` and ``receivers`` are host node indices of a :class:`Fabric`.
    """

    root: int
    receivers: tuple[int, ...]
    arcs: tuple[int, ...]

    def parent_arcs(self, fabric: Fabric) -> dict[int, int]:
        """The arc entering each node of the tree but the root."""
        return {int(fabric.arc_dst[a]): a for a in self.arcs}

    def branches(self, fabric: Fabric) -> dict[int, tuple[int, ...]]:
        """Each node's tree arcs out (a switch's group buckets), in port order."""
        out: dict[int, list[int]] = {}
        for arc in sorted(self.arcs, key=lambda a: fabric.topology.arcs[a].src_port):
            out.setdefault(int(fabric.arc_src[arc]), []).append(arc)
        return {node: tuple(arcs) for node, arcs in out.items()}

    def path_to(self, fabric: Fabric, receiver: int) -> tuple[int, ...]:
        """The arcs from the root to ``receiver``."""
        parent = self.parent_arcs(fabric)
        if receiver not in parent:
            raise RoutingError(f"{fabric.names[receiver]} is not in the tree")
        path = [parent[receiver]]
        while int(fabric.arc_src[path[-1]]) != self.root:
            path.append(parent[int(fabric.arc_src[path[-1]])])
        return tuple(reversed(path))

    def farthest(self, fabric: Fabric, weight: Sequence[float] | FloatArray) -> float:
        """The largest sum of ``weight[arc]`` from the root to a receiver (one pass over
        the arcs, a parent's first, as :func:`check_tree` requires)."""
        tails, heads = fabric.arc_src, fabric.arc_dst
        reach = {self.root: 0.0}
        for arc in self.arcs:
            reach[int(heads[arc])] = reach[int(tails[arc])] + float(weight[arc])
        return max((reach[r] for r in self.receivers), default=0.0)

    def depth(self, fabric: Fabric) -> int:
        """The most arcs from the root to a receiver."""
        return int(self.farthest(fabric, [1.0] * fabric.narcs))

    def latency_s(self, fabric: Fabric) -> float:
        """The longest root-to-receiver latency: when the last receiver has a byte."""
        return self.farthest(fabric, fabric.latency_s)

    @property
    def nlinks(self) -> int:
        """Links the data crosses (each once)."""
        return len(self.arcs)


def build_tree(
    fabric: Fabric,
    root: int,
    receivers: Iterable[int],
    load_bps: Sequence[float] | FloatArray | None = None,
) -> ReplicationTree:
    """A tree from host ``root`` to every host in ``receivers`` (see the module doc).

    Receivers are deduplicated in order; the root among them is dropped (its own
    ranks are served on the host).  ``load_bps[arc]``: what other traffic already puts
    on each arc.  Raises :class:`RoutingError` for a node that is not a host or a
    receiver the root cannot reach.
    """
    wanted = _receivers(fabric, root, receivers)
    cost = _costs(fabric, load_bps)
    in_tree = {root}
    arcs: list[int] = []
    left = set(wanted)
    while left:
        found = _nearest(fabric, cost, root, in_tree, left)
        if found is None:
            names = ", ".join(fabric.names[r] for r in wanted if r in left)
            raise RoutingError(f"no path from {fabric.names[root]} to {names}")
        receiver, path = found
        arcs.extend(path)
        in_tree.update(int(fabric.arc_dst[a]) for a in path)
        left.discard(receiver)
    return ReplicationTree(root, wanted, tuple(arcs))


def check_tree(fabric: Fabric, tree: ReplicationTree) -> None:
    """Raise :class:`RoutingError` unless ``tree`` is a tree the switches can replicate on.

    Every arc leaves a node the tree already reached; no node is entered twice (the
    root not at all); only the root sends from a host; every receiver is reached and
    every leaf is a receiver.
    """
    name = fabric.names
    reached = {tree.root}
    for arc in tree.arcs:
        tail, head = int(fabric.arc_src[arc]), int(fabric.arc_dst[arc])
        if tail not in reached:
            raise RoutingError(f"tree arc {name[tail]}->{name[head]} leaves a node not reached")
        if tail < fabric.nhosts and tail != tree.root:
            raise RoutingError(f"tree transits host {name[tail]}")
        if head in reached:
            raise RoutingError(f"tree enters {name[head]} twice")
        reached.add(head)
    missing = [name[r] for r in tree.receivers if r not in reached]
    if missing:
        raise RoutingError(f"tree misses {', '.join(missing)}")
    tails = {int(fabric.arc_src[a]) for a in tree.arcs}
    idle = sorted(n for n in reached - tails if n not in tree.receivers and n != tree.root)
    if idle:
        raise RoutingError(f"tree ends at {', '.join(name[n] for n in idle)}, not a receiver")


def _receivers(fabric: Fabric, root: int, receivers: Iterable[int]) -> tuple[int, ...]:
    for node in (root, *receivers):
        if not 0 <= node < fabric.nhosts:
            raise RoutingError(f"node {node} is not a host of {fabric.topology.name!r}")
    return tuple(dict.fromkeys(r for r in receivers if r != root))


def _costs(fabric: Fabric, load_bps: Sequence[float] | FloatArray | None) -> list[float]:
    if load_bps is None:
        return [1.0] * fabric.narcs
    if len(load_bps) != fabric.narcs:
        raise RoutingError(f"load for {len(load_bps)} arcs, the fabric has {fabric.narcs}")
    cap = fabric.capacity_bps
    return [1.0 + max(0.0, float(load)) / float(cap[a]) for a, load in enumerate(load_bps)]


def _nearest(
    fabric: Fabric, cost: Sequence[float], root: int, in_tree: set[int], wanted: set[int]
) -> tuple[int, list[int]] | None:
    """The wanted host cheapest to reach from the tree, and the arcs that reach it.

    One Dijkstra from every tree node at once; it never enters a tree node and never
    leaves a host other than the root.
    Ties go to the lower node index.
    """
    adj = adjacency(fabric)
    nhosts = fabric.nhosts
    dist: dict[int, float] = dict.fromkeys(in_tree, 0.0)
    via: dict[int, int] = {}
    heap = [(0.0, node) for node in sorted(in_tree)]
    heapq.heapify(heap)
    while heap:
        d_u, u = heapq.heappop(heap)
        if d_u > dist.get(u, float("inf")):
            continue
        if u in wanted:
            return u, _back(fabric, via, in_tree, u)
        if u < nhosts and u != root:
            continue
        for arc, v in adj[u]:
            if v in in_tree:
                continue
            d_v = d_u + cost[arc]
            if d_v < dist.get(v, float("inf")):
                dist[v] = d_v
                via[v] = arc
                heapq.heappush(heap, (d_v, v))
    return None


def _back(fabric: Fabric, via: dict[int, int], in_tree: set[int], node: int) -> list[int]:
    path = [via[node]]
    while int(fabric.arc_src[path[-1]]) not in in_tree:
        path.append(via[int(fabric.arc_src[path[-1]])])
    path.reverse()
    return path
