"""MPI collectives expanded into the exact messages their algorithms send.

Public API (implemented by the algorithm modules of this package)::

    expand(collective, nprocs, count, *, algorithm=None, root=0, type_bytes=1,
           library="mpich") -> Schedule
    algorithms(collective) -> tuple[str, ...]
    COLLECTIVES: tuple[str, ...]

``algorithm=None`` picks the algorithm the MPI library would use by default
(:mod:`sdnmpi.core.collectives.selection`).
"""

from __future__ import annotations

from sdnmpi.core.collectives.schedule import Message, Schedule, ScheduleBuilder, Step

__all__ = ["Message", "Schedule", "ScheduleBuilder", "Step"]
