"""Open MPI's unsegmented binomial Bcast (``ompi_binomial``) against its tree rule.

The reference below transcribes the rule of ``ompi_coll_base_topo_build_bmtree``
(Open MPI 4.1, ``ompi/mca/coll/base/coll_base_topo.c``) step by step, as the C
loop computes it (next power of two by doubling, parent by XOR, children until one
falls outside the communicator), independently of the closed forms in ``bcast.py``.
"""

from __future__ import annotations

import pytest

from sdnmpi.core.collectives import expand
from sdnmpi.core.collectives.bcast import bmtree_children, bmtree_parent
from sdnmpi.core.collectives.verify import verify


def _next_pow2_above(value: int) -> int:
    """The smallest power of two strictly greater than ``value`` (1 for 0)."""
    power = 1
    while value > 0:
        value >>= 1
        power <<= 1
    return power


def _bmtree_reference(size: int, rank: int, root: int) -> tuple[int | None, list[int]]:
    """``(parent, children)`` of ``rank`` by the bmtree rule; the root has no parent."""
    index = rank - root
    if index < 0:
        index += size
    mask = _next_pow2_above(index)
    parent = None
    if rank != root:
        parent = (index ^ (mask >> 1)) + root
        if parent >= size:
            parent -= size
    children = []
    while mask < size:
        remote = index ^ mask
        if remote >= size:
            break
        remote += root
        if remote >= size:
            remote -= size
        children.append(remote)
        mask <<= 1
    return parent, children


def _cases() -> list[tuple[int, int]]:
    return [(p, r) for p in range(1, 41) for r in sorted({0, 1 % p, p // 2, p - 1})]


@pytest.mark.parametrize(("nprocs", "root"), _cases())
def test_tree_is_the_bmtree_rule(nprocs: int, root: int) -> None:
    for rank in range(nprocs):
        parent, children = _bmtree_reference(nprocs, rank, root)
        assert bmtree_parent(nprocs, rank, root) == parent, rank
        assert list(bmtree_children(nprocs, rank, root)) == children, rank


def test_hand_checked_trees() -> None:
    # 20 ranks, root 0: the root's children are the powers of two below 20; rank 1
    # (top bit 2^0) adds 2, 4, 8, 16; rank 3 (top bit 2^1) adds 4, 8, 16; rank 7
    # adds 8 (7 + 16 = 23 is out); 8 and 16 have none (8 + 16, 16 + 32 are out).
    assert bmtree_children(20, 0, 0) == (1, 2, 4, 8, 16)
    assert bmtree_children(20, 1, 0) == (3, 5, 9, 17)
    assert bmtree_children(20, 3, 0) == (7, 11, 19)
    assert bmtree_children(20, 7, 0) == (15,)
    assert bmtree_children(20, 8, 0) == bmtree_children(20, 16, 0) == ()
    # parents: clear the top bit (19 = 10011 -> 0011 = 3, 15 -> 7, 17 -> 1)
    assert [bmtree_parent(20, r, 0) for r in (19, 15, 17, 1, 0)] == [3, 7, 1, 0, None]
    # root 4: relative rank 1 is rank 5, its children relative 3, 5, 9, 17 are
    # ranks 7, 9, 13 and 21 - 20 = 1
    assert bmtree_children(20, 4, 4) == (5, 6, 8, 12, 0)
    assert bmtree_children(20, 5, 4) == (7, 9, 13, 1)
    assert bmtree_parent(20, 1, 4) == 5
    # 8 ranks, root 0: 0 -> 1, 2, 4; 1 -> 3, 5; 2 -> 6; 3 -> 7
    assert [bmtree_children(8, r, 0) for r in range(4)] == [(1, 2, 4), (3, 5), (6,), (7,)]


@pytest.mark.parametrize("nprocs", range(2, 34))
def test_every_rank_receives_the_whole_buffer_once_from_its_parent(nprocs: int) -> None:
    for root in sorted({0, nprocs // 3, nprocs - 1}):
        s = expand("bcast", nprocs, 7, algorithm="ompi_binomial", root=root, type_bytes=4)
        verify(s)
        assert s.bytes_received() == [0 if r == root else 28 for r in range(nprocs)]
        assert sorted(m.dst for m in s.messages()) == [r for r in range(nprocs) if r != root]
        assert all(m.segments == ((0, 7),) for m in s.messages())
        assert all(m.src == bmtree_parent(nprocs, m.dst, root) for m in s.messages())


@pytest.mark.parametrize("nprocs", range(2, 34))
def test_a_rank_sends_to_all_its_children_in_the_step_after_its_receive(nprocs: int) -> None:
    root = nprocs // 2
    s = expand("bcast", nprocs, 3, algorithm="ompi_binomial", root=root)
    received = {root: -1}
    for i, step in enumerate(s.steps):
        senders = {m.src for m in step.messages}
        assert all(received[r] == i - 1 for r in senders), i
        for r in senders:
            dsts = [m.dst for m in step.messages if m.src == r]
            assert dsts == list(bmtree_children(nprocs, r, root))
        received.update((m.dst, i) for m in step.messages)
    # one step per tree level: relative ranks with d bits set, d up to floor(log2 p)
    assert len(s.steps) == nprocs.bit_length() - 1


def test_nothing_to_send() -> None:
    assert expand("bcast", 7, 0, algorithm="ompi_binomial").steps == ()
    assert expand("bcast", 1, 5, algorithm="ompi_binomial").steps == ()
