"""NetSA's path processor: default paths, then bandwidth cells, then latency cells.

NetSA (Trois et al.) programs the network from a pattern's annotated traffic
matrix in three passes of rising OpenFlow priority:

1. low-priority default rules for every pair: a shortest path (first shortest
   next hop in port order), so no pair is left unreachable; unannotated flows
   use them;
2. bandwidth-intensive cells (``Demands.kind == 1``): Dijkstra on link weights
   that start at 1 and grow by one for every communication placed on the link,
   preferring bandwidth-class links: links NetSA should not load (latency-class
   links, and unannotated switch links when the topology annotates some links
   bandwidth-class) cost an extra ``nnodes``, more than any detour;
3. latency-sensitive cells (``kind == 2``): the least-weight path that uses only
   latency-class links between switches and traverses at most ``max_hops``
   switches (0 = no limit; NetSA's "one hop" is one switch), falling back to the
   default path when no such path exists.

Weights are per arc (link direction) and shared by passes 2 and 3; default
paths and fallbacks do not add weight.  One path per (host pair, class, hop
limit), in order of first appearance.  On the ``netsa`` preset, bandwidth cells
between the ToRs cross the spine's four bandwidth-class uplinks, latency cells
the tor1-tor2 latency-class link.

Demands without annotations are classified first with NetSA's thresholds
(:mod:`sdnmpi.core.classify`: bandwidth above 1100, latency below 120 bytes per
packet, latency hop limit 2).  ``Demands`` has no message counts, so each flow is
taken as one message cut into :data:`MTU_BYTES` packets: its average packet size
is ``size / ceil(size / MTU)``.  With message counts at hand, classify the
pattern instead (:func:`sdnmpi.core.classify.classify`) before building demands:
annotated demands are used as they are.

Weighted Dijkstra may take a longer path than the shortest one (on the netsa
preset it does, by design); on an unannotated fat-tree it only does so under load.
"""

from __future__ import annotations

import numpy as np

from sdnmpi.core.classify import Thresholds
from sdnmpi.core.pattern import KIND_CODES
from sdnmpi.core.routing.model import Demands, Fabric, IntArray, Routing
from sdnmpi.core.routing.paths import (
    adjacency,
    dijkstra,
    first_shortest_table,
    follow_table,
    routing,
)
from sdnmpi.errors import RoutingError

NAME = "netsa"
DESCRIPTION = (
    "NetSA path processor: default shortest paths, bandwidth cells by weighted Dijkstra, "
    "latency cells on latency-class links within max hops"
)
CITATION = (
    "Trois, Bona, Del Fabro, Martinello, Bidkar, Nejabati, Simeonidou, Softening up the "
    "network for scientific applications (NetSA): path processor module"
)
#: Packet size assumed to classify flows without message counts.
MTU_BYTES = 1500
BANDWIDTH = KIND_CODES["bandwidth"]
LATENCY = KIND_CODES["latency"]


def classify_flows(
    demands: Demands, thresholds: Thresholds | None = None, mtu_bytes: int = MTU_BYTES
) -> tuple[IntArray, IntArray]:
    """NetSA kind (0, 1 bandwidth, 2 latency) and hop limit of each flow, by packet size.

    >>> a = np.array
    >>> d = Demands(a([0, 0]), a([1, 1]), a([64, 10**6]), a([0, 0]), a([-1, -1]), a([-1, -1]),
    ...             ("p",), a([1]))
    >>> [k.tolist() for k in classify_flows(d)]
    [[2, 1], [2, 0]]
    """
    th = thresholds or Thresholds()
    size = demands.size_bytes.astype(np.float64)
    packets = np.maximum(np.ceil(size / mtu_bytes), 1.0)
    per_packet = size / packets
    kind = np.where(per_packet > th.bandwidth, BANDWIDTH, 0)
    kind = np.where((per_packet < th.latency) & (size > 0), LATENCY, kind).astype(np.int64)
    hops = np.where(kind == LATENCY, th.max_hops, 0).astype(np.int64)
    return kind, hops


def route(fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing:
    """Route as NetSA's path processor (``seed`` is unused)."""
    classified = demands.kind is None
    if demands.kind is None or demands.max_hops is None:
        kind, max_hops = classify_flows(demands)
    else:
        kind, max_hops = demands.kind, demands.max_hops
    default = follow_table(
        fabric, first_shortest_table(fabric), demands.src, demands.dst, router=NAME
    )
    placer = _Placer(fabric)
    special: dict[tuple[int, int, int, int], list[int] | None] = {}
    for wanted in (BANDWIDTH, LATENCY):
        for key in _keys(demands, kind, max_hops, wanted):
            special[key] = placer.place(*key)
    arcs = _merge(default, demands, kind, max_hops, special)
    meta = {
        "classified": classified,
        "bandwidth_paths": sum(1 for k in special if k[2] == BANDWIDTH),
        "latency_paths": sum(1 for k, p in special.items() if k[2] == LATENCY and p),
        "latency_fallbacks": sum(1 for k, p in special.items() if k[2] == LATENCY and not p),
    }
    return routing(NAME, arcs, meta)


def _keys(
    demands: Demands, kind: IntArray, max_hops: IntArray, wanted: int
) -> list[tuple[int, int, int, int]]:
    flows = np.flatnonzero(kind == wanted)
    rows = zip(
        demands.src[flows].tolist(),
        demands.dst[flows].tolist(),
        kind[flows].tolist(),
        max_hops[flows].tolist(),
        strict=True,
    )
    return list(dict.fromkeys(rows))


def _merge(
    default: IntArray,
    demands: Demands,
    kind: IntArray,
    max_hops: IntArray,
    special: dict[tuple[int, int, int, int], list[int] | None],
) -> IntArray:
    width = max([default.shape[1]] + [len(p) for p in special.values() if p])
    arcs = np.full((len(demands), width), -1, dtype=np.int64)
    arcs[:, : default.shape[1]] = default
    for flow in np.flatnonzero(kind != 0).tolist():
        key = (
            int(demands.src[flow]),
            int(demands.dst[flow]),
            int(kind[flow]),
            int(max_hops[flow]),
        )
        path = special.get(key)
        if path:
            arcs[flow] = -1
            arcs[flow, : len(path)] = path
    return arcs


class _Placer:
    """Shared link weights and the two weighted searches."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        notes = [a.annotations for a in fabric.topology.arcs]
        is_bw = np.array(["bandwidth" in n for n in notes], dtype=bool)
        is_lat = np.array(["latency" in n for n in notes], dtype=bool)
        host = fabric.is_host_arc
        preferred = (is_bw | host) if is_bw.any() else ~is_lat
        self.penalty = np.where(preferred, 0.0, float(fabric.nnodes)).tolist()
        self.latency_ok = (host | is_lat).tolist()
        self.weight = [1.0] * fabric.narcs

    def place(self, src: int, dst: int, kind: int, max_hops: int) -> list[int] | None:
        """Path of one communication (``None``: latency fallback), weights updated."""
        if kind == BANDWIDTH:
            cost = [w + p for w, p in zip(self.weight, self.penalty, strict=True)]
            path = dijkstra(self.fabric, cost, src, dst)
            if path is None:
                names = self.fabric.names
                raise RoutingError(f"{NAME}: no path from {names[src]} to {names[dst]}")
        else:
            limit = max_hops + 1 if max_hops > 0 else self.fabric.nnodes
            path = self._bounded(src, dst, limit)
        for arc in path or ():
            self.weight[arc] += 1.0
        return path

    def _bounded(self, src: int, dst: int, max_arcs: int) -> list[int] | None:
        """Least-weight path over latency-usable arcs with at most ``max_arcs`` arcs.

        Layered Bellman-Ford: a node's entry is replaced only by a strictly
        cheaper path, so among equal weights the one with fewer arcs wins.
        """
        adj = adjacency(self.fabric)
        nhosts = self.fabric.nhosts
        best: dict[int, tuple[float, list[int]]] = {src: (0.0, [])}
        frontier = dict(best)
        for _ in range(max_arcs):
            reached: dict[int, tuple[float, list[int]]] = {}
            for node, (cost, path) in frontier.items():
                if node < nhosts and node != src:
                    continue
                for arc, nxt in adj[node]:
                    if not self.latency_ok[arc]:
                        continue
                    new = cost + self.weight[arc]
                    if nxt not in best or new < best[nxt][0]:
                        best[nxt] = reached[nxt] = (new, [*path, arc])
            if not reached:
                break
            frontier = reached
        found = best.get(dst)
        return found[1] if found else None
