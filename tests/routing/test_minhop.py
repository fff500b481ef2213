"""Min-hop: OpenSM's per-port destination counters, balanced within one."""

from __future__ import annotations

import numpy as np
import pytest

from sdnmpi.core.generators import fat_tree, leaf_spine, xgft
from sdnmpi.core.routing import Demands, Fabric, route, validate
from sdnmpi.core.routing.minhop import forwarding_table
from sdnmpi.core.topology import Topology
from tests.routing.flows import flows_per_arc, node


def _arc_classes(f: Fabric) -> dict[tuple[int, int], np.ndarray]:
    """Switch-to-switch arcs grouped by (level from, level to)."""
    level, out = f.level, {}
    switch = (f.arc_src >= f.nhosts) & (f.arc_dst >= f.nhosts)
    for a, b in {(int(level[s]), int(level[t])) for s, t in zip(f.arc_src, f.arc_dst, strict=True)}:
        sel = switch & (level[f.arc_src] == a) & (level[f.arc_dst] == b)
        if sel.any():
            out[(a, b)] = np.flatnonzero(sel)
    return out


@pytest.mark.parametrize(
    "topo",
    [
        fat_tree(4),
        fat_tree(8),
        xgft(3, [2, 2, 3], [2, 2, 2]),
        leaf_spine(3, 4, 6, uplinks_per_pair=2),
    ],
    ids=lambda t: t.name,
)
def test_routes_per_link_balanced_within_one(topo: Topology) -> None:
    """Every link of one tier carries the same number of routes (destinations), +-1.

    A route is a forwarding-table entry: a (switch, destination) pair, which is what
    OpenSM's port counters count and equalize.
    """
    f = Fabric(topo)
    _, per_arc = forwarding_table(f)
    for (a, b), arcs in _arc_classes(f).items():
        counts = per_arc[arcs]
        assert counts.max() - counts.min() <= 1, f"level {a} -> {b}: {counts.tolist()}"
    # and every switch spreads its destinations over its equal-cost up-ports within one
    for s in range(f.nhosts, f.nnodes):
        ups = [a for a in f.out_arcs[s] if f.level[f.arc_dst[a]] > f.level[s]]
        if ups:
            assert np.ptp(per_arc[ups]) <= 1


def test_hand_computed_first_choices() -> None:
    # fat_tree(4), edge1_1 (hosts h01, h02): destinations in order h03..h16 alternate
    # between its up-ports (least used, lowest port on ties): h03 -> agg1_1, h04 -> agg1_2, ...
    f = Fabric(fat_tree(4))
    table, _ = forwarding_table(f)
    edge = node(f, "edge1_1")
    aggs = [f.names[int(f.arc_dst[table[edge, d]])] for d in range(2, 8)]
    assert aggs == ["agg1_1", "agg1_2"] * 3
    assert f.names[int(f.arc_dst[table[edge, 1]])] == "h02"


def test_all_pairs_shortest_and_oblivious() -> None:
    f = Fabric(fat_tree(4))
    d = Demands.all_pairs(f)
    r = route("minhop", f, d)
    validate(f, d, r, shortest=True, valley_free=True)
    heavy = Demands.all_pairs(f, size_bytes=10**9)
    assert np.array_equal(route("minhop", f, heavy).arcs, r.arcs)


def test_source_destination_routes_are_not_balanced() -> None:
    """The known weakness: every edge switch sends destination d to the same aggregation
    switch, so on all pairs some aggregation-to-core links carry no route at all."""
    f = Fabric(fat_tree(4))
    r = route("minhop", f, Demands.all_pairs(f))
    load = flows_per_arc(f, r)
    agg_core = _arc_classes(f)[(2, 3)]
    assert load[agg_core].min() == 0
    assert load[agg_core].max() == 24
