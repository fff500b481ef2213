"""MPI_Bcast algorithms, following MPICH 4.x (and Open MPI's linear and binomial ones).

* ``linear``: Open MPI's ``ompi_coll_base_bcast_intra_basic_linear``
  (``ompi/mca/coll/base/coll_base_bcast.c``): the root posts one ``isend`` of the
  whole buffer to every other rank at once and waits for all of them; the others
  receive from the root.  One step of ``p - 1`` messages, all leaving the root's
  link: ``(p - 1) * nbytes`` on it.  Open MPI 4.1's fixed rules pick it for 8-15
  ranks from 32 KiB up (``coll_tuned_decision_fixed.c``).
* ``ompi_binomial``: Open MPI's ``ompi_coll_base_bcast_intra_binomial`` as its
  fixed rules run it, with segment size 0: one segment, so
  ``ompi_coll_base_bcast_intra_generic`` has every rank, once it holds the buffer
  (the root at once, the others when their receive from the parent completes),
  post an ``isend`` of the whole buffer to **all** its children at once and wait
  for all of them.  The tree is ``ompi_coll_base_topo_build_bmtree``
  (``coll_base_topo.c``), not MPICH's: relative rank ``i``'s parent is ``i`` without
  its top bit, its children are ``i + 2^k`` for each ``2^k`` above that bit (the
  root's are ``1, 2, 4, ...``).  Step ``d`` carries the messages into the relative
  ranks with ``d`` bits set; a rank's sends are all in the step after its receive,
  so in the simulator's ``ranks`` mode they start together when that receive is done
  and share the rank's link.
  With ``k`` children a rank needs about ``k`` transfer times; on 20 ranks the
  path 0, 1, 3, 7, 15 takes ``5 + 4 + 3 + 1 = 13`` where MPICH's tree takes 5.
  Open MPI 4.1's fixed rules pick it for 16-31 ranks from 4 KiB to 1 MiB and for
  32-63 ranks below 2 KiB, among others.
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


def ompi_binomial(nprocs: int, count: int, root: int, type_bytes: int) -> Schedule:
    """Open MPI's unsegmented binomial tree: a rank sends to all its children at once.

    >>> s = ompi_binomial(6, 8, 0, 1)
    >>> [[(m.src, m.dst) for m in step.messages] for step in s.steps]
    [[(0, 1), (0, 2), (0, 4)], [(1, 3), (1, 5)]]
    """
    b = ScheduleBuilder(
        "bcast", "ompi_binomial", nprocs=nprocs, count=count, type_bytes=type_bytes, root=root
    )
    if count == 0:
        return b.build()
    level = [root]
    while level:
        sends = [(r, c) for r in level for c in bmtree_children(nprocs, r, root)]
        b.step("binomial tree, all children at once", [b.msg(r, c, [(0, count)]) for r, c in sends])
        level = [c for _, c in sends]
    return b.build()


def bmtree_children(nprocs: int, rank: int, root: int) -> tuple[int, ...]:
    """``rank``'s children in Open MPI's binomial tree, in the order it posts its sends.

    ``ompi_coll_base_topo_build_bmtree``: relative rank ``i = (rank - root) mod p``
    has the children ``i + 2^k`` for every power of two ``2^k`` above ``i``'s top
    bit with ``i + 2^k < p``, in increasing order, shifted back by ``root``.

    >>> bmtree_children(20, 0, 0), bmtree_children(20, 1, 0), bmtree_children(20, 5, 4)
    ((1, 2, 4, 8, 16), (3, 5, 9, 17), (7, 9, 13, 1))
    """
    i = (rank - root) % nprocs
    ks = range(i.bit_length(), nprocs.bit_length())
    return tuple((i + (1 << k) + root) % nprocs for k in ks if i + (1 << k) < nprocs)


def bmtree_parent(nprocs: int, rank: int, root: int) -> int | None:
    """``rank``'s parent in Open MPI's binomial tree (``None`` for the root).

    Relative rank ``i`` receives from ``i`` with its top bit cleared.

    >>> bmtree_parent(20, 19, 0), bmtree_parent(20, 1, 4), bmtree_parent(20, 4, 4)
    (3, 5, None)
    """
    i = (rank - root) % nprocs
    if i == 0:
        return None
    return (i - (1 << (i.bit_length() - 1)) + root) % nprocs


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
