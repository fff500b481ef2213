"""The MPI library settings that let a rank pair's large exchanges run both ways at once.

Over TCP, a rank pair whose ranks send each other large messages at the same
time gets one direction after the other, not both at once: above the library's
eager limit a message goes by rendezvous, and the receiver's rendezvous
acknowledgement is queued on the pair's one TCP connection behind its own
outgoing payload (docs/mpi-duplex.md has the measurements).  Sending every
message up to a few MiB eagerly removes the wait: Open MPI's TCP BTL with its
eager limits raised to :data:`OPENMPI_EAGER_LIMIT_BYTES`, MPICH over UCX with an
unbounded rendezvous threshold.  The price is memory at the receiver: an eager
message that arrives before its receive is posted is buffered whole.  Both
libraries also get fixed socket buffers (:data:`SOCKET_BUFFER_BYTES`): with the
kernel's autotuned ones an exchange ran at full rate in some runs only.

This table is the one definition; ``csrc/include/sdnmpi/duplex.h`` is the same
table for the C and C++ parts (``libsdnmpi.so`` with ``SDNMPI_DUPLEX=1``, the
SPANK plugin's ``duplex`` key), checked equal by ``tests/node/test_duplex.py`` (the
header's text) and ``tests/pmpi/test_core.py`` (the table as compiled).
``sdnmpi emu mpirun --duplex`` sets it in every rank.

>>> duplex_env("mpich")["UCX_RNDV_THRESH"]
'inf'
>>> with_duplex({"UCX_RNDV_THRESH": "64k"}, "mpich")["UCX_RNDV_THRESH"]
'64k'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sdnmpi.errors import ConfigError

#: Open MPI's raised TCP BTL limits (4 MiB; the default eager limit is 64 KiB).  The
#: eager limit counts ob1's match header, so messages a few bytes short of it go eagerly.
OPENMPI_EAGER_LIMIT_BYTES: Final = 4 * 1024 * 1024

#: The TCP socket buffers (send and receive) both libraries set on their connections,
#: instead of leaving them to the kernel's autotuning.  An exchange's acknowledgements
#: travel behind the other direction's data, so each direction needs about two queues'
#: worth in flight; autotuned buffers often stopped short of that and the exchange ran
#: at 0.75-0.89 of line rate (docs/mpi-duplex.md, "Socket buffers").  4 MiB is the
#: kernel's autotuning ceiling here (``net.ipv4.tcp_wmem``); memory is only used for
#: data queued, up to this much per connection and direction.
SOCKET_BUFFER_BYTES: Final = 4 * 1024 * 1024

#: The variables of each library, in the order they are set.  Open MPI (ob1 PML, TCP
#: BTL): the eager limit, the first fragment of a rendezvous message (at most the eager
#: limit), the largest fragment of the rest, and the TCP BTL's socket buffers.  MPICH's
#: ch4:ucx (and Open MPI's UCX PML): UCX's rendezvous threshold, ``inf`` to send every
#: tagged message eagerly, and UCX's TCP transport's socket buffers.
DUPLEX_ENV: Final[Mapping[str, Mapping[str, str]]] = {
    "openmpi": {
        "OMPI_MCA_btl_tcp_eager_limit": str(OPENMPI_EAGER_LIMIT_BYTES),
        "OMPI_MCA_btl_tcp_rndv_eager_limit": str(OPENMPI_EAGER_LIMIT_BYTES),
        "OMPI_MCA_btl_tcp_max_send_size": str(OPENMPI_EAGER_LIMIT_BYTES),
        "OMPI_MCA_btl_tcp_sndbuf": str(SOCKET_BUFFER_BYTES),
        "OMPI_MCA_btl_tcp_rcvbuf": str(SOCKET_BUFFER_BYTES),
    },
    "mpich": {
        "UCX_RNDV_THRESH": "inf",
        "UCX_TCP_SNDBUF": str(SOCKET_BUFFER_BYTES),
        "UCX_TCP_RCVBUF": str(SOCKET_BUFFER_BYTES),
    },
}

#: The flavours :data:`DUPLEX_ENV` knows, in its order.
DUPLEX_FLAVOURS: Final = tuple(DUPLEX_ENV)


def duplex_env(flavour: str | None = None) -> dict[str, str]:
    """The variables for ``flavour`` (``openmpi`` or ``mpich``), or for both with ``None``.

    Both at once are safe: each library ignores the other's variables.

    >>> sorted(duplex_env())[-3:]
    ['UCX_RNDV_THRESH', 'UCX_TCP_RCVBUF', 'UCX_TCP_SNDBUF']
    """
    if flavour is None:
        return {name: value for env in DUPLEX_ENV.values() for name, value in env.items()}
    if flavour not in DUPLEX_ENV:
        raise ConfigError(f"unknown MPI {flavour!r} (want one of {', '.join(DUPLEX_FLAVOURS)})")
    return dict(DUPLEX_ENV[flavour])


def with_duplex(env: Mapping[str, str], flavour: str | None = None) -> dict[str, str]:
    """``env`` plus the duplex variables it does not set: a value already there wins.

    >>> with_duplex({"A": "1", "UCX_TCP_SNDBUF": "auto"}, "mpich")
    {'UCX_RNDV_THRESH': 'inf', 'UCX_TCP_SNDBUF': 'auto', 'UCX_TCP_RCVBUF': '4194304', 'A': '1'}
    """
    return {**duplex_env(flavour), **env}
