"""Schedules: the exact messages an MPI collective algorithm sends, step by step.

A :class:`Schedule` is what an algorithm module returns.  Each :class:`Step` is a
set of messages that the algorithm issues concurrently (one round of
send/recv or sendrecv); a message carries *element segments* of the collective's
data space, so a schedule can be executed symbolically
(:mod:`sdnmpi.core.collectives.verify`) to prove that it computes the collective,
and converted to a :class:`~sdnmpi.core.pattern.Pattern` (one phase per step) for
routing and simulation.

Data spaces (elements of ``type_bytes`` bytes each; ``count`` is the MPI count):

=================  ==========================  ====================================
collective         element space               meaning of element ``e``
=================  ==========================  ====================================
bcast              ``count``                   the root's buffer
reduce, allreduce  ``count``                   every rank's vector (reduced)
reduce_scatter     ``nprocs * count``          block ``r`` is rank ``r``'s result
allgather, gather  ``nprocs * count``          block ``r`` is rank ``r``'s data
scatter            ``nprocs * count``          block ``r`` goes to rank ``r``
alltoall           ``nprocs * nprocs * count`` block ``i*nprocs+j`` goes i -> j
barrier            ``nprocs``                  "rank r has arrived"
=================  ==========================  ====================================

Some algorithms split the buffer at byte granularity rather than at element
boundaries (MPICH's scatter-allgather broadcasts divide ``count * type_bytes``
bytes into ``ceil(nbytes / nprocs)``-byte pieces).  Their schedules set
``unit_bytes=1``: segments then index bytes and the data space is scaled by
``type_bytes / unit_bytes`` (:attr:`Schedule.element_bytes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from sdnmpi.core.pattern import Pattern, Phase, reserve_cells, uncharged
from sdnmpi.errors import PatternError

#: How the receiver treats the elements of a message.
#: ``copy``: store the sender's values; ``reduce``: combine them with its own;
#: ``notify``: a zero-byte synchronization message (barrier), the receiver learns
#: everything the sender knows.
MessageOp = Literal["copy", "reduce", "notify"]

Segment = tuple[int, int]  # half-open element range [lo, hi)


@dataclass(frozen=True, slots=True)
class Message:
    """One point-to-point message of a collective algorithm.

    Slotted: a 1024-rank alltoall holds a million of them.
    """

    src: int
    dst: int
    segments: tuple[Segment, ...]
    op: MessageOp = "copy"
    type_bytes: int = 1

    @property
    def elements(self) -> int:
        """Number of elements carried."""
        return sum(hi - lo for lo, hi in self.segments)

    @property
    def size_bytes(self) -> int:
        """Payload bytes on the wire (0 for a pure synchronization message)."""
        return self.elements * self.type_bytes


@dataclass(frozen=True)
class Step:
    """Messages issued concurrently; ``label`` names the algorithm stage."""

    label: str
    messages: tuple[Message, ...]


@dataclass(frozen=True)
class Schedule:
    """The full message schedule of one collective call.

    ``count`` is the MPI element count as defined per collective in the module
    docstring, ``type_bytes`` the datatype size; ``root`` is ``None`` for rootless
    collectives.
    """

    collective: str
    algorithm: str
    nprocs: int
    count: int
    type_bytes: int = 1
    root: int | None = None
    steps: tuple[Step, ...] = field(default_factory=tuple)
    params: tuple[tuple[str, int], ...] = ()
    unit_bytes: int | None = None

    @property
    def element_bytes(self) -> int:
        """Bytes per segment element: ``unit_bytes`` if set, else ``type_bytes``."""
        return self.unit_bytes or self.type_bytes

    @property
    def size_bytes(self) -> int:
        """The call's message size in bytes (``count * type_bytes``)."""
        return self.count * self.type_bytes

    def messages(self) -> Iterable[Message]:
        """All messages in step order."""
        for step in self.steps:
            yield from step.messages

    @property
    def total_bytes(self) -> int:
        """Bytes sent by all ranks over all steps."""
        return sum(m.size_bytes for m in self.messages())

    def bytes_sent(self) -> list[int]:
        """Bytes sent per rank."""
        out = [0] * self.nprocs
        for m in self.messages():
            out[m.src] += m.size_bytes
        return out

    def bytes_received(self) -> list[int]:
        """Bytes received per rank."""
        out = [0] * self.nprocs
        for m in self.messages():
            out[m.dst] += m.size_bytes
        return out

    def to_pattern(self, name: str | None = None) -> Pattern:
        """One phase per step, labelled ``MPI_<Coll> <algorithm>: <stage> (step i/n)``."""
        title = _MPI_NAMES.get(self.collective, self.collective)
        n = len(self.steps)
        with uncharged():  # the steps' messages were charged as they were made
            phases = tuple(
                _step_phase(f"{title} {self.algorithm}: {step.label} (step {i + 1}/{n})", step)
                for i, step in enumerate(self.steps)
            )
        meta = {
            "collective": self.collective,
            "algorithm": self.algorithm,
            "count": self.count,
            "type_bytes": self.type_bytes,
            "root": self.root,
            **dict(self.params),
        }
        if self.unit_bytes is not None:
            meta["unit_bytes"] = self.unit_bytes
        return Pattern(name or f"{title} ({self.algorithm})", self.nprocs, phases, None, meta)


def _step_phase(label: str, step: Step) -> Phase:
    """One step as a traffic matrix, built from flat numpy columns in a single pass."""
    msgs = step.messages
    k = len(msgs)
    src = np.fromiter((m.src for m in msgs), dtype=np.int64, count=k)
    dst = np.fromiter((m.dst for m in msgs), dtype=np.int64, count=k)
    size = np.fromiter((m.size_bytes for m in msgs), dtype=np.int64, count=k)
    return Phase.from_arrays(label, src, dst, size, np.ones(k, dtype=np.int64))


_MPI_NAMES = {
    "bcast": "MPI_Bcast",
    "reduce": "MPI_Reduce",
    "allreduce": "MPI_Allreduce",
    "allgather": "MPI_Allgather",
    "alltoall": "MPI_Alltoall",
    "gather": "MPI_Gather",
    "scatter": "MPI_Scatter",
    "reduce_scatter": "MPI_Reduce_scatter_block",
    "barrier": "MPI_Barrier",
}


class ScheduleBuilder:
    """Collects messages step by step; algorithm modules use it to build a Schedule.

    >>> b = ScheduleBuilder("bcast", "demo", nprocs=2, count=4)
    >>> b.step("send", [b.msg(0, 1, [(0, 4)])])
    >>> b.build().total_bytes
    4
    """

    def __init__(
        self,
        collective: str,
        algorithm: str,
        *,
        nprocs: int,
        count: int,
        type_bytes: int = 1,
        root: int | None = None,
        unit_bytes: int | None = None,
    ) -> None:
        if nprocs < 1:
            raise PatternError(f"{collective}: nprocs must be >= 1, got {nprocs}")
        if count < 0:
            raise PatternError(f"{collective}: count must be >= 0, got {count}")
        if type_bytes < 1:
            raise PatternError(f"{collective}: type_bytes must be >= 1, got {type_bytes}")
        if root is not None and not 0 <= root < nprocs:
            raise PatternError(f"{collective}: root {root} out of range for {nprocs} processes")
        if unit_bytes is not None and (unit_bytes < 1 or type_bytes % unit_bytes):
            raise PatternError(
                f"{collective}: unit_bytes {unit_bytes} must be >= 1 and divide "
                f"type_bytes {type_bytes}"
            )
        self.collective = collective
        self.algorithm = algorithm
        self.nprocs = nprocs
        self.count = count
        self.type_bytes = type_bytes
        self.root = root
        self.unit_bytes = unit_bytes
        self._element_bytes = unit_bytes or type_bytes
        self._steps: list[Step] = []
        self._params: list[tuple[str, int]] = []

    def msg(
        self, src: int, dst: int, segments: Iterable[Segment], op: MessageOp = "copy"
    ) -> Message:
        """A message of this schedule's element size; empty segments are dropped.

        A message whose segments are all empty is kept: it models a zero-byte
        message that the algorithm really sends (an MPI envelope on the wire).
        """
        segs = tuple((lo, hi) for lo, hi in segments if hi > lo)
        return Message(src, dst, segs, op, self._element_bytes)

    def step(self, label: str, messages: Iterable[Message]) -> None:
        """Append a step (skipped if it has no message)."""
        msgs = tuple(messages)
        if msgs:
            reserve_cells(len(msgs))  # each message becomes at most one cell (to_pattern)
            self._steps.append(Step(label, msgs))

    def param(self, name: str, value: int) -> None:
        """Record an algorithm parameter (segment size, throttle, ...) in the schedule."""
        self._params.append((name, value))

    def build(self) -> Schedule:
        """The finished schedule."""
        return Schedule(
            self.collective,
            self.algorithm,
            self.nprocs,
            self.count,
            self.type_bytes,
            self.root,
            tuple(self._steps),
            tuple(self._params),
            self.unit_bytes,
        )
