"""Symbolic execution of a schedule: does it compute its collective?

Every rank holds, for each element of the collective's data space (see
:mod:`sdnmpi.core.collectives.schedule`), either nothing or a
:class:`collections.Counter` of the ranks whose input the element's value
combines ("contributions").  The initial and the required final states follow
from the collective's semantics only, never from the algorithm:

==============  ================================  =================================
collective      initial state                     required final state
==============  ================================  =================================
bcast           root: all ``{root: 1}``           every rank: all ``{root: 1}``
reduce          every rank: all ``{rank: 1}``     root: all ``{0: 1, ..., p-1: 1}``
allreduce       every rank: all ``{rank: 1}``     every rank: all, every rank once
reduce_scatter  every rank: all ``{rank: 1}``     rank r: block r, every rank once
allgather       rank r: block r ``{r: 1}``        every rank: block b ``{b: 1}``
gather          rank r: block r ``{r: 1}``        root: block b ``{b: 1}``
scatter         root: all ``{root: 1}``           rank r: block r ``{root: 1}``
alltoall        rank i: blocks (i, j) ``{i: 1}``  rank j: blocks (i, j) ``{i: 1}``
barrier         rank r: element r ``{r: 1}``      every rank: element e ``{e: 1}``
==============  ================================  =================================

Step semantics: all messages of a step read their sender's state as it was at
the start of the step, then take effect: ``copy`` stores the sender's values,
``reduce`` adds the sender's Counter to the receiver's (a contribution counted
twice shows up as a count of 2), ``notify`` gives the receiver everything the
sender holds.  Sending an element one does not hold, reducing into an element one
does not hold, a self-message, a rank or element out of range, and a wrong final
state raise :class:`~sdnmpi.errors.PatternError` naming the step, ranks and
elements.

Elements are grouped into "atoms": the maximal ranges that no message boundary
and no block boundary cuts, so the cost depends on the number of distinct
segments, not on ``count``.  A reduction adds Counters of up to ``p`` entries,
so the cost grows like (atoms moved) x p: a few milliseconds for the 33-process
sweeps of the tests, minutes for a 1024-process ring allreduce.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NoReturn

from sdnmpi.core.collectives.schedule import Message, Schedule
from sdnmpi.errors import PatternError

Value = Counter[int]
State = list[dict[int, Value]]

_BLOCKED = {"reduce_scatter", "allgather", "gather", "scatter"}


def verify(schedule: Schedule) -> None:
    """Raise :class:`PatternError` unless ``schedule`` computes its collective."""
    _Executor(schedule).run()


def data_space(schedule: Schedule) -> int:
    """Number of elements (of ``schedule.element_bytes`` bytes) in the data space.

    >>> from sdnmpi.core.collectives.schedule import Schedule
    >>> data_space(Schedule("alltoall", "demo", nprocs=3, count=2))
    18
    """
    p, n = schedule.nprocs, schedule.count * _scale(schedule)
    if schedule.collective in ("bcast", "reduce", "allreduce"):
        return n
    if schedule.collective in _BLOCKED:
        return p * n
    if schedule.collective == "alltoall":
        return p * p * n
    if schedule.collective == "barrier":
        return p
    raise PatternError(f"verify: unknown collective {schedule.collective!r}")


def _scale(schedule: Schedule) -> int:
    return schedule.type_bytes // schedule.element_bytes


@dataclass(frozen=True)
class _Expect:
    """``rank`` must hold elements ``[lo, hi)`` with contributions ``value``."""

    rank: int
    lo: int
    hi: int
    value: Value


class _Executor:
    def __init__(self, schedule: Schedule) -> None:
        self.s = schedule
        self.where = (
            f"{schedule.collective}/{schedule.algorithm} (nprocs={schedule.nprocs}, "
            f"count={schedule.count}, type_bytes={schedule.type_bytes}, root={schedule.root})"
        )
        self.space = data_space(schedule)
        self.block = schedule.count * _scale(schedule)
        self.initial = list(_initial(schedule, self.block))
        self.final = list(_final(schedule, self.block))
        self._check_messages()
        self.bounds = self._atoms()
        self.index = {b: i for i, b in enumerate(self.bounds)}

    # -- setup ------------------------------------------------------------------
    def _check_messages(self) -> None:
        p, eb = self.s.nprocs, self.s.element_bytes
        for i, step in enumerate(self.s.steps):
            for m in step.messages:
                if not (0 <= m.src < p and 0 <= m.dst < p):
                    self._fail(i, f"message {m.src} -> {m.dst} names a rank outside 0..{p - 1}")
                if m.src == m.dst:
                    self._fail(i, f"rank {m.src} sends a message to itself")
                if m.type_bytes != eb:
                    self._fail(
                        i,
                        f"message {m.src} -> {m.dst} has {m.type_bytes}-byte elements, "
                        f"schedule uses {eb}",
                    )
                for lo, hi in m.segments:
                    if not 0 <= lo < hi <= self.space:
                        self._fail(
                            i,
                            f"rank {m.src} sends elements [{lo}, {hi}) to rank {m.dst}, "
                            f"outside the data space [0, {self.space})",
                        )

    def _atoms(self) -> list[int]:
        cuts = {0, self.space}
        if self.block:
            cuts.update(range(0, self.space, self.block))
        for e in (*self.initial, *self.final):
            cuts.update((e.lo, e.hi))
        for m in self.s.messages():
            for lo, hi in m.segments:
                cuts.update((lo, hi))
        return sorted(cuts)

    def _atom_ids(self, lo: int, hi: int) -> range:
        return range(self.index[lo], self.index[hi])

    # -- execution ---------------------------------------------------------------
    def run(self) -> None:
        state: State = [{} for _ in range(self.s.nprocs)]
        for e in self.initial:
            for a in self._atom_ids(e.lo, e.hi):
                state[e.rank][a] = e.value
        for i, step in enumerate(self.s.steps):
            deliveries = [self._read(i, state, m) for m in step.messages]
            for m, values in zip(step.messages, deliveries, strict=True):
                self._apply(i, state, m, values)
        self._check_final(state)

    def _read(self, i: int, state: State, m: Message) -> list[tuple[int, Value]]:
        held = state[m.src]
        if m.op == "notify":
            return list(held.items())
        out = []
        for lo, hi in m.segments:
            for a in self._atom_ids(lo, hi):
                value = held.get(a)
                if value is None:
                    self._fail(
                        i,
                        f"rank {m.src} sends elements [{lo}, {hi}) to rank {m.dst} "
                        f"but holds no data for {self._range(a)}",
                    )
                out.append((a, value))
        return out

    def _apply(self, i: int, state: State, m: Message, values: list[tuple[int, Value]]) -> None:
        held = state[m.dst]
        if m.op == "reduce":
            for a, value in values:
                mine = held.get(a)
                if mine is None:
                    self._fail(
                        i,
                        f"rank {m.dst} reduces {self._range(a)} from rank {m.src} "
                        f"into data it does not hold",
                    )
                held[a] = mine + value
        elif m.op == "notify":
            for a, value in values:
                held.setdefault(a, value)
        else:
            held.update(values)

    def _check_final(self, state: State) -> None:
        for e in self.final:
            for a in self._atom_ids(e.lo, e.hi):
                got = state[e.rank].get(a)
                if got != e.value:
                    have = "nothing" if got is None else _show(got)
                    raise PatternError(
                        f"{self.where}: final state wrong: rank {e.rank} holds {have} for "
                        f"{self._range(a)}, expected {_show(e.value)}"
                    )

    # -- reporting ---------------------------------------------------------------
    def _range(self, atom: int) -> str:
        return f"elements [{self.bounds[atom]}, {self.bounds[atom + 1]})"

    def _fail(self, i: int, what: str) -> NoReturn:
        step = self.s.steps[i]
        raise PatternError(f"{self.where}: step {i + 1}/{len(self.s.steps)} {step.label!r}: {what}")


def _show(value: Value) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(value.items())) + "}"


# -- collective semantics ----------------------------------------------------------


def _initial(s: Schedule, block: int) -> Iterator[_Expect]:
    p, coll, root = s.nprocs, s.collective, s.root or 0
    if coll in ("bcast", "scatter"):
        yield _Expect(root, 0, data_space(s), Counter({root: 1}))
    elif coll in ("reduce", "allreduce", "reduce_scatter"):
        yield from (_Expect(r, 0, data_space(s), Counter({r: 1})) for r in range(p))
    elif coll in ("allgather", "gather"):
        yield from (_Expect(r, r * block, (r + 1) * block, Counter({r: 1})) for r in range(p))
    elif coll == "alltoall":
        yield from (
            _Expect(r, r * p * block, (r + 1) * p * block, Counter({r: 1})) for r in range(p)
        )
    elif coll == "barrier":
        yield from (_Expect(r, r, r + 1, Counter({r: 1})) for r in range(p))


def _final(s: Schedule, block: int) -> Iterator[_Expect]:
    p, coll, root = s.nprocs, s.collective, s.root or 0
    everyone = Counter(range(p))
    n = data_space(s)
    if coll == "bcast":
        yield from (_Expect(r, 0, n, Counter({root: 1})) for r in range(p))
    elif coll == "reduce":
        yield _Expect(root, 0, n, everyone)
    elif coll == "allreduce":
        yield from (_Expect(r, 0, n, everyone) for r in range(p))
    elif coll == "reduce_scatter":
        yield from (_Expect(r, r * block, (r + 1) * block, everyone) for r in range(p))
    elif coll == "allgather":
        yield from _all_blocks(range(p), p, block)
    elif coll == "gather":
        yield from _all_blocks([root], p, block)
    elif coll == "scatter":
        yield from (_Expect(r, r * block, (r + 1) * block, Counter({root: 1})) for r in range(p))
    elif coll == "alltoall":
        yield from (
            _Expect(j, (i * p + j) * block, (i * p + j + 1) * block, Counter({i: 1}))
            for j in range(p)
            for i in range(p)
        )
    elif coll == "barrier":
        yield from _all_blocks(range(p), p, 1)


def _all_blocks(ranks: Iterable[int], p: int, block: int) -> Iterator[_Expect]:
    for r in ranks:
        for b in range(p):
            yield _Expect(r, b * block, (b + 1) * block, Counter({b: 1}))
