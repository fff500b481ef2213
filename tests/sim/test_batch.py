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

from sdnmpi import catalog
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.sim import FlowSet, Platform, parse_protocol
from sdnmpi.sim.batch import batches
from sdnmpi.sim.engine import PhaseRun, run_phases
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
