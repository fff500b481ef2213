"""The batched event loop against the reference: every phase run alone.

:func:`sdnmpi.sim.engine.run_phases` runs the phases without serialized
exchanges together (:mod:`sdnmpi.sim.batch`); ``batched=False`` runs each on
its own through :func:`sdnmpi.sim.engine.run`.  Both must give the same traces:
times, segments, arc rates, flow rates, peaks and event counts.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi import catalog
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.sim import FlowSet, Platform, parse_protocol
from sdnmpi.sim.batch import batches
from sdnmpi.sim.engine import PhaseRun, run_phases
from sdnmpi.sim.filling import Blocks, Filling
from sdnmpi.sim.maxmin import maxmin_entries, row_positions
from tests.sim.test_properties import scenarios

TIMES = ("release_s", "start_s", "finish_s", "segment_start_s", "segment_end_s", "arc_peak_bps")


def assert_same(ref: list[PhaseRun], fast: list[PhaseRun]) -> None:
    """Same traces, bit for bit."""
    assert len(ref) == len(fast)
    for a, b in zip(ref, fast, strict=True):
        assert np.array_equal(a.rows, b.rows)
        assert a.duration_s == b.duration_s
        assert a.trace.events == b.trace.events
        for name in TIMES:
            assert np.array_equal(getattr(a.trace, name), getattr(b.trace, name)), name
        for name in ("arc_rate_bps", "flow_rate_bps"):
            x, y = getattr(a.trace, name), getattr(b.trace, name)
            assert (x is None) == (y is None), name
            if x is not None:
                assert x.shape == y.shape and (x != y).nnz == 0, name


@settings(max_examples=80, deadline=None)
@given(scenarios())
def test_batched_phases_equal_phases_run_alone(sc):
    platform = Platform.from_fabric(sc.fabric)
    flowset = FlowSet.from_demands(platform, sc.demands, sc.routing)
    assert_same(
        run_phases(platform, flowset, batched=False, timeline=True, flow_rates=True),
        run_phases(platform, flowset, timeline=True, flow_rates=True),
    )


@pytest.mark.parametrize(
    ("spec", "placement", "router", "per_host"),
    [
        ("ft:nprocs=32", "random", "dmodk", 2),
        ("ft:nprocs=32", "random", "ecmp", 2),
        ("alltoall:nprocs=16,bytes=65536", "block", "single", 1),
        ("cg:nprocs=16", "cyclic", "minhop", 1),
    ],
)
def test_batched_equals_alone_on_patterns(spec, placement, router, per_host):
    topo = fat_tree(4)
    pattern = catalog.load_pattern(spec)
    place = catalog.resolve_placement(pattern, topo, placement, ranks_per_host=per_host, seed=3)
    fabric = Fabric(topo)
    demands = Demands.from_pattern(fabric, pattern, place)
    platform = Platform.from_fabric(fabric)
    flowset = FlowSet.from_demands(platform, demands, route(router, fabric, demands, seed=1))
    assert_same(
        run_phases(platform, flowset, batched=False, timeline=True),
        run_phases(platform, flowset, timeline=True),
    )


def test_serialized_phases_keep_their_samples_and_draws():
    # Under openmpi, phases with exchanges above the eager limit are sampled (random
    # order); the others are batched.  The draws must be those of the reference.
    topo = fat_tree(4)
    pattern = catalog.load_pattern("ft:nprocs=16")
    place = catalog.resolve_placement(pattern, topo, "random", ranks_per_host=1, seed=0)
    fabric = Fabric(topo)
    demands = Demands.from_pattern(fabric, pattern, place)
    platform = Platform.from_fabric(fabric)
    flowset = FlowSet.from_demands(platform, demands, route("dmodk", fabric, demands))
    proto = parse_protocol("openmpi:eager=4096")
    ref = run_phases(platform, flowset, protocol=proto, batched=False, seed=5)
    fast = run_phases(platform, flowset, protocol=proto, seed=5)
    assert flowset.serialized(proto).any()
    assert_same(ref, fast)


def test_batches_bound_entries_and_keep_order():
    assert batches([]) == []
    assert batches([10], limit=3) == [range(0, 1)]
    groups = batches([1, 2, 3, 4, 5, 6], limit=6)
    assert [list(g) for g in groups] == [[0, 1, 2], [3], [4], [5]]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_resumed_filling_equals_a_filling_from_scratch(seed):
    # Two blocks of random paths over few arcs with few capacities (many ties); flows
    # leave and arrive at random; after each refill every rate equals maxmin_entries
    # on the live flows of its block, bit for bit.
    rng = np.random.default_rng(seed)
    narcs, nflows = 6, 24
    paths = [rng.choice(narcs, size=int(rng.integers(1, 4)), replace=False) for _ in range(nflows)]
    block = np.repeat([0, 1], nflows // 2)
    arc = np.concatenate([p + narcs * b for p, b in zip(paths, block, strict=True)])
    indptr = np.concatenate([[0], np.cumsum([p.size for p in paths])]).astype(np.int64)
    capacity = rng.choice([1.0, 2.0, 3.0, 7.0], size=2 * narcs)
    blocks = Blocks.build(
        indptr, arc.astype(np.int64), np.ones(arc.size), block, np.repeat([0, 1], narcs), capacity
    )
    filling = Filling(blocks)
    live = rng.random(nflows) < 0.7
    filling.arrive(np.flatnonzero(live))
    for _ in range(8):
        filling.refill()
        for b in (0, 1):
            mine = np.flatnonzero(live & (block == b))
            positions, lengths = row_positions(indptr, mine)
            local = np.repeat(np.arange(mine.size), lengths)
            expected = maxmin_entries(
                local, arc[positions], np.ones(positions.size), mine.size, capacity
            )
            assert np.array_equal(filling.rate[mine], expected)
        leaving = np.flatnonzero(live & (rng.random(nflows) < 0.25))
        arriving = np.flatnonzero(~live & (rng.random(nflows) < 0.1 * (rng.random() < 0.3)))
        live[leaving], live[arriving] = False, True
        filling.leave(leaving)
        filling.arrive(arriving)
