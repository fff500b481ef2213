"""Broadcasts in a pattern: finding its ``MPI_Bcast`` calls, and replicating them.

A switch-replicated ``MPI_Bcast`` (issue 14) is one transfer: the root sends its
buffer once and the switches copy it along a tree
(:mod:`sdnmpi.core.routing.multicast`).  In a pattern it is one *replicated phase*:
its label starts with :data:`REPLICATED` and its cells go from the root to every
receiving rank, each carrying the whole buffer (what every receiver gets, not what
crosses a link).  Routers, the LP bound and the simulator recognise such a phase by
its label (:func:`is_replicated`) and load each arc of the tree once.

:func:`bcast_calls` finds the calls a collective expansion left in a pattern: the
consecutive phases ``MPI_Bcast <algorithm>: <stage> (step i/n)``, ``i = 1..n``, of
:meth:`sdnmpi.core.collectives.schedule.Schedule.to_pattern`.  Their root is the one
rank that sends bytes in the first step and their size the least any other rank
receives over the call (each receiver ends with the whole buffer; a binomial tree or
a scatter-allgather sends it exactly that much, intermediate ranks more).
:func:`replicated` puts one replicated phase in place of each call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.errors import PatternError

#: The label prefix that marks a phase as one switch-replicated broadcast.
REPLICATED = "MPI_Bcast replicated"
_STEP = re.compile(r"^MPI_Bcast (\S+): .* \(step (\d+)/(\d+)\)$")


def is_replicated(label: str) -> bool:
    """Whether a phase label marks a replicated broadcast.

    >>> is_replicated("MPI_Bcast replicated: root 0"), is_replicated("MPI_Bcast binomial")
    (True, False)
    """
    return label.startswith(REPLICATED)


@dataclass(frozen=True)
class BcastCall:
    """One ``MPI_Bcast`` of a pattern: phases ``first..last`` (inclusive), its root
    rank, buffer size, receiving ranks and repeat."""

    first: int
    last: int
    algorithm: str
    root: int
    nbytes: int
    receivers: tuple[int, ...]
    repeat: int


def broadcast_phase(
    root: int, receivers: Sequence[int], nbytes: int, *, repeat: int = 1, note: str = ""
) -> Phase:
    """The replicated phase of a broadcast of ``nbytes`` from ``root`` to ``receivers``.

    >>> p = broadcast_phase(0, [1, 2], 4096)
    >>> p.label, p.src.tolist(), p.dst.tolist(), p.size_bytes.tolist()
    ('MPI_Bcast replicated: root 0', [0, 0], [1, 2], [4096, 4096])
    """
    others = sorted({int(r) for r in receivers} - {root})
    label = f"{REPLICATED}: root {root}" + (f" ({note})" if note else "")
    n = len(others)
    return Phase.from_arrays(label, [root] * n, others, [nbytes] * n, [1] * n, repeat=repeat)


def replicated_root(phase: Phase) -> tuple[int, int]:
    """``(root, nbytes)`` of a replicated phase; :class:`PatternError` unless its cells
    all leave one rank with the same bytes."""
    roots = np.unique(phase.src)
    sizes = np.unique(phase.size_bytes)
    if roots.size != 1 or sizes.size != 1:
        raise PatternError(
            f"phase {phase.label!r} is marked replicated but has {roots.size} senders and "
            f"{sizes.size} message sizes (want one root sending one buffer to every receiver)"
        )
    return int(roots[0]), int(sizes[0])


def bcast_calls(pattern: Pattern) -> list[BcastCall]:
    """The ``MPI_Bcast`` calls of a collective expansion left in ``pattern``, in order.

    A run of phases that does not go ``step 1/n`` to ``step n/n`` with one algorithm
    and one repeat is not a call and is skipped, as is a host-level pattern.
    """
    if pattern.hosts is not None:
        return []
    out: list[BcastCall] = []
    i, phases = 0, pattern.phases
    while i < len(phases):
        run = _call_at(phases, i)
        if run is None:
            i += 1
            continue
        alg, n = run
        call = _call(pattern, i, i + n - 1, alg)
        if call is not None:
            out.append(call)
        i += n
    return out


def replicated(pattern: Pattern) -> Pattern:
    """``pattern`` with each ``MPI_Bcast`` call replaced by one replicated phase."""
    calls = bcast_calls(pattern)
    if not calls:
        return pattern
    phases: list[Phase] = []
    at = 0
    for c in calls:
        phases += pattern.phases[at : c.first]
        note = f"was {c.algorithm}, {c.last - c.first + 1} steps"
        phases.append(broadcast_phase(c.root, c.receivers, c.nbytes, repeat=c.repeat, note=note))
        at = c.last + 1
    phases += pattern.phases[at:]
    meta = {**pattern.meta, "bcast": "replicated"}
    return pattern.replace(phases=tuple(phases), meta=meta)


def _call_at(phases: Sequence[Phase], i: int) -> tuple[str, int] | None:
    """``(algorithm, steps)`` if a whole call's steps start at phase ``i``."""
    m = _STEP.match(phases[i].label)
    if m is None or m.group(2) != "1":
        return None
    alg, n = m.group(1), int(m.group(3))
    if i + n > len(phases):
        return None
    for k in range(1, n):
        mk = _STEP.match(phases[i + k].label)
        same = phases[i + k].repeat == phases[i].repeat
        if mk is None or (mk.group(1), int(mk.group(2)), int(mk.group(3))) != (alg, k + 1, n):
            return None
        if not same:
            return None
    return alg, n


def _call(pattern: Pattern, first: int, last: int, alg: str) -> BcastCall | None:
    steps = pattern.phases[first : last + 1]
    lead = steps[0]
    roots = np.unique(lead.src[lead.size_bytes > 0])
    if roots.size != 1:
        return None
    root = int(roots[0])
    received = np.zeros(pattern.nprocs, dtype=np.int64)
    for ph in steps:
        np.add.at(received, ph.dst, ph.size_bytes)
    received[root] = 0
    receivers = tuple(int(r) for r in np.flatnonzero(received))
    if not receivers:
        return None
    nbytes = int(received[list(receivers)].min())
    return BcastCall(first, last, alg, root, nbytes, receivers, lead.repeat)
