"""MPI_Scatter, binomial tree, following MPICH 4.x; ``count`` is the per-rank block.

``src/mpi/coll/scatter/scatter_intra_binomial.c`` (Thakur, Rabenseifner & Gropp
2005, IJHPCA 19(1), section 4.2): the root sends relative rank ``mask`` the
blocks of its subtree ``[mask, min(2 * mask, p))`` for decreasing ``mask``, and
every receiver does the same for its own subtree.  ``ceil(log2 p)`` steps; the
root sends ``(p - 1) * count`` elements.

``MPI_Scatter`` has no early return for a zero count and the binomial code sends
``curr_cnt - count * mask`` elements even when that is zero, so ``count == 0``
gives the same tree of zero-byte messages.
"""

from __future__ import annotations

from sdnmpi.core.collectives.blocks import pof2_ceil, rank_blocks
from sdnmpi.core.collectives.schedule import Schedule, ScheduleBuilder


def binomial(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Binomial-tree scatter from ``root``; one step per tree level (mask p/2, ..., 1)."""
    b = ScheduleBuilder(
        "scatter", "binomial", nprocs=nprocs, count=count, type_bytes=type_bytes, root=root
    )
    mask = pof2_ceil(nprocs) >> 1
    while mask > 0:
        b.step(
            "binomial tree",
            [
                b.msg(
                    (r + root) % nprocs,
                    (r + mask + root) % nprocs,
                    rank_blocks(r + mask + root, min(mask, nprocs - r - mask), nprocs, count),
                )
                for r in range(0, nprocs, 2 * mask)
                if r + mask < nprocs
            ],
        )
        mask >>= 1
    return b.build()
