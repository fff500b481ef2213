"""The MPI library settings that let a rank pair's large exchanges run both ways at once.

Over TCP, a rank pair whose ranks send each other large messages at the same
time gets one direction after the other, not both at once: above the library's
eager limit a message goes by rendezvous, and the receiver's rendezvous
acknowledgement is queued on the pair's one TCP connection behind its own
outgoing payload (docs/mpi-duplex.md has the measurements).  Sending every
message up to a few MiB eagerly removes the wait: Open MPI's TCP BTL with its
eager limits raised to :data:`OPENMPI_EAGER_LIMIT_BYTES`, MPICH over UCX with an
unbounded rendezvous threshold.  The price is memory at the receiver: an eager
message that arrives before its receive is posted is buffered whole.

This table is the one definition; ``csrc/include/sdnmpi/duplex.h`` is the same
table for the C and C++ parts (``libsdnmpi.so`` with ``SDNMPI_DUPLEX=1``, the
SPANK plugin's ``duplex`` key), checked equal by ``tests/node/test_duplex.py`` (the
header's text) and ``tests/pmpi/test_core.py`` (the table as compiled).
``sdnmpi emu mpirun --duplex`` sets it in every rank.

>>> duplex_env("mpich")
{'UCX_RNDV_THRESH': 'inf'}
>>> with_duplex({"UCX_RNDV_THRESH": "64k"}, "mpich")
{'UCX_RNDV_THRESH': '64k'}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sdnmpi.errors import ConfigError

#: Open MPI's raised TCP BTL limits (4 MiB; the default eager limit is 64 KiB).  The
#: eager limit counts ob1's match header, so messages a few bytes short of it go eagerly.
OPENMPI_EAGER_LIMIT_BYTES: Final = 4 * 1024 * 1024

#: The variables of each library, in the order they are set.  Open MPI (ob1 PML, TCP
#: BTL): the eager limit, the first fragment of a rendezvous message (at most the eager
#: limit) and the largest fragment of the rest.  MPICH's ch4:ucx (and Open MPI's UCX PML):
#: UCX's rendezvous threshold, ``inf`` to send every tagged message eagerly.
DUPLEX_ENV: Final[Mapping[str, Mapping[str, str]]] = {
    "openmpi": {
        "OMPI_MCA_btl_tcp_eager_limit": str(OPENMPI_EAGER_LIMIT_BYTES),
        "OMPI_MCA_btl_tcp_rndv_eager_limit": str(OPENMPI_EAGER_LIMIT_BYTES),
        "OMPI_MCA_btl_tcp_max_send_size": str(OPENMPI_EAGER_LIMIT_BYTES),
    },
    "mpich": {
        "UCX_RNDV_THRESH": "inf",
    },
}

#: The flavours :data:`DUPLEX_ENV` knows, in its order.
DUPLEX_FLAVOURS: Final = tuple(DUPLEX_ENV)


def duplex_env(flavour: str | None = None) -> dict[str, str]:
    """The variables for ``flavour`` (``openmpi`` or ``mpich``), or for both with ``None``.

    Both at once are safe: each library ignores the other's variables.

    >>> sorted(duplex_env())[-1]
    'UCX_RNDV_THRESH'
    """
    if flavour is None:
        return {name: value for env in DUPLEX_ENV.values() for name, value in env.items()}
    if flavour not in DUPLEX_ENV:
        raise ConfigError(f"unknown MPI {flavour!r} (want one of {', '.join(DUPLEX_FLAVOURS)})")
    return dict(DUPLEX_ENV[flavour])


def with_duplex(env: Mapping[str, str], flavour: str | None = None) -> dict[str, str]:
    """``env`` plus the duplex variables it does not set: a value already there wins.

    >>> with_duplex({"A": "1"}, "mpich")
    {'UCX_RNDV_THRESH': 'inf', 'A': '1'}
    """
    return {**duplex_env(flavour), **env}
