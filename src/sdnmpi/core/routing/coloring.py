"""Edge-colouring start of :mod:`sdnmpi.core.routing.ours`.

Routing a permutation on a Clos network is an edge colouring (Beneš); routing a
phase's pairs over a fat-tree or leaf-spine hop by hop is an equitable edge
colouring of a bipartite multigraph per hop (de Werra, 1971), found here with
Kőnig's alternating paths (Kőnig, 1916).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sdnmpi.core.routing.candidates import PairProblem
from sdnmpi.core.routing.model import Fabric

IntArray = npt.NDArray[np.int64]

#: Largest number of movable host pairs given the edge-colouring start.  Its cost
#: grows with the pairs (about 1.5 s for 65,280 pairs of FT at 256 ranks on
#: fat_tree(12)), and above the old limit of 50,000 the search alone was far worse:
#: on fat_tree(12), 256 ranks placed at random, Alltoall at 1.94x the bound and FT at
#: 1.03x after 19 and 33 s, against 1.00x in 2-3 s from this start; on fat_tree(16)
#: with 1024 ranks at random, FT at 1.58x and Alltoall at 3.93x, now 1.00x in 38 and
#: 29 s (docs/bounds.md).  The limit admits a 1024-rank Alltoall (1,047,552 pairs).
COLOR_PAIRS = 2_000_000


def coloring_start(prob: PairProblem, fabric: Fabric) -> IntArray | None:
    """Each phase's pairs, hop by hop, equitably coloured over the hop's choices.

    On a fat-tree or leaf-spine a path is one digit per up-hop (which
    aggregation switch, which core).  Choosing digit ``l`` for a phase's pairs
    colours the bipartite multigraph joining the node where the hop is chosen
    to its mirror on the way down with ``r_l`` colours; an equitable colouring
    (each node sees each colour at most ``ceil(deg / r_l)`` times, de Werra,
    1971) spreads equal flows perfectly, which single moves find hard (an edge
    colouring).  Phases go heaviest first; a pair keeps its first colour.
    """
    movable = prob.allowed > 1
    if not movable.any() or int(movable.sum()) > COLOR_PAIRS:
        return None
    radix, regular = radices(prob)
    stride = np.cumprod(np.c_[np.ones(prob.npairs, np.int64), radix[:, :-1]], axis=1)
    choice = prob.first + prob.pair_dst % prob.nshort
    done = ~(movable & regular)
    heavy = np.bincount(np.repeat(np.arange(prob.nq), np.diff(prob.qptr)), prob.qw, prob.nq)
    for q in np.argsort(-prob.repeat * heavy, kind="stable").tolist():
        pairs = prob.qpair[prob.qptr[q] : prob.qptr[q + 1]]
        pairs = pairs[~done[pairs]]
        digit = np.zeros((pairs.size, radix.shape[1]), np.int64)
        for level in range(radix.shape[1]):
            for r in np.unique(radix[pairs, level]).tolist():
                sel = np.flatnonzero(radix[pairs, level] == r)
                if r < 2 or not sel.size:
                    continue
                row = prob.first[pairs] + (digit * stride[pairs]).sum(axis=1)
                arcs = prob.cand[row[sel]]
                mirror = (arcs >= 0).sum(axis=1) - 1 - level
                left = fabric.arc_src[arcs[:, level]]
                down = arcs[np.arange(sel.size), np.maximum(mirror, 0)]
                right = np.where(mirror > level, fabric.arc_dst[down], -1 - np.arange(sel.size))
                digit[sel, level] = equitable(left, right, r)
        choice[pairs] = prob.first[pairs] + (digit * stride[pairs]).sum(axis=1)
        done[pairs] = True
    return choice


def radices(prob: PairProblem) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """Per pair and hop: how many choices its group's shortest paths have there, and
    whether the group is a full product of them (row = mixed-radix digit number)."""
    firsts, first_of, inverse = np.unique(prob.first, return_index=True, return_inverse=True)
    count = prob.nshort[first_of]
    rank = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    rows = np.repeat(firsts, count) + rank
    group = np.repeat(np.arange(firsts.size), count)
    width = prob.digits.shape[1]
    radix = np.ones((firsts.size, width), np.int64)
    np.maximum.at(radix, group, prob.digits[rows] + 1)
    stride = np.cumprod(np.c_[np.ones(firsts.size, np.int64), radix[:, :-1]], axis=1)
    expect = (rank[:, None] // stride[group]) % radix[group]
    same = (expect == prob.digits[rows]).all(axis=1)
    full = np.prod(radix, axis=1) == count
    regular = full & (np.bincount(group, ~same, firsts.size) == 0)
    return radix[inverse], regular[inverse]


def equitable(left: IntArray, right: IntArray, k: int) -> IntArray:
    """An equitable ``k``-edge-colouring of the bipartite multigraph ``left[e]-right[e]``.

    Each node is split into copies of at most ``k`` edges, then König's
    alternating-path algorithm colours the copies properly (Kőnig, 1916).
    """
    lv, rv = split_nodes(left, k), split_nodes(right, k)
    at = (
        [[-1] * k for _ in range(int(lv.max(initial=-1)) + 1)],
        [[-1] * k for _ in range(int(rv.max(initial=-1)) + 1)],
    )
    ends = (lv.tolist(), rv.tolist())
    color = [-1] * left.size
    for e in range(left.size):
        u, v = ends[0][e], ends[1][e]
        a = at[0][u].index(-1)
        if at[1][v][a] >= 0:  # a is taken at v: swap a/b along the path from v
            b = at[1][v].index(-1)
            path, side, node, c = [], 1, v, a
            while (f := at[side][node][c]) >= 0:
                path.append(f)
                side, c = 1 - side, b if c == a else a
                node = ends[side][f]
            for f in path:
                at[0][ends[0][f]][color[f]] = at[1][ends[1][f]][color[f]] = -1
            for f in path:
                color[f] = b if color[f] == a else a
                at[0][ends[0][f]][color[f]] = at[1][ends[1][f]][color[f]] = f
        at[0][u][a] = at[1][v][a] = e
        color[e] = a
    return np.array(color, dtype=np.int64)


def split_nodes(node: IntArray, k: int) -> IntArray:
    """Copy ids: each node's edges dealt, in order, to copies of ``k`` edges."""
    inverse = np.unique(node, return_inverse=True)[1]
    order = np.argsort(inverse, kind="stable")
    rank = np.empty(node.size, np.int64)
    rank[order] = np.arange(node.size) - np.searchsorted(inverse[order], inverse[order])
    per = node.size // k + 1
    out: IntArray = np.unique(inverse * per + rank // k, return_inverse=True)[1]
    return out
