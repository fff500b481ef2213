"""MPI_Reduce algorithms, following MPICH 4.x (commutative built-in operation).

* ``binomial``: ``src/mpi/coll/reduce/reduce_intra_binomial.c``.  Relative to the
  root, a process whose lowest set bit is ``mask`` sends its partial result to
  ``rank - mask`` after receiving from its children; ``ceil(log2 p)`` rounds,
  the whole vector per message (Thakur, Rabenseifner & Gropp 2005, IJHPCA
  19(1), section 4.4).  MPICH uses the root as tree root only for commutative
  operations; this module models the commutative case (MPI_SUM and friends).
* ``reduce_scatter_gather``: Rabenseifner's algorithm (Rabenseifner 2004,
  "Optimization of Collective Reduction Operations", ICCS; Thakur et al. 2005),
  ``reduce_intra_reduce_scatter_gather.c``: a recursive-halving reduce-scatter
  among ``pof2`` processes, then a binomial gather of the pieces to the root.  For
  a non-power-of-two ``p`` the first ``rem = p - pof2`` odd ranks first send
  their vector to ``rank - 1`` ("pre-step").  If the root is one of those odd
  ranks, rank 0 hands its reduced piece to the root, which then plays rank 0 in
  the gather.  MPICH asserts ``count >= pof2`` for this algorithm (its default
  selection never uses it otherwise); for smaller counts the schedule shows what
  the code sends without that assertion: the same rounds, some with zero-byte
  messages.

Zero-byte messages are kept: neither algorithm skips a send of zero elements,
and ``MPI_Reduce`` has no early return for ``count == 0`` (only for one process).
"""

from __future__ import annotations

from sdnmpi.core.collectives.blocks import Halving, displacements, even_split, pof2_floor
from sdnmpi.core.collectives.schedule import Schedule, ScheduleBuilder


def binomial(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Binomial-tree reduce to ``root``; one step per tree level (mask 1, 2, 4, ...)."""
    b = ScheduleBuilder(
        "reduce", "binomial", nprocs=nprocs, count=count, type_bytes=type_bytes, root=root
    )
    mask = 1
    while mask < nprocs:
        b.step(
            "binomial tree",
            [
                b.msg((r + root) % nprocs, (r - mask + root) % nprocs, [(0, count)], "reduce")
                for r in range(mask, nprocs, 2 * mask)
            ],
        )
        mask <<= 1
    return b.build()


def reduce_scatter_gather(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Rabenseifner's reduce: pre-step, recursive-halving reduce-scatter, binomial gather."""
    b = ScheduleBuilder(
        "reduce",
        "reduce_scatter_gather",
        nprocs=nprocs,
        count=count,
        type_bytes=type_bytes,
        root=root,
    )
    if nprocs == 1:
        return b.build()
    pof2 = pof2_floor(nprocs)
    rem = nprocs - pof2
    b.step(
        "pre-step",
        [b.msg(r, r - 1, [(0, count)], "reduce") for r in range(1, 2 * rem, 2)],
    )
    cnts = even_split(count, pof2)
    disps = displacements(cnts)
    halves = Halving(pof2, cnts, disps)
    real = _real_ranks(pof2, rem)
    for transfers in halves.reduce_scatter():
        b.step(
            "reduce-scatter",
            [b.msg(real[s], real[d], [(lo, hi)], "reduce") for s, d, lo, hi in transfers],
        )
    if root < 2 * rem and root % 2:
        b.step("root hand-off", [b.msg(0, root, [(0, cnts[0])])])
        real[0] = root
    newroot = _new_rank(root, rem) if not (root < 2 * rem and root % 2) else 0
    for transfers in halves.gather(newroot):
        b.step(
            "gather",
            [b.msg(real[s], real[d], [(lo, hi)]) for s, d, lo, hi in transfers],
        )
    return b.build()


def _real_ranks(pof2: int, rem: int) -> list[int]:
    """Real rank of each new rank in Rabenseifner's reduce (even ranks stay in)."""
    return [n * 2 if n < rem else n + rem for n in range(pof2)]


def _new_rank(rank: int, rem: int) -> int:
    return rank // 2 if rank < 2 * rem else rank - rem
