"""The ``reduce`` module: MPI_Reduce's tree towards the root routed by ``ours``.

The mirror image of a broadcast: messages converge on the root, so the
links into the root's leaf are the ones to keep apart.
"""

from __future__ import annotations

from sdnmpi.controller.primitives.pattern import PatternModule

REDUCE = PatternModule("reduce", router="ours")
