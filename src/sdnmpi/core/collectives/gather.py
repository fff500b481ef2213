"""MPI_Gather, binomial tree, following MPICH 4.x; ``count`` is the per-rank block.

``src/mpi/coll/gather/gather_intra_binomial.c`` (Thakur, Rabenseifner & Gropp
2005, IJHPCA 19(1), section 4.2): relative to the root, a process whose lowest
set bit is ``mask`` sends everything its subtree gathered, the blocks of
relative ranks ``[r, min(r + mask, p))``, to ``r - mask``.  ``ceil(log2 p)``
steps; the root receives ``(p - 1) * count`` elements.  MPICH's temporary-buffer
and derived-datatype variants (``MPIR_CVAR_GATHER_VSMALL_MSG_SIZE``) change only
local copies, not what travels.

``MPI_Gather`` returns early when the count is zero, so ``count == 0`` sends
nothing.
"""

from __future__ import annotations

from sdnmpi.core.collectives.blocks import rank_blocks
from sdnmpi.core.collectives.schedule import Schedule, ScheduleBuilder


def binomial(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Binomial-tree gather to ``root``; one step per tree level (mask 1, 2, 4, ...)."""
    b = ScheduleBuilder(
        "gather", "binomial", nprocs=nprocs, count=count, type_bytes=type_bytes, root=root
    )
    if count == 0:
        return b.build()
    mask = 1
    while mask < nprocs:
        b.step(
            "binomial tree",
            [
                b.msg(
                    (r + root) % nprocs,
                    (r - mask + root) % nprocs,
                    rank_blocks(r + root, min(mask, nprocs - r), nprocs, count),
                )
                for r in range(mask, nprocs, 2 * mask)
            ],
        )
        mask <<= 1
    return b.build()
