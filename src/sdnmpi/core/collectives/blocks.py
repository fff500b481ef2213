"""Index arithmetic and data-movement rounds shared by several MPICH algorithms.

The functions here are pure: they take process counts, element counts and
block layouts, and return plain numbers or lists of transfers
``(src, dst, lo, hi)`` (half-open element range ``[lo, hi)``).  Algorithm modules
turn transfers into :class:`~sdnmpi.core.collectives.schedule.Message` values.

Two building blocks are used by more than one collective:

* :func:`recursive_doubling_rounds`: the recursive-doubling allgather of
  Thakur, Rabenseifner & Gropp (2005, section 4.1) including its logarithmic
  "haves send to havenots" fix-up for a non-power-of-two number of processes,
  as written in MPICH's ``allgather_intra_recursive_doubling.c`` and
  ``bcast_intra_scatter_recursive_doubling_allgather.c`` (the branch MPICH
  marks experimental).
* :func:`ring_allgatherv_rounds`: MPICH's ``allgatherv_intra_ring.c`` with its
  chunked pipeline (``MPIR_CVAR_ALLGATHERV_PIPELINE_MSG_SIZE``), used by the ring
  allreduce.
* :class:`Halving`: the recursive-halving reduce-scatter over ``pof2`` pieces of
  Rabenseifner's algorithm (Rabenseifner 2004) with MPICH's ``send_idx``/
  ``recv_idx``/``last_idx`` bookkeeping, followed by either a recursive-doubling
  allgather (allreduce) or a binomial gather (reduce).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sdnmpi.core.collectives.schedule import Segment

#: ``(src, dst, lo, hi)``: a transfer of elements ``[lo, hi)``; ``lo == hi`` is a
#: zero-byte message that the algorithm still sends.
Transfer = tuple[int, int, int, int]

#: MPIR_CVAR_ALLGATHERV_PIPELINE_MSG_SIZE default (bytes), MPICH 4.x.
ALLGATHERV_PIPELINE_MSG_SIZE = 32768


def pof2_floor(n: int) -> int:
    """The largest power of two ``<= n`` (MPICH's ``comm_ptr->pof2``).

    >>> [pof2_floor(n) for n in (1, 2, 3, 7, 8, 9)]
    [1, 2, 2, 4, 8, 8]
    """
    return 1 << (n.bit_length() - 1)


def pof2_ceil(n: int) -> int:
    """The smallest power of two ``>= n``.

    >>> [pof2_ceil(n) for n in (1, 2, 3, 5, 8)]
    [1, 2, 4, 8, 8]
    """
    return 1 << (n - 1).bit_length()


def is_pof2(n: int) -> bool:
    """Whether ``n`` is a power of two.

    >>> is_pof2(8), is_pof2(12)
    (True, False)
    """
    return n > 0 and n & (n - 1) == 0


def ceil_log2(n: int) -> int:
    """``ceil(log2(n))`` for ``n >= 1``.

    >>> [ceil_log2(n) for n in (1, 2, 3, 4, 5, 33)]
    [0, 1, 2, 2, 3, 6]
    """
    return (n - 1).bit_length()


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ``a >= 0, b > 0``.

    >>> ceil_div(10, 4), ceil_div(8, 4), ceil_div(0, 3)
    (3, 2, 0)
    """
    return -(-a // b)


def even_split(count: int, parts: int) -> list[int]:
    """MPICH's ``cnts`` array: ``count // parts`` each, one more for the first ``count % parts``.

    >>> even_split(10, 4)
    [3, 3, 2, 2]
    >>> even_split(2, 4)
    [1, 1, 0, 0]
    """
    base, extra = divmod(count, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def ceil_split(count: int, parts: int) -> list[int]:
    """The ring allreduce's split: ``ceil(count / parts)`` each until the data runs out.

    >>> ceil_split(10, 4)
    [3, 3, 3, 1]
    >>> ceil_split(3, 4)
    [1, 1, 1, 0]
    >>> ceil_split(5, 4)
    [2, 2, 1, 0]
    """
    size = ceil_div(count, parts)
    return [max(0, min(size, count - i * size)) for i in range(parts)]


def displacements(counts: Sequence[int]) -> list[int]:
    """Exclusive prefix sums of ``counts``.

    >>> displacements([3, 3, 2, 2])
    [0, 3, 6, 8]
    """
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out


def rank_blocks(first: int, nblocks: int, nprocs: int, block: int) -> list[Segment]:
    """Element ranges of the blocks of ranks ``first, first+1, ... (mod nprocs)``.

    Block ``r`` is ``[r * block, (r + 1) * block)``; consecutive blocks merge, so
    the result has one range, or two when the rank sequence wraps around.

    >>> rank_blocks(2, 3, 4, 10)
    [(20, 40), (0, 10)]
    >>> rank_blocks(0, 4, 4, 5)
    [(0, 20)]
    """
    if nblocks <= 0:
        return []
    first %= nprocs
    head = min(nblocks, nprocs - first)
    out = [(first * block, (first + head) * block)]
    if nblocks > head:
        out.append((0, (nblocks - head) * block))
    return out


# -- recursive-doubling allgather ------------------------------------------------


def recursive_doubling_rounds(
    nprocs: int, block: int, total: int, have: Sequence[int]
) -> list[tuple[str, list[Transfer]]]:
    """Rounds of the recursive-doubling allgather over relative ranks ``0..nprocs-1``.

    Relative rank ``r`` starts with ``have[r]`` units at offset ``r * block`` (a
    prefix of its block; the data ends at ``total``).  In the round with distance
    ``mask``, ``r`` exchanges everything it holds (``curr`` units starting at its
    subtree root) with ``r ^ mask``; a zero-unit exchange is still a message, as
    in MPICH's ``MPIC_Sendrecv``.  When the partner subtree is cut short by a
    non-power-of-two ``nprocs``, processes that received send the data down a
    binomial tree to those that did not ("fix-up" rounds, one per ``tmp_mask``).

    Returns ``(stage, transfers)`` per round, in relative ranks.
    """
    curr = list(have)
    last = [0] * nprocs
    rounds: list[tuple[str, list[Transfer]]] = []
    mask, i = 1, 0
    while mask < nprocs:
        rounds.append(("allgather", _exchange(nprocs, mask, i, block, curr, last)))
        rounds.extend(_fixups(nprocs, mask, i, block, curr, last))
        mask <<= 1
        i += 1
    return [(label, t) for label, t in rounds if t]


def _exchange(
    nprocs: int, mask: int, i: int, block: int, curr: list[int], last: list[int]
) -> list[Transfer]:
    transfers = []
    sent = list(curr)
    for r in range(nprocs):
        dst = r ^ mask
        if dst < nprocs:
            lo = (r >> i << i) * block
            transfers.append((r, dst, lo, lo + sent[r]))
            last[dst] = sent[r]
            curr[dst] += sent[r]
    return transfers


def _fixups(
    nprocs: int, mask: int, i: int, block: int, curr: list[int], last: list[int]
) -> list[tuple[str, list[Transfer]]]:
    """The non-power-of-two fix-up rounds that follow the exchange at ``mask``."""
    lacking = [r for r in range(nprocs) if ((r ^ mask) >> i << i) + mask > nprocs]
    if not lacking:
        return []
    rounds = []
    tmp_mask, k = mask >> 1, i
    while tmp_mask:
        transfers = []
        for r in lacking:
            my_root = r >> i << i
            done = nprocs - my_root - mask
            tree_root = r >> k << k
            dst = r ^ tmp_mask
            if dst > r and r < tree_root + done <= dst:
                lo = (my_root + mask) * block
                transfers.append((r, dst, lo, lo + last[r]))
        for _, dst, lo, hi in transfers:
            last[dst] = hi - lo
            curr[dst] += hi - lo
        rounds.append(("allgather fix-up", transfers))
        tmp_mask >>= 1
        k -= 1
    return rounds


# -- chunked ring allgatherv ------------------------------------------------------


def ring_chunk_count(counts: Sequence[int], type_bytes: int) -> int:
    """Elements per message of MPICH 4.x's ring allgatherv.

    The pipeline chunks blocks into ``PIPELINE_MSG_SIZE / type_bytes`` elements only
    when the largest block exceeds ``MPIR_CVAR_ALLGATHERV_PIPELINE_MSG_SIZE``
    bytes; otherwise a block travels whole.

    >>> ring_chunk_count([10, 10], 8)
    10
    >>> ring_chunk_count([10000, 9999], 8)
    4096
    """
    biggest = max(counts)
    if biggest * type_bytes > ALLGATHERV_PIPELINE_MSG_SIZE:
        return max(1, ALLGATHERV_PIPELINE_MSG_SIZE // type_bytes)
    return biggest


def ring_allgatherv_rounds(
    counts: Sequence[int], displs: Sequence[int], chunk: int
) -> list[list[Transfer]]:
    """Loop iterations of MPICH's ring allgatherv; iteration ``t`` of every rank is round ``t``.

    Each rank forwards blocks ``rank, rank-1, ...`` to ``rank+1`` in chunks of at
    most ``chunk`` elements; a zero-size block costs an iteration without a
    message.  Every rank walks the same block sequence as its left neighbour
    (shifted by one block), so iteration ``t``'s receive at ``r`` matches
    iteration ``t``'s send at ``r - 1``.
    """
    nprocs = len(counts)
    total = sum(counts)
    if total == 0 or nprocs == 1:
        return []
    per_rank = [_ring_sends(r, counts, displs, chunk, total) for r in range(nprocs)]
    depth = max(len(sends) for sends in per_rank)
    rounds: list[list[Transfer]] = [[] for _ in range(depth)]
    for r, sends in enumerate(per_rank):
        for t, (lo, hi) in enumerate(sends):
            if hi > lo:
                rounds[t].append((r, (r + 1) % nprocs, lo, hi))
    return rounds


def _ring_sends(
    rank: int, counts: Sequence[int], displs: Sequence[int], chunk: int, total: int
) -> list[tuple[int, int]]:
    """What ``rank`` sends in each loop iteration (``(lo, lo)`` when it sends nothing)."""
    nprocs = len(counts)
    left, right = (rank - 1) % nprocs, (rank + 1) % nprocs
    tosend, torecv = total - counts[right], total - counts[rank]
    sidx, ridx, soff, roff = rank, left, 0, 0
    out = []
    while tosend or torecv:
        sendnow = min(chunk, counts[sidx] - soff) if tosend else 0
        recvnow = min(chunk, counts[ridx] - roff) if torecv else 0
        lo = displs[sidx] + soff
        out.append((lo, lo + sendnow))
        tosend -= sendnow
        torecv -= recvnow
        soff += sendnow
        roff += recvnow
        if soff == counts[sidx]:
            soff, sidx = 0, (sidx - 1) % nprocs
        if roff == counts[ridx]:
            roff, ridx = 0, (ridx - 1) % nprocs
    return out


# -- Rabenseifner's recursive halving ----------------------------------------------


@dataclass
class Halving:
    """Recursive halving / doubling over ``pof2`` new ranks with MPICH's index bookkeeping.

    ``cnts``/``disps`` split the vector into ``pof2`` pieces.  Each new rank keeps
    ``send_idx``, ``recv_idx`` and ``last_idx`` as in MPICH's
    ``*_reduce_scatter_*.c`` files; :meth:`reduce_scatter` leaves them in the
    state the following gather/allgather starts from.
    """

    pof2: int
    cnts: list[int]
    disps: list[int]

    def __post_init__(self) -> None:
        self.send_idx = [0] * self.pof2
        self.recv_idx = [0] * self.pof2
        self.last_idx = [self.pof2] * self.pof2

    def span(self, lo_idx: int, hi_idx: int) -> tuple[int, int]:
        """Element range of pieces ``[lo_idx, hi_idx)``."""
        lo = self.disps[lo_idx] if lo_idx < self.pof2 else self.disps[-1] + self.cnts[-1]
        return lo, lo + sum(self.cnts[lo_idx:hi_idx])

    def reduce_scatter(self) -> list[list[Transfer]]:
        """Rounds of the reduce-scatter (distance 1, 2, 4, ...), in new ranks."""
        rounds = []
        mask = 1
        while mask < self.pof2:
            transfers = [self._halve(n, mask) for n in range(self.pof2)]
            mask <<= 1
            for n in range(self.pof2):
                self.send_idx[n] = self.recv_idx[n]
                if mask < self.pof2:
                    self.last_idx[n] = self.recv_idx[n] + self.pof2 // mask
            rounds.append(transfers)
        return rounds

    def _halve(self, n: int, mask: int) -> Transfer:
        dst = n ^ mask
        half = self.pof2 // (mask * 2)
        if n < dst:
            self.send_idx[n] = self.recv_idx[n] + half
            lo, hi = self.span(self.send_idx[n], self.last_idx[n])
        else:
            self.recv_idx[n] = self.send_idx[n] + half
            lo, hi = self.span(self.send_idx[n], self.recv_idx[n])
        return n, dst, lo, hi

    def allgather(self) -> list[list[Transfer]]:
        """Rounds of the recursive-doubling allgather that follows :meth:`reduce_scatter`."""
        rounds = []
        mask = self.pof2 >> 1
        while mask > 0:
            moves = [self._double(n, mask) for n in range(self.pof2)]
            rounds.append([(n, n ^ mask, lo, hi) for n, (lo, hi) in enumerate(moves)])
            for n in range(self.pof2):
                if n > n ^ mask:
                    self.send_idx[n] = self.recv_idx[n]
            mask >>= 1
        return rounds

    def gather(self, newroot: int) -> list[list[Transfer]]:
        """Rounds of the binomial gather to ``newroot`` that follows :meth:`reduce_scatter`."""
        rounds = []
        active = set(range(self.pof2))
        mask, j = self.pof2 >> 1, self.pof2.bit_length() - 2
        while mask > 0:
            transfers = []
            for n in sorted(active):
                lo, hi = self._double(n, mask)
                dst = n ^ mask
                if dst >> j == newroot >> j:
                    transfers.append((n, dst, lo, hi))
                    active.discard(n)
                elif n > dst:
                    self.send_idx[n] = self.recv_idx[n]
            rounds.append(transfers)
            mask >>= 1
            j -= 1
        return rounds

    def _double(self, n: int, mask: int) -> tuple[int, int]:
        """Update ``n``'s indices for distance ``mask``; return the range ``n`` sends."""
        dst = n ^ mask
        half = self.pof2 // (mask * 2)
        if n < dst:
            if mask != self.pof2 // 2:
                self.last_idx[n] += half
            self.recv_idx[n] = self.send_idx[n] + half
            return self.span(self.send_idx[n], self.recv_idx[n])
        self.recv_idx[n] = self.send_idx[n] - half
        return self.span(self.send_idx[n], self.last_idx[n])
