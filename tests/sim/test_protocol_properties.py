"""Properties of the protocol model on random flowsets.

* With no exchange above the eager limit, a serializing protocol changes
  nothing: the same releases and completions as ``ideal``, in both modes, on
  any topology (no dependency is added).
* Every serialized reverse flow is released exactly when its forward flow (and
  its ranks' previous steps) completed.
* Serializing is never faster than ``ideal`` in ``phases`` mode when every
  flow crosses one arc (hosts joined by direct links): each arc is then a
  work-conserving server of its own flows, whose busy period can only grow
  when some starts are delayed.  This does not hold in general: with
  multi-arc paths max-min sharing can give a delayed flow's bandwidth to a
  flow whose completion mattered more (random leaf-spines show it in a few
  cases in a thousand), and in ``ranks`` mode a delay can release later steps
  earlier (``test_serializing_can_shorten_a_ranks_mode_run``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from sdnmpi.core.routing.model import Fabric
from sdnmpi.sim import FlowSet, Platform, Protocol, simulate_workload
from sdnmpi.sim.engine import run_ranks
from sdnmpi.sim.flowset import serialized_exchanges
from tests.sim.routes import host_demands, shortest_routing
from tests.sim.test_properties import Scenario, topologies


def with_messages(sc: Scenario, messages: list[int]) -> Scenario:
    """The scenario with message counts (cycled over the flows)."""
    n = len(sc.demands)
    counts = np.array([messages[i % len(messages)] for i in range(n)], dtype=np.int64)
    return Scenario(sc.fabric, replace(sc.demands, messages=counts), sc.routing)


@st.composite
def exchanges(draw: st.DrawFn) -> Scenario:
    """Random rank flows on a random topology, many of them answered in the same phase."""
    fabric = Fabric(draw(topologies()))
    nh = fabric.nhosts
    rank, size = st.integers(0, 2 * nh - 1), st.integers(1, 2_000_000)
    rows = []
    for s, d, b, p, back in draw(
        st.lists(st.tuples(rank, rank, size, st.integers(0, 1), st.booleans()), max_size=8)
    ):
        rows.append((s, d, b, p))
        if back:
            rows.append((d, s, draw(size), p))
    rows = [r for r in rows if r[0] % nh != r[1] % nh]
    flows = [(s % nh, d % nh, b, p) for s, d, b, p in rows]
    repeats = draw(st.lists(st.integers(1, 2), min_size=2, max_size=2))
    demands = host_demands(flows, repeats, [(s, d) for s, d, _, _ in rows])
    return Scenario(fabric, demands, shortest_routing(fabric, demands))


@settings(max_examples=40, deadline=None)
@given(
    exchanges(),
    st.lists(st.integers(1, 8), min_size=1, max_size=4),
    st.sampled_from(["phases", "ranks"]),
)
def test_no_exchange_above_the_limit_changes_nothing(sc, messages, mode):
    sc = with_messages(sc, messages)
    platform = Platform.from_fabric(sc.fabric)
    flowset = FlowSet.from_demands(platform, sc.demands, sc.routing)
    biggest = math.ceil(flowset.message_bytes.max(initial=0.0))
    for limit in (biggest, biggest + 1):
        proto = Protocol("t", limit, "serialized")
        assert serialized_exchanges(flowset, proto) == 0
        ideal = simulate_workload(platform, flowset, mode=mode)
        got = simulate_workload(platform, flowset, mode=mode, protocol=proto)
        assert got.total_s == ideal.total_s
        assert np.array_equal(got.flow_finish_s, ideal.flow_finish_s)
        assert np.array_equal(got.flow_release_s, ideal.flow_release_s)


@settings(max_examples=40, deadline=None)
@given(exchanges(), st.integers(0, 1_000_000))
def test_ranks_mode_releases_each_reverse_flow_after_its_forward_flow(sc, limit):
    platform = Platform.from_fabric(sc.fabric)
    flowset = FlowSet.from_demands(platform, sc.demands, sc.routing)
    proto = Protocol("t", limit, "serialized")
    steps, trace = run_ranks(
        platform, flowset, max_flows=10**6, protocol=proto, order="lower-first"
    )
    for i in range(len(steps)):
        before = steps.deps.prerequisites(i)
        assert trace.release_s[i] == pytest.approx(trace.finish_s[before].max(initial=0.0))
    src = flowset.src_rank[steps.flow]
    dst = flowset.dst_rank[steps.flow]
    big = flowset.serialized(proto)[steps.flow]
    for i, j in itertools.permutations(range(len(steps)), 2):
        same = steps.step[i] == steps.step[j] and big[i] and big[j]
        if same and src[i] == dst[j] and dst[i] == src[j] and src[i] < dst[i]:
            event("an exchange serialized")
            assert trace.release_s[j] >= trace.finish_s[i] * (1 - 1e-12)


@st.composite
def direct_links(draw: st.DrawFn) -> tuple[Platform, FlowSet]:
    """Hosts joined pairwise by direct arcs (one per ordered pair), ranks on hosts."""
    nhosts = draw(st.integers(2, 3))
    arcs = [(a, b) for a in range(nhosts) for b in range(nhosts) if a != b]
    caps = draw(
        st.lists(st.sampled_from([8.0, 16.0, 24.0]), min_size=len(arcs), max_size=len(arcs))
    )
    lats = draw(st.lists(st.sampled_from([0.0, 0.5]), min_size=len(arcs), max_size=len(arcs)))
    platform = Platform.from_arrays(caps, lats)
    nranks = draw(st.integers(2, 6))
    host = draw(st.permutations([r % nhosts for r in range(nranks)]))
    rank, size, count = st.integers(0, nranks - 1), st.integers(1, 20), st.integers(1, 3)
    rows = []
    for s, d, b, m, p, back in draw(
        st.lists(st.tuples(rank, rank, size, count, st.integers(0, 1), st.booleans()), max_size=8)
    ):
        rows.append((s, d, b, m, p))
        if back:  # the other direction in the same phase: an exchange
            rows.append((d, s, draw(size), draw(count), p))
    rows = [r for r in rows if host[r[0]] != host[r[1]]]
    nphases = 1 + max((r[4] for r in rows), default=0)
    repeat = draw(st.lists(st.integers(1, 3), min_size=nphases, max_size=nphases))
    return platform, FlowSet.from_paths(
        platform,
        [[arcs.index((host[s], host[d]))] for s, d, *_ in rows],
        [r[2] for r in rows],
        phase=[r[4] for r in rows],
        ranks=([r[0] for r in rows], [r[1] for r in rows]),
        phase_repeat=repeat,
        messages=[r[3] for r in rows],
    )


@settings(max_examples=80, deadline=None)
@given(direct_links(), st.integers(0, 12))
def test_serializing_is_never_faster_on_single_arc_paths(case, limit):
    platform, flowset = case
    proto = Protocol("t", limit, "serialized")
    ideal = simulate_workload(platform, flowset)
    serial = simulate_workload(platform, flowset, protocol=proto)
    for a, b in zip(ideal.phases, serial.phases, strict=True):
        assert b.duration_s >= a.duration_s * (1 - 1e-9)
    assert serial.total_s >= ideal.total_s * (1 - 1e-9)
    exchanges = serialized_exchanges(flowset, proto)
    event("some exchange serialized" if exchanges else "no exchange serialized")
    if exchanges == 0:
        assert serial.total_s == ideal.total_s
