"""Single-path lower bounds: widest paths and the tree cuts of a fabric.

Used by :mod:`sdnmpi.core.routing.bound` (its module docstring defines the bounds):
:func:`widest` gives the largest bottleneck capacity of one path between two hosts,
:class:`Cuts` the fractional cut bound and the pigeonhole bound of one path per
pair over every tree cut (:func:`tree_cuts`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sdnmpi.core.routing.candidates import Attachment
from sdnmpi.core.routing.model import Fabric

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Bytes = IntArray | FloatArray

#: Dense (rows x pairs) temporaries, and (phase x arc) load tables, up to this many cells.
DENSE_CELLS = 1 << 24


def widest(fabric: Fabric) -> FloatArray:
    """Largest bottleneck capacity of a single path between each pair of hosts
    (``inf`` where there is none).

    Hosts never forward, so a path is a first arc (host to switch), a widest path
    between switches, and a last arc (switch to host), or a direct host-to-host arc.
    The switches' widest paths are a max-min Bellman-Ford from every switch at once
    (``w[v] = max over arcs u -> v of min(w[u], cap)`` until nothing changes).  The
    values are arc capacities, so the result is exact; on a loaded fabric (every arc
    its own capacity) this takes a fraction of a second where one search per
    distinct capacity took half a minute (fat_tree(16)).

    >>> from sdnmpi.core.generators import leaf_spine
    >>> w = widest(Fabric(leaf_spine(2, 2, 1)))
    >>> float(w[0, 1]) == 1e9
    True
    """
    nh = fabric.nhosts
    src, dst = fabric.arc_src, fabric.arc_dst
    cap = np.asarray(fabric.capacity_bps, dtype=np.float64)
    out = np.full((nh, nh), -np.inf)
    first = np.flatnonzero((src < nh) & (dst >= nh))
    last = np.flatnonzero((src >= nh) & (dst < nh))
    if first.size and last.size:
        entry, at = np.unique(dst[first] - nh, return_inverse=True)
        switch = _switch_widest(fabric, entry)  # (entry switch, switch)
        # from each host to each switch: its best first arc, then the switches' paths
        hosts, via = _best_by(src[first], np.minimum(switch[at], cap[first][:, None]))
        reach = np.full((nh, switch.shape[1]), -np.inf)
        reach[hosts] = via
        step = max(1, DENSE_CELLS // last.size)
        for lo in range(0, nh, step):
            arrive = np.minimum(reach[lo : lo + step, src[last] - nh], cap[last])
            hosts, best = _best_by(dst[last], arrive.T)
            out[lo : lo + step, hosts] = best.T
    direct = np.flatnonzero((src < nh) & (dst < nh))
    np.maximum.at(out, (src[direct], dst[direct]), cap[direct])
    return np.where(np.isneginf(out), np.inf, out)


def _best_by(key: IntArray, rows: FloatArray) -> tuple[IntArray, FloatArray]:
    """The distinct keys and, for each, the maximum of the rows with that key."""
    order = np.argsort(key, kind="stable")
    keys, starts = np.unique(key[order], return_index=True)
    return keys, np.maximum.reduceat(rows[order], starts, axis=0)


def _switch_widest(fabric: Fabric, sources: IntArray) -> FloatArray:
    """Widest path from each of ``sources`` to every switch (``-inf``: none; ``inf``
    from a switch to itself), switches numbered from 0."""
    nh, nsw = fabric.nhosts, fabric.nnodes - fabric.nhosts
    keep = (fabric.arc_src >= nh) & (fabric.arc_dst >= nh)
    order = np.argsort(fabric.arc_dst[keep], kind="stable")
    tail = (fabric.arc_src[keep] - nh)[order]
    head = (fabric.arc_dst[keep] - nh)[order]
    cap = np.asarray(fabric.capacity_bps, dtype=np.float64)[keep][order][:, None]
    w = np.full((nsw, sources.size), -np.inf)  # w[node, source]: rows gathered whole
    w[sources, np.arange(sources.size)] = np.inf
    if head.size:
        heads, starts = np.unique(head, return_index=True)
        for _ in range(nsw):
            now = np.maximum(w[heads], np.maximum.reduceat(np.minimum(w[tail], cap), starts))
            if np.array_equal(now, w[heads]):
                break
            w[heads] = now
    return np.ascontiguousarray(w.T)


@dataclass(frozen=True)
class Cuts:
    """Tree cuts, each in both directions: row ``r`` is crossed by a pair whose source
    is in ``src_in[r]`` and destination in ``dst_in[r]`` (out-rows, then in-rows)."""

    src_in: BoolArray  # (2 * ncuts, nhosts)
    dst_in: BoolArray
    ncut_arcs: IntArray  # (2 * ncuts,)
    cap_max: FloatArray
    cap_sum: FloatArray

    def _blocks(self, npairs: int) -> list[slice]:
        """Row blocks small enough for dense (rows x pairs) temporaries."""
        step = max(1, DENSE_CELLS // max(npairs, 1))
        return [slice(a, a + step) for a in range(0, self.src_in.shape[0], step)]

    def fractional(self, s: IntArray, t: IntArray, b: IntArray) -> float:
        """Most bytes crossing a cut over its capacity: a lower bound on ``lambda``."""
        best = 0.0
        for r in self._blocks(s.size):
            cross = self.src_in[r][:, s] & self.dst_in[r][:, t]
            total = cross.astype(np.float64) @ b.astype(np.float64)
            best = max(best, float((8.0 * total / self.cap_sum[r]).max(initial=0.0)))
        return best

    def bound(self, s: IntArray, t: IntArray, b: Bytes) -> float:
        """The pigeonhole bound of one phase over all cuts, in seconds."""
        best = 0.0
        for r in self._blocks(s.size):
            cross = self.src_in[r][:, s] & self.dst_in[r][:, t]
            best = max(best, _pigeonhole(cross, b, self.ncut_arcs[r], self.cap_max[r]))
            total = cross.astype(np.float64) @ b.astype(np.float64)
            best = max(best, float((8.0 * total / self.cap_sum[r]).max(initial=0.0)))
        return best


def _pigeonhole(cross: BoolArray, b: Bytes, m: IntArray, cap_max: FloatArray) -> float:
    """Per row: among the ``j*m + 1`` largest crossing jobs, ``j + 1`` share one of the
    ``m`` arcs, so that arc carries at least the ``j + 1`` smallest of them."""
    if not cross.size:
        return 0.0
    bf = np.broadcast_to(np.asarray(b, dtype=np.float64), cross.shape[1:])
    njobs = cross.sum(axis=1)
    if _equal_integers(bf):
        # every job the same whole number of bytes, all sums exact: the j + 1
        # smallest of the largest are j + 1 times it (what the sort below gives)
        return _pigeonhole_equal(float(bf[0]), njobs, m, cap_max)
    jobs = -np.sort(-np.where(cross, bf, 0.0), axis=1)
    prefix = np.concatenate([np.zeros((jobs.shape[0], 1)), np.cumsum(jobs, axis=1)], axis=1)
    jmax = int(((njobs - 1) // m).max(initial=0))
    j = np.arange(jmax + 1)[None, :]
    hi = np.minimum(j * m[:, None] + 1, njobs[:, None])
    lo = np.maximum(hi - j - 1, 0)
    ok = j * m[:, None] + 1 <= njobs[:, None]
    rows = np.arange(jobs.shape[0])[:, None]
    share = np.where(ok, prefix[rows, hi] - prefix[rows, lo], 0.0)
    return float((8.0 * share.max(axis=1) / cap_max).max(initial=0.0))


def _equal_integers(b: FloatArray) -> bool:
    """All of ``b`` one whole number, small enough that every sum of them is exact."""
    if not b.size:
        return False
    first = float(b[0])
    return first.is_integer() and 0 <= first * b.size < 2.0**53 and bool((b == first).all())


def _pigeonhole_equal(size: float, njobs: IntArray, m: IntArray, cap_max: FloatArray) -> float:
    """:func:`_pigeonhole` when every job is ``size`` bytes (a whole number)."""
    jmax = int(((njobs - 1) // m).max(initial=0))
    j = np.arange(jmax + 1)[None, :]
    hi = np.minimum(j * m[:, None] + 1, njobs[:, None])
    lo = np.maximum(hi - j - 1, 0)
    ok = j * m[:, None] + 1 <= njobs[:, None]
    share = np.where(ok, (hi - lo) * size, 0.0)
    return float((8.0 * share.max(axis=1) / cap_max).max(initial=0.0))


def tree_cuts(fabric: Fabric, att: Attachment | None) -> Cuts:
    """Down-closures of switches (and single hosts when some host has several links)."""
    nh, nn = fabric.nhosts, fabric.nnodes
    src, dst, level = fabric.arc_src, fabric.arc_dst, np.asarray(fabric.level)
    below = np.zeros((nn, nh), bool)
    below[np.arange(nh), np.arange(nh)] = True
    down = level[dst] < level[src]
    for _ in range(int(level.max(initial=0))):
        nxt = below.copy()
        np.logical_or.at(nxt, src[down], below[dst[down]])
        if np.array_equal(nxt, below):
            break
        below = nxt
    sets = np.unique(below[nh:], axis=0)
    sets = sets[sets.any(axis=1) & ~sets.all(axis=1)]
    if att is None:
        sets = np.concatenate([sets, np.eye(nh, dtype=bool)])
    size = below.sum(axis=1)
    inter = below.astype(np.float32) @ sets.T.astype(np.float32)
    member = (inter >= size[:, None] - 0.5) & (size[:, None] > 0)  # (nodes, cuts): H(u) in S
    out_arc = member[src] & ~member[dst]
    in_arc = ~member[src] & member[dst]
    cap = np.asarray(fabric.capacity_bps, dtype=np.float64)
    arcs = np.concatenate([out_arc.T, in_arc.T])  # rows: out-arcs of each cut, then in-arcs
    count = arcs.sum(axis=1)
    return Cuts(
        np.concatenate([sets, ~sets]),
        np.concatenate([~sets, sets]),
        np.maximum(count, 1),
        np.where(count > 0, np.where(arcs, cap, 0.0).max(axis=1), np.inf),
        np.where(count > 0, (arcs * cap).sum(axis=1), np.inf),
    )
