"""Open MPI 4.1 ``coll/tuned`` fixed decision rules as a selection table.

Transcribed from ``ompi/mca/coll/tuned/coll_tuned_decision_fixed.c`` of the
v4.1 series (the switch points generated with the ompi-collectives-tuning
package, in effect since v4.1.0), commutative-operation branches.  Every decision
function there compares ``communicator_size`` against a ladder of upper bounds
and then a size in bytes, ``dsize * count`` with the count of the call
(``scount``/``rcount`` for the blocked collectives and alltoall), against another
ladder; all comparisons are strict ``<`` except the ``== 2`` special cases of
alltoall and allgather.  In this package's terms that size is
``count * type_bytes`` for every collective (the ``message`` measure of
:class:`~sdnmpi.core.collectives.selection.Rule`).

Open MPI's algorithms are numbered per collective as in its
``coll_tuned_<coll>_algorithm`` MCA parameters; :data:`ALGORITHMS` maps each to
our nearest algorithm and says whether the mapping is exact: ``approximated`` is
``False`` only where the expansion this package produces (which follows MPICH's
code, or Open MPI's where this package has it) sends the same messages as Open
MPI's implementation (recursive-doubling allreduce, Bruck allgather and alltoall,
recursive-doubling allgather on powers of two, ring allgather, the Bruck
(dissemination) barrier, the basic linear and binomial bcasts and the two-process
special cases).

Bcast: the fixed rules pass a segment size and fan-out of 0 to every algorithm
(``ompi_coll_tuned_bcast_intra_do_this(..., alg, 0, 0)``), so nothing is
segmented, and the tree algorithms run ``ompi_coll_base_bcast_intra_generic`` with
one segment: a rank sends the whole buffer to all its children at once.  The
binomial one (6) is expanded as itself (``ompi_binomial``, Open MPI's
``build_bmtree``).  The others stay ``approximated``: the binary tree (5,
``build_tree`` with fan-out 2) and the k-nomial tree (7, ``build_kmtree`` with
``coll_tuned_bcast_knomial_radix``, 4 by default) also send to all children at
once over trees of their own; chain (2, fan-out 0 raised to 1 by ``build_chain``)
and pipeline (3) are then both one unsegmented chain, root to relative rank 1 to 2
and so on, ``p - 1`` whole-buffer hops one after the other; split binary tree (4)
is only reached from 256 ranks.  Scatter-allgather (8) is MPICH's scheme but cuts
the buffer in elements, not bytes, and runs basic linear when ``count < p``.

Allgather: Open MPI's recursive doubling falls back to Bruck for a
non-power-of-two communicator (``coll_base_allgather.c``), so that row maps to
``brucks`` there.

Left out: non-commutative branches, ``coll_tuned_use_dynamic_rules`` files, the
segment sizes and fan-outs the fixed rules pass along, and ``coll/han``/``coll/self``.
"""

from __future__ import annotations

from dataclasses import replace

from sdnmpi.core.collectives.selection import Rule

_SOURCE = "Open MPI v4.1 ompi/mca/coll/tuned/coll_tuned_decision_fixed.c"

#: ``{collective: {open_mpi_id: (open_mpi_name, our_algorithm, approximated)}}``.
ALGORITHMS: dict[str, dict[int, tuple[str, str, bool]]] = {
    "allreduce": {
        1: ("basic_linear", "recursive_doubling", True),
        2: ("nonoverlapping", "recursive_doubling", True),
        3: ("recursive_doubling", "recursive_doubling", False),
        4: ("ring", "ring", True),
        5: ("segmented_ring", "ring", True),
        6: ("rabenseifner", "reduce_scatter_allgather", True),
    },
    "alltoall": {
        1: ("linear", "scattered", True),
        2: ("pairwise", "pairwise", True),
        3: ("modified_bruck", "brucks", False),
        4: ("linear_sync", "scattered", True),
        5: ("two_proc", "pairwise", False),
    },
    "allgather": {
        1: ("linear", "ring", True),
        2: ("bruck", "brucks", False),
        3: ("recursive_doubling", "recursive_doubling", False),
        4: ("ring", "ring", False),
        5: ("neighbor", "ring", True),
        6: ("two_proc", "ring", False),
    },
    "bcast": {
        1: ("basic_linear", "linear", False),
        2: ("chain", "scatter_ring_allgather", True),
        3: ("pipeline", "scatter_ring_allgather", True),
        4: ("split_binary_tree", "scatter_ring_allgather", True),
        5: ("binary_tree", "binomial", True),
        6: ("binomial", "ompi_binomial", False),
        7: ("knomial", "binomial", True),
        8: ("scatter_allgather", "scatter_recursive_doubling_allgather", True),
        9: ("scatter_allgather_ring", "scatter_ring_allgather", True),
    },
    "reduce": {
        1: ("linear", "binomial", True),
        2: ("chain", "binomial", True),
        3: ("pipeline", "binomial", True),
        4: ("binary", "binomial", True),
        5: ("binomial", "binomial", True),
        6: ("in-order_binary", "binomial", True),
        7: ("rabenseifner", "reduce_scatter_gather", True),
    },
    "reduce_scatter": {
        1: ("basic_linear", "recursive_halving", True),
        2: ("recursive_doubling", "recursive_halving", True),
        3: ("recursive_halving", "recursive_halving", True),
        4: ("butterfly", "recursive_halving", True),
    },
    "gather": {
        1: ("basic_linear", "binomial", True),
        2: ("binomial", "binomial", True),
        3: ("linear_sync", "binomial", True),
    },
    "scatter": {
        1: ("basic_linear", "binomial", True),
        2: ("binomial", "binomial", True),
        3: ("linear_nb", "binomial", True),
    },
    "barrier": {
        1: ("linear", "dissemination", True),
        2: ("double_ring", "dissemination", True),
        3: ("recursive_doubling", "dissemination", True),
        4: ("bruck", "dissemination", False),
        5: ("two_proc", "dissemination", False),
        6: ("tree", "dissemination", True),
    },
}

#: Per collective: ``((min_procs, max_procs), ((max_bytes, algorithm_id), ...))``,
#: first match; ``None`` bounds are open.  Straight from the decision functions.
Ladder = tuple[tuple[tuple[int, int | None], tuple[tuple[int | None, int], ...]], ...]

LADDERS: dict[str, Ladder] = {
    "allreduce": (
        ((1, 4), ((8, 4), (4096, 3), (8192, 4), (16384, 3), (65536, 4), (262144, 5), (None, 6))),
        ((1, 8), ((16, 4), (8192, 3), (None, 6))),
        ((1, 16), ((8192, 3), (None, 6))),
        ((1, 32), ((64, 5), (4096, 3), (None, 6))),
        ((1, 64), ((128, 5), (None, 6))),
        ((1, 128), ((262144, 3), (None, 6))),
        ((1, 256), ((131072, 2), (262144, 3), (None, 6))),
        ((1, 512), ((4096, 2), (None, 6))),
        ((1, 2048), ((2048, 2), (16384, 3), (None, 6))),
        ((1, 4096), ((2048, 2), (4096, 5), (16384, 3), (None, 6))),
        ((1, None), ((2048, 2), (16384, 5), (32768, 3), (None, 6))),
    ),
    "alltoall": (
        (
            (2, 3),
            (
                (2, 2),
                (4, 5),
                (16, 2),
                (64, 5),
                (256, 2),
                (4096, 5),
                (32768, 2),
                (262144, 4),
                (1048576, 5),
                (None, 2),
            ),
        ),
        ((1, 8), ((8192, 4), (16384, 1), (65536, 4), (524288, 1), (1048576, 2), (None, 1))),
        ((1, 16), ((262144, 4), (None, 1))),
        ((1, 32), ((4, 4), (512, 3), (8192, 4), (32768, 1), (262144, 4), (524288, 1), (None, 4))),
        ((1, 64), ((512, 3), (524288, 1), (None, 4))),
        ((1, 128), ((1024, 3), (2048, 1), (4096, 4), (262144, 1), (None, 2))),
        ((1, 256), ((1024, 3), (2048, 4), (262144, 1), (None, 2))),
        ((1, 512), ((1024, 3), (8192, 4), (32768, 1), (None, 2))),
        ((1, 1024), ((512, 3), (8192, 4), (16384, 1), (131072, 4), (262144, 1), (None, 2))),
        ((1, 2048), ((512, 3), (1024, 4), (2048, 1), (16384, 4), (262144, 1), (None, 4))),
        ((1, 4096), ((1024, 3), (4096, 4), (8192, 1), (131072, 4), (None, 1))),
        ((1, None), ((2048, 3), (8192, 4), (16384, 1), (32768, 4), (65536, 1), (None, 4))),
    ),
    "allgather": (
        ((2, 3), ((None, 6),)),
        ((1, 32), ((None, 3),)),
        ((1, 64), ((1024, 3), (65536, 5), (None, 4))),
        ((1, 128), ((512, 3), (65536, 5), (None, 4))),
        ((1, 256), ((512, 3), (131072, 5), (524288, 4), (1048576, 5), (None, 4))),
        (
            (1, 512),
            ((32, 3), (128, 2), (1024, 3), (131072, 5), (524288, 4), (1048576, 5), (None, 4)),
        ),
        ((1, 1024), ((64, 3), (256, 2), (2048, 3), (None, 5))),
        ((1, 2048), ((4, 3), (8, 2), (16, 3), (32, 2), (256, 3), (512, 2), (4096, 3), (None, 5))),
        ((1, 4096), ((32, 2), (128, 3), (512, 2), (4096, 3), (None, 5))),
        ((1, None), ((2, 3), (8, 2), (16, 3), (512, 2), (4096, 3), (None, 5))),
    ),
    "bcast": (
        (
            (1, 4),
            (
                (32, 3),
                (256, 5),
                (512, 3),
                (1024, 7),
                (32768, 1),
                (131072, 5),
                (262144, 2),
                (524288, 1),
                (1048576, 6),
                (None, 5),
            ),
        ),
        ((1, 8), ((64, 5), (128, 6), (2048, 5), (8192, 6), (1048576, 1), (None, 2))),
        ((1, 16), ((8, 7), (64, 5), (4096, 7), (16384, 5), (32768, 6), (None, 1))),
        ((1, 32), ((4096, 7), (1048576, 6), (None, 8))),
        ((1, 64), ((2048, 6), (None, 7))),
        ((1, 128), ((None, 7),)),
        ((1, 256), ((2, 6), (16384, 5), (32768, 1), (65536, 5), (None, 7))),
        ((1, 1024), ((16384, 7), (32768, 4), (None, 7))),
        ((1, 2048), ((524288, 7), (None, 8))),
        ((1, 4096), ((262144, 7), (None, 8))),
        ((1, None), ((8192, 7), (16384, 5), (262144, 7), (None, 8))),
    ),
    "reduce": (
        ((1, 4), ((8, 7), (16, 4), (32, 3), (262144, 1), (524288, 3), (1048576, 2), (None, 3))),
        ((1, 8), ((4096, 4), (65536, 2), (262144, 5), (524288, 1), (1048576, 5), (None, 1))),
        ((1, 16), ((8192, 4), (None, 5))),
        ((1, 32), ((4096, 4), (None, 5))),
        ((1, 256), ((None, 5),)),
        ((1, 512), ((8192, 5), (16384, 6), (None, 5))),
        ((1, 2048), ((None, 5),)),
        ((1, 4096), ((512, 5), (1024, 6), (8192, 5), (16384, 6), (None, 5))),
        ((1, None), ((16, 5), (32, 6), (1024, 5), (2048, 6), (8192, 5), (16384, 6), (None, 5))),
    ),
    "reduce_scatter": (
        (
            (1, 4),
            (
                (4, 2),
                (8, 4),
                (16, 3),
                (128, 4),
                (256, 3),
                (4096, 4),
                (8192, 3),
                (131072, 4),
                (None, 1),
            ),
        ),
        ((1, 8), ((8, 3), (32, 2), (256, 4), (8192, 3), (16384, 4), (1048576, 3), (None, 1))),
        ((1, 16), ((4, 1), (32, 3), (128, 4), (524288, 3), (4194304, 1), (None, 4))),
        ((1, 32), ((32, 1), (524288, 3), (2097152, 1), (4194304, 3), (None, 4))),
        ((1, None), ((4, 3), (16, 1), (65536, 4), (262144, 1), (None, 4))),
    ),
    "gather": (
        ((1, 4), ((2, 3), (4, 1), (32768, 2), (65536, 1), (131072, 2), (None, 3))),
        ((1, 8), ((1024, 2), (8192, 1), (32768, 2), (262144, 1), (None, 3))),
        ((1, 256), ((None, 2),)),
        ((1, 512), ((2048, 2), (8192, 1), (None, 2))),
        ((1, None), ((None, 2),)),
    ),
    "scatter": (
        ((1, 4), ((2, 3), (131072, 1), (262144, 3), (None, 1))),
        ((1, 8), ((2048, 2), (4096, 1), (8192, 2), (32768, 1), (1048576, 3), (None, 1))),
        ((1, 16), ((16384, 2), (1048576, 3), (None, 1))),
        ((1, 32), ((16384, 2), (32768, 1), (None, 3))),
        ((1, 64), ((512, 2), (8192, 3), (16384, 2), (None, 3))),
        ((1, None), ((512, 2), (None, 3))),
    ),
    "barrier": (
        ((1, 4), ((None, 3),)),
        ((1, 8), ((None, 1),)),
        ((1, 64), ((None, 3),)),
        ((1, 256), ((None, 4),)),
        ((1, 512), ((None, 6),)),
        ((1, 1024), ((None, 4),)),
        ((1, 4096), ((None, 6),)),
        ((1, None), ((None, 4),)),
    ),
}


def _rows(collective: str, ladder: Ladder) -> list[Rule]:
    out = []
    for (min_procs, max_procs), steps in ladder:
        for max_bytes, alg in steps:
            name, ours, approx = ALGORITHMS[collective][alg]
            base = Rule(
                collective,
                ours,
                "openmpi",
                name,
                alg,
                min_procs=min_procs,
                max_procs=max_procs,
                max_bytes=max_bytes,
                approximated=approx,
                source=f"{_SOURCE}: ompi_coll_tuned_{collective}_intra_dec_fixed",
            )
            out.extend(
                _split_rd_allgather(base) if (collective, alg) == ("allgather", 3) else [base]
            )
    return out


def _split_rd_allgather(rule: Rule) -> list[Rule]:
    """Open MPI's recursive doubling runs Bruck's algorithm on non-powers of two."""
    return [
        replace(rule, pof2=True),
        replace(
            rule,
            pof2=False,
            algorithm="brucks",
            library_algorithm="recursive_doubling (runs bruck: not a power of two)",
        ),
    ]


#: Open MPI 4.1 ``coll/tuned`` fixed rules, commutative operations.
OPENMPI_RULES: tuple[Rule, ...] = tuple(
    row for collective, ladder in LADDERS.items() for row in _rows(collective, ladder)
)
