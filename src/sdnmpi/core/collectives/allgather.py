"""MPI_Allgather algorithms, following MPICH 4.x; ``count`` is the per-rank block.

* ``recursive_doubling``: ``src/mpi/coll/allgather/allgather_intra_recursive_doubling.c``
  (Thakur, Rabenseifner & Gropp 2005, IJHPCA 19(1), section 4.1).  MPICH 4.x
  asserts a power-of-two communicator for this algorithm; for other sizes this
  module implements the general version described by Thakur et al. and kept in
  MPICH's source as an "experimental" branch: after each exchange whose partner
  subtree is incomplete, the processes that received the data forward it down a
  binomial tree to those that did not (extra "fix-up" steps).
* ``brucks``: ``allgather_intra_brucks.c`` (Bruck et al. 1997, "Efficient
  Algorithms for All-to-All Communications in Multiport Message-Passing
  Systems", IEEE TPDS 8(11)): ``floor(log2 p)`` steps in which each rank sends
  everything it has to ``rank - 2^k``, plus one step of ``p - pof2`` blocks when
  ``p`` is not a power of two.
* ``ring``: ``allgather_intra_ring.c``: ``p - 1`` steps, each rank forwards the
  block it received in the previous step to ``rank + 1``.

``MPI_Allgather`` returns early when the count is zero, so ``count == 0`` sends
nothing.
"""

from __future__ import annotations

from sdnmpi.core.collectives.blocks import rank_blocks, recursive_doubling_rounds
from sdnmpi.core.collectives.schedule import Message, Schedule, ScheduleBuilder


def recursive_doubling(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Recursive-doubling allgather (general version for any ``p``)."""
    del root  # rootless
    b = _builder("recursive_doubling", nprocs, count, type_bytes)
    if count == 0:
        return b.build()
    have = [count] * nprocs
    for label, transfers in recursive_doubling_rounds(nprocs, count, nprocs * count, have):
        b.step(label, [b.msg(s, d, [(lo, hi)]) for s, d, lo, hi in transfers])
    return b.build()


def brucks(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Bruck's allgather: ``ceil(log2 p)`` steps."""
    del root  # rootless
    b = _builder("brucks", nprocs, count, type_bytes)
    if count == 0:
        return b.build()
    pof2 = 1
    while pof2 <= nprocs // 2:
        b.step("bruck", _bruck_round(b, pof2, pof2))
        pof2 *= 2
    rem = nprocs - pof2
    if rem:
        b.step("bruck (remainder)", _bruck_round(b, pof2, rem))
    return b.build()


def _bruck_round(b: ScheduleBuilder, distance: int, nblocks: int) -> list[Message]:
    """Every rank sends its first ``nblocks`` blocks (its own, then the next) to rank - distance."""
    p, count = b.nprocs, b.count
    return [b.msg(r, (r - distance) % p, rank_blocks(r, nblocks, p, count)) for r in range(p)]


def ring(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Ring allgather: ``p - 1`` steps of one block per rank."""
    del root  # rootless
    b = _builder("ring", nprocs, count, type_bytes)
    if count == 0:
        return b.build()
    for i in range(1, nprocs):
        b.step(
            "ring",
            [
                b.msg(r, (r + 1) % nprocs, rank_blocks(r - (i - 1), 1, nprocs, count))
                for r in range(nprocs)
            ],
        )
    return b.build()


def _builder(algorithm: str, nprocs: int, count: int, type_bytes: int) -> ScheduleBuilder:
    return ScheduleBuilder(
        "allgather", algorithm, nprocs=nprocs, count=count, type_bytes=type_bytes
    )
