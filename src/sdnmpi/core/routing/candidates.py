"""Candidate paths between switches (or hosts): valley-free, near-shortest, loop-free.

Traffic-aware routing and its bounds only need to choose among a small set of
paths per *group* of flows.  On a fabric whose hosts hang off one switch each
(:func:`attachment`), a host's first and last arcs are fixed, so every pair of
hosts under the same two leaf switches chooses from the same leaf-to-leaf
paths; :func:`candidate_paths` enumerates them once per (src leaf, dst leaf).

A candidate path never transits a host, never visits a node twice, is
valley-free (no upward step after a downward or level step: the up*/down*
rule of Schroeder et al., Autonet, 1991, deadlock-free on fat-trees) and is at
most ``slack`` hops longer than a shortest path.  On fat-trees, leaf-spines and
XGFTs every arc joins adjacent levels, so all cycles are even and no path is
exactly one hop longer than a shortest one: ``slack=1`` yields shortest paths
only there, and adds one-hop detours on irregular fabrics (NetSA's ToR-to-ToR
link plus its spine paths).

Within a group, candidates are ordered shortest first, then by the mixed-radix
number of their hop choices with the first hop's choice least significant: on a
k-ary fat-tree candidate ``t mod n`` is then the path D-mod-K gives destination
``t`` (Zahavi, "D-Mod-K routing providing non-blocking traffic for shift
permutations on real life fat trees", 2010).

:func:`host_phases` sums a :class:`~sdnmpi.core.routing.model.Demands` per
(phase, src host, dst host) and :func:`phase_key` recognizes phases equal up to
a factor; :class:`PairProblem` puts it together for the routers and bounds:
host pairs, their bytes per merged phase, and their candidate paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.errors import RoutingError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Attachment:
    """Each host's only switch and the two arcs joining them."""

    leaf: IntArray
    up_arc: IntArray
    down_arc: IntArray


def attachment(fabric: Fabric) -> Attachment | None:
    """The leaf switch of every host, or ``None`` if some host has several links.

    >>> from sdnmpi.core.generators import leaf_spine
    >>> att = attachment(Fabric(leaf_spine(2, 2, 2)))
    >>> att.leaf.tolist()
    [4, 4, 5, 5]
    """
    nh = fabric.nhosts
    src, dst = fabric.arc_src, fabric.arc_dst
    up = np.flatnonzero(src < nh)
    down = np.flatnonzero(dst < nh)
    if up.size != nh or down.size != nh:
        return None
    up = up[np.argsort(src[up], kind="stable")]
    down = down[np.argsort(dst[down], kind="stable")]
    ok = (
        np.array_equal(src[up], np.arange(nh))
        and np.array_equal(dst[down], np.arange(nh))
        and bool((dst[up] >= nh).all())
        and np.array_equal(dst[up], src[down])
    )
    if not ok:
        return None
    return Attachment(dst[up].astype(np.int64), up.astype(np.int64), down.astype(np.int64))


@dataclass(frozen=True)
class PathSet:
    """Candidate paths of each group, as arc-index rows padded with ``-1``.

    Group ``g`` (from ``src[g]`` to ``dst[g]``) owns rows ``start[g]:start[g+1]``;
    its first ``nshortest[g]`` rows are shortest paths.  ``digits[j, h]`` is the
    rank of row ``j``'s hop ``h`` among the hops its prefix could take.
    """

    src: IntArray
    dst: IntArray
    start: IntArray
    nshortest: IntArray
    arcs: IntArray
    hops: IntArray
    digits: IntArray

    @property
    def ngroups(self) -> int:
        """Number of groups."""
        return int(self.src.size)

    @property
    def count(self) -> IntArray:
        """Number of candidates per group."""
        out: IntArray = np.diff(self.start)
        return out


class _SplitGraph:
    """The fabric with each host split into a source copy and a sink copy.

    Switch ``v`` gets id ``v - nhosts``; host ``h`` leaves from ``nsw + h`` and
    arrives at ``nsw + nhosts + h``, so no path can transit a host.
    """

    def __init__(self, fabric: Fabric) -> None:
        nh = fabric.nhosts
        self.nsw = fabric.nnodes - nh
        self.n = self.nsw + 2 * nh
        self.nh = nh
        src, dst = fabric.arc_src, fabric.arc_dst
        self.arc_src = np.where(src < nh, self.nsw + src, src - nh)
        self.arc_dst = np.where(dst < nh, self.nsw + nh + dst, dst - nh)
        level = np.asarray(fabric.level)
        self.level = np.concatenate([level[nh:], np.zeros(2 * nh, np.int64)])
        port = np.array([a.src_port for a in fabric.topology.arcs], dtype=np.int64)
        self.out_arc = np.lexsort((port, self.arc_src)).astype(np.int64)
        ones = np.ones(src.size)
        self.reverse = csr_matrix((ones, (self.arc_dst, self.arc_src)), shape=(self.n, self.n))

    def node_of_source(self, nodes: IntArray) -> IntArray:
        """Split id of fabric nodes used as path starts."""
        out: IntArray = np.where(nodes < self.nh, self.nsw + nodes, nodes - self.nh)
        return out

    def node_of_sink(self, nodes: IntArray) -> IntArray:
        """Split id of fabric nodes used as path ends."""
        out: IntArray = np.where(nodes < self.nh, self.nsw + self.nh + nodes, nodes - self.nh)
        return out

    def hops_to(self, targets: IntArray) -> IntArray:
        """Hop distance from every node to each target (split ids); -1 if unreachable."""
        if targets.size == 0:
            return np.zeros((0, self.n), np.int64)
        dist = np.atleast_2d(shortest_path(self.reverse, unweighted=True, indices=targets))
        out: IntArray = np.where(np.isfinite(dist), dist, -1).astype(np.int64)
        return out


def candidate_paths(
    fabric: Fabric,
    src: IntArray,
    dst: IntArray,
    *,
    slack: int = 1,
    max_paths: int = 256,
    seed: int = 0,
) -> PathSet:
    """Valley-free, loop-free paths from ``src[g]`` to ``dst[g]`` (fabric node indices).

    Paths are at most ``slack`` hops longer than shortest; a group with more than
    ``max_paths`` of them keeps a seeded sample.  Raises :class:`RoutingError` if
    a group has no path.
    """
    g = _SplitGraph(fabric)
    s_split, d_split = g.node_of_source(src), g.node_of_sink(dst)
    targets, target_of = np.unique(d_split, return_inverse=True)
    dist = g.hops_to(targets)
    shortest = dist[target_of, s_split]
    if (shortest < 0).any():
        bad = int(np.flatnonzero(shortest < 0)[0])
        names = fabric.names
        raise RoutingError(f"no path from {names[int(src[bad])]} to {names[int(dst[bad])]}")
    budget = shortest + slack
    rng = np.random.default_rng(seed)
    # no name keeps the partial paths: _assemble frees them as it copies them
    return _assemble(
        src, dst, shortest, _expand(g, dist, target_of, s_split, d_split, budget, max_paths, rng)
    )


@dataclass
class _States:
    """Partial paths: group, current node, valley flag, arcs, nodes and hop digits."""

    group: IntArray
    node: IntArray
    down: BoolArray
    arcs: list[IntArray]
    nodes: list[IntArray]
    digits: list[IntArray]

    def take(self, keep: IntArray | BoolArray, *, nodes: bool = True) -> _States:
        """The states ``keep`` selects (without their nodes if not ``nodes``: finished
        paths need only their arcs and digits)."""
        return _States(
            self.group[keep],
            self.node[keep],
            self.down[keep],
            [a[keep] for a in self.arcs],
            [n[keep] for n in self.nodes] if nodes else [],
            [d[keep] for d in self.digits],
        )


class _Successors:
    """Per (target, node, spare hops): the arcs that still reach the target in budget.

    An arc ``v -> w`` toward target ``t`` spends ``dist_t(w) + 1 - dist_t(v)``
    spare hops (0 on a shortest path).  Listing the arcs once per target keeps
    the expansion proportional to the number of paths, not to switch degrees.
    """

    def __init__(self, g: _SplitGraph, dist: IntArray, slack: int) -> None:
        arc = g.out_arc
        a_src, a_dst = g.arc_src[arc], g.arc_dst[arc]
        d_src, d_dst = dist[:, a_src], dist[:, a_dst]
        cost = np.where((d_src >= 0) & (d_dst >= 0), d_dst + 1 - d_src, slack + 1)
        self.slack = slack
        self.n = g.n
        keys, arcs = [], []
        for spare in range(slack + 1):
            t, j = np.nonzero(cost <= spare)
            keys.append((t * g.n + a_src[j]) * (slack + 1) + spare)
            arcs.append(arc[j])
        key = np.concatenate(keys)
        order = np.argsort(key, kind="stable")
        self.arc = np.concatenate(arcs)[order]
        self.ptr = np.searchsorted(key[order], np.arange(dist.shape[0] * g.n * (slack + 1) + 1))

    def key(self, target: IntArray, node: IntArray, spare: IntArray) -> IntArray:
        out: IntArray = (target * self.n + node) * (self.slack + 1) + spare
        return out


def _expand(
    g: _SplitGraph,
    dist: IntArray,
    target_of: IntArray,
    s_split: IntArray,
    d_split: IntArray,
    budget: IntArray,
    max_paths: int,
    rng: np.random.Generator,
) -> list[_States]:
    ngroups = s_split.size
    succ = _Successors(g, dist, int((budget - dist[target_of, s_split]).max(initial=0)))
    st = _States(
        np.arange(ngroups, dtype=np.int64),
        s_split.astype(np.int64),
        np.zeros(ngroups, bool),
        [],
        [s_split.astype(np.int64)],
        [],
    )
    done: list[_States] = []
    for depth in range(1, int(budget.max(initial=0)) + 1):
        st = _step(g, succ, st, dist, target_of, budget, depth)
        st = _cap(st, ngroups, max_paths, rng)
        arrived = st.node == d_split[st.group]
        done.append(st.take(arrived, nodes=False))
        st = st.take(~arrived)
        if not st.group.size:
            break
    return done


def _step(
    g: _SplitGraph,
    succ: _Successors,
    st: _States,
    dist: IntArray,
    target_of: IntArray,
    budget: IntArray,
    depth: int,
) -> _States:
    tgt = target_of[st.group]
    spare = budget[st.group] - (depth - 1) - dist[tgt, st.node]
    key = succ.key(tgt, st.node, spare)
    deg = succ.ptr[key + 1] - succ.ptr[key]
    parent = np.repeat(np.arange(st.group.size), deg)
    offset = np.arange(parent.size) - np.repeat(np.cumsum(deg) - deg, deg)
    arc = succ.arc[np.repeat(succ.ptr[key], deg) + offset]
    nxt = g.arc_dst[arc]
    step = np.sign(g.level[nxt] - g.level[st.node[parent]])
    ok = ~(st.down[parent] & (step > 0))
    for col in st.nodes:
        ok &= col[parent] != nxt
    keep = np.flatnonzero(ok)
    parent, arc, nxt = parent[keep], arc[keep], nxt[keep]
    before = np.r_[0, np.cumsum(ok)]  # kept children before each child
    # rank among the kept siblings
    digit = (before[:-1] - np.repeat(before[np.cumsum(deg) - deg], deg))[keep]
    return _States(
        st.group[parent],
        nxt,
        st.down[parent] | (step[keep] <= 0),
        [a[parent] for a in st.arcs] + [arc],
        [n[parent] for n in st.nodes] + [nxt],
        [d[parent] for d in st.digits] + [digit.astype(np.int64)],
    )


def _cap(st: _States, ngroups: int, max_paths: int, rng: np.random.Generator) -> _States:
    counts = np.bincount(st.group, minlength=ngroups)
    if counts.max(initial=0) <= max_paths:
        return st
    noise = rng.random(st.group.size)
    order = np.lexsort((noise, st.group))
    ranked = st.group[order]
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size) - np.searchsorted(ranked, ranked)
    return st.take(np.flatnonzero(rank < max_paths))


def _assemble(src: IntArray, dst: IntArray, shortest: IntArray, done: list[_States]) -> PathSet:
    """The paths of ``done`` (emptied: each depth's partial paths are freed once copied),
    sorted by :func:`_order`."""
    width = max((len(st.arcs) for st in done), default=0)
    total = sum(st.group.size for st in done)
    grp = np.empty(total, np.int64)
    hop = np.empty(total, np.int64)
    arcs = np.full((total, width), -1, np.int64)
    dig = np.zeros((total, width), np.int64)
    at = 0
    done.reverse()  # pop() from the end: shallowest first, as listed
    while done:
        st = done.pop()
        n, depth = st.group.size, len(st.arcs)
        grp[at : at + n] = st.group
        hop[at : at + n] = depth
        for j in range(depth):
            arcs[at : at + n, j] = st.arcs[j]
            dig[at : at + n, j] = st.digits[j]
        at += n
        del st
    if np.bincount(grp, minlength=src.size).min(initial=1) == 0:
        raise RoutingError("a group has no valley-free path within the hop budget")
    longer = hop > shortest[grp]
    order = _order(grp, longer, dig)
    del longer
    grp, hop = grp[order], hop[order]
    for j in range(width):  # column by column: one column's copy at a time
        arcs[:, j] = arcs[order, j]
        dig[:, j] = dig[order, j]
    del order
    start = np.searchsorted(grp, np.arange(src.size + 1)).astype(np.int64)
    nshort = np.bincount(grp[hop == shortest[grp]], minlength=src.size).astype(np.int64)
    return PathSet(src, dst, start, nshort, arcs, hop, dig)


def _order(grp: IntArray, longer: BoolArray, dig: IntArray) -> IntArray:
    """Sort by group, shortest first, then hop digits with the first hop least significant."""
    radix = int(dig.max(initial=0)) + 1
    bits = int(grp.max(initial=0)).bit_length() + 1 + dig.shape[1] * max(radix - 1, 1).bit_length()
    if bits > 62:
        out: IntArray = np.lexsort((*dig.T, longer, grp))
        return out
    key = grp * 2 + longer
    for col in dig.T[::-1]:
        key = key * radix + col
    out = np.argsort(key, kind="stable")
    return out


# -- host-level phases ----------------------------------------------------------------


@dataclass(frozen=True)
class HostPhases:
    """Host-level matrices: phase ``p``'s pairs are rows ``start[p]:start[p+1]``."""

    src: IntArray
    dst: IntArray
    size_bytes: IntArray
    start: IntArray

    def phase(self, p: int) -> tuple[IntArray, IntArray, IntArray]:
        """(src, dst, bytes) of one phase, identical (src, dst) pairs summed."""
        a, b = int(self.start[p]), int(self.start[p + 1])
        return self.src[a:b], self.dst[a:b], self.size_bytes[a:b]


def host_phases(demands: Demands, nhosts: int) -> HostPhases:
    """Sum each phase's flows per (src host, dst host)."""
    key = (demands.phase * nhosts + demands.src) * nhosts + demands.dst
    cells, inverse = np.unique(key, return_inverse=True)
    size = np.bincount(inverse, weights=demands.size_bytes).round().astype(np.int64)
    phase = cells // (nhosts * nhosts)
    start = np.searchsorted(phase, np.arange(demands.nphases + 1)).astype(np.int64)
    return HostPhases(
        (cells // nhosts % nhosts).astype(np.int64), (cells % nhosts).astype(np.int64), size, start
    )


def phase_key(src: IntArray, dst: IntArray, size: IntArray) -> tuple[bytes, int]:
    """A key equal for matrices equal up to a factor, and that factor (the bytes' gcd)."""
    scale = int(np.gcd.reduce(size)) if size.size else 1
    scale = max(scale, 1)
    return src.tobytes() + b"|" + dst.tobytes() + b"|" + (size // scale).tobytes(), scale


# -- host pairs and their candidates ---------------------------------------------------


@dataclass(frozen=True, eq=False)
class PairProblem:
    """Host pairs, their bytes per merged phase, and their candidate paths.

    Pair ``i`` chooses row ``first[i] + j`` of ``cand`` for ``0 <= j < allowed[i]``
    (shortest rows first); with single-homed hosts rows hold the switch arcs and
    ``fixed`` the host arcs.  Phases equal up to a factor are merged: merged
    phase ``q`` carries its first phase's bytes and weighs ``repeat[q]``, so
    ``sum_q repeat[q] * max_e load_qe`` is the pattern's ``max_link_busy``.
    """

    narcs: int
    inv_c: FloatArray  # 8 / capacity per arc: utilization seconds per byte
    repeat: FloatArray  # weight of each merged phase
    nq: int
    pair_src: IntArray
    pair_dst: IntArray
    flow_pair: IntArray
    ptr: IntArray  # pair i's entries: ptr[i]:ptr[i+1] of (q, w)
    q: IntArray
    w: FloatArray
    qptr: IntArray  # phase q's entries (by phase): qptr[q]:qptr[q+1] of qpair / qw
    qpair: IntArray
    qw: FloatArray
    first: IntArray  # first candidate row of each pair
    allowed: IntArray  # how many candidates a pair may use (shortest first)
    nshort: IntArray
    cand: IntArray  # candidate rows (switch arcs, or whole paths), -1 padded
    digits: IntArray  # hop digits of each row (PathSet.digits)
    paths_shortest: npt.NDArray[np.bool_]
    fixed: IntArray  # (npairs, 2): host up / down arcs, -1 when in the candidate rows

    @property
    def npairs(self) -> int:
        """Number of host pairs."""
        return int(self.pair_src.size)

    @classmethod
    def build(cls, fabric: Fabric, demands: Demands, seed: int = 0) -> PairProblem:
        """Aggregate the demands per host pair and enumerate their candidates."""
        nh = fabric.nhosts
        # temporaries are deleted as soon as they are used: at 1024 hosts each per-entry
        # array is 8 MB, and candidate_paths below is the peak of `ours`
        hp = host_phases(demands, nh)
        keys, entry_pair = np.unique(hp.src * nh + hp.dst, return_inverse=True)
        pair_src, pair_dst = keys // nh, keys % nh
        flow_pair = np.searchsorted(keys, demands.src * nh + demands.dst)
        q_of, repeat, reps = _merge_phases(hp, demands)
        entry_phase = np.repeat(np.arange(demands.nphases), np.diff(hp.start))
        rep = np.zeros(demands.nphases, bool)
        rep[reps] = True
        keep = rep[entry_phase]  # one entry per (pair, merged phase): the representative's
        epair, eq = entry_pair[keep], q_of[entry_phase[keep]]
        ew = hp.size_bytes[keep].astype(np.float64)
        del hp, entry_pair, entry_phase, keep
        by_pair = np.lexsort((eq, epair))
        epair, eq, ew = epair[by_pair], eq[by_pair], ew[by_pair]
        del by_pair
        ptr = np.searchsorted(epair, np.arange(keys.size + 1))
        order = np.lexsort((-ew, eq))
        qptr = np.searchsorted(eq[order], np.arange(len(repeat) + 1))
        qpair, qw = epair[order], ew[order]
        del epair, order
        att = attachment(fabric)
        if att is not None:
            gsrc, gdst = att.leaf[pair_src], att.leaf[pair_dst]
            fixed = np.stack([att.up_arc[pair_src], att.down_arc[pair_dst]], axis=1)
        else:
            gsrc, gdst = pair_src, pair_dst
            fixed = np.full((keys.size, 2), -1, np.int64)
        inter = gsrc != gdst
        gkeys, group = np.unique(gsrc[inter] * fabric.nnodes + gdst[inter], return_inverse=True)
        paths = candidate_paths(
            fabric, gkeys // fabric.nnodes, gkeys % fabric.nnodes, slack=1, seed=seed
        )
        empty = paths.arcs.shape[0]  # an extra all -1 row: the empty switch path
        cand = np.concatenate([paths.arcs, np.full((1, paths.arcs.shape[1]), -1, np.int64)])
        digits = np.concatenate([paths.digits, np.zeros((1, paths.arcs.shape[1]), np.int64)])
        shortest = np.r_[_shortest_rows(paths), True]
        first = np.full(keys.size, empty, np.int64)
        nshort = np.ones(keys.size, np.int64)
        count = np.ones(keys.size, np.int64)
        first[inter] = paths.start[group]
        nshort[inter] = paths.nshortest[group]
        count[inter] = paths.count[group]
        allowed = np.where(_latency_pairs(demands, flow_pair, keys.size), nshort, count)
        return cls(
            fabric.narcs,
            8.0 / np.asarray(fabric.capacity_bps, dtype=np.float64),
            repeat,
            len(repeat),
            pair_src,
            pair_dst,
            flow_pair,
            ptr,
            eq,
            ew,
            qptr,
            qpair,
            qw,
            first,
            allowed,
            nshort,
            cand,
            digits,
            shortest,
            fixed,
        )

    def loads(self, choice: IntArray) -> FloatArray:
        """Utilization table (merged phase x arc) of a choice of rows, host arcs included."""
        table = self._table(self.cand[choice])
        table += self.fixed_loads  # in place: a (phases x arcs) table is 50 MB at 1024 hosts
        return table

    @cached_property
    def fixed_loads(self) -> FloatArray:
        """The host arcs' utilization, the same for every choice."""
        return self._table(self.fixed)

    def _table(self, rows: IntArray) -> FloatArray:
        entry_pair = np.repeat(np.arange(self.npairs), np.diff(self.ptr))
        arcs = rows[entry_pair]
        del entry_pair
        ok = arcs >= 0
        used = arcs[ok]
        key = np.broadcast_to(self.q[:, None], arcs.shape)[ok]
        key *= self.narcs
        key += used
        weight = np.broadcast_to(self.w[:, None], arcs.shape)[ok]
        del arcs, ok
        weight *= self.inv_c[used]
        del used
        table = np.asarray(  # float64 already: no copy
            np.bincount(key, weights=weight, minlength=self.nq * self.narcs), dtype=np.float64
        )
        out: FloatArray = table.reshape(self.nq, self.narcs)
        return out

    def flow_arcs(self, choice: IntArray) -> IntArray:
        """The padded arc matrix of every flow: host arc, switch path, host arc."""
        body = self.cand[choice]
        if (self.fixed[:, 0] < 0).all():  # candidate rows are whole paths
            table = body
        else:
            n, width = body.shape
            table = np.full((n, width + 2), -1, np.int64)
            table[:, 0] = self.fixed[:, 0]
            table[:, 1 : width + 1] = body
            table[np.arange(n), 1 + (body >= 0).sum(axis=1)] = self.fixed[:, 1]
        used = int((table >= 0).sum(axis=1).max(initial=0))
        out: IntArray = table[:, :used][self.flow_pair]
        out.setflags(write=False)
        return out


def _merge_phases(hp: HostPhases, demands: Demands) -> tuple[IntArray, FloatArray, IntArray]:
    """Merged phase of each phase, the merged phases' weights, and their representatives.

    Phases equal up to a factor share one merged phase, whose matrix is its
    first phase's (the representative) and whose weight is the sum of
    ``repeat_p * factor_p`` (the peak of ``c * D`` is ``c`` times that of ``D``).
    """
    index: dict[bytes, int] = {}
    q_of = np.zeros(demands.nphases, np.int64)
    weight: list[float] = []
    scales: list[int] = []
    reps: list[int] = []
    for p in range(demands.nphases):
        key, scale = phase_key(*hp.phase(p))
        q = index.setdefault(key, len(index))
        if q == len(weight):
            weight.append(0.0)
            scales.append(scale)
            reps.append(p)
        weight[q] += float(demands.phase_repeat[p]) * scale / scales[q]
        q_of[p] = q
    return q_of, np.array(weight), np.array(reps, dtype=np.int64)


def _shortest_rows(paths: PathSet) -> npt.NDArray[np.bool_]:
    rank = np.arange(paths.arcs.shape[0]) - np.repeat(paths.start[:-1], paths.count)
    out: npt.NDArray[np.bool_] = rank < np.repeat(paths.nshortest, paths.count)
    return out


def _latency_pairs(demands: Demands, flow_pair: IntArray, npairs: int) -> npt.NDArray[np.bool_]:
    """Pairs with a latency-class flow (NetSA annotation): kept on shortest paths."""
    out = np.zeros(npairs, bool)
    if demands.kind is not None:
        out[flow_pair[demands.kind == 2]] = True
    return out
