"""MPI_Reduce_scatter_block algorithms, following MPICH 4.x (commutative operation).

``count`` is the per-rank result block; every rank contributes ``p * count``
elements and rank ``r`` ends with the reduced block ``[r * count, (r + 1) * count)``.

* ``recursive_halving``:
  ``src/mpi/coll/reduce_scatter_block/reduce_scatter_block_intra_recursive_halving.c``
  (Thakur, Rabenseifner & Gropp 2005, IJHPCA 19(1), section 4.6): ``log2(pof2)``
  steps, the first between processes ``pof2 / 2`` apart, each halving the data.
  For a non-power-of-two ``p``, the even ranks below ``2 * rem`` first send their
  whole vector to ``rank + 1``, which then computes both ranks' blocks and sends
  the neighbour its block at the end.  Exchanges of zero elements are skipped,
  as in MPICH.
* ``pairwise``: ``reduce_scatter_block_intra_pairwise.c``: ``p - 1`` steps; in
  step ``i`` each rank sends ``rank + i`` its block and reduces the one from
  ``rank - i``.  The code has no zero-count shortcut, so ``count == 0`` keeps
  ``p - 1`` steps of zero-byte messages.

``recursive_halving`` returns at once when ``count == 0`` (as MPICH does).
"""

from __future__ import annotations

from sdnmpi.core.collectives.blocks import displacements, pof2_floor
from sdnmpi.core.collectives.schedule import Message, Schedule, ScheduleBuilder


def recursive_halving(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Recursive-halving reduce-scatter with the pre-/post-step for non-powers of two."""
    del root  # rootless
    b = _builder("recursive_halving", nprocs, count, type_bytes)
    if count == 0 or nprocs == 1:
        return b.build()
    pof2 = pof2_floor(nprocs)
    rem = nprocs - pof2
    total = [(0, nprocs * count)]
    b.step("pre-step", [b.msg(r, r + 1, total, "reduce") for r in range(0, 2 * rem, 2)])
    real = [n * 2 + 1 if n < rem else n + rem for n in range(pof2)]
    newcnts = [2 * count if real[n] < 2 * rem else count for n in range(pof2)]
    for msgs in _halving_rounds(b, real, newcnts):
        b.step("recursive halving", msgs)
    b.step(
        "post-step",
        [b.msg(r, r - 1, [((r - 1) * count, r * count)]) for r in range(1, 2 * rem, 2)],
    )
    return b.build()


def _halving_rounds(b: ScheduleBuilder, real: list[int], newcnts: list[int]) -> list[list[Message]]:
    """The halving exchanges among the ``pof2`` new ranks (distance ``pof2/2`` first)."""
    pof2 = len(real)
    newdisps = displacements(newcnts)
    send_idx, recv_idx, last_idx = [0] * pof2, [0] * pof2, [pof2] * pof2
    rounds = []
    mask = pof2 >> 1
    while mask > 0:
        msgs = []
        for n in range(pof2):
            if n < n ^ mask:
                send_idx[n] = recv_idx[n] + mask
                lo_idx, hi_idx = send_idx[n], last_idx[n]
            else:
                recv_idx[n] = send_idx[n] + mask
                lo_idx, hi_idx = send_idx[n], recv_idx[n]
            size = sum(newcnts[lo_idx:hi_idx])
            if size:
                lo = newdisps[lo_idx]
                msgs.append(b.msg(real[n], real[n ^ mask], [(lo, lo + size)], "reduce"))
        for n in range(pof2):
            send_idx[n] = recv_idx[n]
            last_idx[n] = recv_idx[n] + mask
        rounds.append(msgs)
        mask >>= 1
    return rounds


def pairwise(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Pairwise exchange: ``p - 1`` steps of one block per rank."""
    del root  # rootless
    b = _builder("pairwise", nprocs, count, type_bytes)
    for i in range(1, nprocs):
        msgs = []
        for r in range(nprocs):
            dst = (r + i) % nprocs
            msgs.append(b.msg(r, dst, [(dst * count, (dst + 1) * count)], "reduce"))
        b.step("pairwise exchange", msgs)
    return b.build()


def _builder(algorithm: str, nprocs: int, count: int, type_bytes: int) -> ScheduleBuilder:
    return ScheduleBuilder(
        "reduce_scatter", algorithm, nprocs=nprocs, count=count, type_bytes=type_bytes
    )
