"""The C phase engine (csrc/sim, :mod:`sdnmpi.sim.native`) against the reference.

Each phase run on the C engine must give the trace :func:`sdnmpi.sim.engine.run`
gives for it, bit for bit: start and finish times, segments, arc peaks, event
counts.  The C unit tests (``build/sim/test_phase``) check hand-computed cases.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse

from sdnmpi import catalog
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.errors import SdnMpiError
from sdnmpi.sim import FlowSet, Platform, simulate
from sdnmpi.sim import native as c_engine
from sdnmpi.sim.engine import run, run_phases
from tests.sim.test_batch import assert_same
from tests.sim.test_properties import scenarios

FIELDS = ("start_s", "finish_s", "segment_start_s", "segment_end_s", "arc_peak_bps")


@pytest.fixture(autouse=True)
def _built() -> None:
    if not c_engine.available():
        pytest.fail(f"the C phase engine is needed here: {c_engine.status()}")


def _flowset(spec: str, placement: str, router: str, per_host: int, k: int = 4):
    topo = fat_tree(k)
    pattern = catalog.load_pattern(spec)
    place = catalog.resolve_placement(pattern, topo, placement, ranks_per_host=per_host, seed=3)
    fabric = Fabric(topo)
    demands = Demands.from_pattern(fabric, pattern, place)
    platform = Platform.from_fabric(fabric)
    return platform, FlowSet.from_demands(platform, demands, route(router, fabric, demands, seed=1))


@settings(max_examples=80, deadline=None)
@given(scenarios())
def test_native_phases_equal_phases_run_alone(sc):
    platform = Platform.from_fabric(sc.fabric)
    flowset = FlowSet.from_demands(platform, sc.demands, sc.routing)
    assert_same(
        run_phases(platform, flowset, batched=False),
        run_phases(platform, flowset, native=True),
    )


@pytest.mark.parametrize(
    ("spec", "placement", "router", "per_host"),
    [
        ("ft:nprocs=64", "random", "dmodk", 4),
        ("ft:nprocs=64", "random", "ecmp", 4),
        ("alltoall:nprocs=16,bytes=65536", "block", "single", 1),
        ("cg:nprocs=16", "cyclic", "minhop", 1),
        ("stencil3d:nprocs=64", "random", "ours", 4),
    ],
)
def test_native_equals_alone_on_patterns(spec, placement, router, per_host):
    # Dense phases (64 ranks on 16 hosts): many flows per arc, many ties, flows that
    # complete from every filling stage, so the resumed filling and its kept
    # history of rooms are exercised.
    platform, flowset = _flowset(spec, placement, router, per_host)
    assert_same(
        run_phases(platform, flowset, batched=False),
        run_phases(platform, flowset, native=True),
    )


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_random_phase_with_latencies_and_ties(seed):
    # Few arcs and capacities (ties between fair shares), unequal sizes and path
    # latencies (starts spread over several events), some flows without arcs.
    rng = np.random.default_rng(seed)
    narcs, nflows = 7, int(rng.integers(1, 40))
    rows = [
        np.sort(rng.choice(narcs, size=int(rng.integers(0, 4)), replace=False))
        for _ in range(nflows)
    ]
    indptr = np.concatenate([[0], np.cumsum([r.size for r in rows])]).astype(np.int64)
    arcs = np.concatenate(rows or [np.zeros(0, dtype=np.int64)]).astype(np.int64)
    weights = rng.choice([1.0, 2.0], size=arcs.size)
    incidence = sparse.csr_array((weights, arcs, indptr), shape=(nflows, narcs))
    capacity = rng.choice([1e9, 2e9, 3e9, 1e10], size=narcs)
    size = rng.choice([8e3, 6.4e4, 5.24288e5, 1e6], size=nflows)
    latency = rng.choice([0.0, 1e-6, 2e-6, 5e-6], size=nflows)

    class _Platform:
        capacity_bps = capacity
        narcs = capacity.size

    ref = run(_Platform, incidence, size, latency)  # type: ignore[arg-type]
    got = c_engine.run_phase(capacity, incidence, size, latency, rtol=1e-9)
    assert got.events == ref.events
    for name in FIELDS:
        assert np.array_equal(getattr(got, name), getattr(ref, name)), name


def test_simulate_gives_the_same_result_with_and_without_it():
    topo = fat_tree(4)
    pattern = catalog.load_pattern("ft:nprocs=64")
    place = catalog.resolve_placement(pattern, topo, "random", ranks_per_host=4, seed=3)
    fabric = Fabric(topo)
    demands = Demands.from_pattern(fabric, pattern, place)
    routing = route("dmodk", fabric, demands, seed=1)
    with_c = simulate(fabric, demands, routing)
    c_engine._load.cache_clear()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(c_engine.ENV, "0")
            assert not c_engine.available()
            assert "numpy" in c_engine.status() and c_engine.ENV in c_engine.status()
            without = simulate(fabric, demands, routing)
    finally:
        c_engine._load.cache_clear()
    assert with_c.total_s == without.total_s
    assert with_c.phases == without.phases
    assert with_c.events == without.events
    for name in ("flow_start_s", "flow_finish_s", "arc_max_utilization"):
        assert np.array_equal(getattr(with_c, name), getattr(without, name)), name


def test_asking_for_it_when_missing_says_why(monkeypatch):
    platform, flowset = _flowset("cg:nprocs=16", "block", "dmodk", 1)
    c_engine._load.cache_clear()
    try:
        monkeypatch.setenv(c_engine.ENV, "0")
        with pytest.raises(SdnMpiError, match="C phase engine was asked for"):
            run_phases(platform, flowset, native=True)
        with pytest.raises(SdnMpiError, match="not available"):
            c_engine.run_phase(
                platform.capacity_bps,
                flowset.incidence,
                flowset.size_bits,
                flowset.latency_s,
                rtol=1e-9,
            )
    finally:
        c_engine._load.cache_clear()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"weights": 0.5}, "not a positive integer"),
        ({"capacity": 0.0}, "capacity"),
        ({"size": float("nan")}, "size or latency"),
        ({"latency": -1.0}, "size or latency"),
    ],
)
def test_bad_input_is_refused_with_its_reason(change, message):
    incidence = sparse.csr_array(
        (np.array([change.get("weights", 1.0), 1.0]), np.array([0, 1]), np.array([0, 1, 2])),
        shape=(2, 2),
    )
    capacity = np.array([change.get("capacity", 1e9), 1e9])
    size = np.array([change.get("size", 8e3), 8e3])
    latency = np.array([change.get("latency", 0.0), 0.0])
    with pytest.raises(SdnMpiError, match=message):
        c_engine.run_phase(capacity, incidence, size, latency, rtol=1e-9)


def test_mismatched_lengths_are_refused():
    incidence = sparse.csr_array(np.ones((2, 1)))
    with pytest.raises(SdnMpiError, match="2 flows but 1 sizes"):
        c_engine.run_phase(np.ones(1), incidence, np.ones(1), np.zeros(2), rtol=1e-9)
    with pytest.raises(SdnMpiError, match="incidence has 1 arcs, the platform 0"):
        c_engine.run_phase(np.ones(0), incidence, np.ones(2), np.zeros(2), rtol=1e-9)


def test_integral_weights():
    assert c_engine.integral(np.array([1.0, 2.0, 3.0]))
    assert not c_engine.integral(np.array([1.0, 0.5]))
    assert not c_engine.integral(np.array([0.0, 1.0]))
