"""Max-min solver: hand-solved cases (derivations in comments) and properties.

In the style of SimGrid's maxmin tests: small systems whose fair shares can be
worked out on paper by progressive filling.  Capacities are in arbitrary units.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.sim.maxmin import arc_rates, incidence_matrix, maxmin_rates


def rates(paths: list[list[int]], capacity: list[float]) -> list[float]:
    width = max((len(p) for p in paths), default=1)
    arcs = np.full((len(paths), width), -1, dtype=np.int64)
    for i, p in enumerate(paths):
        arcs[i, : len(p)] = p
    out = maxmin_rates(incidence_matrix(arcs, len(capacity)), np.array(capacity, dtype=float))
    return [float(x) for x in out]


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_one_link_shared_by_n_flows(n):
    # One link of capacity 6 and n flows: the only constraint is x1 + ... + xn <= 6,
    # progressive filling raises all n together until the link saturates: 6 / n each.
    assert rates([[0]] * n, [6.0]) == pytest.approx([6.0 / n] * n, rel=1e-15)


def test_two_links_in_series_with_a_flow_on_each():
    # Links 0 and 1 (capacity 1 each); A crosses both, B uses 0, C uses 1.
    # Level t: link 0 carries A+B = 2t, link 1 carries A+C = 2t: both saturate at
    # t = 1/2, freezing everyone at 1/2.
    assert rates([[0, 1], [0], [1]], [1.0, 1.0]) == pytest.approx([0.5, 0.5, 0.5])


def test_two_links_in_series_unequal():
    # Link 0 has capacity 1, link 1 capacity 2.  Stage 1: link 0 saturates at
    # t = 1/2 (2 flows), freezing A and B at 1/2.  Stage 2: link 1 has 2 - 1/2 left
    # for C alone: C = 3/2.
    assert rates([[0, 1], [0], [1]], [1.0, 2.0]) == pytest.approx([0.5, 0.5, 1.5])


def test_parking_lot():
    # The classic parking lot: a long flow crosses links 0..3 (capacity 1 each),
    # one short flow per link.  Each link has 2 flows, all saturate at t = 1/2:
    # the long flow gets 1/2, like every short one (max-min, not max-throughput,
    # which would starve the long flow and give 4).
    paths = [[0, 1, 2, 3], [0], [1], [2], [3]]
    assert rates(paths, [1.0] * 4) == pytest.approx([0.5] * 5)


def test_parking_lot_with_growing_capacities():
    # Capacities 1, 2, 3.  Stage 1: link 0 (2 flows) saturates first at t = 1/2
    # (link 1 would at 1, link 2 at 3/2): the long flow and short 0 freeze at 1/2.
    # Stage 2: short 1 alone on link 1 gets 2 - 1/2 = 3/2, short 2 on link 2 gets
    # 3 - 1/2 = 5/2 (each link is then the bottleneck of its short flow).
    paths = [[0, 1, 2], [0], [1], [2]]
    assert rates(paths, [1.0, 2.0, 3.0]) == pytest.approx([0.5, 0.5, 1.5, 2.5])


def test_progressive_filling_freezes_in_three_stages():
    # Links a=0 (cap 1), b=1 (cap 3), c=2 (cap 4).  Flows: f1 on a, f2 on a+b,
    # f3 on b, f4 on b+c, f5 on c.
    # Stage 1: shares a: 1/2, b: 3/3 = 1, c: 4/2 = 2 -> a saturates at t = 1/2,
    #   f1 = f2 = 1/2.
    # Stage 2: b has 3 - 3/2 = 3/2 left for f3, f4 (+3/4 each -> 5/4);
    #   c has 4 - 1 = 3 left for f4, f5 (+3/2 each) -> b saturates: f3 = f4 = 5/4.
    # Stage 3: c has 4 - 5/4 - 5/4 = 3/2 left for f5: f5 = 5/4 + 3/2 = 11/4.
    got = rates([[0], [0, 1], [1], [1, 2], [2]], [1.0, 3.0, 4.0])
    assert got == pytest.approx([0.5, 0.5, 1.25, 1.25, 2.75], rel=1e-14)


def test_ties_saturate_together_and_unused_links_are_ignored():
    # Links 0 and 1 both saturate at 1/2 in stage 1; link 2 carries nothing.
    assert rates([[0], [0], [1], [1]], [1.0, 1.0, 5.0]) == pytest.approx([0.5] * 4)


def test_flow_without_arcs_is_unconstrained_and_empty_system():
    got = maxmin_rates(incidence_matrix(np.array([[-1], [0]]), 1), np.array([2.0]))
    assert got[0] == np.inf and got[1] == 2.0
    assert maxmin_rates(incidence_matrix(np.zeros((0, 1), np.int64), 1), np.ones(1)).size == 0


def test_arc_rates_sum_the_flows():
    inc = incidence_matrix(np.array([[0, 1], [0, -1]]), 3)
    assert arc_rates(inc, np.array([1.0, 2.0]), 3).tolist() == [3.0, 1.0, 0.0]


@st.composite
def systems(draw: st.DrawFn) -> tuple[list[list[int]], list[float]]:
    narcs = draw(st.integers(1, 6))
    capacity = draw(
        st.lists(st.sampled_from([1.0, 2.0, 3.0, 10.0, 0.5]), min_size=narcs, max_size=narcs)
    )
    flows = draw(
        st.lists(
            st.sets(st.integers(0, narcs - 1), min_size=1).map(sorted), min_size=1, max_size=15
        )
    )
    return flows, capacity


@settings(max_examples=200, deadline=None)
@given(systems())
def test_rates_are_feasible_and_every_flow_has_a_bottleneck(system):
    # Bertsekas & Gallager: an allocation is max-min fair iff it is feasible and
    # every flow crosses a saturated arc on which its rate is the largest.
    paths, capacity = system
    x = np.array(rates(paths, capacity))
    cap = np.array(capacity)
    load = np.zeros(len(cap))
    for p, r in zip(paths, x, strict=True):
        load[p] += r
    assert (load <= cap * (1 + 1e-12)).all()
    for p, r in zip(paths, x, strict=True):
        assert any(
            load[a] >= cap[a] * (1 - 1e-12)
            and r >= max(x[i] for i, q in enumerate(paths) if a in q) * (1 - 1e-12)
            for a in p
        )
