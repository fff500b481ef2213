"""MPI_Bcast algorithms, following MPICH 4.x (and Open MPI's linear one).

* ``linear``: Open MPI's ``ompi_coll_base_bcast_intra_basic_linear``
  (``ompi/mca/coll/base/coll_base_bcast.c``): the root posts one ``isend`` of the
  whole buffer to every other rank at once and waits for all of them; the others
  receive from the root.  One step of ``p - 1`` messages, all leaving the root's
  link: ``(p - 1) * nbytes`` on it.  Open MPI 4.1's fixed rules pick it for 8-15
  ranks from 32 KiB up (``coll_tuned_decision_fixed.c``).
* ``binomial``: ``src/mpi/coll/bcast/bcast_intra_binomial.c``.  The root sends
  to relative rank ``2^k`` for decreasing ``k``; every receiver forwards to its
  own subtree.  ``ceil(log2 p)`` rounds, each non-root receives the whole buffer
  once (Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective
  Communication Operations in MPICH", IJHPCA 19(1), section 3).
* ``scatter_recursive_doubling_allgather`` and ``scatter_ring_allgather``: the
  long-message broadcast of Barnett et al. as described by Thakur et al. 2005:
  a binomial scatter (``MPII_Scatter_for_bcast`` in ``bcast_utils.c``) followed
  by a recursive-doubling (``bcast_intra_scatter_recursive_doubling_allgather.c``)
  or ring (``bcast_intra_scatter_ring_allgather.c``) allgather.

MPICH splits the buffer in **bytes**: ``nbytes = count * type_bytes`` is cut into
pieces of ``ceil(nbytes / p)`` bytes, so a piece may end inside an element.  The
scatter-allgather schedules therefore use byte segments (``unit_bytes=1``).
Relative rank ``r = (rank - root) mod p`` owns piece ``r``; high relative ranks
may own an empty piece.

Zero-byte messages: the scatter skips empty sends (MPICH tests ``send_size >
0``), but both allgathers call ``MPIC_Sendrecv`` even with a zero count, so those
zero-byte messages are kept.  ``count == 0`` or ``p == 1`` sends nothing.  The
recursive-doubling allgather for a non-power-of-two ``p`` is the fix-up branch
MPICH marks experimental (its default selection uses it only for powers of two).
"""

from __future__ import annotations

from sdnmpi.core.collectives.blocks import (
    Transfer,
    ceil_div,
    pof2_ceil,
    recursive_doubling_rounds,
)
from sdnmpi.core.collectives.schedule import Schedule, ScheduleBuilder


def binomial(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Binomial-tree broadcast (``bcast_intra_binomial.c``); one step per tree level."""
    b = ScheduleBuilder(
        "bcast", "binomial", nprocs=nprocs, count=count, type_bytes=type_bytes, root=root
    )
    if count == 0:
        return b.build()
    mask = pof2_ceil(nprocs) >> 1
    while mask > 0:
        b.step(
            "binomial tree",
            [
                b.msg((r + root) % nprocs, (r + mask + root) % nprocs, [(0, count)])
                for r in range(0, nprocs, 2 * mask)
                if r + mask < nprocs
            ],
        )
        mask >>= 1
    return b.build()


def linear(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """The root sends the whole buffer to every other rank at once (one step).

    >>> [(m.src, m.dst) for m in linear(4, 8, 1, 1).steps[0].messages]
    [(1, 0), (1, 2), (1, 3)]
    """
    b = ScheduleBuilder(
        "bcast", "linear", nprocs=nprocs, count=count, type_bytes=type_bytes, root=root
    )
    if count == 0:
        return b.build()
    b.step("linear", [b.msg(root, r, [(0, count)]) for r in range(nprocs) if r != root])
    return b.build()


def scatter_recursive_doubling_allgather(
    nprocs: int, count: int, root: int, type_bytes: int
) -> Schedule:
    """Binomial scatter, then recursive-doubling allgather of the byte pieces."""
    b = _byte_builder("scatter_recursive_doubling_allgather", nprocs, count, root, type_bytes)
    nbytes = count * type_bytes
    if nbytes == 0 or nprocs == 1:
        return b.build()
    piece = ceil_div(nbytes, nprocs)
    _add_rounds(b, root, scatter_rounds(nprocs, nbytes))
    have = [_piece_bytes(r, piece, nbytes) for r in range(nprocs)]
    for label, transfers in recursive_doubling_rounds(nprocs, piece, nbytes, have):
        _add_rounds(b, root, [(label, transfers)])
    return b.build()


def scatter_ring_allgather(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Binomial scatter, then a ring allgather of the byte pieces over ``p - 1`` steps."""
    b = _byte_builder("scatter_ring_allgather", nprocs, count, root, type_bytes)
    nbytes = count * type_bytes
    if nbytes == 0 or nprocs == 1:
        return b.build()
    piece = ceil_div(nbytes, nprocs)
    _add_rounds(b, root, scatter_rounds(nprocs, nbytes))
    for i in range(1, nprocs):
        msgs = []
        for rank in range(nprocs):
            rel = (rank - (i - 1) - root) % nprocs
            lo = rel * piece
            msgs.append(
                b.msg(rank, (rank + 1) % nprocs, [(lo, lo + _piece_bytes(rel, piece, nbytes))])
            )
        b.step("allgather (ring)", msgs)
    return b.build()


def scatter_rounds(nprocs: int, nbytes: int) -> list[tuple[str, list[Transfer]]]:
    """``MPII_Scatter_for_bcast`` over relative ranks: one round per binomial mask.

    Each subtree root sends the tail of what it holds (everything beyond its own
    ``mask`` pieces) to relative rank ``r + mask``; nothing is sent when that
    tail is empty.

    >>> scatter_rounds(4, 10)
    [('scatter', [(0, 2, 6, 10)]), ('scatter', [(0, 1, 3, 6), (2, 3, 9, 10)])]
    """
    piece = ceil_div(nbytes, nprocs)
    held = [0] * nprocs
    held[0] = nbytes
    rounds = []
    mask = pof2_ceil(nprocs) >> 1
    while mask > 0:
        transfers = []
        for r in range(0, nprocs, 2 * mask):
            tail = held[r] - piece * mask
            if r + mask < nprocs and tail > 0:
                lo = piece * (r + mask)
                transfers.append((r, r + mask, lo, lo + tail))
                held[r] -= tail
                held[r + mask] = tail
        rounds.append(("scatter", transfers))
        mask >>= 1
    return [(label, t) for label, t in rounds if t]


def _piece_bytes(rel: int, piece: int, nbytes: int) -> int:
    """Bytes of piece ``rel`` (the last pieces may be short or empty)."""
    return max(0, min(piece, nbytes - rel * piece))


def _byte_builder(
    algorithm: str, nprocs: int, count: int, root: int, type_bytes: int
) -> ScheduleBuilder:
    return ScheduleBuilder(
        "bcast",
        algorithm,
        nprocs=nprocs,
        count=count,
        type_bytes=type_bytes,
        root=root,
        unit_bytes=1,
    )


def _add_rounds(b: ScheduleBuilder, root: int, rounds: list[tuple[str, list[Transfer]]]) -> None:
    """Append relative-rank rounds as steps, shifting ranks by ``root``."""
    p = b.nprocs
    for label, transfers in rounds:
        b.step(
            label,
            [b.msg((s + root) % p, (d + root) % p, [(lo, hi)]) for s, d, lo, hi in transfers],
        )
