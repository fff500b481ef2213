"""The ``alltoall`` module: MPI_Alltoall's pairwise or Bruck exchange routed by ``ours``.

Every step of a pairwise exchange is a permutation; ``ours`` routes each
step's pairs over distinct spines where it can (an edge colouring).
"""

from __future__ import annotations

from sdnmpi.controller.primitives.pattern import PatternModule

ALLTOALL = PatternModule("alltoall", router="ours")
