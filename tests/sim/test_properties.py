"""Property tests on random small fat-trees and leaf-spines with random flows.

Invariants of max-min sharing and of the event loop: no arc above capacity at
any time; every transmitting flow has a bottleneck (a saturated arc on which its
rate is the largest, Bertsekas & Gallager); every flow delivers exactly its
bytes; phase-mode time is the sum of the phases; repeats multiply; latency adds;
ranks-mode releases follow the dependencies exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.core.topology import Topology
from sdnmpi.sim import FlowSet, Platform, simulate
from sdnmpi.sim.engine import Trace, run_phases, run_ranks
from tests.sim.routes import host_demands, shortest_routing

TOL = 1e-9
CAPACITIES = [5e8, 1e9, 2e9, 1e10]
LATENCIES = [0.0, 1e-6, 5e-6]


@dataclass
class Scenario:
    fabric: Fabric
    demands: Demands
    routing: Routing


@st.composite
def topologies(draw: st.DrawFn, *, leaf_spine_only: bool = False) -> Topology:
    if not leaf_spine_only and draw(st.booleans()):
        topo = fat_tree(draw(st.sampled_from([2, 4])))
    else:
        topo = leaf_spine(draw(st.integers(1, 3)), draw(st.integers(2, 3)), draw(st.integers(1, 3)))
    n = len(topo.links)
    caps = draw(st.lists(st.sampled_from(CAPACITIES), min_size=n, max_size=n))
    lats = draw(st.lists(st.sampled_from(LATENCIES), min_size=n, max_size=n))
    links = [
        replace(ln, capacity_bps=c, latency_s=x)
        for ln, c, x in zip(topo.links, caps, lats, strict=True)
    ]
    return topo.with_links(links)


@st.composite
def scenarios(draw: st.DrawFn, *, ranks: bool = False) -> Scenario:
    fabric = Fabric(draw(topologies()))
    nh = fabric.nhosts
    nphases = draw(st.integers(1, 3))
    repeats = draw(st.lists(st.integers(1, 3), min_size=nphases, max_size=nphases))
    ends = st.integers(0, 2 * nh - 1) if ranks else st.integers(0, nh - 1)
    rows = draw(
        st.lists(
            st.tuples(ends, ends, st.integers(0, 2_000_000), st.integers(0, nphases - 1)),
            max_size=14,
        )
    )
    rows = [r for r in rows if r[0] % nh != r[1] % nh]
    flows = [(s % nh, d % nh, b, p) for s, d, b, p in rows]
    pairs = [(s, d) for s, d, _, _ in rows] if ranks else None
    demands = host_demands(flows, repeats, pairs)
    rng = random.Random(draw(st.integers(0, 2**32)))
    return Scenario(fabric, demands, shortest_routing(fabric, demands, rng))


def check_trace(platform: Platform, flowset: FlowSet, rows: np.ndarray, trace: Trace) -> None:
    """Capacity, bottleneck and byte conservation in every segment of one trace."""
    cap = platform.capacity_bps
    inc = flowset.incidence[rows].toarray() > 0
    flow_rates = trace.flow_rate_bps.toarray()
    for x in flow_rates:
        load = x @ inc
        assert (load <= cap * (1 + TOL)).all()
        saturated = load >= cap * (1 - 1e-7)
        for f in np.flatnonzero(x > 0):
            on_arc_max = np.where(inc, x[:, None], 0.0).max(axis=0)
            bottleneck = inc[f] & saturated & (x[f] >= on_arc_max * (1 - 1e-7))
            assert bottleneck.any(), f"flow {f} has no bottleneck"
    sent = (trace.segment_end_s - trace.segment_start_s) @ flow_rates
    assert sent == pytest.approx(flowset.size_bits[rows], rel=1e-7, abs=1e-6)
    latency = flowset.latency_s[rows]
    assert trace.start_s - trace.release_s == pytest.approx(latency, abs=1e-12)
    assert (trace.finish_s >= trace.start_s).all()


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_rates_are_feasible_max_min_fair_and_deliver_every_byte(sc):
    platform = Platform.from_fabric(sc.fabric)
    flowset = FlowSet.from_demands(platform, sc.demands, sc.routing)
    for rows, trace, _ in run_phases(platform, flowset, flow_rates=True):
        check_trace(platform, flowset, rows, trace)


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_timeline_carries_the_demanded_bytes_and_phases_add_up(sc):
    r = simulate(sc.fabric, sc.demands, sc.routing, timeline=True)
    assert r.timeline is not None
    expected = sc.routing.arc_bytes(sc.demands, sc.fabric)
    assert r.arc_bytes == pytest.approx(expected)
    assert r.timeline.arc_bits() == pytest.approx(8 * expected, rel=1e-7, abs=1e-3)
    assert (r.arc_max_utilization <= 1 + TOL).all()
    repeat = sc.demands.phase_repeat
    assert r.total_s == pytest.approx(
        sum(p.duration_s * k for p, k in zip(r.phases, repeat, strict=True))
    )
    for p, phase in enumerate(r.phases):
        alone = _only_phase(sc, p)
        assert simulate(sc.fabric, alone.demands, alone.routing).total_s == pytest.approx(
            phase.duration_s * phase.repeat, rel=1e-12
        )


def _only_phase(sc: Scenario, p: int) -> Scenario:
    keep = np.flatnonzero(sc.demands.phase == p)
    d = sc.demands
    rows = np.stack([d.src[keep], d.dst[keep], d.size_bytes[keep], np.zeros(keep.size)], axis=1)
    flows = [(int(s), int(t), int(b), 0) for s, t, b, _ in rows]
    demands = host_demands(flows, [int(d.phase_repeat[p])])
    return Scenario(sc.fabric, demands, Routing("sub", sc.routing.arcs[keep]))


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_repeats_multiply(sc):
    once = simulate(sc.fabric, sc.demands, sc.routing)
    d = sc.demands
    doubled = replace(d, phase_repeat=d.phase_repeat * 2)
    twice = simulate(sc.fabric, doubled, sc.routing)
    assert twice.total_s == pytest.approx(2 * once.total_s, rel=1e-12)
    assert twice.arc_bytes == pytest.approx(2 * once.arc_bytes)


@settings(max_examples=40, deadline=None)
@given(topologies(leaf_spine_only=True), st.data())
def test_latency_adds_to_every_phase(topo, data):
    # Only flows between different leaves: every path has 4 arcs, so with latency
    # l on every arc all flows of a phase start 4 l later and then share exactly
    # as without latency.
    zero = Fabric(topo.with_links([replace(ln, latency_s=0.0) for ln in topo.links]))
    lat = data.draw(st.sampled_from([1e-6, 1e-3]))
    slow = Fabric(topo.with_links([replace(ln, latency_s=lat) for ln in topo.links]))
    hpl = topo.meta["hosts_per_leaf"]
    ends = st.integers(0, zero.nhosts - 1)
    rows = data.draw(st.lists(st.tuples(ends, ends, st.integers(1, 10**6), st.integers(0, 1))))
    rows = [r for r in rows if r[0] // hpl != r[1] // hpl]
    demands = host_demands(rows, (1, 2))
    routing = shortest_routing(zero, demands, random.Random(len(rows)))
    base = simulate(zero, demands, routing)
    later = simulate(slow, demands, routing)
    for p0, p1 in zip(base.phases, later.phases, strict=True):
        added = 4 * lat if p0.flows else 0.0
        assert p1.duration_s == pytest.approx(p0.duration_s + added, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(scenarios(ranks=True))
def test_ranks_mode_releases_each_flow_when_its_ranks_are_done(sc):
    platform = Platform.from_fabric(sc.fabric)
    flowset = FlowSet.from_demands(platform, sc.demands, sc.routing)
    steps, trace = run_ranks(platform, flowset, max_flows=10**6)
    for i in range(len(steps)):
        before = steps.deps.prerequisites(i)
        expected = trace.finish_s[before].max(initial=0.0)
        assert trace.release_s[i] == pytest.approx(expected, abs=1e-15)
    if sc.demands.nphases == 1 and sc.demands.phase_repeat[0] == 1:
        phases = simulate(sc.fabric, sc.demands, sc.routing)
        assert trace.makespan_s == pytest.approx(phases.total_s, rel=1e-12)


def test_empty_demands_give_zero():
    fabric = Fabric(fat_tree(4))
    demands = host_demands([], (1, 1))
    r = simulate(fabric, demands, Routing.from_paths("none", []), timeline=True)
    assert r.total_s == 0.0 and [p.total_s for p in r.phases] == [0.0, 0.0]
