"""MPI_Alltoall algorithms, following MPICH 4.x; ``count`` is the per-pair block.

Element block ``i * p + j`` (``count`` elements) is the data rank ``i`` sends to
rank ``j``.

* ``brucks``: ``src/mpi/coll/alltoall/alltoall_intra_brucks.c`` (Bruck et al.
  1997, IEEE TPDS 8(11); Thakur, Rabenseifner & Gropp 2005, section 4.3).  After a
  local rotation, position ``b`` of rank ``r`` holds the block for ``r + b``; in
  step ``k`` every rank sends the blocks at the positions with bit ``k`` set to
  ``rank + 2^k``.  ``ceil(log2 p)`` steps, ``(p/2) log2 p`` blocks per rank for
  a power of two.
* ``pairwise``: ``alltoall_intra_pairwise.c``: ``p - 1`` steps; partner
  ``rank ^ i`` for a power-of-two ``p``, else send to ``rank + i`` and receive
  from ``rank - i``.
* ``scattered``: ``alltoall_intra_scattered.c``: every rank posts nonblocking
  receives from ``rank + i`` and sends to ``rank - i`` in batches of
  ``MPIR_CVAR_ALLTOALL_THROTTLE`` (default 32; 0 means all at once) and waits for
  each batch; one step per batch.  The transfer a rank posts to itself in the
  first batch is a local copy, not a message.

``MPI_Alltoall`` returns early when the count is zero, so ``count == 0`` sends
nothing.
"""

from __future__ import annotations

from sdnmpi.core.collectives.blocks import is_pof2
from sdnmpi.core.collectives.schedule import Message, Schedule, ScheduleBuilder

#: MPIR_CVAR_ALLTOALL_THROTTLE default, MPICH 4.x.
ALLTOALL_THROTTLE = 32


def brucks(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Bruck's store-and-forward alltoall: ``ceil(log2 p)`` steps."""
    del root  # rootless
    b = _builder("brucks", nprocs, count, type_bytes)
    if count == 0:
        return b.build()
    pof2 = 1
    while pof2 < nprocs:
        positions = [pos for pos in range(1, nprocs) if pos & pof2]
        b.step(
            "bruck",
            [
                b.msg(r, (r + pof2) % nprocs, _bruck_blocks(b, r, pof2, positions))
                for r in range(nprocs)
            ],
        )
        pof2 *= 2
    return b.build()


def _bruck_blocks(
    b: ScheduleBuilder, rank: int, pof2: int, positions: list[int]
) -> list[tuple[int, int]]:
    """Element ranges at ``positions`` of ``rank`` before the step with distance ``pof2``.

    A block at position ``pos`` has moved by the bits of ``pos`` below ``pof2``
    so far, so it started at ``rank - (pos mod pof2)`` and is bound for
    ``origin + pos``.
    """
    p, count = b.nprocs, b.count
    out = []
    for pos in positions:
        origin = (rank - (pos & (pof2 - 1))) % p
        block = origin * p + (origin + pos) % p
        out.append((block * count, (block + 1) * count))
    return out


def pairwise(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Pairwise exchange: ``p - 1`` steps (XOR partners when ``p`` is a power of two)."""
    del root  # rootless
    b = _builder("pairwise", nprocs, count, type_bytes)
    if count == 0:
        return b.build()
    xor = is_pof2(nprocs)
    for i in range(1, nprocs):
        msgs = []
        for r in range(nprocs):
            dst = r ^ i if xor else (r + i) % nprocs
            block = r * nprocs + dst
            msgs.append(b.msg(r, dst, [(block * count, (block + 1) * count)]))
        b.step("pairwise exchange", msgs)
    return b.build()


def scattered(
    nprocs: int, count: int, root: int, type_bytes: int, throttle: int = ALLTOALL_THROTTLE
) -> Schedule:
    """Nonblocking sends and receives posted ``throttle`` at a time; one step per batch."""
    del root  # rootless
    b = _builder("scattered", nprocs, count, type_bytes)
    b.param("alltoall_throttle", throttle)
    if count == 0:
        return b.build()
    batch = throttle or nprocs
    for first in range(0, nprocs, batch):
        size = min(batch, nprocs - first)
        b.step("scattered batch", _scattered_batch(nprocs, count, type_bytes, first, size))
    return b.build()


def _scattered_batch(
    nprocs: int, count: int, type_bytes: int, first: int, size: int
) -> list[Message]:
    """Sends of one batch: rank ``r`` sends to ``r - k`` for ``k`` in ``[first, first + size)``.

    Built without :meth:`ScheduleBuilder.msg` because an alltoall over a thousand
    ranks has a million messages.
    """
    out = []
    for r in range(nprocs):
        base = r * nprocs
        for k in range(max(first, 1), first + size):
            dst = (r - k) % nprocs
            lo = (base + dst) * count
            out.append(Message(r, dst, ((lo, lo + count),), "copy", type_bytes))
    return out


def _builder(algorithm: str, nprocs: int, count: int, type_bytes: int) -> ScheduleBuilder:
    return ScheduleBuilder("alltoall", algorithm, nprocs=nprocs, count=count, type_bytes=type_bytes)
