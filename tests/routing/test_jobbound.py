"""The job-level LP bound: one fractional split per host pair for all its phases.

Hand-solved cases carry their derivation in a comment; hypothesis checks on random
multi-phase patterns that the bound lies between the per-phase LP bound and what
every router achieves at job granularity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.catalog import load_topology
from sdnmpi.core.generators import fat_tree, leaf_spine, oversubscribe
from sdnmpi.core.routing import ROUTERS, route
from sdnmpi.core.routing.bound import max_link_busy, pattern_bound
from sdnmpi.core.routing.jobbound import job_bound
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.core.topology import Host, Link, Switch, Topology
from sdnmpi.errors import RoutingError

G = 1e9
B = 1_000_000  # bytes: 8 ms over 1 Gbit/s


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


def partial_leaf_spine(spines_of: Sequence[Sequence[int]], spines: int = 2) -> Topology:
    """Leaf ``i`` (one host ``h{i}``, 4 Gbit/s) linked at 1 Gbit/s to the spines
    ``spines_of[i]`` only: some leaf pairs have one path, others several."""
    nl = len(spines_of)
    hosts = tuple(Host(f"h{i}", f"02:00:00:00:00:{i:02x}") for i in range(nl))
    leaves = [Switch(f"leaf{i}", i + 1, 1) for i in range(nl)]
    tops = [Switch(f"spine{j}", nl + j + 1, 2) for j in range(spines)]
    links = [Link(f"h{i}", f"leaf{i}", 1, 1, 4 * G) for i in range(nl)]
    links += [
        Link(f"leaf{i}", f"spine{j}", 2 + j, 1 + i, G)
        for i, which in enumerate(spines_of)
        for j in which
    ]
    return Topology("partial", hosts, tuple(leaves + tops), tuple(links))


# -- hand-solved ------------------------------------------------------------------------


def attained_case() -> tuple[Fabric, Demands]:
    # h0 has two NICs (4 Gbit/s), to spine0 and spine1; h1 hangs off leaf1, joined to
    # both spines; h2 off leaf2 (spine1 only), h3 off leaf3 (spine0 only); switch links
    # 1 Gbit/s.  The spines meet only at leaf1 and no path transits a host, so h2 and
    # h3 have one path each to h1 and h0 two.  h0 -> h1 talks in both phases; phase 0
    # adds h2 -> h1 (via spine1), phase 1 h3 -> h1 (via spine0), B bytes each.
    hosts = tuple(Host(f"h{i}", f"02:00:00:00:00:0{i}") for i in range(4))
    switches = (
        *(Switch(f"leaf{i}", i, 1) for i in (1, 2, 3)),
        *(Switch(f"spine{j}", 4 + j, 2) for j in (0, 1)),
    )
    links = (
        Link("h0", "spine0", 1, 1, 4 * G),
        Link("h0", "spine1", 2, 1, 4 * G),
        Link("h1", "leaf1", 1, 1, 4 * G),
        Link("h2", "leaf2", 1, 1, 4 * G),
        Link("h3", "leaf3", 1, 1, 4 * G),
        Link("leaf1", "spine0", 2, 2, G),
        Link("leaf1", "spine1", 3, 2, G),
        Link("leaf2", "spine1", 2, 3, G),
        Link("leaf3", "spine0", 2, 3, G),
    )
    f = Fabric(Topology("two-spines", hosts, switches, links))
    d = demands([(0, 1, B, 0), (2, 1, B, 0), (0, 1, B, 1), (3, 1, B, 1)], (1, 1))
    return f, d


def test_job_bound_above_per_phase_bound_attained_by_one_path() -> None:
    # Per phase h0 -> h1 avoids the forced flow: every arc carries at most B, 8 ms,
    # and 16 ms over both.  One split a (share via spine0) for both phases loads
    # spine1 -> leaf1 with (2 - a)B in phase 0 and spine0 -> leaf1 with (1 + a)B in
    # phase 1: (2 - a + 1 + a) * 8 ms = 24 ms whatever a, and a single path (a = 0
    # or 1) attains it.
    f, d = attained_case()
    pb = pattern_bound(f, d, single_path=False)
    jb = job_bound(f, d, pb.phases)
    assert pb.lp_max_link_busy_s == pytest.approx(16e-3, rel=1e-6)
    assert jb.lp_max_link_busy_s == pytest.approx(24e-3, rel=1e-6)
    assert jb.status == "optimal" and jb.coupled == 1 and jb.lp_solves == 1
    assert jb.ratio == pytest.approx(1.5, rel=1e-6)
    util = max_link_busy(f, d, route("ours", f, d)).total_s
    assert util == pytest.approx(jb.lp_max_link_busy_s, rel=1e-6)


def test_pairs_in_one_phase_each_give_the_per_phase_bound() -> None:
    # The same fabric, h1 -> h0 in place of phase 1's h0 -> h1: no pair talks in two
    # phases, each phase routes freely, the job bound is the per-phase one (status
    # per-phase), and the forced LP agrees.
    f, _ = attained_case()
    d = demands([(0, 1, B, 0), (2, 1, B, 0), (1, 0, B, 1), (3, 1, B, 1)], (1, 3))
    pb = pattern_bound(f, d, single_path=False)
    jb = job_bound(f, d, pb.phases)
    assert jb.status == "per-phase" and jb.coupled == 0
    assert jb.lp_max_link_busy_s == pb.lp_max_link_busy_s
    forced = job_bound(f, d, pb.phases, force_lp=True)
    assert forced.lp_max_link_busy_s == pytest.approx(pb.lp_max_link_busy_s, rel=1e-6)


def test_one_phase_pattern_equals_per_phase_lp() -> None:
    # One phase: the job LP is the phase's LP.  leaf_spine(2, 2, 3), 1 Gbit/s: leaf1's
    # three hosts send B each to leaf2's: 3B over two uplinks, 12 ms.
    f = Fabric(leaf_spine(2, 2, 3))
    d = demands([(s, s + 3, B, 0) for s in range(3)])
    pb = pattern_bound(f, d, single_path=False, force_lp=True)
    assert pb.lp_max_link_busy_s == pytest.approx(12e-3, rel=1e-6)
    for force in (False, True):
        jb = job_bound(f, d, pb.phases, force_lp=force)
        assert jb.lp_max_link_busy_s == pytest.approx(12e-3, rel=1e-6)
    assert job_bound(f, d, pb.phases, force_lp=True).status == "optimal"


def test_fat_tree_coupled_phases_certified_by_the_even_split() -> None:
    # fat_tree(4): h0 -> h15 in both phases, with a different second flow in each.
    # The even split over shortest next hops reaches each phase's lambda at once, so
    # the job bound is the per-phase bound without an LP; the LP agrees.
    f = Fabric(fat_tree(4))
    d = demands([(0, 15, B, 0), (1, 14, B, 0), (0, 15, B, 1), (4, 15, 2 * B, 1)], (2, 1))
    pb = pattern_bound(f, d, single_path=False)
    jb = job_bound(f, d, pb.phases)
    assert jb.status == "certified" and jb.lp_solves == 0 and jb.coupled == 1
    assert jb.lp_max_link_busy_s == pb.lp_max_link_busy_s
    forced = job_bound(f, d, pb.phases, force_lp=True)
    assert forced.lp_max_link_busy_s == pytest.approx(jb.lp_max_link_busy_s, rel=1e-6)


def test_proportional_phases_merge_and_repeat_weights() -> None:
    # The attained case with phase 1 repeated 3 times and a third phase equal to
    # phase 0 doubled (merged into it, weight 1 + 2).  Phase 0-like cost (2 - a) *
    # 8 ms times 3, phase 1 (1 + a) * 8 ms times 3: 72 ms whatever a.
    f, _ = attained_case()
    flows = [(0, 1, B, 0), (2, 1, B, 0), (0, 1, B, 1), (3, 1, B, 1)]
    flows += [(0, 1, 2 * B, 2), (2, 1, 2 * B, 2)]
    d = demands(flows, (1, 3, 1))
    jb = job_bound(f, d)
    assert jb.lp_max_link_busy_s == pytest.approx(72e-3, rel=1e-6)
    assert jb.per_phase_s == pytest.approx(48e-3, rel=1e-6)


def test_too_large_leaves_the_bound_unknown() -> None:
    f, d = attained_case()
    jb = job_bound(f, d, max_vars=1)
    assert jb.status == "too-large" and math.isnan(jb.lp_max_link_busy_s)


def test_empty_demands() -> None:
    f, _ = attained_case()
    jb = job_bound(f, demands([]))
    assert jb.lp_max_link_busy_s == 0.0 and jb.status == "per-phase"


# -- properties ---------------------------------------------------------------------------

FABRICS = {
    "leaf_spine": lambda: leaf_spine(2, 3, 2),
    "fat_tree4": lambda: fat_tree(4),
    "fat_tree4_os2": lambda: oversubscribe(fat_tree(4), 2.0),
    "partial": lambda: partial_leaf_spine([(0, 1, 2), (0, 1), (1, 2), (0,), (2,)], spines=3),
    "two_spines": lambda: attained_case()[0].topology,
    "netsa": lambda: load_topology("netsa"),
}
_FABRIC_CACHE: dict[str, Fabric] = {}


def fabric(name: str) -> Fabric:
    if name not in _FABRIC_CACHE:
        _FABRIC_CACHE[name] = Fabric(FABRICS[name]())
    return _FABRIC_CACHE[name]


@st.composite
def instances(draw: st.DrawFn) -> tuple[Fabric, Demands]:
    """Random host pairs, each talking in a random set of phases (so phases couple)."""
    f = fabric(draw(st.sampled_from(sorted(FABRICS))))
    nph = draw(st.integers(1, 3))
    flows = []
    for _ in range(draw(st.integers(1, 10))):
        s = draw(st.integers(0, f.nhosts - 1))
        t = draw(st.integers(0, f.nhosts - 2))
        t += t >= s
        for p in draw(st.sets(st.integers(0, nph - 1), min_size=1)):
            flows.append((s, t, draw(st.integers(1, 1000)), p))
    repeats = draw(st.lists(st.integers(1, 5), min_size=nph, max_size=nph))
    return f, demands(flows, repeats)


@settings(max_examples=40, deadline=None)
@given(instances())
def test_job_bound_between_per_phase_bound_and_every_router(
    case: tuple[Fabric, Demands],
) -> None:
    f, d = case
    pb = pattern_bound(f, d, single_path=False)
    jb = job_bound(f, d, pb.phases)
    forced = job_bound(f, d, pb.phases, force_lp=True)
    assert jb.lp_max_link_busy_s >= pb.lp_max_link_busy_s * (1 - 1e-9)
    assert jb.lp_max_link_busy_s == pytest.approx(forced.lp_max_link_busy_s, rel=1e-6)
    for name in ROUTERS:
        try:
            routing = route(name, f, d)
        except RoutingError:  # a router for fat-trees only, say
            continue
        util = max_link_busy(f, d, routing).total_s
        assert jb.lp_max_link_busy_s <= util * (1 + 1e-6), name
