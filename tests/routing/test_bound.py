"""The congestion LP, the NIC / latency / single-path bounds, and the max_link_busy metric.

Hand-solved cases carry their derivation in a comment (SimGrid's solver-test
style); hypothesis checks that no routing ever beats the LP.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.catalog import load_topology
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.routing import ours
from sdnmpi.core.routing.bound import max_link_busy, pattern_bound, phase_bounds
from sdnmpi.core.routing.candidates import PairProblem
from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.core.topology import Host, Link, Switch, Topology

G = 1e9
B = 1_000_000  # bytes per flow in the hand cases: 8 ms at 1 Gbit/s


def demands(flows: Sequence[tuple[int, int, int, int]], repeats: Sequence[int] = (1,)) -> Demands:
    """Flows ``(src host, dst host, bytes, phase)``."""
    a = np.array(flows, dtype=np.int64).reshape(-1, 4)
    minus = np.full(len(a), -1, np.int64)
    return Demands(
        a[:, 0],
        a[:, 1],
        a[:, 2],
        a[:, 3],
        minus,
        minus,
        tuple(f"phase {i}" for i in range(len(repeats))),
        np.array(repeats, dtype=np.int64),
    )


def only(fabric: Fabric, d: Demands, force_lp: bool = False):
    (pb,) = phase_bounds(fabric, d, force_lp=force_lp)
    return pb


# -- hand-solved LPs --------------------------------------------------------------------


@pytest.mark.parametrize("force_lp", [False, True])
def test_one_flow_over_two_equal_paths_takes_half_each(force_lp: bool) -> None:
    # h1 -leaf1- {spine1, spine2} -leaf2- h2, uplinks 1 Gbit/s, host links 4 Gbit/s.
    # The LP sends B/2 via each spine: every uplink carries 8*(B/2)/1e9 = 4 ms, the
    # host links 8*B/4e9 = 2 ms, so lambda = 4 ms, half of any single path's 8 ms.
    f = Fabric(leaf_spine(2, 2, 1, host_bps=4 * G, uplink_bps=G))
    pb = only(f, demands([(0, 1, B, 0)]), force_lp)
    assert pb.lp_s == pytest.approx(4e-3, rel=1e-6)
    assert pb.nic_s == pytest.approx(2e-3)
    assert pb.single_path_s == pytest.approx(8e-3)  # widest single path: 1 Gbit/s
    assert pb.status == ("optimal" if force_lp else "certified")


def test_leaf_spine_permutation_odd_count_across_two_spines() -> None:
    # leaf_spine(2, 2, 3), all 1 Gbit/s: the 3 hosts of leaf1 send B to the 3 of leaf2
    # and back.  Leaf1's 2 uplinks carry 3B: lambda = 8*1.5B/1e9 = 12 ms (NIC: 8 ms).
    # One path per pair puts 2 of the 3 pairs on one uplink: single path >= 16 ms.
    f = Fabric(leaf_spine(2, 2, 3))
    pairs = [(s, s + 3, B, 0) for s in range(3)] + [(s + 3, s, B, 0) for s in range(3)]
    pb = only(f, demands(pairs))
    assert pb.lp_s == pytest.approx(12e-3, rel=1e-6)
    assert pb.nic_s == pytest.approx(8e-3)
    assert pb.single_path_s == pytest.approx(16e-3)
    assert only(f, demands(pairs), force_lp=True).lp_s == pytest.approx(12e-3, rel=1e-6)


def test_host_link_limited_incast_equals_nic_bound() -> None:
    # fat_tree(4): h2, h5 and h9 each send B to h1.  h1's only link carries 3B:
    # 24 ms; every other arc carries at most 2B, so lambda = NIC bound = 24 ms.
    f = Fabric(fat_tree(4))
    pb = only(f, demands([(1, 0, B, 0), (4, 0, B, 0), (8, 0, B, 0)]))
    assert pb.lp_s == pytest.approx(24e-3, rel=1e-6)
    assert pb.nic_s == pytest.approx(24e-3)
    assert only(f, demands([(1, 0, B, 0), (4, 0, B, 0)]), force_lp=True).lp_s == pytest.approx(
        16e-3, rel=1e-6
    )


def test_lateral_link_needs_the_lp() -> None:
    # NetSA testbed: 8 hosts under tor1 send B each to the 8 under tor2.  The cut
    # around tor1 has the tor1-tor2 link and 4 uplinks, 5 Gbit/s: lambda =
    # 8*8B/5e9 = 12.8 ms, reached by 1.6B on each of the 5 (via spine: 2 hops more).
    # Uniform splitting over shortest paths only uses tor1-tor2, so the LP is solved.
    f = Fabric(load_topology("netsa"))
    pb = only(f, demands([(s, s + 8, B, 0) for s in range(8)]))
    assert pb.lp_s == pytest.approx(12.8e-3, rel=1e-6)
    assert pb.status == "optimal"
    assert pb.lp_vars > 0


def test_no_transit_through_a_multi_homed_host() -> None:
    # h2 has NICs on s1 and s2; s1 and s2 are joined only by s1-s3-s2.  h1 -> h3
    # must take s1-s3-s2 (B on s1->s3: 8 ms) even though h1-s1-h2-s2-h3 would
    # halve it: paths may not transit a host.
    hosts = tuple(Host(f"h{i}", f"02:00:00:00:00:0{i}") for i in (1, 2, 3))
    switches = tuple(Switch(f"s{i}", i, 1) for i in (1, 2, 3))
    links = (
        Link("h1", "s1", 1, 1, 4 * G),
        Link("h2", "s1", 1, 2, 4 * G),
        Link("h2", "s2", 2, 1, 4 * G),
        Link("h3", "s2", 1, 2, 4 * G),
        Link("s1", "s3", 3, 1, G),
        Link("s3", "s2", 2, 3, G),
    )
    f = Fabric(Topology("bridge", hosts, switches, links))
    pb = only(f, demands([(0, 2, B, 0)]))
    assert pb.lp_s == pytest.approx(8e-3, rel=1e-6)
    assert pb.status == "optimal"


# -- the metric and the pattern sums ------------------------------------------------------


def test_max_link_busy_by_hand() -> None:
    # leaf_spine(1, 2, 1): h1 - leaf1 - spine1 - leaf2 - h2, hosts 8 bit/s, uplinks
    # 4 bit/s.  Phase 0 (repeat 3): 2 bytes h1->h2, 1 byte h2->h1: the uplink
    # leaf1->spine1 carries 16 bits / 4 bit/s = 4 s.  Phase 1 (repeat 1): 1 byte
    # h2->h1: 8 bits over 4 bit/s = 2 s.  Total 3*4 + 1*2 = 14 s.
    f = Fabric(leaf_spine(1, 2, 1, host_bps=8.0, uplink_bps=4.0))
    d = demands([(0, 1, 2, 0), (1, 0, 1, 0), (1, 0, 1, 1)], repeats=(3, 1))
    fwd = [0, 4, 7, 3]  # h1->leaf1, leaf1->spine1, spine1->leaf2, leaf2->h2
    back = [2, 6, 5, 1]
    assert [f.names[f.arc_dst[a]] for a in fwd] == ["leaf1", "spine1", "leaf2", "h2"]
    r = Routing.from_paths("hand", [fwd, back, back])
    util = max_link_busy(f, d, r)
    assert util.per_phase_s.tolist() == [4.0, 2.0]
    assert util.total_s == 14.0
    assert f.names[f.arc_src[util.busiest_arc[0]]] == "leaf1"
    pb = pattern_bound(f, d)
    assert pb.lp_max_link_busy_s == pytest.approx(14.0)  # one path only: the LP agrees
    assert pb.nic_max_link_busy_s == pytest.approx(3 * 2.0 + 1 * 1.0)


def test_lower_bound_includes_latency() -> None:
    # One byte between leaves: 8 ns of transfer, 4 hops of 1 us latency: 4 us.
    f = Fabric(leaf_spine(2, 2, 1))
    pb = pattern_bound(f, demands([(0, 1, 1, 0)]))
    assert pb.phases[0].latency_s == pytest.approx(4e-6)
    assert pb.lower_bound_s == pytest.approx(4e-6)
    assert pb.lp_max_link_busy_s == pytest.approx(8e-9, rel=1e-6)


def test_proportional_phases_share_one_solve() -> None:
    f = Fabric(leaf_spine(2, 2, 2))
    flows = [(0, 2, B, 0), (1, 3, B, 0), (0, 2, 3 * B, 1), (1, 3, 3 * B, 1)]
    first, second = phase_bounds(f, demands(flows, repeats=(1, 2)))
    assert second.status == "cached"
    assert second.lp_s == pytest.approx(3 * first.lp_s)
    pb = pattern_bound(f, demands(flows, repeats=(1, 2)))
    assert pb.lp_max_link_busy_s == pytest.approx(first.lp_s * (1 + 2 * 3))
    assert pb.lp_solves == 1


# -- no routing beats the LP ----------------------------------------------------------------


FABRICS = {
    "ls-2x3x2": lambda: leaf_spine(2, 3, 2),
    "ls-3x2x3": lambda: leaf_spine(3, 2, 3, uplink_bps=2 * G),
    "ls-1x3x2": lambda: leaf_spine(1, 3, 2),
    "ft4": lambda: fat_tree(4),
}
_FABRIC_CACHE: dict[str, Fabric] = {}


def fabric(name: str) -> Fabric:
    if name not in _FABRIC_CACHE:
        _FABRIC_CACHE[name] = Fabric(FABRICS[name]())
    return _FABRIC_CACHE[name]


@st.composite
def instances(draw: st.DrawFn) -> tuple[Fabric, Demands]:
    f = fabric(draw(st.sampled_from(sorted(FABRICS))))
    nph = draw(st.integers(1, 3))
    n = draw(st.integers(1, 12))
    flows = []
    for _ in range(n):
        s = draw(st.integers(0, f.nhosts - 1))
        t = draw(st.integers(0, f.nhosts - 2))
        t += t >= s
        flows.append((s, t, draw(st.integers(1, 1000)), draw(st.integers(0, nph - 1))))
    repeats = draw(st.lists(st.integers(1, 5), min_size=nph, max_size=nph))
    return f, demands(flows, repeats)


def first_shortest(f: Fabric, d: Demands) -> Routing:
    """Every pair on its first shortest candidate path."""
    prob = PairProblem.build(f, d)
    return Routing("first", prob.flow_arcs(prob.first))


@settings(max_examples=40, deadline=None)
@given(instances())
def test_lp_is_below_every_routing(case: tuple[Fabric, Demands]) -> None:
    f, d = case
    phases = phase_bounds(f, d)
    forced = phase_bounds(f, d, force_lp=True, single_path=False)
    for routing in (ours.route(f, d), first_shortest(f, d)):
        util = max_link_busy(f, d, routing).per_phase_s
        for pb, lp, u in zip(phases, forced, util, strict=True):
            assert pb.nic_s <= pb.lp_s * (1 + 1e-6)
            assert pb.lp_s == pytest.approx(lp.lp_s, rel=1e-6)  # certificate == LP
            assert pb.lp_s <= pb.single_path_s * (1 + 1e-9)
            assert pb.single_path_s <= u * (1 + 1e-6)  # a single-path routing


@pytest.mark.parametrize(
    "make",
    [lambda: fat_tree(4), lambda: fat_tree(8), lambda: leaf_spine(3, 5, 2)],
    ids=["fat_tree4", "fat_tree8", "leaf_spine"],
)
def test_uniform_split_from_fractions_equals_the_direct_split(make) -> None:
    # The even split from the fractions kept per topology (leaf pairs times arcs)
    # equals the one computed from the flows, up to rounding, on random leaf phases
    # (repeated pairs, sources equal to targets, one flow).
    from sdnmpi.core.routing.bound import _Context

    ctx = _Context(Fabric(make()))
    sw = ctx.switches
    assert sw.leaves is not None and sw._fractions() is not None
    rng = np.random.default_rng(11)
    for n in (1, 2, 7, 50, 400):
        s = rng.choice(sw.leaves, n)
        t = rng.choice(sw.leaves, n)
        b = rng.integers(1, 10**7, n)
        fast, slow = sw.uniform_split(s, t, b), sw.uniform_split_direct(s, t, b)
        assert fast == pytest.approx(slow, rel=1e-12, abs=0.0)
        assert slow > 0 or (s == t).all()


def _pigeonhole_by_sorting(cross, b, m, cap_max) -> float:
    # the sort-based pigeonhole bound, as it was before the equal-jobs shortcut
    jobs = -np.sort(-np.where(cross, b.astype(np.float64), 0.0), axis=1)
    prefix = np.concatenate([np.zeros((jobs.shape[0], 1)), np.cumsum(jobs, axis=1)], axis=1)
    njobs = cross.sum(axis=1)
    jmax = int(((njobs - 1) // m).max(initial=0))
    j = np.arange(jmax + 1)[None, :]
    hi = np.minimum(j * m[:, None] + 1, njobs[:, None])
    lo = np.maximum(hi - j - 1, 0)
    ok = j * m[:, None] + 1 <= njobs[:, None]
    rows = np.arange(jobs.shape[0])[:, None]
    share = np.where(ok, prefix[rows, hi] - prefix[rows, lo], 0.0)
    return float((8.0 * share.max(axis=1) / cap_max).max(initial=0.0))


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(1, 6),
    jobs=st.integers(1, 40),
    size=st.sampled_from([1, 3, 65536, 7 * 2**30]),
    equal=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_pigeonhole_with_equal_jobs_is_the_sorted_one(rows, jobs, size, equal, seed) -> None:
    # Jobs all of one whole size take a shortcut (no sort); it gives the same value,
    # to the bit, as sorting (and other jobs still sort).
    from sdnmpi.core.routing.cuts import _pigeonhole

    rng = np.random.default_rng(seed)
    cross = rng.random((rows, jobs)) < 0.6
    b = np.full(jobs, size, dtype=np.int64)
    if not equal:
        b = b + rng.integers(0, 3, jobs)
    m = rng.integers(1, 5, rows)
    cap = rng.choice([1e9, 1e10, 4e10], rows)
    assert _pigeonhole(cross, b, m, cap) == _pigeonhole_by_sorting(cross, b, m, cap)
