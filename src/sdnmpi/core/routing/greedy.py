"""The interconnect manager's greedy router: heaviest host pairs first, least-loaded path.

The multi-job interconnect manager computes a routing per job from the job's
communication pattern and placement (its routing module is pluggable).  This
is the greedy one: host pairs are taken in decreasing traffic (bytes of all
their flows, weighted by phase repeats; ties in pair order), and each is put on
the candidate path with the least load, where load counts the bytes of the
pairs already placed.  Candidates are the pair's shortest-hop paths, at most
:data:`MAX_CANDIDATES` of them (spread evenly over the enumeration when there
are more, see :class:`~sdnmpi.core.routing.paths.ShortestPaths`).  Two variants:

* ``greedy``: least sum over the path of ``load / capacity`` (first on ties);
* ``greedy_bottleneck``: least maximum over the path of
  ``(load + demand) / capacity``, ties by the sum, then first.

All flows of a host pair share its path.  Paths are shortest, so valley-free on
fat-trees.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sdnmpi.core.routing.candidates import Attachment, attachment
from sdnmpi.core.routing.model import Demands, Fabric, FloatArray, IntArray, Routing
from sdnmpi.core.routing.paths import UNREACHABLE, ShortestPaths, host_hops
from sdnmpi.errors import ConfigError

NAME = "greedy"
VARIANTS: dict[str, str] = {
    "greedy": "greedy, heaviest pair first, on the shortest path of least sum of load/capacity",
    "greedy_bottleneck": (
        "greedy, heaviest pair first, on the shortest path of least max (load+demand)/capacity"
    ),
}
DESCRIPTION = VARIANTS["greedy"]
CITATION = (
    "Takahashi, Date, Watashiba, Kido, Shimojo, An MPI framework for HPC clusters deployed "
    "with software-defined networking (interconnect manager with pluggable routing)"
)
#: Most candidate paths considered per host pair.
MAX_CANDIDATES = 32
_RTOL = 1e-12
#: Pairs whose candidates are unranked at once.
CHUNK = 4096
#: numpy sums fewer terms than this strictly left to right (then pairwise).
_SEQUENTIAL_SUM = 8


def route(fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing:
    """The ``greedy`` (sum) variant; ``seed`` is unused."""
    return route_variant(NAME, fabric, demands, seed=seed)


def route_variant(
    name: str,
    fabric: Fabric,
    demands: Demands,
    *,
    seed: int = 0,
    max_candidates: int = MAX_CANDIDATES,
) -> Routing:
    """Route with the ``greedy`` or ``greedy_bottleneck`` variant."""
    if name not in VARIANTS:
        raise ConfigError(f"unknown greedy variant {name!r}; known: {', '.join(VARIANTS)}")
    bottleneck = name == "greedy_bottleneck"
    pairs, flow_pair, pair_bytes = demands.host_pairs()
    candidates = ShortestPaths(fabric, max_candidates)
    order = np.argsort(-pair_bytes, kind="stable")
    att = attachment(fabric)
    if int(order.size) and _longest_shortest_path(fabric) < _SEQUENTIAL_SUM:
        if att is not None and not bottleneck:
            table = _place_by_leaves(fabric, att, pairs, pair_bytes, order, candidates)
            meta = {"max_candidates": max_candidates, "pairs": int(table.shape[0])}
            return Routing.from_pair_table(name, flow_pair, table, meta)
        chosen = _place_listwise(fabric, pairs, pair_bytes, order, candidates, bottleneck)
    else:
        chosen = _place(fabric, pairs, pair_bytes, order, candidates, bottleneck)
    meta = {"max_candidates": max_candidates, "pairs": len(chosen)}
    return Routing.from_pair_paths(name, demands, chosen, meta)


def _place(
    fabric: Fabric,
    pairs: IntArray,
    pair_bytes: IntArray,
    order: IntArray,
    candidates: ShortestPaths,
    bottleneck: bool,
) -> dict[tuple[int, int], list[int]]:
    """The greedy placement, one pair at a time with numpy (any path length)."""
    load = np.zeros(fabric.narcs, dtype=np.float64)
    capacity = fabric.capacity_bps
    chosen: dict[tuple[int, int], list[int]] = {}
    for i in order.tolist():
        src, dst = int(pairs[i, 0]), int(pairs[i, 1])
        paths = candidates.paths(src, dst)
        demand = float(pair_bytes[i])
        path = paths[_best(paths, load, capacity, demand, bottleneck)]
        load[path] += demand
        chosen[(src, dst)] = path.tolist()
    return chosen


def _place_listwise(
    fabric: Fabric,
    pairs: IntArray,
    pair_bytes: IntArray,
    order: IntArray,
    candidates: ShortestPaths,
    bottleneck: bool,
) -> dict[tuple[int, int], list[int]]:
    """:func:`_place` with the candidates of :data:`CHUNK` pairs unranked at once and
    the scores in Python floats.

    The same arithmetic, in the same order, as :func:`_best`: ``load / capacity``
    per arc, summed along the path left to right (what numpy's sum does for fewer
    than :data:`_SEQUENTIAL_SUM` terms), so the same paths are chosen.
    """
    load = [0.0] * fabric.narcs
    capacity = fabric.capacity_bps.tolist()
    util = [0.0] * fabric.narcs  # load / capacity of every arc, kept up to date
    chosen: dict[tuple[int, int], list[int]] = {}
    for lo in range(0, int(order.size), CHUNK):
        idx = order[lo : lo + CHUNK]
        ptr, arcs = candidates.many(pairs[idx, 0], pairs[idx, 1])
        hops = (arcs[ptr[:-1]] >= 0).sum(axis=1).tolist() if idx.size else []
        rows, starts = arcs.tolist(), ptr.tolist()
        width = arcs.shape[1]
        for k, i in enumerate(idx.tolist()):
            paths = rows[starts[k] : starts[k + 1]]
            if hops[k] < width:
                paths = [r[: hops[k]] for r in paths]
            demand = float(pair_bytes[i])
            path = paths[_best_listwise(paths, load, capacity, util, demand, bottleneck)]
            for a in path:
                load[a] += demand
                util[a] = load[a] / capacity[a]
            chosen[(int(pairs[i, 0]), int(pairs[i, 1]))] = path
    return chosen


def _place_by_leaves(
    fabric: Fabric,
    att: Attachment,
    pairs: IntArray,
    pair_bytes: IntArray,
    order: IntArray,
    candidates: ShortestPaths,
) -> IntArray:
    """:func:`_place_listwise` (the ``greedy`` sum variant) on a single-homed fabric,
    with the candidates unranked once per pair of leaves; returns each pair's path
    as a row of arcs (padded with -1).

    When every host has one link, a shortest path from host ``s`` to host ``d`` is
    ``s``'s up arc, a shortest path between their leaves, and ``d``'s down arc, and
    the enumeration is the same for every host pair of the same two leaves (the
    choices and counts at every switch are those toward ``d``'s leaf), so the
    middles are computed once per leaf pair.  Scores are summed in the same order
    as :func:`_best_listwise` (up arc, middle left to right, down arc), so the same
    paths are chosen.
    """
    n = fabric.nnodes
    leaf, up, down = att.leaf, att.up_arc, att.down_arc
    key = leaf[pairs[:, 0]] * n + leaf[pairs[:, 1]]
    keys, first, of = np.unique(key, return_index=True, return_inverse=True)
    of = of.reshape(-1)
    ptr, arcs = candidates.many(pairs[first, 0], pairs[first, 1])
    hops = (arcs[ptr[:-1]] >= 0).sum(axis=1).tolist() if keys.size else []
    rows, starts = arcs[:, 1:-1].tolist(), ptr.tolist()
    middles: list[list[tuple[int, ...]]] = []
    for k, h in enumerate(hops):
        middles.append([tuple(r[: h - 2]) for r in rows[starts[k] : starts[k + 1]]])
    sums = {h: _middle_sums(h) for h in set(hops)}
    load = [0.0] * fabric.narcs
    capacity = fabric.capacity_bps.tolist()
    util = [0.0] * fabric.narcs
    src, dst, group = pairs[:, 0].tolist(), pairs[:, 1].tolist(), of.tolist()
    ups, downs, byte = up.tolist(), down.tolist(), pair_bytes.tolist()
    pick = [0] * len(src)
    for i in order.tolist():
        g = group[i]
        a, z = ups[src[i]], downs[dst[i]]
        mids = middles[g]
        total = sums[hops[g]](mids, util, util[a], util[z])
        low = min(total)
        limit = low + _RTOL * max(1.0, abs(low))
        j = 0
        while total[j] > limit:
            j += 1
        pick[i] = j
        demand = float(byte[i])
        for arc in (a, *mids[j], z):
            load[arc] += demand
            util[arc] = load[arc] / capacity[arc]
    table = arcs[ptr[of] + np.asarray(pick, dtype=np.int64)] if len(src) else arcs[:0]
    table = np.array(table, dtype=np.int64)
    length = np.asarray(hops, dtype=np.int64)[of]
    table[:, 0] = up[pairs[:, 0]]
    table[np.arange(len(src)), length - 1] = down[pairs[:, 1]]
    out: IntArray = table
    return out


def _middle_sums(
    hops: int,
) -> Callable[[list[tuple[int, ...]], list[float], float, float], list[float]]:
    """``first + util along each middle + last``, left to right (paths of ``hops`` arcs)."""
    if hops == 2:
        return lambda mids, u, x, y: [x + y for _ in mids]
    if hops == 3:
        return lambda mids, u, x, y: [x + u[a] + y for (a,) in mids]
    if hops == 4:
        return lambda mids, u, x, y: [x + u[a] + u[b] + y for a, b in mids]
    if hops == 5:
        return lambda mids, u, x, y: [x + u[a] + u[b] + u[c] + y for a, b, c in mids]
    if hops == 6:
        return lambda mids, u, x, y: [x + u[a] + u[b] + u[c] + u[d] + y for a, b, c, d in mids]
    return lambda mids, u, x, y: [
        x + u[a] + u[b] + u[c] + u[d] + u[e] + y for a, b, c, d, e in mids
    ]


def _best_listwise(
    paths: list[list[int]],
    load: list[float],
    capacity: list[float],
    util: list[float],
    demand: float,
    bottleneck: bool,
) -> int:
    """:func:`_best` on Python lists."""
    total = _PATH_SUMS[len(paths[0])](paths, util)
    if bottleneck:
        peak = [max((load[a] + demand) / capacity[a] for a in p) for p in paths]
        keep = _near_min_list(peak)
        return keep[_near_min_list([total[j] for j in keep])[0]]
    return _near_min_list(total)[0]


def _sums(hops: int) -> Callable[[list[list[int]], list[float]], list[float]]:
    """``util`` summed along each path of ``hops`` arcs, left to right."""
    if hops == 1:
        return lambda paths, u: [u[a] for (a,) in paths]
    if hops == 2:
        return lambda paths, u: [u[a] + u[b] for a, b in paths]
    if hops == 3:
        return lambda paths, u: [u[a] + u[b] + u[c] for a, b, c in paths]
    if hops == 4:
        return lambda paths, u: [u[a] + u[b] + u[c] + u[d] for a, b, c, d in paths]
    if hops == 5:
        return lambda paths, u: [u[a] + u[b] + u[c] + u[d] + u[e] for a, b, c, d, e in paths]
    if hops == 6:
        return lambda paths, u: [
            u[a] + u[b] + u[c] + u[d] + u[e] + u[f] for a, b, c, d, e, f in paths
        ]
    return lambda paths, u: [
        u[a] + u[b] + u[c] + u[d] + u[e] + u[f] + u[g] for a, b, c, d, e, f, g in paths
    ]


_PATH_SUMS = {h: _sums(h) for h in range(1, 8)}


def _near_min_list(score: list[float]) -> list[int]:
    """:func:`_near_min` on a list."""
    low = min(score)
    limit = low + _RTOL * max(1.0, abs(low))
    return [j for j, x in enumerate(score) if x <= limit]


def _longest_shortest_path(fabric: Fabric) -> int:
    """The most arcs a shortest host-to-host path has."""
    hops = host_hops(fabric)[: fabric.nhosts]
    return int(hops[hops < UNREACHABLE].max(initial=0))


def _best(
    paths: IntArray, load: FloatArray, capacity: FloatArray, demand: float, bottleneck: bool
) -> int:
    """Row of ``paths`` with the least score (see the module docstring)."""
    total = (load[paths] / capacity[paths]).sum(axis=1)
    if bottleneck:
        peak = ((load[paths] + demand) / capacity[paths]).max(axis=1)
        keep = _near_min(peak)
        return int(keep[_near_min(total[keep])[0]])
    return int(_near_min(total)[0])


def _near_min(score: FloatArray) -> IntArray:
    """Indices whose score equals the minimum up to rounding, in order.

    >>> _near_min(np.array([0.3, 0.1 + 0.2, 0.5])).tolist()
    [0, 1]
    """
    low = float(score.min())
    out: IntArray = np.flatnonzero(score <= low + _RTOL * max(1.0, abs(low)))
    return out
