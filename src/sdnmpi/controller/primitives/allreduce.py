"""The ``allreduce`` module: the SDN-enhanced MPI_Allreduce router on the pattern.

The seed paper's route generation (per-pair Dijkstra on link weights that
grow with the routes already placed, :mod:`sdnmpi.core.routing.allreduce`) run
on the job's expanded recursive-doubling, ring or Rabenseifner pattern.
"""

from __future__ import annotations

from sdnmpi.controller.primitives.pattern import PatternModule

ALLREDUCE = PatternModule("allreduce", router="allreduce")
