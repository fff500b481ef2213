"""Node-side adapters and their pure helpers.

- :mod:`sdnmpi.node.bpf`: loads the eBPF TC egress tagger, owns its maps (libbpf via ctypes).
- :mod:`sdnmpi.node.procnet`: a process's TCP sockets from ``/proc`` (what a rank's
  claims are checked against).
- :mod:`sdnmpi.node.peers`: which rank is at the other end of a connection.
- :mod:`sdnmpi.node.duplex`: the MPI library settings that make a rank pair's large
  exchanges full duplex over TCP (what ranks get; docs/mpi-duplex.md).

The agent that ties them together comes next (issue 5).
"""

from __future__ import annotations
