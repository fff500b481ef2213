"""D-mod-K: destination-based up-port selection on multi-rooted trees.

On an XGFT(h; m_1..m_h; w_1..w_h) a node at level ``l`` (hosts are level 0)
forwards a packet for destination host ``d`` that is not below it to up-port

    ``floor(d / (w_1 * ... * w_l)) mod w_{l+1}``

(Zahavi 2010; Rodriguez et al. 2009, who also show S-mod-K and D-mod-K to be
equivalent), and down the unique down path once it is an ancestor of ``d``.  On
a full fat-tree this routes every shift permutation ``d = s + c mod N`` without
two flows sharing a link (Zahavi's non-blocking property).

Generalisation used here, so that the same code serves leaf-spine, Al-Fares
k-ary fat-trees, XGFTs and topologies read from files without parameters (milk):

* levels come from ``Fabric.level``; ``w_{l+1}`` is the number of up arcs of a
  level-``l`` node (:mod:`~sdnmpi.core.routing.updown`), counting parallel
  links and LAG members as separate up-ports, in port order.  When
  ``Topology.meta`` describes a generated fabric (``kind`` ``fat_tree``,
  ``xgft`` or ``leaf_spine``) its parameters give the widths, checked against
  the wiring (a mismatch is logged and the wiring wins);
* the index picks among the up arcs that still lead to a nearest common
  ancestor (all of them on a regular fat-tree, so the formula is the paper's);
* parallel down links (leaf-spine with ``uplinks_per_pair > 1``) are picked by
  ``floor(d / (w_1 * ... * w_{l-1})) mod p``, the member the child's up-port
  index selects, so down links stay one destination each on shift patterns;
* lateral links (between switches of one level) are not used.

Destination index ``d`` is the host's position in the topology.  Everything is
vectorized: the forwarding table (``nodes x hosts``) is built level by level
with numpy and the flows follow it one hop per step for all flows at once.
Topologies without an up*/down* path between two demanded hosts (not a
multi-rooted tree) raise :class:`~sdnmpi.errors.RoutingError`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from sdnmpi.core.routing.model import Demands, Fabric, IntArray, Routing
from sdnmpi.core.routing.paths import (
    UNREACHABLE,
    follow_table,
    memo,
    nth_true,
    readonly,
    routing,
)
from sdnmpi.core.routing.updown import Int32Array, UpDown, blocks, updown
from sdnmpi.errors import RoutingError

NAME = "dmodk"
DESCRIPTION = "D-mod-K: up-port floor(d / prod w) mod w_l by destination, unique down path"
CITATION = (
    "Zahavi, D-Mod-K routing providing non-blocking traffic for shift permutations on "
    "real life fat trees (Technion CCIT report, 2010); Rodriguez et al., Oblivious "
    "routing schemes in extended generalized fat tree networks (IEEE Cluster 2009)"
)

log = logging.getLogger(__name__)


def route(fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing:
    """Route every flow along the D-mod-K forwarding table (``seed`` is unused)."""
    table, structure, widths = forwarding_table(fabric)
    _check_reachable(fabric, structure, demands)
    arcs = follow_table(fabric, table, demands.src, demands.dst, router=NAME)
    meta = {"widths": list(widths), "lateral_arcs_ignored": structure.lateral}
    return routing(NAME, arcs, meta)


def forwarding_table(fabric: Fabric) -> tuple[IntArray, UpDown, tuple[int, ...]]:
    """The D-mod-K table ``table[node, dst_host] -> arc`` (-1: none), its structure, widths."""

    def build() -> tuple[IntArray, UpDown, tuple[int, ...]]:
        structure = updown(fabric)
        widths = _widths(fabric, structure)
        return readonly(_table(fabric, structure, widths)), structure, widths

    return memo(fabric, "dmodk_table", build)


def meta_widths(meta: Mapping[str, Any]) -> tuple[int, ...] | None:
    """Up-ports per node of each level (hosts first) from a generator's parameters.

    >>> meta_widths({"kind": "fat_tree", "k": 4})
    (1, 2, 2, 0)
    >>> meta_widths({"kind": "leaf_spine", "spines": 2, "uplinks_per_pair": 4})
    (1, 8, 0)
    """
    kind = meta.get("kind")
    try:
        if kind == "fat_tree":
            half = int(meta["k"]) // 2
            return (1, half, half, 0)
        if kind == "xgft":
            return (*(int(w) for w in meta["w"]), 0)
        if kind == "leaf_spine" and "spines" in meta:
            return (1, int(meta["spines"]) * int(meta.get("uplinks_per_pair", 1)), 0)
    except (KeyError, TypeError, ValueError):
        return None
    return None


def _widths(fabric: Fabric, structure: UpDown) -> tuple[int, ...]:
    expected = meta_widths(fabric.topology.meta)
    if expected is not None and expected != structure.widths:
        log.warning(
            "dmodk: topology %r: meta says %s up-ports per level, the wiring %s; using the wiring",
            fabric.topology.name,
            expected,
            structure.widths,
        )
    return structure.widths


def _divisor(widths: tuple[int, ...], level: int) -> int:
    return int(np.prod([max(w, 1) for w in widths[: max(level, 0)]], dtype=np.int64))


def _table(fabric: Fabric, s: UpDown, widths: tuple[int, ...]) -> IntArray:
    nh = fabric.nhosts
    table = np.full((fabric.nnodes, nh), -1, dtype=np.int64)
    dest = np.arange(nh, dtype=np.int64)
    width = max(s.up.shape[1], s.down.shape[1], 1)
    for lv in np.unique(s.level).tolist():
        up_index = dest // _divisor(widths, lv)
        down_index = dest // _divisor(widths, lv - 1)
        for rows in blocks(np.flatnonzero(s.level == lv), width, nh):
            down = _pick(s.down[rows], s.down_head[rows], s.down_ext, rows, down_index)
            up = _pick(s.up[rows], s.up_head[rows], s.hops_ext, rows, up_index)
            below = s.down_hops[rows] < UNREACHABLE
            table[rows] = np.where(below, down, up)
    return table


def _pick(
    arcs: IntArray, heads: IntArray, dist: Int32Array, rows: IntArray, index: IntArray
) -> IntArray:
    """Per (row, host): the ``index mod count``-th of ``arcs`` (a row's) one hop closer."""
    if arcs.shape[1] == 0:
        return np.full((rows.size, dist.shape[1]), -1, dtype=np.int64)
    ok = dist[heads] == (dist[rows] - 1)[:, None, :]
    count = ok.sum(axis=1)
    pos = nth_true(ok, index[None, :] % np.maximum(count, 1))
    chosen: IntArray = np.take_along_axis(arcs, pos, axis=1)
    return np.where(count > 0, chosen, -1)


def _check_reachable(fabric: Fabric, s: UpDown, demands: Demands) -> None:
    bad = np.flatnonzero(s.hops[demands.src, demands.dst] >= UNREACHABLE)
    if bad.size:
        src, dst = fabric.names[int(demands.src[bad[0]])], fabric.names[int(demands.dst[bad[0]])]
        raise RoutingError(
            f"{NAME}: topology {fabric.topology.name!r} has no up*/down* path from {src} "
            f"to {dst} ({bad.size} flows affected): D-mod-K needs a multi-rooted tree "
            f"(leaf-spine, fat-tree, XGFT); {s.lateral} arcs between switches of one level "
            "are ignored"
        )
