"""Min-hop: OpenSM's default routing engine, shortest paths balanced by port counters.

For every switch, OpenSM's ``minhop`` engine walks the destination LIDs in order
and sets the forwarding-table entry of each to the port, among those on a
minimum-hop path, through which the fewest destinations have been routed so far
(``osm_switch_recommend_path``: least ``num_paths``, lowest port on ties), then
counts the destination on that port.  Each switch decides alone, so the table
is built here for all switches at once, one destination (host, in topology
order) per numpy step.  Hosts with several ports choose the same way.

What is balanced is the number of *destinations* per port of a switch (within
one among its equal-cost ports on a regular fat-tree), not the number of
source-destination routes per link: on a k-ary fat-tree every edge switch sends
destination ``d`` to the same aggregation switch, so the aggregation-to-core
links see uneven route counts, the known weakness D-mod-K fixes.  Oblivious:
bytes are ignored; paths are shortest on any topology, so valley-free on
fat-trees.
"""

from __future__ import annotations

import numpy as np

from sdnmpi.core.routing.model import Demands, Fabric, IntArray, Routing
from sdnmpi.core.routing.paths import (
    follow_table,
    memo,
    out_table,
    readonly,
    routing,
    shortest_choices,
)

NAME = "minhop"
DESCRIPTION = "OpenSM min-hop: shortest paths, each switch port taking the fewest destinations"
CITATION = (
    "OpenSM (linux-rdma/opensm), minhop routing engine: osm_ucast_mgr.c, "
    "osm_switch_recommend_path; InfiniBand Architecture Specification, subnet management"
)


def route(fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing:
    """Route every flow along the min-hop forwarding table (``seed`` is unused)."""
    table, _ = forwarding_table(fabric)
    arcs = follow_table(fabric, table, demands.src, demands.dst, router=NAME)
    return routing(NAME, arcs, {"destinations": "host order"})


def forwarding_table(fabric: Fabric) -> tuple[IntArray, IntArray]:
    """``table[node, dst_host] -> arc`` and each arc's destination count (OpenSM's counter)."""

    def build() -> tuple[IntArray, IntArray]:
        table, per_arc = _build(fabric)
        return readonly(table), readonly(per_arc)

    return memo(fabric, "minhop_table", build)


def _build(fabric: Fabric) -> tuple[IntArray, IntArray]:
    choices = shortest_choices(fabric)
    nodes = np.arange(fabric.nnodes)
    slot_of = _slot_of(fabric)
    used = np.zeros(out_table(fabric).shape, dtype=np.int64)  # destinations per port
    table = np.full((fabric.nnodes, fabric.nhosts), -1, dtype=np.int64)
    rank = np.arange(choices.arcs.shape[2])[None, :]
    for d in range(fabric.nhosts):
        cand = choices.arcs[d].astype(np.int64)
        valid = rank < choices.count[d][:, None]
        slots = slot_of[np.where(valid, cand, 0)]
        load = np.where(valid, used[nodes[:, None], slots], np.iinfo(np.int64).max)
        best = np.argmin(load, axis=1)  # first minimum: lowest port among the least used
        rows = np.flatnonzero(valid[:, 0])
        table[rows, d] = cand[rows, best[rows]]
        used[rows, slots[rows, best[rows]]] += 1
    per_arc = np.zeros(fabric.narcs, dtype=np.int64)
    out = out_table(fabric)
    np.add.at(per_arc, out[out >= 0], used[out >= 0])
    return table, per_arc


def _slot_of(fabric: Fabric) -> IntArray:
    """Column of each arc in :func:`out_table` (its port rank at its source)."""
    out = out_table(fabric)
    slot = np.zeros(fabric.narcs, dtype=np.int64)
    rows, cols = np.nonzero(out >= 0)
    slot[out[rows, cols]] = cols
    return slot
