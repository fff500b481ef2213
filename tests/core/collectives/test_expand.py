"""expand(): API contract, exhaustive symbolic verification, hand-derived schedules."""

from __future__ import annotations

import doctest
import importlib

import pytest

from sdnmpi.core.collectives import COLLECTIVES, ROOTED, algorithms, expand
from sdnmpi.core.collectives.schedule import Schedule
from sdnmpi.core.collectives.verify import verify
from sdnmpi.errors import PatternError

ALL = [(c, a) for c in COLLECTIVES for a in algorithms(c)]


def _counts(p: int) -> list[int]:
    return sorted({0, 1, 3, max(p - 1, 0), 2 * p + 1})


def _roots(collective: str, p: int) -> list[int]:
    return sorted({0, p // 2, p - 1}) if collective in ROOTED else [0]


def _cases(collective: str, p: int) -> list[tuple[int, int, int]]:
    """(count, root, type_bytes) combinations swept for one process count."""
    counts = [0] if collective == "barrier" else _counts(p)
    # Only the scatter-allgather broadcasts split bytes; the others scale with type_bytes.
    sizes = (1, 8) if collective == "bcast" else (1,)
    return [(n, r, tb) for n in counts for r in _roots(collective, p) for tb in sizes]


def _show(s: Schedule) -> list[tuple[str, list[tuple[int, int, tuple[tuple[int, int], ...]]]]]:
    return [(st.label, [(m.src, m.dst, m.segments) for m in st.messages]) for st in s.steps]


# -- API ---------------------------------------------------------------------------


def test_collectives_and_algorithms_listed():
    assert COLLECTIVES == (
        "bcast",
        "reduce",
        "allreduce",
        "allgather",
        "alltoall",
        "gather",
        "scatter",
        "reduce_scatter",
        "barrier",
    )
    assert algorithms("bcast") == (
        "binomial",
        "scatter_recursive_doubling_allgather",
        "scatter_ring_allgather",
        "linear",
        "ompi_binomial",
    )
    assert algorithms("alltoall") == ("brucks", "pairwise", "scattered")


def test_unknown_collective_lists_valid_ones():
    with pytest.raises(PatternError, match=r"unknown collective 'allgatherv'; valid: bcast, "):
        expand("allgatherv", 4, 1)
    with pytest.raises(PatternError, match="unknown collective"):
        algorithms("scan")


def test_unknown_algorithm_lists_valid_ones():
    with pytest.raises(PatternError, match=r"unknown algorithm 'ring'; valid: binomial, scatter_"):
        expand("bcast", 4, 1, algorithm="ring")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nprocs": 0, "count": 1}, "nprocs must be >= 1, got 0"),
        ({"nprocs": 4, "count": -1}, "count must be >= 0, got -1"),
        ({"nprocs": 4, "count": 1, "root": 4}, "root 4 out of range for 4 processes"),
        ({"nprocs": 4, "count": 1, "root": -1}, "root must be >= 0"),
        ({"nprocs": 4, "count": 1, "type_bytes": 0}, "type_bytes must be >= 1"),
        ({"nprocs": 4.0, "count": 1}, "nprocs must be an integer"),
        ({"nprocs": True, "count": 1}, "nprocs must be an integer"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    with pytest.raises(PatternError, match=message):
        expand("bcast", **kwargs)


def test_barrier_rejects_a_count_and_unknown_library():
    with pytest.raises(PatternError, match="barrier: count must be 0"):
        expand("barrier", 4, 3)
    with pytest.raises(PatternError, match="unknown MPI library 'lam'"):
        expand("bcast", 4, 1, library="lam")


def test_default_algorithm_comes_from_selection():
    assert expand("bcast", 16, 1024, type_bytes=8).algorithm == "binomial"
    assert expand("bcast", 16, 4096, type_bytes=8).algorithm == (
        "scatter_recursive_doubling_allgather"
    )
    assert expand("allgather", 12, 1000, type_bytes=8).algorithm == "ring"
    assert expand("allreduce", 64, 100, library="openmpi").algorithm == "recursive_doubling"


def test_default_selection_is_recorded_in_params():
    assert expand("bcast", 16, 8).params == (("approximated", 0),)
    s = expand("allreduce", 300, 10, library="openmpi")
    assert s.algorithm == "recursive_doubling"
    assert s.params == (("approximated", 1), ("openmpi_algorithm", 2))  # nonoverlapping
    assert expand("bcast", 16, 8, algorithm="binomial").params == ()


def test_library_is_validated_even_with_an_explicit_algorithm():
    with pytest.raises(PatternError, match="unknown MPI library"):
        expand("bcast", 4, 1, algorithm="binomial", library="mvapich")


def test_rootless_schedules_have_no_root_and_rooted_keep_it():
    assert expand("allreduce", 4, 4, root=3).root is None
    assert expand("reduce", 4, 4, root=3).root == 3


def test_doctests_pass():
    for name in (
        "blocks",
        "bcast",
        "schedule",
        "selection",
        "verify",
    ):
        module = importlib.import_module(f"sdnmpi.core.collectives.{name}")
        failed, _ = doctest.testmod(module)
        assert failed == 0, name
    failed, _ = doctest.testmod(importlib.import_module("sdnmpi.core.collectives"))
    assert failed == 0


# -- exhaustive symbolic verification ---------------------------------------------


@pytest.mark.parametrize(("collective", "algorithm"), ALL)
def test_every_algorithm_computes_its_collective(collective, algorithm):
    """nprocs 1..33, several roots and counts (0, 1, 3, p-1, 2p+1), type sizes 1 and 8."""
    for p in range(1, 34):
        for count, root, tb in _cases(collective, p):
            s = expand(collective, p, count, algorithm=algorithm, root=root, type_bytes=tb)
            verify(s)
            assert all(m.src != m.dst for m in s.messages())


@pytest.mark.parametrize(("collective", "algorithm"), ALL)
def test_single_process_sends_nothing(collective, algorithm):
    count = 0 if collective == "barrier" else 5
    assert expand(collective, 1, count, algorithm=algorithm).steps == ()


@pytest.mark.parametrize(
    ("collective", "algorithm"),
    [
        ("bcast", "binomial"),
        ("bcast", "scatter_ring_allgather"),
        ("allgather", "recursive_doubling"),
        ("allgather", "brucks"),
        ("allgather", "ring"),
        ("alltoall", "brucks"),
        ("alltoall", "pairwise"),
        ("alltoall", "scattered"),
        ("gather", "binomial"),
        ("reduce_scatter", "recursive_halving"),
    ],
)
def test_zero_count_sends_nothing_where_mpich_returns_early(collective, algorithm):
    assert expand(collective, 7, 0, algorithm=algorithm).steps == ()


@pytest.mark.parametrize(
    ("collective", "algorithm", "steps"),
    [
        ("reduce", "binomial", 3),
        ("allreduce", "recursive_doubling", 4),  # pre-step, 2 exchanges, post-step
        ("allreduce", "ring", 6),  # ring reduce-scatter only; the allgatherv skips empties
        ("scatter", "binomial", 3),
        ("reduce_scatter", "pairwise", 6),
    ],
)
def test_zero_count_keeps_the_zero_byte_messages_mpich_sends(collective, algorithm, steps):
    s = expand(collective, 7, 0, algorithm=algorithm)
    assert len(s.steps) == steps
    assert s.total_bytes == 0
    assert all(m.segments == () for m in s.messages())


# -- hand-derived schedules ---------------------------------------------------------


def test_scatter_ring_bcast_splits_bytes_like_mpich():
    # p=4, root=1, count=5 elements of 2 bytes: nbytes=10, piece=ceil(10/4)=3 bytes.
    # Relative rank r (actual (r+1)%4) owns bytes [3r, 3r+3) cut at 10: rel3 owns [9,10).
    # Scatter, mask 2: rel0 holds 10, sends the tail 10-3*2=4 bytes [6,10) to rel2.
    # Mask 1: rel0 holds 6, sends 6-3=3 bytes [3,6) to rel1; rel2 holds 4, sends
    # 4-3=1 byte [9,10) to rel3.  Ring step i: rank r sends piece rel (r-(i-1)-root)%4.
    s = expand("bcast", 4, 5, algorithm="scatter_ring_allgather", root=1, type_bytes=2)
    assert s.unit_bytes == 1
    assert _show(s) == [
        ("scatter", [(1, 3, ((6, 10),))]),
        ("scatter", [(1, 2, ((3, 6),)), (3, 0, ((9, 10),))]),
        ("allgather (ring)", [(0, 1, ((9, 10),)), (1, 2, ((0, 3),)), (2, 3, ((3, 6),)),
                              (3, 0, ((6, 9),))]),
        ("allgather (ring)", [(0, 1, ((6, 9),)), (1, 2, ((9, 10),)), (2, 3, ((0, 3),)),
                              (3, 0, ((3, 6),))]),
        ("allgather (ring)", [(0, 1, ((3, 6),)), (1, 2, ((6, 9),)), (2, 3, ((9, 10),)),
                              (3, 0, ((0, 3),))]),
    ]  # fmt: skip
    assert s.to_pattern().phases[0].total_bytes == 4


def test_scatter_recursive_doubling_bcast_non_power_of_two_fixups():
    # p=5, root=2, nbytes=12, piece=3; rel4 owns nothing.  Exchanges at masks 1, 2, 4;
    # at mask 4 rel4 sends its 0 bytes to rel0, and the fix-up tree of MPICH's
    # experimental branch forwards that (empty) receipt: rel0->rel2, then rel0->rel1,
    # rel2->rel3, all zero-byte MPIC_Send calls.
    algorithm = "scatter_recursive_doubling_allgather"
    s = expand("bcast", 5, 3, algorithm=algorithm, root=2, type_bytes=4)
    assert _show(s) == [
        ("scatter", [(2, 4, ((6, 12),))]),
        ("scatter", [(2, 3, ((3, 6),)), (4, 0, ((9, 12),))]),
        ("allgather", [(2, 3, ((0, 3),)), (3, 2, ((3, 6),)), (4, 0, ((6, 9),)),
                       (0, 4, ((9, 12),))]),
        ("allgather", [(2, 4, ((0, 6),)), (3, 0, ((0, 6),)), (4, 2, ((6, 12),)),
                       (0, 3, ((6, 12),))]),
        ("allgather", [(2, 1, ((0, 12),)), (1, 2, ())]),
        ("allgather fix-up", [(2, 4, ())]),
        ("allgather fix-up", [(2, 3, ()), (4, 0, ())]),
    ]  # fmt: skip


def test_rabenseifner_allreduce_six_processes():
    # p=6: pof2=4, rem=2.  Pre-step: even ranks 0, 2 send to 1, 3.  New ranks 0..3 are
    # real 1, 3, 4, 5; cnts = [3, 3, 2, 2], disps = [0, 3, 6, 8].
    # Mask 1: new 0 keeps pieces 0-1 and sends pieces 2-3 = [6,10) to new 1, which
    # sends [0,6).  Mask 2: new 0 keeps piece 0, sends piece 1 = [3,6) to new 2 ...
    # The allgather replays the halving backwards; the post-step copies the result.
    s = expand("allreduce", 6, 10, algorithm="reduce_scatter_allgather")
    assert _show(s) == [
        ("pre-step", [(0, 1, ((0, 10),)), (2, 3, ((0, 10),))]),
        ("reduce-scatter", [(1, 3, ((6, 10),)), (3, 1, ((0, 6),)), (4, 5, ((6, 10),)),
                            (5, 4, ((0, 6),))]),
        ("reduce-scatter", [(1, 4, ((3, 6),)), (3, 5, ((8, 10),)), (4, 1, ((0, 3),)),
                            (5, 3, ((6, 8),))]),
        ("allgather", [(1, 4, ((0, 3),)), (3, 5, ((6, 8),)), (4, 1, ((3, 6),)),
                       (5, 3, ((8, 10),))]),
        ("allgather", [(1, 3, ((0, 6),)), (3, 1, ((6, 10),)), (4, 5, ((0, 6),)),
                       (5, 4, ((6, 10),))]),
        ("post-step", [(1, 0, ((0, 10),)), (3, 2, ((0, 10),))]),
    ]  # fmt: skip
    assert [m.op for m in s.steps[1].messages] == ["reduce"] * 4
    assert [m.op for m in s.steps[3].messages] == ["copy"] * 4


def test_rabenseifner_reduce_with_an_excluded_odd_root():
    # p=7, root=3: pof2=4, rem=3; odd ranks 1, 3, 5 send to 0, 2, 4 and drop out.
    # New ranks 0..3 are real 0, 2, 4, 6; cnts = [2, 2, 2, 1].  The root (3) was
    # excluded, so rank 0 hands it piece 0 and the root plays new rank 0 in the gather.
    s = expand("reduce", 7, 7, algorithm="reduce_scatter_gather", root=3)
    assert _show(s) == [
        ("pre-step", [(1, 0, ((0, 7),)), (3, 2, ((0, 7),)), (5, 4, ((0, 7),))]),
        ("reduce-scatter", [(0, 2, ((4, 7),)), (2, 0, ((0, 4),)), (4, 6, ((4, 7),)),
                            (6, 4, ((0, 4),))]),
        ("reduce-scatter", [(0, 4, ((2, 4),)), (2, 6, ((6, 7),)), (4, 0, ((0, 2),)),
                            (6, 2, ((4, 6),))]),
        ("root hand-off", [(0, 3, ((0, 2),))]),
        ("gather", [(4, 3, ((2, 4),)), (6, 2, ((6, 7),))]),
        ("gather", [(2, 3, ((4, 7),))]),
    ]  # fmt: skip


def test_ring_allreduce_allgatherv_pipeline_chunks():
    # p=3, count=30000 doubles: pieces of 10000 elements = 80000 bytes > 32768, so the
    # allgatherv sends 32768/8 = 4096-element chunks: 4096, 4096, 1808 per piece,
    # two pieces per rank -> 6 allgather steps.
    s = expand("allreduce", 3, 30000, algorithm="ring", type_bytes=8)
    gather = [st for st in s.steps if st.label == "allgather (ring)"]
    assert len(gather) == 6
    sizes = [m.elements for m in (st.messages[0] for st in gather)]
    assert sizes == [4096, 4096, 1808, 4096, 4096, 1808]
    assert ("allgatherv_pipeline_msg_size", 32768) in s.params
    verify(s)


def test_scattered_alltoall_batches_by_throttle():
    s = expand("alltoall", 70, 1, algorithm="scattered")
    assert [len(st.messages) for st in s.steps] == [70 * 31, 70 * 32, 70 * 6]
    assert ("alltoall_throttle", 32) in s.params
    # Batch 0 of rank 5: sends to 5-1, 5-2, ..., 5-31 (mod 70); the self-send is local.
    assert [m.dst for m in s.steps[0].messages if m.src == 5][:3] == [4, 3, 2]
