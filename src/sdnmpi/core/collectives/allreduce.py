"""MPI_Allreduce algorithms, following MPICH 4.x (commutative built-in operation).

* ``recursive_doubling``: ``src/mpi/coll/allreduce/allreduce_intra_recursive_doubling.c``
  (Thakur, Rabenseifner & Gropp 2005, IJHPCA 19(1), section 4.5): ``log2(pof2)``
  exchanges of the whole vector among ``pof2`` processes.
* ``reduce_scatter_allgather``: Rabenseifner's algorithm (Rabenseifner 2004;
  Thakur et al. 2005), ``allreduce_intra_reduce_scatter_allgather.c``: a
  recursive-halving reduce-scatter then a recursive-doubling allgather of the
  ``pof2`` pieces (``count // pof2`` elements, one more for the first
  ``count % pof2``).  MPICH asserts ``count >= pof2``; smaller counts give the
  schedule the code would run without that assertion (zero-byte messages).
* ``ring``: ``allreduce_intra_ring.c`` (the bandwidth-optimal ring of Patarasuk &
  Yuan 2009, popularised by Baidu): ``p - 1`` ring reduce-scatter rounds over
  pieces of ``ceil(count / p)`` elements, then MPICH's ring allgatherv
  (``allgatherv_intra_ring.c``), which cuts pieces larger than
  ``MPIR_CVAR_ALLGATHERV_PIPELINE_MSG_SIZE`` (32768 bytes) into chunks.

Non-power-of-two ``p`` (first two algorithms): with ``rem = p - pof2``, the even
ranks below ``2 * rem`` send their vector to ``rank + 1`` ("pre-step") and get
the result back from it at the end ("post-step").

Zero-byte messages are kept: MPICH's allreduce has no early return for
``count == 0`` and these algorithms call ``MPIC_Sendrecv``/``MPIC_Isend`` with zero
counts (for example the empty ring pieces when ``count < p``).  The ring
allgatherv skips empty pieces, as MPICH does.
"""

from __future__ import annotations

from sdnmpi.core.collectives.blocks import (
    ALLGATHERV_PIPELINE_MSG_SIZE,
    Halving,
    ceil_split,
    displacements,
    even_split,
    pof2_floor,
    ring_allgatherv_rounds,
    ring_chunk_count,
)
from sdnmpi.core.collectives.schedule import Schedule, ScheduleBuilder


def recursive_doubling(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Recursive-doubling allreduce with the pre-/post-step for non-powers of two."""
    del root  # rootless
    b = _builder("recursive_doubling", nprocs, count, type_bytes)
    pof2 = pof2_floor(nprocs)
    rem = nprocs - pof2
    whole = [(0, count)]
    b.step("pre-step", [b.msg(r, r + 1, whole, "reduce") for r in range(0, 2 * rem, 2)])
    real = _real_ranks(pof2, rem)
    mask = 1
    while mask < pof2:
        b.step(
            "recursive doubling",
            [b.msg(real[n], real[n ^ mask], whole, "reduce") for n in range(pof2)],
        )
        mask <<= 1
    b.step("post-step", [b.msg(r, r - 1, whole) for r in range(1, 2 * rem, 2)])
    return b.build()


def reduce_scatter_allgather(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Rabenseifner's allreduce: recursive-halving reduce-scatter, recursive-doubling allgather."""
    del root  # rootless
    b = _builder("reduce_scatter_allgather", nprocs, count, type_bytes)
    pof2 = pof2_floor(nprocs)
    rem = nprocs - pof2
    whole = [(0, count)]
    b.step("pre-step", [b.msg(r, r + 1, whole, "reduce") for r in range(0, 2 * rem, 2)])
    real = _real_ranks(pof2, rem)
    cnts = even_split(count, pof2)
    halves = Halving(pof2, cnts, displacements(cnts))
    for transfers in halves.reduce_scatter():
        b.step(
            "reduce-scatter",
            [b.msg(real[s], real[d], [(lo, hi)], "reduce") for s, d, lo, hi in transfers],
        )
    for transfers in halves.allgather():
        b.step(
            "allgather",
            [b.msg(real[s], real[d], [(lo, hi)]) for s, d, lo, hi in transfers],
        )
    b.step("post-step", [b.msg(r, r - 1, whole) for r in range(1, 2 * rem, 2)])
    return b.build()


def ring(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Ring reduce-scatter (``p - 1`` steps) then MPICH's chunked ring allgatherv."""
    del root  # rootless
    b = _builder("ring", nprocs, count, type_bytes)
    b.param("allgatherv_pipeline_msg_size", ALLGATHERV_PIPELINE_MSG_SIZE)
    if nprocs == 1:
        return b.build()
    cnts = ceil_split(count, nprocs)
    displs = displacements(cnts)
    for i in range(nprocs - 1):
        msgs = []
        for r in range(nprocs):
            piece = (r - 1 - i) % nprocs
            lo = displs[piece]
            msgs.append(b.msg(r, (r + 1) % nprocs, [(lo, lo + cnts[piece])], "reduce"))
        b.step("reduce-scatter (ring)", msgs)
    chunk = ring_chunk_count(cnts, type_bytes)
    for transfers in ring_allgatherv_rounds(cnts, displs, chunk):
        b.step("allgather (ring)", [b.msg(s, d, [(lo, hi)]) for s, d, lo, hi in transfers])
    return b.build()


def _builder(algorithm: str, nprocs: int, count: int, type_bytes: int) -> ScheduleBuilder:
    return ScheduleBuilder(
        "allreduce", algorithm, nprocs=nprocs, count=count, type_bytes=type_bytes
    )


def _real_ranks(pof2: int, rem: int) -> list[int]:
    """Real rank of each new rank: odd ranks below ``2 * rem`` stay in, the rest shift."""
    return [n * 2 + 1 if n < rem else n + rem for n in range(pof2)]
