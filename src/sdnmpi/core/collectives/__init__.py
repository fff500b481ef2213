"""MPI collectives expanded into the exact messages their algorithms send.

Public API::

    expand(collective, nprocs, count, *, algorithm=None, root=0, type_bytes=1,
           library="mpich") -> Schedule
    algorithms(collective) -> tuple[str, ...]
    COLLECTIVES: tuple[str, ...]

Every algorithm follows MPICH 4.x's implementation (the module of each
collective names the source file; Thakur, Rabenseifner & Gropp 2005,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1),
describes most of them), except Open MPI's own ``linear`` and ``ompi_binomial``
broadcasts (:mod:`~sdnmpi.core.collectives.bcast`).  ``algorithm=None`` picks
the algorithm ``library`` (``"mpich"`` or ``"openmpi"``) would use by default
(:mod:`sdnmpi.core.collectives.selection`); ``library`` only affects that
choice.  :func:`sdnmpi.core.collectives.verify.verify` checks that a schedule
computes its collective.

>>> s = expand("allreduce", 4, 8, algorithm="recursive_doubling")
>>> len(s.steps), s.total_bytes
(2, 64)
"""

from __future__ import annotations

import dataclasses
import gc
import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import MappingProxyType

from sdnmpi.core.collectives import (
    allgather,
    allreduce,
    alltoall,
    barrier,
    bcast,
    gather,
    reduce,
    reduce_scatter,
    scatter,
)
from sdnmpi.core.collectives.schedule import Message, Schedule, ScheduleBuilder, Step
from sdnmpi.core.collectives.selection import Rule, rules, select_rule
from sdnmpi.errors import PatternError

#: ``(nprocs, count, root, type_bytes) -> Schedule``
Expander = Callable[[int, int, int, int], Schedule]

_REGISTRY: dict[str, dict[str, Expander]] = {
    "bcast": {
        "binomial": bcast.binomial,
        "scatter_recursive_doubling_allgather": bcast.scatter_recursive_doubling_allgather,
        "scatter_ring_allgather": bcast.scatter_ring_allgather,
        "linear": bcast.linear,
        "ompi_binomial": bcast.ompi_binomial,
    },
    "reduce": {
        "binomial": reduce.binomial,
        "reduce_scatter_gather": reduce.reduce_scatter_gather,
    },
    "allreduce": {
        "recursive_doubling": allreduce.recursive_doubling,
        "reduce_scatter_allgather": allreduce.reduce_scatter_allgather,
        "ring": allreduce.ring,
    },
    "allgather": {
        "recursive_doubling": allgather.recursive_doubling,
        "brucks": allgather.brucks,
        "ring": allgather.ring,
    },
    "alltoall": {
        "brucks": alltoall.brucks,
        "pairwise": alltoall.pairwise,
        "scattered": alltoall.scattered,
    },
    "gather": {"binomial": gather.binomial},
    "scatter": {"binomial": scatter.binomial},
    "reduce_scatter": {
        "recursive_halving": reduce_scatter.recursive_halving,
        "pairwise": reduce_scatter.pairwise,
    },
    "barrier": {"dissemination": barrier.dissemination},
}

#: Collective names accepted by :func:`expand`.
COLLECTIVES: tuple[str, ...] = tuple(_REGISTRY)
#: Collectives with a root process.
ROOTED: frozenset[str] = frozenset({"bcast", "reduce", "gather", "scatter"})
#: Read-only view of the algorithm functions, by collective and name.
REGISTRY = MappingProxyType({k: MappingProxyType(v) for k, v in _REGISTRY.items()})


def algorithms(collective: str) -> tuple[str, ...]:
    """The algorithm names :func:`expand` accepts for ``collective``.

    >>> algorithms("allgather")
    ('recursive_doubling', 'brucks', 'ring')
    """
    return tuple(_table(collective))


def expand(
    collective: str,
    nprocs: int,
    count: int,
    *,
    algorithm: str | None = None,
    root: int = 0,
    type_bytes: int = 1,
    library: str = "mpich",
) -> Schedule:
    """The exact message schedule of one collective call.

    ``count`` follows the schedule module's conventions (whole vector for
    bcast/reduce/allreduce, per-rank block for allgather/gather/scatter/
    reduce_scatter, per-pair block for alltoall, 0 for barrier).  ``root`` is
    used by bcast, reduce, gather and scatter and must be a valid rank.
    """
    table = _table(collective)
    rules(library)  # validates the library name
    nprocs = _int_arg("nprocs", nprocs, 1)
    count = _int_arg("count", count, 0)
    type_bytes = _int_arg("type_bytes", type_bytes, 1)
    root = _int_arg("root", root, 0)
    if root >= nprocs:
        raise PatternError(f"{collective}: root {root} out of range for {nprocs} processes")
    if collective == "barrier" and count:
        raise PatternError(f"barrier: count must be 0 (a barrier moves no data), got {count}")
    rule = None
    if algorithm is None:
        rule = select_rule(collective, nprocs, count, type_bytes, library)
    name = rule.algorithm if rule is not None else str(algorithm)
    if name not in table:
        raise PatternError(f"{collective}: unknown algorithm {name!r}; valid: {', '.join(table)}")
    with _gc_paused():
        schedule = table[name](nprocs, count, root if collective in ROOTED else 0, type_bytes)
    return schedule if rule is None else _with_selection(schedule, rule)


def _with_selection(schedule: Schedule, rule: Rule) -> Schedule:
    """Record in ``params`` how the default was chosen (and whether it is approximate)."""
    extra = [("approximated", int(rule.approximated))]
    if rule.library_algorithm_id is not None:
        extra.append((f"{rule.library}_algorithm", rule.library_algorithm_id))
    return dataclasses.replace(schedule, params=(*schedule.params, *extra))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while an algorithm allocates its messages.

    Messages hold no reference cycles, but a 1024-rank alltoall allocates a
    million of them and the collector's repeated scans would more than double the
    time; the previous collector state is restored afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _table(collective: str) -> dict[str, Expander]:
    try:
        return _REGISTRY[collective]
    except (KeyError, TypeError):
        raise PatternError(
            f"unknown collective {collective!r}; valid: {', '.join(_REGISTRY)}"
        ) from None


def _int_arg(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PatternError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise PatternError(f"{name} must be >= {minimum}, got {value}")
    return operator.index(value)


__all__ = [
    "COLLECTIVES",
    "REGISTRY",
    "ROOTED",
    "Message",
    "Schedule",
    "ScheduleBuilder",
    "Step",
    "algorithms",
    "expand",
]
