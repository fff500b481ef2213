"""verify(): it accepts correct schedules and pinpoints broken ones."""

from __future__ import annotations

import dataclasses

import pytest

from sdnmpi.core.collectives import expand
from sdnmpi.core.collectives.schedule import Message, Schedule, ScheduleBuilder, Step
from sdnmpi.core.collectives.verify import data_space, verify
from sdnmpi.errors import PatternError


def _with_step(s: Schedule, i: int, messages: tuple[Message, ...]) -> Schedule:
    steps = list(s.steps)
    steps[i] = Step(steps[i].label, messages)
    return dataclasses.replace(s, steps=tuple(steps))


def test_allreduce_steps_compute_the_reduction():
    for algorithm in ("recursive_doubling", "reduce_scatter_allgather", "ring"):
        verify(expand("allreduce", 12, 30, algorithm=algorithm))


def test_dropped_message_is_caught():
    s = expand("allreduce", 6, 10, algorithm="reduce_scatter_allgather")
    broken = _with_step(s, 2, s.steps[2].messages[1:])
    with pytest.raises(PatternError, match=r"final state wrong: rank \d holds \{"):
        verify(broken)


def test_duplicated_reduce_is_caught_as_double_counting():
    s = expand("allreduce", 8, 4, algorithm="recursive_doubling")
    first = s.steps[0].messages
    with pytest.raises(PatternError, match=r": 2"):
        verify(_with_step(s, 0, (*first, first[0])))


def test_dropped_forward_in_a_tree_is_caught_at_the_sender():
    s = expand("bcast", 8, 4, algorithm="binomial")
    # Without the root's first message, rank 4 has nothing to forward in step 2.
    with pytest.raises(
        PatternError,
        match=r"step 2/3 'binomial tree': rank 4 sends elements "
        r"\[0, 4\) to rank 6 but holds no data for elements \[0, 4\)",
    ):
        verify(_with_step(s, 0, ()))


def test_reduce_into_missing_data_is_caught():
    b = ScheduleBuilder("allgather", "bad", nprocs=2, count=2)
    b.step("oops", [b.msg(0, 1, [(0, 2)], "reduce")])
    with pytest.raises(
        PatternError, match=r"rank 1 reduces elements \[0, 2\) from rank 0 into data"
    ):
        verify(b.build())


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (Message(1, 1, ((0, 1),)), "rank 1 sends a message to itself"),
        (Message(0, 5, ((0, 1),)), "message 0 -> 5 names a rank outside 0..2"),
        (Message(0, 1, ((0, 4),)), r"sends elements \[0, 4\) to rank 1, outside the data space"),
        (Message(0, 1, ((0, 1),), "copy", 4), "has 4-byte elements, schedule uses 1"),
    ],
)
def test_malformed_messages_are_rejected(message, error):
    s = Schedule("bcast", "bad", 3, 3, root=0, steps=(Step("x", (message,)),))
    with pytest.raises(PatternError, match=error):
        verify(s)


def test_missing_final_data_is_reported():
    s = Schedule("allgather", "none", 3, 1, steps=())
    with pytest.raises(PatternError, match=r"rank 0 holds nothing for elements \[1, 2\)"):
        verify(s)


def test_wrong_block_delivered_is_caught():
    # scatter: rank 1 must end with block 1; sending it block 2 is wrong.
    b = ScheduleBuilder("scatter", "bad", nprocs=3, count=1, root=0)
    b.step("x", [b.msg(0, 1, [(2, 3)]), b.msg(0, 2, [(1, 2)])])
    with pytest.raises(PatternError, match=r"rank 1 holds nothing for elements \[1, 2\)"):
        verify(b.build())


def test_barrier_needs_every_arrival_to_reach_everyone():
    s = expand("barrier", 5, 0)
    verify(s)
    with pytest.raises(PatternError, match="final state wrong"):
        verify(dataclasses.replace(s, steps=s.steps[:-1]))


def test_byte_granular_bcast_space():
    s = expand("bcast", 4, 3, algorithm="scatter_ring_allgather", type_bytes=8)
    assert (s.unit_bytes, s.element_bytes, data_space(s)) == (1, 1, 24)
    verify(s)
