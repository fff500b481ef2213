"""Which algorithm an MPI library picks by default, as data tables.

A :class:`Rule` is one row of a first-match table: it applies when every
condition it sets holds.  :func:`select_rule` returns the first applicable row of
the library's table for a call; :func:`select` returns its algorithm name (one of
:func:`sdnmpi.core.collectives.algorithms`).

Message sizes: ``message`` is ``count * type_bytes`` (the whole vector for
bcast/reduce/allreduce, one block for the blocked collectives, one pair's block
for alltoall); ``total`` is ``message * nprocs``.

MPICH 4.x (``library="mpich"``)
------------------------------
With the default ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM=auto``, MPICH 4.x does not use
the ``MPIR_*_intra_auto`` functions and their ``MPIR_CVAR_*_MSG_SIZE`` thresholds
of MPICH 3.x any more: it walks the collective-selection ("csel") decision tree
compiled in from ``maint/tuning/coll/mpir/generic.json`` (overridable with
``MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE``, default empty).  With ch4, the
device tree ``maint/tuning/coll/ch4/generic.json``
(``MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE``) first picks a "composition":
for a communicator with node hierarchy (``comm_hierarchy=parent``, as
MPI_COMM_WORLD over several nodes is by default) it chooses node-aware
compositions for bcast, reduce, allreduce and barrier, which this package does
not model; otherwise it forwards to the network module, which without offloaded
collectives ends in the MPIR tree.  The rows below transcribe the MPIR tree's
``comm_type=intra`` branches for a flat communicator, a commutative built-in
operation and a send buffer that is not ``MPI_IN_PLACE``; each row names its
JSON key and the MPICH 3.x CVAR whose default the threshold inherits (the JSON
tests ``<=`` where 3.x tested ``<``, and allreduce's short-message bound fell from
2048 to 8 bytes).  ``MPIR_CVAR_ALLTOALL_THROTTLE`` (32) and
``MPIR_CVAR_ALLGATHERV_PIPELINE_MSG_SIZE`` (32768) still shape the algorithms
themselves.  Evaluation details taken
from ``src/mpi/coll/src/csel.c``: ``avg_msg_size`` is the ``message`` size,
``total_msg_size`` the ``total`` size, ``count<pow2`` compares ``count`` with the
largest power of two ``<= nprocs``, and ``comm_size<N`` tests that are not pruned
when the communicator is created are evaluated as ``<=`` by
``MPIR_Csel_search`` (the alltoall tree tests ``is_sendbuf_inplace`` first, so
its ``comm_size<8`` really means ``nprocs <= 8``).

Open MPI 4.1 (``library="openmpi"``)
-----------------------------------
The ``coll/tuned`` fixed decision functions
(``ompi/mca/coll/tuned/coll_tuned_decision_fixed.c``), see
:mod:`sdnmpi.core.collectives.selection_openmpi`.

Left out: node-aware (SMP / hierarchical) algorithms, non-commutative and
user-defined operations, in-place alltoall (MPICH picks
``pairwise_sendrecv_replace``), intercommunicators, MPICH's ch4 shared-memory
and netmod-specific collectives, Open MPI's dynamic rule files, segment sizes and
tree fan-outs, and components other than ``coll/tuned`` (``coll/han``, ``coll/self``
for one process).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sdnmpi.core.collectives.blocks import is_pof2, pof2_floor
from sdnmpi.errors import PatternError

SizeMeasure = Literal["message", "total"]


@dataclass(frozen=True)
class Rule:
    """One row of a first-match selection table.

    ``min_procs <= nprocs``, ``nprocs < max_procs`` (``<=`` if ``procs_inclusive``),
    ``pof2`` (whether ``nprocs`` must or must not be a power of two), the ``size``
    measure ``< max_bytes`` (``<=`` if ``bytes_inclusive``), and
    ``count_below_pof2`` (``count < pof2_floor(nprocs)``) are conditions; ``None``
    means "any".  ``algorithm`` is ours; ``library_algorithm`` and
    ``library_algorithm_id`` name what the library runs.  ``approximated`` says
    that the library's algorithm is not one this package expands exactly and
    ``algorithm`` is the nearest one it has.
    """

    collective: str
    algorithm: str
    library: str
    library_algorithm: str
    library_algorithm_id: int | None = None
    min_procs: int = 1
    max_procs: int | None = None
    procs_inclusive: bool = False
    pof2: bool | None = None
    size: SizeMeasure = "message"
    max_bytes: int | None = None
    bytes_inclusive: bool = False
    count_below_pof2: bool | None = None
    approximated: bool = False
    source: str = ""

    def applies(self, nprocs: int, count: int, type_bytes: int) -> bool:
        """Whether every condition of the row holds for the call."""
        return (
            self._procs_ok(nprocs)
            and (self.pof2 is None or is_pof2(nprocs) == self.pof2)
            and self._bytes_ok(nprocs, count * type_bytes)
            and (
                self.count_below_pof2 is None
                or (count < pof2_floor(nprocs)) == self.count_below_pof2
            )
        )

    def _procs_ok(self, nprocs: int) -> bool:
        if nprocs < self.min_procs:
            return False
        if self.max_procs is None:
            return True
        return nprocs <= self.max_procs if self.procs_inclusive else nprocs < self.max_procs

    def _bytes_ok(self, nprocs: int, message: int) -> bool:
        if self.max_bytes is None:
            return True
        size = message * nprocs if self.size == "total" else message
        return size <= self.max_bytes if self.bytes_inclusive else size < self.max_bytes


def _mpich(collective: str, algorithm: str, function: str, source: str, **cond: Any) -> Rule:
    return Rule(collective, algorithm, "mpich", function, source=source, **cond)


_JSON = "maint/tuning/coll/mpir/generic.json, collective="

#: MPICH 4.x defaults for a flat intracommunicator (see the module docstring).
MPICH_RULES: tuple[Rule, ...] = (
    # bcast
    _mpich(
        "bcast",
        "binomial",
        "MPIR_Bcast_intra_binomial",
        f"{_JSON}bcast: comm_size<8 (3.x: MPIR_CVAR_BCAST_MIN_PROCS=8)",
        max_procs=8,
    ),
    _mpich(
        "bcast",
        "binomial",
        "MPIR_Bcast_intra_binomial",
        f"{_JSON}bcast: comm_size=pow2, avg_msg_size<=12288 "
        "(3.x: MPIR_CVAR_BCAST_SHORT_MSG_SIZE=12288, strict <)",
        pof2=True,
        max_bytes=12288,
        bytes_inclusive=True,
    ),
    _mpich(
        "bcast",
        "scatter_recursive_doubling_allgather",
        "MPIR_Bcast_intra_scatter_recursive_doubling_allgather",
        f"{_JSON}bcast: comm_size=pow2, avg_msg_size<=524288 "
        "(3.x: MPIR_CVAR_BCAST_LONG_MSG_SIZE=524288, strict <)",
        pof2=True,
        max_bytes=524288,
        bytes_inclusive=True,
    ),
    _mpich(
        "bcast",
        "scatter_ring_allgather",
        "MPIR_Bcast_intra_scatter_ring_allgather",
        f"{_JSON}bcast: comm_size=pow2, avg_msg_size=any",
        pof2=True,
    ),
    _mpich(
        "bcast",
        "binomial",
        "MPIR_Bcast_intra_binomial",
        f"{_JSON}bcast: comm_size=any, avg_msg_size<=12288",
        max_bytes=12288,
        bytes_inclusive=True,
    ),
    _mpich(
        "bcast",
        "scatter_ring_allgather",
        "MPIR_Bcast_intra_scatter_ring_allgather",
        f"{_JSON}bcast: comm_size=any, avg_msg_size=any",
    ),
    # allreduce
    Rule(
        "allreduce",
        "recursive_doubling",
        "mpich",
        "MPIR_Allreduce_intra_smp",
        max_bytes=0,
        bytes_inclusive=True,
        approximated=True,
        source=f"{_JSON}allreduce: avg_msg_size<=0, is_commutative=yes (on a flat "
        "communicator the SMP algorithm sends nothing)",
    ),
    _mpich(
        "allreduce",
        "recursive_doubling",
        "MPIR_Allreduce_intra_recursive_doubling",
        f"{_JSON}allreduce: avg_msg_size<=8 (3.x used MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE=2048)",
        max_bytes=8,
        bytes_inclusive=True,
    ),
    _mpich(
        "allreduce",
        "recursive_doubling",
        "MPIR_Allreduce_intra_recursive_doubling",
        f"{_JSON}allreduce: is_op_built_in=yes, count<pow2",
        count_below_pof2=True,
    ),
    _mpich(
        "allreduce",
        "reduce_scatter_allgather",
        "MPIR_Allreduce_intra_reduce_scatter_allgather",
        f"{_JSON}allreduce: is_op_built_in=yes, count=any",
    ),
    # reduce
    _mpich(
        "reduce",
        "binomial",
        "MPIR_Reduce_intra_binomial",
        f"{_JSON}reduce: avg_msg_size<=2048 (3.x: MPIR_CVAR_REDUCE_SHORT_MSG_SIZE=2048)",
        max_bytes=2048,
        bytes_inclusive=True,
    ),
    _mpich(
        "reduce",
        "binomial",
        "MPIR_Reduce_intra_binomial",
        f"{_JSON}reduce: is_op_built_in=yes, count<pow2",
        count_below_pof2=True,
    ),
    _mpich(
        "reduce",
        "reduce_scatter_gather",
        "MPIR_Reduce_intra_reduce_scatter_gather",
        f"{_JSON}reduce: is_op_built_in=yes, count=any",
    ),
    # allgather
    _mpich(
        "allgather",
        "recursive_doubling",
        "MPIR_Allgather_intra_recursive_doubling",
        f"{_JSON}allgather: comm_size=pow2, total_msg_size<524288 "
        "(3.x: MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE=524288)",
        pof2=True,
        size="total",
        max_bytes=524288,
    ),
    _mpich(
        "allgather",
        "ring",
        "MPIR_Allgather_intra_ring",
        f"{_JSON}allgather: comm_size=pow2, total_msg_size=any",
        pof2=True,
    ),
    _mpich(
        "allgather",
        "brucks",
        "MPIR_Allgather_intra_brucks",
        f"{_JSON}allgather: comm_size=any, total_msg_size<81920 "
        "(3.x: MPIR_CVAR_ALLGATHER_SHORT_MSG_SIZE=81920)",
        size="total",
        max_bytes=81920,
    ),
    _mpich(
        "allgather",
        "ring",
        "MPIR_Allgather_intra_ring",
        f"{_JSON}allgather: comm_size=any, total_msg_size=any",
    ),
    # alltoall
    _mpich(
        "alltoall",
        "scattered",
        "MPIR_Alltoall_intra_scattered",
        f"{_JSON}alltoall: is_sendbuf_inplace=no, comm_size<8 (searched as <=), "
        "avg_msg_size<=32768",
        max_procs=8,
        procs_inclusive=True,
        max_bytes=32768,
        bytes_inclusive=True,
    ),
    _mpich(
        "alltoall",
        "pairwise",
        "MPIR_Alltoall_intra_pairwise",
        f"{_JSON}alltoall: is_sendbuf_inplace=no, comm_size<8 (searched as <=), avg_msg_size=any",
        max_procs=8,
        procs_inclusive=True,
    ),
    _mpich(
        "alltoall",
        "brucks",
        "MPIR_Alltoall_intra_brucks",
        f"{_JSON}alltoall: comm_size=any, avg_msg_size<=256 "
        "(3.x: MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE=256)",
        max_bytes=256,
        bytes_inclusive=True,
    ),
    _mpich(
        "alltoall",
        "scattered",
        "MPIR_Alltoall_intra_scattered",
        f"{_JSON}alltoall: comm_size=any, avg_msg_size<=32768 "
        "(3.x: MPIR_CVAR_ALLTOALL_MEDIUM_MSG_SIZE=32768; MPIR_CVAR_ALLTOALL_THROTTLE=32)",
        max_bytes=32768,
        bytes_inclusive=True,
    ),
    _mpich(
        "alltoall",
        "pairwise",
        "MPIR_Alltoall_intra_pairwise",
        f"{_JSON}alltoall: comm_size=any, avg_msg_size=any",
    ),
    # gather, scatter
    _mpich("gather", "binomial", "MPIR_Gather_intra_binomial", f"{_JSON}gather: comm_type=intra"),
    _mpich(
        "scatter", "binomial", "MPIR_Scatter_intra_binomial", f"{_JSON}scatter: comm_type=intra"
    ),
    # reduce_scatter_block
    _mpich(
        "reduce_scatter",
        "recursive_halving",
        "MPIR_Reduce_scatter_block_intra_recursive_halving",
        f"{_JSON}reduce_scatter_block: is_commutative=yes, total_msg_size<524288 "
        "(3.x: MPIR_CVAR_REDSCAT_COMMUTATIVE_LONG_MSG_SIZE=524288)",
        size="total",
        max_bytes=524288,
    ),
    _mpich(
        "reduce_scatter",
        "pairwise",
        "MPIR_Reduce_scatter_block_intra_pairwise",
        f"{_JSON}reduce_scatter_block: is_commutative=yes, total_msg_size=any",
    ),
    # barrier
    _mpich(
        "barrier",
        "dissemination",
        "MPIR_Barrier_intra_k_dissemination",
        f"{_JSON}barrier: comm_hierarchy=any, k=2 (calls MPIR_Barrier_intra_dissemination)",
    ),
)


def rules(library: str) -> tuple[Rule, ...]:
    """The selection table of ``library`` (``"mpich"`` or ``"openmpi"``)."""
    if library == "mpich":
        return MPICH_RULES
    if library == "openmpi":
        from sdnmpi.core.collectives.selection_openmpi import OPENMPI_RULES

        return OPENMPI_RULES
    raise PatternError(f"unknown MPI library {library!r}; expected one of: mpich, openmpi")


def select_rule(
    collective: str, nprocs: int, count: int, type_bytes: int = 1, library: str = "mpich"
) -> Rule:
    """The first row of ``library``'s table that applies to the call."""
    table = [r for r in rules(library) if r.collective == collective]
    if not table:
        raise PatternError(f"{library}: no selection rules for collective {collective!r}")
    for rule in table:
        if rule.applies(nprocs, count, type_bytes):
            return rule
    raise PatternError(
        f"{library}: no rule for {collective} with nprocs={nprocs}, count={count}, "
        f"type_bytes={type_bytes}"
    )


def select(
    collective: str, nprocs: int, count: int, type_bytes: int = 1, library: str = "mpich"
) -> str:
    """Our name of the algorithm ``library`` uses by default for the call.

    >>> select("bcast", 16, 1024, 8)
    'binomial'
    >>> select("bcast", 16, 4096, 8)
    'scatter_recursive_doubling_allgather'
    """
    return select_rule(collective, nprocs, count, type_bytes, library).algorithm
