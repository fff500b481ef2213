"""Path machinery shared by the routers: hop distances, forwarding tables, walks, path sets.

Every function works on :class:`~sdnmpi.core.routing.model.Fabric` arrays and
never lets a path transit a host.  The pieces:

* :func:`host_hops`: shortest hop count from every node to every host (the
  "LID matrix" of an InfiniBand subnet manager), from one BFS per host in C.
* :func:`walk`: follow a per-hop decision for many flows at once (vectorized
  over flows, one numpy step per hop); :func:`follow_table` does it for a
  destination-based forwarding table (``table[node, dst_host] -> arc``), which
  is how D-mod-K, min-hop and NetSA's default paths route.
* :func:`shortest_choices`: the shortest next hops of every (destination, node),
  in port order (the shortest-path DAG of every host), optionally one per LAG.
* :class:`ShortestPaths`: counts and unranks shortest paths (candidate sets).
* :func:`dijkstra`: a plain binary-heap Dijkstra for the per-pair routers.
* :func:`lag_leader` / :func:`lag_members`: aggregated links as one logical port.

Results that depend only on the fabric's wiring (never on capacities or latencies)
are cached per :class:`~sdnmpi.core.topology.Topology` object, so every fabric of one
topology shares them: the manager routes each job on a fabric of its own (capacities
reduced by the other jobs' load), and D-mod-K's table alone took a second on
fat_tree(16).
"""

from __future__ import annotations

import heapq
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from sdnmpi.core.routing.model import Fabric, IntArray, Routing
from sdnmpi.errors import RoutingError

BoolArray = npt.NDArray[np.bool_]
#: Hop count standing for "no path" in distance tables (large, but safe to add to).
UNREACHABLE = 1 << 30
#: Flows walked at once; bounds the (flows x ports) temporaries.
CHUNK = 1 << 17

_T = TypeVar("_T")
#: id(topology) -> its cached tables (topologies compare by value, so they are not
#: hashable; an entry goes when its topology does).
_CACHE: dict[int, dict[str, Any]] = {}
_CACHE_LOCK = threading.RLock()  # re-entered by a finalizer run by the GC

#: ``step(flows, nodes, hop) -> arcs``: the arc each flow takes from its current node.
Step = Callable[[IntArray, IntArray, int], IntArray]


def memo(fabric: Fabric, key: str, build: Callable[[], _T]) -> _T:
    """``build()`` once per topology and key (topologies are immutable); ``build`` must
    depend on the wiring only, not on capacities or latencies.  Threads may build the
    same value at once; one is kept."""
    with _CACHE_LOCK:
        slot = _CACHE.get(id(fabric.topology))
        if slot is None:
            slot = _CACHE[id(fabric.topology)] = {}
            weakref.finalize(fabric.topology, _forget, id(fabric.topology))
        if key in slot:
            return cast(_T, slot[key])
    value = build()
    with _CACHE_LOCK:
        return cast(_T, slot.setdefault(key, value))


def _forget(topology_id: int) -> None:
    with _CACHE_LOCK:
        _CACHE.pop(topology_id, None)


def readonly(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Mark an array read-only and return it."""
    arr.setflags(write=False)
    return arr


def routing(router: str, arcs: IntArray, meta: Mapping[str, object] | None = None) -> Routing:
    """A :class:`Routing` from a padded arc matrix (made read-only)."""
    out = np.ascontiguousarray(arcs, dtype=np.int64)
    return Routing(router, readonly(out), dict(meta or {}))


def padded(rows: Sequence[Sequence[int]], width: int | None = None) -> IntArray:
    """Rows of ints as a matrix padded with -1.

    >>> padded([[1, 2], [3]])
    array([[ 1,  2],
           [ 3, -1]])
    """
    width = max((len(r) for r in rows), default=0) if width is None else width
    out = np.full((len(rows), width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


# -- fabric tables ------------------------------------------------------------------


def out_table(fabric: Fabric) -> IntArray:
    """Arcs leaving each node in port order, shape (nnodes, max degree), padded with -1."""
    return memo(fabric, "out_table", lambda: readonly(padded(fabric.out_arcs)))


def host_hops(fabric: Fabric) -> IntArray:
    """Shortest hop count from every node to every host, shape (nnodes, nhosts).

    Hosts never forward, so only the first arc of a path may leave a host.
    :data:`UNREACHABLE` marks missing paths.
    """
    return memo(fabric, "host_hops", lambda: readonly(_host_hops(fabric)))


def _host_hops(fabric: Fabric) -> IntArray:
    nh, n = fabric.nhosts, fabric.nnodes
    src, dst = fabric.arc_src, fabric.arc_dst
    keep = src >= nh  # arcs a path may take after its first hop
    reverse = csr_matrix(
        (np.ones(int(keep.sum())), (dst[keep], src[keep])), shape=(n, n), dtype=np.float64
    )
    dist = shortest_path(reverse, directed=True, unweighted=True, indices=np.arange(nh))
    table = np.where(np.isinf(dist), UNREACHABLE, dist).astype(np.int64).T.copy()
    first = np.flatnonzero(src < nh)
    to_switch = first[dst[first] >= nh]
    np.minimum.at(table, src[to_switch], table[dst[to_switch]] + 1)
    to_host = first[dst[first] < nh]
    np.minimum.at(table, (src[to_host], dst[to_host]), 1)
    return np.minimum(table, UNREACHABLE)


def lag_leader(fabric: Fabric) -> IntArray:
    """The first arc (port order) of each arc's aggregated link; itself if not in a LAG."""
    return memo(fabric, "lag_leader", lambda: readonly(_lag_leader(fabric)))


def _lag_leader(fabric: Fabric) -> IntArray:
    leader = np.arange(fabric.narcs, dtype=np.int64)
    arcs = fabric.topology.arcs
    for row in fabric.out_arcs:
        first: dict[str, int] = {}
        for a in row:
            lag = arcs[a].lag
            if lag is not None:
                leader[a] = first.setdefault(lag, a)
    return leader


def lag_members(fabric: Fabric) -> tuple[IntArray, IntArray]:
    """Members of each arc's aggregated link in port order (padded), and their count."""

    def build() -> tuple[IntArray, IntArray]:
        leader = lag_leader(fabric)
        groups: dict[int, list[int]] = {}
        for a in range(fabric.narcs):
            groups.setdefault(int(leader[a]), []).append(a)
        rows = [groups[int(leader[a])] for a in range(fabric.narcs)]
        table = padded(rows)
        return readonly(table), readonly(np.array([len(r) for r in rows], dtype=np.int64))

    return memo(fabric, "lag_members", build)


def nth_true(mask: BoolArray, k: IntArray) -> IntArray:
    """Index along axis 1 of the ``k``-th (0-based) True; ``k`` must be below each count.

    ``k`` has ``mask``'s shape without axis 1.

    >>> nth_true(np.array([[True, False, True], [False, True, True]]), np.array([1, 0]))
    array([2, 1])
    """
    out: IntArray = np.zeros(k.shape, dtype=np.int64)
    seen = np.zeros(k.shape, dtype=np.int64)  # Trues before column j (one pass per column:
    for j in range(mask.shape[1]):  # a cumulative sum along a middle axis is slow)
        column = mask[:, j]
        out[column & (seen == k)] = j
        seen += column
    return out


# -- walking ------------------------------------------------------------------------


def walk(
    fabric: Fabric, src: IntArray, dst: IntArray, step: Step, *, router: str, chunk: int = CHUNK
) -> IntArray:
    """Paths of many flows built hop by hop: ``step`` picks each flow's next arc.

    Flows are walked ``chunk`` at a time; the result is a padded (flows, hops) matrix.
    Raises :class:`RoutingError` if a step has no arc, enters a host that is not the
    destination, or does not arrive within ``nnodes`` hops (a forwarding loop).
    """
    parts = [
        _walk(fabric, src, dst, np.arange(lo, min(lo + chunk, src.size)), step, router)
        for lo in range(0, src.size, chunk)
    ]
    width = max((p.shape[1] for p in parts), default=0)
    out = np.full((src.size, width), -1, dtype=np.int64)
    lo = 0
    for p in parts:
        out[lo : lo + p.shape[0], : p.shape[1]] = p
        lo += p.shape[0]
    return out


def _walk(
    fabric: Fabric, src: IntArray, dst: IntArray, flows: IntArray, step: Step, router: str
) -> IntArray:
    cur = src[flows].copy()
    target = dst[flows]
    same = np.flatnonzero(cur == target)
    if same.size:
        host = fabric.names[int(cur[same[0]])]
        raise RoutingError(f"{router}: flow {int(flows[same[0]])} goes from {host} to itself")
    out = np.full((flows.size, 8), -1, dtype=np.int64)
    hop = 0
    active = np.arange(flows.size)
    while active.size:
        if hop >= fabric.nnodes:
            _stuck(fabric, router, cur[active[0]], target[active[0]], "loops")
        arcs = step(flows[active], cur[active], hop)
        bad = np.flatnonzero(arcs < 0)
        if bad.size:
            _stuck(fabric, router, cur[active[bad[0]]], target[active[bad[0]]], "has no next hop")
        if hop == out.shape[1]:
            out = np.concatenate([out, np.full_like(out, -1)], axis=1)
        out[active, hop] = arcs
        here = fabric.arc_dst[arcs]
        cur[active] = here
        transit = np.flatnonzero((here < fabric.nhosts) & (here != target[active]))
        if transit.size:
            _stuck(fabric, router, here[transit[0]], target[active[transit[0]]], "transits")
        active = active[here != target[active]]
        hop += 1
    return out[:, :hop]


def _stuck(
    fabric: Fabric, router: str, node: np.integer[Any], dst: np.integer[Any], why: str
) -> None:
    where, to = fabric.names[int(node)], fabric.names[int(dst)]
    if why == "transits":
        raise RoutingError(f"{router}: the path towards {to} transits host {where}")
    raise RoutingError(f"{router}: forwarding at {where} towards host {to} {why}")


def follow_table(
    fabric: Fabric, table: IntArray, src: IntArray, dst: IntArray, *, router: str
) -> IntArray:
    """Paths through a destination-based forwarding table ``table[node, dst_host] -> arc``."""

    def step(flows: IntArray, cur: IntArray, hop: int) -> IntArray:
        out: IntArray = table[cur, dst[flows]]
        return out

    return walk(fabric, src, dst, step, router=router)


def first_shortest_table(fabric: Fabric) -> IntArray:
    """Forwarding table taking, at every node, the first shortest next hop in port order."""

    def build() -> IntArray:
        c = shortest_choices(fabric)
        table = np.where(c.count > 0, c.arcs[:, :, 0], -1).astype(np.int64).T.copy()
        return readonly(table)

    return memo(fabric, "first_shortest_table", build)


@dataclass(frozen=True, eq=False)
class Choices:
    """The shortest next hops towards every destination host from every node, in port order.

    ``arcs[d, node, j]`` for ``j < count[d, node]`` (then -1).  With ``logical``
    only the first member (port order) of each aggregated link is listed.
    """

    count: IntArray  # (nhosts, nnodes)
    arcs: npt.NDArray[np.int32]  # (nhosts, nnodes, most choices)
    logical: bool


def shortest_choices(fabric: Fabric, *, logical: bool = False) -> Choices:
    """The (cached) :class:`Choices` of a fabric: the shortest-path DAG of every host."""
    if logical and not has_lags(fabric):
        # without aggregated links both tables are the same: one copy (110 MB at 1024 hosts)
        c = shortest_choices(fabric)
        return memo(fabric, "choices_logical", lambda: Choices(c.count, c.arcs, True))
    key = "choices_logical" if logical else "choices"
    return memo(fabric, key, lambda: _choices(fabric, logical))


def has_lags(fabric: Fabric) -> bool:
    """Whether any link of the fabric is aggregated with another (a LAG of two or more)."""
    return bool((lag_leader(fabric) != np.arange(fabric.narcs)).any())


def _choices(fabric: Fabric, logical: bool) -> Choices:
    nh, n = fabric.nhosts, fabric.nnodes
    # distances as int16, destination-major: the (dest, node, port) temporaries stay small
    dist = np.minimum(host_hops(fabric), np.iinfo(np.int16).max).astype(np.int16).T.copy()
    parts = [
        (rows, *_choices_of(fabric, rows, dist, logical))
        for rows in (np.arange(nh), np.arange(nh, n))  # hosts have few ports, switches many
        if rows.size
    ]
    width = max(p[2].shape[2] for p in parts)
    count = np.zeros((nh, n), dtype=np.int64)
    table = np.full((nh, n, width), -1, dtype=np.int32)
    for rows, c, a in parts:
        count[:, rows] = c
        table[:, rows, : a.shape[2]] = a
    return Choices(readonly(count), readonly(table), logical)


def _choices_of(
    fabric: Fabric, rows: IntArray, dist: npt.NDArray[np.int16], logical: bool
) -> tuple[IntArray, npt.NDArray[np.int32]]:
    nh = fabric.nhosts
    arcs = padded([fabric.out_arcs[r] for r in rows.tolist()])
    safe = np.where(arcs >= 0, arcs, 0)
    valid = arcs >= 0
    if logical:
        valid &= lag_leader(fabric)[safe] == safe
    head = fabric.arc_dst[safe]
    host_head = np.where(head < nh, head, -1)
    local = np.arange(rows.size)[None, :, None]
    count = np.zeros((nh, rows.size), dtype=np.int64)
    chunks: list[npt.NDArray[np.int32]] = []
    step = max(1, (1 << 21) // max(1, arcs.size))
    for lo in range(0, nh, step):
        block = np.arange(lo, min(lo + step, nh))
        d = dist[block]
        ok = d[:, head] == (d[:, rows] - 1)[:, :, None]
        ok &= valid[None]
        ok &= (host_head[None] < 0) | (host_head[None] == block[:, None, None])
        c = ok.sum(axis=-1)
        count[block] = c
        order = np.argsort(~ok, axis=-1, kind="stable")
        rank = np.arange(arcs.shape[1])[None, None, :]
        chunks.append(np.where(rank < c[:, :, None], arcs[local, order], -1).astype(np.int32))
    table = np.concatenate(chunks, axis=0)[:, :, : max(1, int(count.max(initial=0)))]
    return count, table


# -- path sets ----------------------------------------------------------------------


class ShortestPaths:
    """Shortest-hop paths between hosts, counted and unranked on the shortest-path DAG.

    :meth:`paths` returns all shortest paths when there are at most ``limit``,
    else ``limit`` of them spread evenly over the (port-ordered) enumeration, so a
    cap never favours the first spine or core.
    """

    def __init__(self, fabric: Fabric, limit: int) -> None:
        if limit < 1:
            raise RoutingError(f"candidate path limit must be >= 1, got {limit}")
        self.fabric = fabric
        self.limit = limit
        self._choices = shortest_choices(fabric)
        self._heads = fabric.arc_dst.tolist()
        self._counts: dict[int, list[int]] = {}
        self._next: dict[tuple[int, int], list[int]] = {}

    def count(self, src: int, dst: int) -> int:
        """Number of shortest paths from node ``src`` to host ``dst``."""
        return self._count_to(dst)[src]

    def _count_to(self, dst: int) -> list[int]:
        if dst not in self._counts:
            self._counts[dst] = self._build_counts(dst)
        return self._counts[dst]

    def _build_counts(self, dst: int) -> list[int]:
        fabric, choices = self.fabric, self._choices
        dist = host_hops(fabric)[:, dst]
        counts = np.zeros(fabric.nnodes, dtype=np.int64)
        counts[dst] = 1
        rank = np.arange(choices.arcs.shape[2])[None, :]
        for layer in range(1, int(dist[dist < UNREACHABLE].max(initial=0)) + 1):
            rows = np.flatnonzero(dist == layer)
            arcs = choices.arcs[dst, rows]
            valid = rank < choices.count[dst, rows][:, None]
            heads = fabric.arc_dst[np.where(valid, arcs, 0)]
            counts[rows] = np.minimum(np.where(valid, counts[heads], 0).sum(axis=1), 1 << 62)
        out: list[int] = counts.tolist()
        return out

    def _next_arcs(self, node: int, dst: int) -> list[int]:
        key = (node, dst)
        if key not in self._next:
            n = int(self._choices.count[dst, node])
            self._next[key] = self._choices.arcs[dst, node, :n].tolist()
        return self._next[key]

    def paths(self, src: int, dst: int) -> IntArray:
        """Candidate paths as a (paths, hops) arc matrix; raises if ``dst`` is unreachable."""
        total = self.count(src, dst)
        if total == 0:
            names = self.fabric.names
            raise RoutingError(f"no path from {names[src]} to {names[dst]}")
        ranks = range(total) if total <= self.limit else self._spread(total)
        return np.array([self.unrank(src, dst, r) for r in ranks], dtype=np.int64)

    def many(self, src: IntArray, dst: IntArray) -> tuple[IntArray, IntArray]:
        """:meth:`paths` of many (``src``, ``dst``) pairs at once, unranked together.

        Returns ``(ptr, arcs)``: pair ``i``'s candidates are rows ``ptr[i]:ptr[i+1]``
        of ``arcs`` (padded with -1), the same paths in the same order as
        :meth:`paths` gives.
        """
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        uniq, inverse = np.unique(dst, return_inverse=True)
        table = np.array([self._count_to(int(d)) for d in uniq.tolist()], dtype=np.int64)
        row = inverse.reshape(-1).astype(np.int64)
        total = table[row, src] if src.size else np.zeros(0, np.int64)
        if (total == 0).any():
            bad = int(np.flatnonzero(total == 0)[0])
            names = self.fabric.names
            raise RoutingError(f"no path from {names[int(src[bad])]} to {names[int(dst[bad])]}")
        width = np.minimum(total, self.limit)
        ptr = np.zeros(src.size + 1, dtype=np.int64)
        np.cumsum(width, out=ptr[1:])
        pair = np.repeat(np.arange(src.size, dtype=np.int64), width)
        nth = np.arange(int(ptr[-1]), dtype=np.int64) - ptr[pair]
        spread = total[pair] > self.limit
        rank = np.where(spread, nth * total[pair] // self.limit, nth)
        return ptr, self._unrank_many(src[pair], dst[pair], rank, table, row[pair])

    def _unrank_many(
        self, node: IntArray, dst: IntArray, rank: IntArray, table: IntArray, row: IntArray
    ) -> IntArray:
        """:meth:`unrank` vectorized: ``table[row[i]]`` is :meth:`_count_to` of ``dst[i]``."""
        choices, heads = self._choices, self.fabric.arc_dst
        node, rank = node.copy(), rank.copy()
        hops: list[IntArray] = []
        while True:
            go = np.flatnonzero(node != dst)
            if not go.size:
                break
            nd, dd, rr = node[go], dst[go], rank[go]
            n = choices.count[dd, nd]
            chosen = np.full(go.size, -1, dtype=np.int64)
            for j in range(choices.arcs.shape[2]):
                open_ = (j < n) & (chosen < 0)
                arc = np.where(open_, choices.arcs[dd, nd, j], 0).astype(np.int64)
                c = table[row[go], heads[arc]]
                take = open_ & (rr < c)
                chosen[take] = arc[take]
                rr = np.where(open_ & ~take, rr - c, rr)
            step = np.full(node.size, -1, dtype=np.int64)
            step[go] = chosen
            hops.append(step)
            node[go], rank[go] = heads[chosen], rr
        if not hops:
            return np.zeros((node.size, 0), dtype=np.int64)
        return np.stack(hops, axis=1)

    def _spread(self, total: int) -> list[int]:
        return [i * total // self.limit for i in range(self.limit)]

    def unrank(self, src: int, dst: int, rank: int) -> list[int]:
        """The ``rank``-th shortest path (port-order enumeration) from ``src`` to ``dst``."""
        counts = self._count_to(dst)
        path: list[int] = []
        node = src
        while node != dst:
            for arc in self._next_arcs(node, dst):
                c = counts[self._heads[arc]]
                if rank < c:
                    path.append(arc)
                    node = self._heads[arc]
                    break
                rank -= c
        return path


# -- per-pair search ------------------------------------------------------------------


def adjacency(fabric: Fabric) -> tuple[tuple[tuple[int, int], ...], ...]:
    """``(arc, head)`` pairs leaving each node, in port order (for Python searches)."""

    def build() -> tuple[tuple[tuple[int, int], ...], ...]:
        heads = fabric.arc_dst.tolist()
        return tuple(tuple((a, heads[a]) for a in row) for row in fabric.out_arcs)

    return memo(fabric, "adjacency", build)


def dijkstra(
    fabric: Fabric,
    cost: Sequence[float],
    src: int,
    dst: int,
    allowed: Sequence[bool] | None = None,
) -> list[int] | None:
    """Least-cost path (arc list) from ``src`` to ``dst`` by Dijkstra with a binary heap.

    ``cost[arc]`` must be non-negative; ``allowed[arc]`` False removes an arc.  Hosts
    other than ``src`` are never expanded.  Ties keep the first path found (heap
    order by cost, then node index; arcs in port order).  ``None`` if unreachable.
    """
    adj = adjacency(fabric)
    nhosts = fabric.nhosts
    dist = [float("inf")] * fabric.nnodes
    via = [-1] * fabric.nnodes
    dist[src] = 0.0
    heap: list[tuple[float, int]] = [(0.0, src)]
    while heap:
        d_u, u = heapq.heappop(heap)
        if u == dst:
            break
        if d_u > dist[u] or (u < nhosts and u != src):
            continue
        for arc, v in adj[u]:
            if allowed is not None and not allowed[arc]:
                continue
            d_v = d_u + cost[arc]
            if d_v < dist[v]:
                dist[v] = d_v
                via[v] = arc
                heapq.heappush(heap, (d_v, v))
    if via[dst] < 0:
        return None
    tails = fabric.arc_src
    path = [via[dst]]
    while int(tails[path[-1]]) != src:
        path.append(via[int(tails[path[-1]])])
    path.reverse()
    return path


def pairs_in_order(
    demands_src: IntArray, demands_dst: IntArray, nhosts: int
) -> tuple[IntArray, IntArray]:
    """Distinct (src, dst) host pairs in order of first appearance, and each flow's pair.

    >>> pairs, of = pairs_in_order(np.array([2, 0, 2]), np.array([1, 1, 1]), 3)
    >>> pairs.tolist(), of.tolist()
    ([[2, 1], [0, 1]], [0, 1, 0])
    """
    key = demands_src * nhosts + demands_dst
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    pairs = np.stack([demands_src[first[order]], demands_dst[first[order]]], axis=1)
    return pairs.astype(np.int64), rank[inverse.reshape(-1)].astype(np.int64)
