"""The ``bcast`` module: MPI_Bcast's tree (binomial or scatter-allgather) routed by ``ours``.

A broadcast's messages fan out from the root; ``ours`` spreads the tree's
concurrent edges over the spines (minimum phase-weighted peak utilization).
"""

from __future__ import annotations

from sdnmpi.controller.primitives.pattern import PatternModule

BCAST = PatternModule("bcast", router="ours")
