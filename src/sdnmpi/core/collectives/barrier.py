"""MPI_Barrier, dissemination algorithm, following MPICH 4.x.

``src/mpi/coll/barrier/barrier_intra_dissemination.c`` (Hensgen, Finkel & Manber
1988, "Two Algorithms for Barrier Synchronization", IJPP 17(1); Thakur,
Rabenseifner & Gropp 2005, section 4.7): in step ``k`` every rank sends a
zero-byte message to ``rank + 2^k`` and receives one from ``rank - 2^k``;
``ceil(log2 p)`` steps.  MPICH 4.x's default selects
``MPIR_Barrier_intra_k_dissemination`` with ``k = 2``
(``barrier_intra_k_dissemination.c``), which calls this algorithm.  A single
process returns at once.
"""

from __future__ import annotations

from sdnmpi.core.collectives.schedule import Schedule, ScheduleBuilder


def dissemination(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Dissemination barrier: ``ceil(log2 p)`` steps of zero-byte notifications."""
    del root  # rootless
    b = ScheduleBuilder(
        "barrier", "dissemination", nprocs=nprocs, count=count, type_bytes=type_bytes
    )
    mask = 1
    while mask < nprocs:
        b.step(
            "dissemination",
            [b.msg(r, (r + mask) % nprocs, [], "notify") for r in range(nprocs)],
        )
        mask <<= 1
    return b.build()
