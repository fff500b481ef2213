"""sdnmpi: application-aware interconnect control for MPI clusters.

The package is split by architecture: :mod:`sdnmpi.core` is pure (plain data in,
plain data out), :mod:`sdnmpi.formats` reads and writes files, :mod:`sdnmpi.cli`
is the command line.  See ``docs/ARCHITECTURE.md``.
"""

from __future__ import annotations

__version__ = "0.1.0"
