"""The routing data model: the fabric as arrays, the demands, and the routes.

Three values are shared by every router, the LP lower bound and the simulator:

* :class:`Fabric`: a :class:`~sdnmpi.core.topology.Topology` as numpy arrays.
  Nodes are indexed hosts first (``0..nhosts-1``, in topology order), then
  switches; arcs are :attr:`Topology.arcs` in order (one per link direction).
* :class:`Demands`: the flows to route.  One flow per (src rank, dst rank) cell
  of each phase whose ranks sit on different hosts, with its bytes, its phase
  and the ranks it joins (ECMP hashes them); built from a pattern and a
  placement, or for all host pairs (default routes).
* :class:`Routing`: one path per flow, as arc indices in a padded matrix
  (``-1`` after the last hop), which vectorizes link loads and simulation.

:func:`validate` checks what the controller will rely on: paths are contiguous,
go from the flow's source host to its destination host, never transit a host,
never visit a node twice, and optionally are shortest-hop and valley-free.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from sdnmpi.core.pattern import Pattern
from sdnmpi.core.placement import Placement
from sdnmpi.core.topology import Topology
from sdnmpi.errors import PatternError, RoutingError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def _ro(values: npt.ArrayLike) -> IntArray:
    """A read-only int64 array."""
    arr: IntArray = np.array(values, dtype=np.int64)
    arr.setflags(write=False)
    return arr


def _ro_float(values: npt.ArrayLike) -> FloatArray:
    """A read-only float64 array."""
    arr: FloatArray = np.array(values, dtype=np.float64)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class Fabric:
    """A topology as arrays: node indices, arcs, capacities, levels, hop distances."""

    topology: Topology

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Node names by index: hosts first, then switches."""
        return self.topology.node_names

    @cached_property
    def index(self) -> dict[str, int]:
        """Node name -> index."""
        return {n: i for i, n in enumerate(self.names)}

    @property
    def nhosts(self) -> int:
        """Number of hosts (their node indices are ``0..nhosts-1``)."""
        return len(self.topology.hosts)

    @property
    def nnodes(self) -> int:
        """Number of nodes."""
        return len(self.names)

    @property
    def narcs(self) -> int:
        """Number of arcs (link directions)."""
        return len(self.topology.arcs)

    @cached_property
    def arc_src(self) -> IntArray:
        """Source node of each arc."""
        return _ro([self.index[a.src] for a in self.topology.arcs])

    @cached_property
    def arc_dst(self) -> IntArray:
        """Destination node of each arc."""
        return _ro([self.index[a.dst] for a in self.topology.arcs])

    @cached_property
    def capacity_bps(self) -> FloatArray:
        """Capacity of each arc in bit/s."""
        return _ro_float([a.capacity_bps for a in self.topology.arcs])

    @cached_property
    def latency_s(self) -> FloatArray:
        """Latency of each arc in seconds."""
        return _ro_float([a.latency_s for a in self.topology.arcs])

    @cached_property
    def level(self) -> IntArray:
        """Level of each node: 0 for hosts, the switch level otherwise."""
        levels = self.topology.levels
        return _ro([0] * self.nhosts + [levels[s.name] for s in self.topology.switches])

    @cached_property
    def out_arcs(self) -> tuple[tuple[int, ...], ...]:
        """Arc indices leaving each node, in port order."""
        table: list[list[int]] = [[] for _ in range(self.nnodes)]
        for i, a in enumerate(self.topology.arcs):
            table[self.index[a.src]].append(i)
        return tuple(tuple(sorted(t, key=lambda i: self.topology.arcs[i].src_port)) for t in table)

    @cached_property
    def is_host_arc(self) -> npt.NDArray[np.bool_]:
        """Whether each arc starts or ends at a host."""
        out = (self.arc_src < self.nhosts) | (self.arc_dst < self.nhosts)
        out.setflags(write=False)
        return out

    def hops_to(self, dst: int) -> IntArray:
        """Hop count from every node to node ``dst`` (-1 if unreachable).

        Paths may not transit hosts, so hosts other than ``dst`` are not expanded.
        """
        dist = np.full(self.nnodes, -1, dtype=np.int64)
        dist[dst] = 0
        incoming = self._in_arcs
        queue = deque([dst])
        while queue:
            node = queue.popleft()
            if node < self.nhosts and node != dst:
                continue
            for arc in incoming[node]:
                prev = int(self.arc_src[arc])
                if dist[prev] < 0:
                    dist[prev] = dist[node] + 1
                    queue.append(prev)
        return dist

    @cached_property
    def _in_arcs(self) -> tuple[tuple[int, ...], ...]:
        table: list[list[int]] = [[] for _ in range(self.nnodes)]
        for i, d in enumerate(self.arc_dst.tolist()):
            table[d].append(i)
        return tuple(tuple(t) for t in table)

    def host_index(self, name: str) -> int:
        """Node index of host ``name``."""
        i = self.index.get(name)
        if i is None or i >= self.nhosts:
            raise RoutingError(f"topology {self.topology.name!r} has no host {name!r}")
        return i


@dataclass(frozen=True, eq=False)
class Demands:
    """Flows to route: one entry per (phase, src rank, dst rank) across hosts.

    ``src``/``dst`` are host node indices; ``src_rank``/``dst_rank`` are the MPI
    ranks (``-1`` for host-level demands); ``phase`` indexes ``phase_labels`` and
    ``phase_repeat``.  ``kind`` and ``max_hops`` carry NetSA annotations
    (0: none, 1: bandwidth, 2: latency) when the pattern has them.
    ``messages`` counts the MPI messages each flow is made of (the pattern
    cells' ``messages`` column, at least 1); ``None`` means one message per
    flow.  The simulator's point-to-point protocol model needs the size of
    one message (:attr:`message_bytes`).

    >>> a = lambda v: np.array(v, dtype=np.int64)
    >>> d = Demands(a([0, 1]), a([1, 0]), a([1024, 10]), a([0, 0]), a([0, 1]), a([1, 0]),
    ...             ("p0",), a([1]), messages=a([4, 1]))
    >>> d.message_bytes.tolist()
    [256.0, 10.0]
    """

    src: IntArray
    dst: IntArray
    size_bytes: IntArray
    phase: IntArray
    src_rank: IntArray
    dst_rank: IntArray
    phase_labels: tuple[str, ...]
    phase_repeat: IntArray
    kind: IntArray | None = None
    max_hops: IntArray | None = None
    meta: Mapping[str, object] = field(default_factory=dict)
    messages: IntArray | None = None

    def __post_init__(self) -> None:
        if self.messages is None:
            return
        if self.messages.shape != self.src.shape:
            raise PatternError(
                f"demands: {self.messages.size} message counts for {self.src.size} flows"
            )
        if self.messages.size and int(self.messages.min()) < 1:
            raise PatternError(
                f"demands: a flow has {int(self.messages.min())} messages (must be >= 1)"
            )

    def __len__(self) -> int:
        return int(self.src.size)

    @property
    def message_counts(self) -> IntArray:
        """Messages per flow (1 where unknown)."""
        if self.messages is None:
            return _ro(np.ones(len(self), dtype=np.int64))
        return self.messages

    @property
    def message_bytes(self) -> FloatArray:
        """Mean size of one message of each flow: ``size_bytes / messages``."""
        out: FloatArray = self.size_bytes / self.message_counts
        return out

    @property
    def nphases(self) -> int:
        """Number of phases."""
        return len(self.phase_labels)

    @classmethod
    def from_pattern(
        cls, fabric: Fabric, pattern: Pattern, placement: Placement | None = None
    ) -> Demands:
        """Flows of a rank-level pattern placed on hosts (intra-host cells dropped).

        A host-level pattern needs no placement: its endpoints are host names.
        Each flow keeps its cell's message count (a cell with bytes but a count
        of 0 counts as one message).
        """
        if pattern.hosts is not None:
            host_of = np.array([fabric.host_index(h) for h in pattern.hosts], dtype=np.int64)
            ranks_known = False
        else:
            if placement is None:
                raise PatternError(f"pattern {pattern.name!r} is per rank: a placement is needed")
            if placement.nprocs < pattern.nprocs:
                raise PatternError(
                    f"pattern {pattern.name!r} has ranks up to {pattern.nprocs - 1}, "
                    f"the placement only {placement.nprocs} ranks"
                )
            host_of = np.array([fabric.host_index(h) for h in placement.hosts], dtype=np.int64)
            ranks_known = True
        cols: dict[str, list[IntArray]] = {
            k: [] for k in ("src", "dst", "b", "ph", "sr", "dr", "k", "h", "m")
        }
        annotated = any(p.kind is not None for p in pattern.phases)
        for i, p in enumerate(pattern.phases):
            s, d = host_of[p.src], host_of[p.dst]
            keep = (s != d) & (p.size_bytes > 0)
            cols["src"].append(s[keep])
            cols["dst"].append(d[keep])
            cols["b"].append(p.size_bytes[keep])
            cols["ph"].append(np.full(int(keep.sum()), i, dtype=np.int64))
            cols["sr"].append(
                p.src[keep] if ranks_known else np.full(int(keep.sum()), -1, np.int64)
            )
            cols["dr"].append(
                p.dst[keep] if ranks_known else np.full(int(keep.sum()), -1, np.int64)
            )
            zeros = np.zeros(int(keep.sum()), dtype=np.int64)
            cols["k"].append(p.kind[keep] if p.kind is not None else zeros)
            cols["h"].append(p.max_hops[keep] if p.max_hops is not None else zeros)
            cols["m"].append(np.maximum(p.messages[keep], 1))
        cat = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
        return cls(
            _ro(cat["src"]),
            _ro(cat["dst"]),
            _ro(cat["b"]),
            _ro(cat["ph"]),
            _ro(cat["sr"]),
            _ro(cat["dr"]),
            tuple(p.label for p in pattern.phases),
            _ro([p.repeat for p in pattern.phases]),
            _ro(cat["k"]) if annotated else None,
            _ro(cat["h"]) if annotated else None,
            {"pattern": pattern.name},
            _ro(cat["m"]),
        )

    @classmethod
    def all_pairs(
        cls, fabric: Fabric, size_bytes: int = 1, hosts: Sequence[str] | None = None
    ) -> Demands:
        """One flow per ordered pair of distinct hosts (default routes), one phase."""
        idx = np.array(
            [fabric.host_index(h) for h in hosts] if hosts is not None else range(fabric.nhosts),
            dtype=np.int64,
        )
        s, d = np.meshgrid(idx, idx, indexing="ij")
        keep = s != d
        s, d = s[keep], d[keep]
        n = s.size
        minus = np.full(n, -1, dtype=np.int64)
        return cls(
            _ro(s),
            _ro(d),
            _ro(np.full(n, size_bytes)),
            _ro(np.zeros(n)),
            _ro(minus),
            _ro(minus),
            ("all pairs",),
            _ro([1]),
        )

    def per_host_pair(self) -> Demands:
        """One flow per (phase, src host, dst host) and annotation: the flows between the
        same two hosts in a phase merged, their bytes and messages summed, ranks ``-1``.

        What a router needs when the switches hold one path per host pair (the
        manager's job routes): a 724-rank all-to-all on 20 hosts is 380 flows a phase
        instead of 523,452 (its ranks' pairs across hosts).  Sums stay within int64: a
        phase's bytes are at most :data:`sdnmpi.core.pattern.MAX_TOTAL`.

        >>> a = lambda v: np.array(v, dtype=np.int64)
        >>> d = Demands(a([0, 0, 1]), a([1, 1, 0]), a([5, 7, 1]), a([0, 0, 0]), a([0, 2, 1]),
        ...             a([1, 3, 0]), ("p0",), a([1]))
        >>> m = d.per_host_pair()
        >>> m.src.tolist(), m.dst.tolist(), m.size_bytes.tolist(), m.message_counts.tolist()
        ([0, 1], [1, 0], [12, 1], [2, 1])
        """
        if not len(self):
            return self
        zeros = np.zeros(len(self), dtype=np.int64)
        kind = self.kind if self.kind is not None else zeros
        hops = self.max_hops if self.max_hops is not None else zeros
        keys = np.stack([self.phase, self.src, self.dst, kind, hops], axis=1)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)

        def summed(col: IntArray) -> IntArray:
            out = np.zeros(len(uniq), dtype=np.int64)
            np.add.at(out, inverse, col)
            return _ro(out)

        minus = _ro(np.full(len(uniq), -1, dtype=np.int64))
        return Demands(
            _ro(uniq[:, 1]),
            _ro(uniq[:, 2]),
            summed(self.size_bytes),
            _ro(uniq[:, 0]),
            minus,
            minus,
            self.phase_labels,
            self.phase_repeat,
            _ro(uniq[:, 3]) if self.kind is not None else None,
            _ro(uniq[:, 4]) if self.max_hops is not None else None,
            self.meta,
            summed(self.message_counts),
        )

    def host_pairs(self) -> tuple[IntArray, IntArray, IntArray]:
        """Unique (src, dst) host pairs, the index of each flow's pair, and bytes per pair.

        Bytes are summed over flows and weighted by phase repeats.
        Returns ``(pairs, flow_pair, pair_bytes)`` with ``pairs`` of shape (n, 2).
        """
        key = self.src * (int(self.dst.max(initial=0)) + 1) + self.dst
        uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        pairs = np.stack([self.src[first], self.dst[first]], axis=1)
        weight = self.size_bytes * self.phase_repeat[self.phase]
        pair_bytes = np.bincount(inverse, weights=weight, minlength=uniq.size).astype(np.int64)
        return pairs, inverse.astype(np.int64), pair_bytes


@dataclass(frozen=True, eq=False)
class Routing:
    """A path per flow of a :class:`Demands`: ``arcs[i]`` lists flow i's arcs, then -1."""

    router: str
    arcs: IntArray
    meta: Mapping[str, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.arcs.shape[0])

    def path(self, flow: int) -> tuple[int, ...]:
        """Arc indices of one flow's path."""
        row = self.arcs[flow]
        return tuple(int(a) for a in row[row >= 0])

    def node_path(self, fabric: Fabric, flow: int) -> tuple[str, ...]:
        """Node names along one flow's path."""
        arcs = self.path(flow)
        if not arcs:
            return ()
        nodes = [int(fabric.arc_src[arcs[0]])] + [int(fabric.arc_dst[a]) for a in arcs]
        return tuple(fabric.names[n] for n in nodes)

    @cached_property
    def hops(self) -> IntArray:
        """Path length (arcs) per flow."""
        return _ro((self.arcs >= 0).sum(axis=1))

    def arc_bytes(self, demands: Demands, fabric: Fabric, phase: int | None = None) -> FloatArray:
        """Bytes each arc carries (one phase, or all phases weighted by repeat)."""
        weight: FloatArray = demands.size_bytes.astype(np.float64)
        if phase is None:
            weight = weight * demands.phase_repeat[demands.phase].astype(np.float64)
        else:
            weight = np.where(demands.phase == phase, weight, 0.0)
        mask = self.arcs >= 0
        rows = np.broadcast_to(weight[:, None], self.arcs.shape)[mask]
        out: FloatArray = np.bincount(self.arcs[mask], weights=rows, minlength=fabric.narcs).astype(
            np.float64
        )
        return out

    @classmethod
    def from_paths(
        cls, router: str, paths: Iterable[Sequence[int]], meta: Mapping[str, object] | None = None
    ) -> Routing:
        """Build from a sequence of arc-index paths, one per flow."""
        rows = [tuple(p) for p in paths]
        width = max((len(r) for r in rows), default=0)
        arcs = np.full((len(rows), width), -1, dtype=np.int64)
        for i, r in enumerate(rows):
            arcs[i, : len(r)] = r
        return cls(router, _ro(arcs), dict(meta or {}))

    @classmethod
    def from_pair_paths(
        cls,
        router: str,
        demands: Demands,
        pair_paths: Mapping[tuple[int, int], Sequence[int]],
        meta: Mapping[str, object] | None = None,
    ) -> Routing:
        """Give every flow the path of its (src host, dst host) pair."""
        pairs, flow_pair, _ = demands.host_pairs()
        rows = [pair_paths[(int(s), int(d))] for s, d in pairs] if len(demands) else []
        table = cls.from_paths(router, rows).arcs
        return cls.from_pair_table(router, flow_pair, table, meta)

    @classmethod
    def from_pair_table(
        cls,
        router: str,
        flow_pair: IntArray,
        table: IntArray,
        meta: Mapping[str, object] | None = None,
    ) -> Routing:
        """Give flow ``i`` row ``flow_pair[i]`` of ``table`` (a path per host pair of
        :meth:`Demands.host_pairs`, arcs padded with -1)."""
        arcs = table[flow_pair] if flow_pair.size else np.zeros((0, 0), np.int64)
        return cls(router, _ro(arcs), dict(meta or {}))


def validate(
    fabric: Fabric,
    demands: Demands,
    routing: Routing,
    *,
    shortest: bool = False,
    valley_free: bool = False,
) -> None:
    """Raise :class:`RoutingError` naming the first flow whose path is invalid."""
    if len(routing) != len(demands):
        raise RoutingError(f"{routing.router}: {len(routing)} paths for {len(demands)} flows")
    if not len(demands):
        return
    arcs = routing.arcs
    mask = arcs >= 0
    _check_padding(routing, mask)
    safe = np.where(mask, arcs, 0)
    src_nodes, dst_nodes = fabric.arc_src[safe], fabric.arc_dst[safe]
    first, last = src_nodes[:, 0], dst_nodes[np.arange(len(arcs)), routing.hops - 1]
    bad = np.flatnonzero((routing.hops == 0) | (first != demands.src) | (last != demands.dst))
    if bad.size:
        _fail(
            fabric,
            demands,
            routing,
            int(bad[0]),
            "does not go from its source to its destination host",
        )
    joined = (dst_nodes[:, :-1] == src_nodes[:, 1:]) | ~mask[:, 1:]
    bad = np.flatnonzero(~joined.all(axis=1))
    if bad.size:
        _fail(fabric, demands, routing, int(bad[0]), "is not contiguous")
    transit = (dst_nodes[:, :-1] < fabric.nhosts) & mask[:, 1:]
    bad = np.flatnonzero(transit.any(axis=1))
    if bad.size:
        _fail(fabric, demands, routing, int(bad[0]), "transits a host")
    _check_loops(fabric, demands, routing, dst_nodes, mask)
    if shortest:
        _check_shortest(fabric, demands, routing)
    if valley_free:
        _check_valley_free(fabric, demands, routing, src_nodes, dst_nodes, mask)


def _check_padding(routing: Routing, mask: npt.NDArray[np.bool_]) -> None:
    if mask.shape[1] > 1 and (mask[:, 1:] & ~mask[:, :-1]).any():
        row = int(np.flatnonzero((mask[:, 1:] & ~mask[:, :-1]).any(axis=1))[0])
        raise RoutingError(f"{routing.router}: path of flow {row} has a gap (-1 before an arc)")


def _fail(fabric: Fabric, demands: Demands, routing: Routing, flow: int, why: str) -> None:
    s, d = fabric.names[int(demands.src[flow])], fabric.names[int(demands.dst[flow])]
    path = " -> ".join(routing.node_path(fabric, flow)) or "(empty)"
    raise RoutingError(f"{routing.router}: path of flow {flow} ({s} -> {d}) {why}: {path}")


def _check_loops(
    fabric: Fabric,
    demands: Demands,
    routing: Routing,
    dst_nodes: IntArray,
    mask: npt.NDArray[np.bool_],
) -> None:
    visited = np.where(mask, dst_nodes, -1 - np.arange(mask.shape[1])[None, :])
    ordered = np.sort(visited, axis=1)
    dup = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1) | (visited == demands.src[:, None]).any(
        axis=1
    )
    bad = np.flatnonzero(dup)
    if bad.size:
        _fail(fabric, demands, routing, int(bad[0]), "visits a node twice (loop)")


def _check_shortest(fabric: Fabric, demands: Demands, routing: Routing) -> None:
    for dst in np.unique(demands.dst):
        dist = fabric.hops_to(int(dst))
        flows = np.flatnonzero(demands.dst == dst)
        longer = flows[routing.hops[flows] > dist[demands.src[flows]]]
        if longer.size:
            _fail(fabric, demands, routing, int(longer[0]), "is longer than a shortest path")


def _check_valley_free(
    fabric: Fabric,
    demands: Demands,
    routing: Routing,
    src_nodes: IntArray,
    dst_nodes: IntArray,
    mask: npt.NDArray[np.bool_],
) -> None:
    step = np.sign(fabric.level[dst_nodes] - fabric.level[src_nodes])
    step = np.where(mask, step, -1)
    # valley: a downward or level move followed by an upward move
    went_down = np.maximum.accumulate((step <= 0).astype(np.int8), axis=1)
    valley = (went_down[:, :-1] == 1) & (step[:, 1:] > 0)
    bad = np.flatnonzero(valley.any(axis=1))
    if bad.size:
        _fail(fabric, demands, routing, int(bad[0]), "is not valley-free (goes down, then up)")
