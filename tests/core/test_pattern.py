"""The pattern model: phases, merging, validation, aggregation, classification."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.core import placement as pl
from sdnmpi.core.classify import Thresholds, classify
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Cell, Pattern, Phase, concat, repeated
from sdnmpi.errors import PatternError

cells_st = st.lists(
    st.tuples(st.integers(0, 15), st.integers(0, 15), st.integers(0, 10**9), st.integers(1, 1000)),
    max_size=60,
)


def test_duplicates_merge_and_cells_sort():
    p = Phase.from_cells("x", [(2, 1, 5), (0, 3, 1), (2, 1, 7)])
    assert [(c.src, c.dst, c.size_bytes, c.messages) for c in p.cells()] == [
        (0, 3, 1, 1),
        (2, 1, 12, 2),
    ]
    assert p.total_bytes == 13 and p.total_messages == 3


def test_arrays_are_read_only():
    p = Phase.from_cells("x", [(0, 1, 5)])
    with pytest.raises(ValueError, match="read-only"):
        p.size_bytes[0] = 1


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ([(0, 1, -5)], "negative bytes"),
        ([(-1, 1, 5)], "negative rank"),
        ([Cell(0, 1, 5, -1)], "negative messages"),
    ],
)
def test_negative_values_are_rejected(cells, message):
    with pytest.raises(PatternError, match=message):
        Phase.from_cells("bad", cells)


def test_pattern_rejects_out_of_range_endpoints_and_bad_hosts():
    ph = Phase.from_cells("x", [(0, 4, 5)])
    with pytest.raises(PatternError, match="endpoint 4 out of range for 4"):
        Pattern("p", 4, (ph,))
    with pytest.raises(PatternError, match="2 host names for 5"):
        Pattern("p", 5, (ph,), ("a", "b"))
    with pytest.raises(PatternError, match="repeat must be >= 1"):
        Phase.from_cells("x", [(0, 1, 1)], repeat=0)


def test_repeat_weights_totals():
    a = Phase.from_cells("a", [(0, 1, 10)], repeat=3)
    b = Phase.from_cells("b", [(0, 1, 1), (1, 0, 2)])
    p = Pattern("p", 2, (a, b))
    assert p.total_bytes == 33
    assert p.dense().tolist() == [[0, 31], [2, 0]]
    assert repeated(p, 2).total_bytes == 66
    assert concat("c", [p, p]).total_bytes == 66


@settings(max_examples=60, deadline=None)
@given(cells_st, st.integers(1, 5))
def test_property_total_matrix_conserves_bytes(cells, rep):
    phase = Phase.from_cells("x", [Cell(s, d, b, m) for s, d, b, m in cells], repeat=rep)
    pattern = Pattern("p", 16, (phase, phase.with_label("y", 1)))
    assert pattern.total_bytes == (rep + 1) * sum(c[2] for c in cells)
    assert int(pattern.dense().sum()) == pattern.total_bytes
    pairs = {(s, d) for s, d, _, _ in cells}
    assert len(pattern.total_matrix()) == len(pairs)


def test_placements():
    t = leaf_spine(1, 2, 2, cores=2)  # hosts h1..h4 with 2 cores
    assert pl.block(t, 5).hosts == ("h1", "h1", "h2", "h2", "h3")
    assert pl.cyclic(t, 5).hosts == ("h1", "h2", "h3", "h4", "h1")
    assert pl.block(t, 4, ranks_per_host=1).hosts == ("h1", "h2", "h3", "h4")
    r1, r2 = pl.random(t, 8, seed=3), pl.random(t, 8, seed=3)
    assert r1 == r2 and sorted(r1.hosts) == sorted(pl.block(t, 8).hosts)
    assert pl.random(t, 8, seed=4) != r1
    assert pl.explicit(t, {0: "h4", 1: "h1"}).hosts == ("h4", "h1")
    assert pl.block(t, 3, hosts=["h4", "h3"]).hosts == ("h4", "h4", "h3")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: pl.block(t, 9), "9 ranks do not fit in 8 slots"),
        (lambda t: pl.cyclic(t, 5, ranks_per_host=1), "5 ranks do not fit in 4 slots"),
        (lambda t: pl.explicit(t, ["h1", "h1", "h1"]), "3 ranks on 'h1', which has 2 slots"),
        (lambda t: pl.explicit(t, ["nope"]), "unknown host"),
        (lambda t: pl.explicit(t, {0: "h1", 2: "h2"}), "missing \\[1\\]"),
        (lambda t: pl.make(t, 2, "spiral"), "unknown placement strategy"),
    ],
)
def test_placement_errors(make, message):
    with pytest.raises(PatternError, match=message):
        make(leaf_spine(1, 2, 2, cores=2))


def test_aggregation_to_hosts_drops_local_traffic():
    t = leaf_spine(1, 2, 2, cores=2)
    ph = Phase.from_cells("x", [(0, 1, 100), (0, 2, 10), (1, 3, 5), (3, 0, 7)])
    p = Pattern("p", 4, (ph,))
    h = pl.to_hosts(p, pl.block(t, 4))
    assert h.hosts == ("h1", "h2")
    assert h.dense().tolist() == [[0, 15], [7, 0]]
    assert pl.to_hosts(p, pl.block(t, 4), keep_local=True).dense().tolist() == [[100, 15], [7, 0]]
    with pytest.raises(PatternError, match="already host-level"):
        pl.to_hosts(h, pl.block(t, 4))
    with pytest.raises(PatternError, match="placement only 2"):
        pl.to_hosts(p, pl.block(t, 2))


@settings(max_examples=40, deadline=None)
@given(cells_st, st.integers(0, 99))
def test_property_aggregation_conserves_remote_bytes(cells, seed):
    t = leaf_spine(2, 2, 2, cores=4)
    p = Pattern("p", 16, (Phase.from_cells("x", [Cell(s, d, b, m) for s, d, b, m in cells]),))
    place = pl.random(t, 16, seed=seed)
    remote = sum(b for s, d, b, _ in cells if place.hosts[s] != place.hosts[d])
    assert pl.to_hosts(p, place).total_bytes == remote


def test_netsa_classification_by_average_packet_size():
    ph = Phase.from_cells(
        "x",
        [
            Cell(0, 1, 42752734, 35346),
            Cell(0, 2, 9394, 81),
            Cell(1, 2, 500 * 10, 10),
            Cell(2, 0, 0, 0),
        ],
    )
    p = classify(Pattern("allreduce", 3, (ph,)), Thresholds(1100, 120, 2))
    kinds = {(c.src, c.dst): (c.kind, c.max_hops) for c in p.phases[0].cells()}
    assert kinds == {
        (0, 1): ("bandwidth", 0),
        (0, 2): ("latency", 2),
        (1, 2): (None, 0),
        (2, 0): (None, 0),
    }


def test_explicit_annotations_win_unless_told_otherwise():
    ph = Phase.from_cells("x", [Cell(0, 1, 100, 10, "bandwidth")])
    assert next(classify(Pattern("p", 2, (ph,))).phases[0].cells()).kind == "bandwidth"
    assert (
        next(classify(Pattern("p", 2, (ph,)), keep_explicit=False).phases[0].cells()).kind
        == "latency"
    )
    with pytest.raises(PatternError, match="must not exceed"):
        Thresholds(bandwidth=100, latency=200)


def test_phase_equality_compares_values():
    a = Phase.from_cells("x", [(0, 1, 5)])
    b = Phase.from_arrays("x", np.array([0]), np.array([1]), np.array([5]))
    assert a == b
    assert a != a.with_label("y")
