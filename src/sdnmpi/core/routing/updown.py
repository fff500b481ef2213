"""The up/down structure of a multi-rooted tree (fat-tree, XGFT, leaf-spine).

Nodes have levels (hosts 0, leaf switches 1, upward from there: ``Fabric.level``).
An arc is *up* when it climbs a level, *down* when it descends; arcs between
nodes of one level (the NetSA testbed's ToR-to-ToR link) are *lateral* and are
not part of the tree.  A node is an *ancestor* of host ``d`` when ``d`` can be
reached from it by down arcs only.  An up*/down* route climbs until it reaches
an ancestor of its destination, then descends: on a fat-tree that is a shortest
path, and the climb may take any up arc that still leads to a nearest common
ancestor.

:func:`updown` computes, for every node and host, the down distance and the
up*/down* distance with one vectorized pass per level, and the *widths*: how
many up arcs a node of each level has (XGFT's ``w_{l+1}``, counting parallel
links and LAG members), from which D-mod-K derives its divisors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sdnmpi.core.routing.model import Fabric, IntArray
from sdnmpi.core.routing.paths import UNREACHABLE, memo, padded, readonly

Int32Array = npt.NDArray[np.int32]
#: Upper bound on elements of the (nodes x arcs x hosts) temporaries per block.
_BLOCK = 1 << 23


@dataclass(frozen=True, eq=False)
class UpDown:
    """Up and down arcs per node and the up*/down* distances to every host.

    Distance tables have one extra, last row: a sentinel node at :data:`UNREACHABLE`
    that the padding of the head tables points to, so gathers need no masking.
    """

    level: IntArray
    up: IntArray  # (nnodes, max up degree): arcs to higher levels, port order, -1 padded
    down: IntArray  # (nnodes, max down degree): arcs to lower levels
    up_head: IntArray  # node each up arc leads to; nnodes (the sentinel) for padding
    down_head: IntArray
    lateral: int  # arcs between nodes of the same level (ignored)
    down_ext: Int32Array  # (nnodes + 1, nhosts): hops by down arcs only
    hops_ext: Int32Array  # (nnodes + 1, nhosts): up*/down* hops (climb, then descend)
    widths: tuple[int, ...]  # widths[l]: most up arcs of a level-l node (l = 0 .. top)

    @property
    def down_hops(self) -> Int32Array:
        """Hops from every node to every host by down arcs only (UNREACHABLE: not below)."""
        return self.down_ext[:-1]

    @property
    def hops(self) -> Int32Array:
        """Up*/down* hops from every node to every host (UNREACHABLE: no such path)."""
        return self.hops_ext[:-1]


def updown(fabric: Fabric) -> UpDown:
    """The (cached) up/down structure of a fabric."""
    return memo(fabric, "updown", lambda: _build(fabric))


def _build(fabric: Fabric) -> UpDown:
    level = fabric.level
    step = level[fabric.arc_dst] - level[fabric.arc_src]
    up = _table(fabric, step > 0)
    down = _table(fabric, step < 0)
    up_head, down_head = _heads(fabric, up), _heads(fabric, down)
    down_ext = _down_hops(fabric, level, down_head)
    hops_ext = _updown_hops(fabric, level, up_head, down_ext)
    top = int(level.max(initial=0))
    counts = (up >= 0).sum(axis=1)
    widths = tuple(int(counts[level == lv].max(initial=0)) for lv in range(top + 1))
    return UpDown(
        readonly(level.copy()),
        readonly(up),
        readonly(down),
        readonly(up_head),
        readonly(down_head),
        int((step == 0).sum()),
        readonly(down_ext),
        readonly(hops_ext),
        widths,
    )


def _table(fabric: Fabric, keep: np.ndarray) -> IntArray:
    return padded([[a for a in row if keep[a]] for row in fabric.out_arcs])


def _heads(fabric: Fabric, table: IntArray) -> IntArray:
    out: IntArray = np.where(
        table >= 0, fabric.arc_dst[np.where(table >= 0, table, 0)], fabric.nnodes
    )
    return out


def blocks(nodes: IntArray, width: int, nhosts: int) -> list[IntArray]:
    """Split ``nodes`` so that each block's (nodes x width x hosts) array stays small."""
    size = max(1, _BLOCK // max(1, width * nhosts))
    return [nodes[i : i + size] for i in range(0, nodes.size, size)]


def _down_hops(fabric: Fabric, level: IntArray, down_head: IntArray) -> Int32Array:
    nh = fabric.nhosts
    dist = np.full((fabric.nnodes + 1, nh), UNREACHABLE, dtype=np.int32)
    dist[np.arange(nh), np.arange(nh)] = 0
    if down_head.shape[1] == 0:
        return dist
    for lv in np.unique(level[level > 0]):
        for rows in blocks(np.flatnonzero(level == lv), down_head.shape[1], nh):
            best = dist[down_head[rows]].min(axis=1) + 1
            dist[rows] = np.minimum(best, UNREACHABLE)
    return dist


def _updown_hops(
    fabric: Fabric, level: IntArray, up_head: IntArray, down_ext: Int32Array
) -> Int32Array:
    nh = fabric.nhosts
    hops = down_ext.copy()
    if up_head.shape[1] == 0:
        return hops
    for lv in np.unique(level)[::-1]:
        for rows in blocks(np.flatnonzero(level == lv), up_head.shape[1], nh):
            climb = np.minimum(hops[up_head[rows]].min(axis=1) + 1, UNREACHABLE)
            below = down_ext[rows] < UNREACHABLE
            hops[rows] = np.where(below, down_ext[rows], climb)
    return hops
