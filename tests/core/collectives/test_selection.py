"""Selection tables at their thresholds (MPICH 4.x csel JSON, Open MPI 4.1 tuned)."""

from __future__ import annotations

import pytest

from sdnmpi.core.collectives import COLLECTIVES, algorithms
from sdnmpi.core.collectives.selection import MPICH_RULES, rules, select, select_rule
from sdnmpi.core.collectives.selection_openmpi import ALGORITHMS, OPENMPI_RULES
from sdnmpi.errors import PatternError


@pytest.mark.parametrize(
    ("collective", "nprocs", "count", "type_bytes", "expected"),
    [
        # bcast: comm_size<8 -> binomial, whatever the size
        ("bcast", 7, 1 << 20, 1, "binomial"),
        ("bcast", 8, 12288, 1, "binomial"),  # avg_msg_size<=12288 (inclusive)
        ("bcast", 8, 12289, 1, "scatter_recursive_doubling_allgather"),
        ("bcast", 16, 524288, 1, "scatter_recursive_doubling_allgather"),  # <=524288
        ("bcast", 16, 524289, 1, "scatter_ring_allgather"),
        ("bcast", 12, 12288, 1, "binomial"),
        ("bcast", 12, 12289, 1, "scatter_ring_allgather"),  # not pof2: ring at once
        ("bcast", 16, 1536, 8, "binomial"),  # 12288 bytes
        # allreduce: <=8 bytes RD, count < pof2 RD, else Rabenseifner
        ("allreduce", 16, 0, 8, "recursive_doubling"),  # SMP row, approximated
        ("allreduce", 16, 1, 8, "recursive_doubling"),
        ("allreduce", 16, 9, 1, "recursive_doubling"),  # 9 < pof2 = 16
        ("allreduce", 16, 16, 1, "reduce_scatter_allgather"),
        ("allreduce", 20, 15, 4, "recursive_doubling"),  # pof2(20) = 16
        ("allreduce", 20, 16, 4, "reduce_scatter_allgather"),
        # reduce: <=2048 bytes binomial, count < pof2 binomial, else Rabenseifner
        ("reduce", 32, 256, 8, "binomial"),
        ("reduce", 32, 257, 8, "reduce_scatter_gather"),
        ("reduce", 4096, 2049, 1, "binomial"),  # 2049 < 4096
        # allgather: total = count * type * p
        ("allgather", 16, 32767, 1, "recursive_doubling"),  # 524272 < 524288
        ("allgather", 16, 32768, 1, "ring"),
        ("allgather", 10, 8191, 1, "brucks"),  # 81910 < 81920
        ("allgather", 10, 8192, 1, "ring"),
        # alltoall: comm_size<8 is searched as <= 8 (MPIR_Csel_search)
        ("alltoall", 8, 1, 1, "scattered"),
        ("alltoall", 8, 32769, 1, "pairwise"),
        ("alltoall", 9, 256, 1, "brucks"),
        ("alltoall", 9, 257, 1, "scattered"),
        ("alltoall", 9, 32768, 1, "scattered"),
        ("alltoall", 9, 32769, 1, "pairwise"),
        # reduce_scatter_block: total < 524288
        ("reduce_scatter", 8, 65535, 1, "recursive_halving"),
        ("reduce_scatter", 8, 65536, 1, "pairwise"),
        ("gather", 100, 1 << 20, 1, "binomial"),
        ("scatter", 100, 1 << 20, 1, "binomial"),
        ("barrier", 100, 0, 1, "dissemination"),
    ],
)
def test_mpich_thresholds(collective, nprocs, count, type_bytes, expected):
    assert select(collective, nprocs, count, type_bytes) == expected


def test_mpich_rows_name_their_json_source_and_only_smp_is_approximated():
    assert all("generic.json" in r.source for r in MPICH_RULES)
    approx = [r.library_algorithm for r in MPICH_RULES if r.approximated]
    assert approx == ["MPIR_Allreduce_intra_smp"]
    assert select_rule("alltoall", 8, 1).procs_inclusive


@pytest.mark.parametrize(
    ("collective", "nprocs", "nbytes", "alg_id", "expected", "approximated"),
    [
        ("allreduce", 12, 8191, 3, "recursive_doubling", False),
        ("allreduce", 12, 8192, 6, "reduce_scatter_allgather", True),
        ("allreduce", 16, 63, 5, "ring", True),
        ("allreduce", 3, 7, 4, "ring", True),
        ("allreduce", 200, 131071, 2, "recursive_doubling", True),
        ("alltoall", 2, 1, 2, "pairwise", True),
        ("alltoall", 2, 2, 5, "pairwise", False),
        ("alltoall", 1, 1, 4, "scattered", True),  # 1 != 2, 1 < 8
        ("alltoall", 20, 511, 3, "brucks", False),
        ("alltoall", 20, 512, 4, "scattered", True),
        ("allgather", 2, 100, 6, "ring", False),
        ("allgather", 16, 100, 3, "recursive_doubling", False),
        ("allgather", 24, 100, 3, "brucks", False),  # Open MPI falls back to Bruck
        ("allgather", 40, 1023, 3, "brucks", False),
        ("allgather", 40, 1024, 5, "ring", True),
        ("bcast", 16, 4095, 7, "binomial", True),
        # 8 ranks fall in the fixed rules' communicator_size < 16 branch
        ("bcast", 8, 32767, 6, "ompi_binomial", False),
        ("bcast", 8, 32768, 1, "linear", False),
        ("bcast", 8, 1 << 20, 1, "linear", False),
        ("bcast", 7, 1 << 20, 2, "scatter_ring_allgather", True),  # < 8: chain
        # 16-31 ranks: binomial (unsegmented, Open MPI's tree) from 4 KiB below 1 MiB
        ("bcast", 20, 4095, 7, "binomial", True),
        ("bcast", 20, 4096, 6, "ompi_binomial", False),
        ("bcast", 20, (1 << 20) - 1, 6, "ompi_binomial", False),
        ("bcast", 20, 1 << 20, 8, "scatter_recursive_doubling_allgather", True),
        ("reduce", 3, 7, 7, "reduce_scatter_gather", True),
        ("reduce", 64, 100, 5, "binomial", True),
        ("reduce_scatter", 40, 70000, 1, "recursive_halving", True),
        ("gather", 5000, 1, 2, "binomial", True),
        ("scatter", 100, 511, 2, "binomial", True),
        ("barrier", 100, 0, 4, "dissemination", False),
        ("barrier", 5000, 0, 4, "dissemination", False),
        ("barrier", 300, 0, 6, "dissemination", True),
        ("barrier", 600, 0, 4, "dissemination", False),
    ],
)
def test_openmpi_thresholds(collective, nprocs, nbytes, alg_id, expected, approximated):
    rule = select_rule(collective, nprocs, nbytes, 1, "openmpi")
    assert rule.library_algorithm_id == alg_id
    assert rule.algorithm == expected
    assert rule.approximated is approximated
    assert rule.library_algorithm == ALGORITHMS[collective][alg_id][0] or alg_id == 3


@pytest.mark.parametrize("library", ["mpich", "openmpi"])
def test_every_row_names_an_algorithm_we_implement(library):
    for rule in rules(library):
        assert rule.algorithm in algorithms(rule.collective), rule


@pytest.mark.parametrize("library", ["mpich", "openmpi"])
def test_tables_cover_every_call(library):
    for collective in COLLECTIVES:
        for p in (1, 2, 3, 8, 9, 64, 100, 1024, 5000):
            for nbytes in (0, 1, 255, 4096, 1 << 20, 1 << 26):
                count = 0 if collective == "barrier" else nbytes
                assert select(collective, p, count, 1, library) in algorithms(collective)


def test_openmpi_table_size_and_errors():
    assert len(OPENMPI_RULES) > 200
    with pytest.raises(PatternError, match="unknown MPI library 'intel'"):
        select("bcast", 4, 1, library="intel")
    with pytest.raises(PatternError, match="no selection rules for collective 'scan'"):
        select("scan", 4, 1)
