"""``Demands.messages``: per-flow message counts from the pattern cells, kept by every copy."""

from __future__ import annotations

import numpy as np
import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import phase_demands, subset
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.errors import PatternError
from tests.routing.flows import demands


@pytest.fixture
def fabric() -> Fabric:
    return Fabric(leaf_spine(1, 2, 2))


def pattern() -> Pattern:
    # 4 ranks (see placed()): 0 and 1 on the first host, 2 and 3 on the second.
    p0 = Phase.from_arrays("a", [0, 0, 2, 1], [1, 2, 0, 3], [10, 600, 600, 70], [5, 3, 0, 7])
    p1 = Phase.from_arrays("b", [3], [0], [800], [4], repeat=2)
    return Pattern("m", 4, (p0, p1))


def placed(fabric: Fabric) -> Demands:
    hosts = [h.name for h in fabric.topology.hosts]
    return Demands.from_pattern(fabric, pattern(), Placement((hosts[0],) * 2 + (hosts[1],) * 2))


def test_from_pattern_keeps_the_cells_message_counts(fabric):
    d = placed(fabric)
    # 0->1 is intra-host (dropped); 0->2 has 3 messages, 2->0 0 (counted as 1),
    # 1->3 has 7, and phase b's 3->0 has 4.
    assert d.src_rank.tolist() == [0, 1, 2, 3]
    assert d.dst_rank.tolist() == [2, 3, 0, 0]
    assert d.message_counts.tolist() == [3, 7, 1, 4]
    assert d.message_bytes.tolist() == pytest.approx([200.0, 10.0, 600.0, 200.0])


def test_hand_built_demands_have_one_message_per_flow():
    d = demands([(0, 1), (1, 0)], [64, 128])
    assert d.messages is None
    assert d.message_counts.tolist() == [1, 1]
    assert d.message_bytes.tolist() == [64.0, 128.0]


def test_phase_demands_and_subset_keep_the_counts(fabric):
    d = placed(fabric)
    assert phase_demands(d, 1).message_counts.tolist() == [4]
    assert phase_demands(d, 0).message_counts.tolist() == [3, 7, 1]
    assert subset(d, np.array([3, 0])).message_counts.tolist() == [4, 3]
    plain = demands([(0, 1), (1, 0)])
    assert subset(plain, np.array([1])).messages is None


@pytest.mark.parametrize(
    ("messages", "message"),
    [([1], "1 message counts for 2 flows"), ([1, 0], "a flow has 0 messages")],
)
def test_bad_message_counts_are_pattern_errors(messages, message):
    d = demands([(0, 1), (1, 0)])
    with pytest.raises(PatternError, match=message):
        Demands(
            d.src,
            d.dst,
            d.size_bytes,
            d.phase,
            d.src_rank,
            d.dst_rank,
            d.phase_labels,
            d.phase_repeat,
            messages=np.array(messages, dtype=np.int64),
        )


def test_model_doctests_pass():
    import doctest

    from sdnmpi.core.routing import model

    failed, tried = doctest.testmod(model)
    assert failed == 0 and tried > 0
