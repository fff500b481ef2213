"""Ranks that wait for messages sleep instead of spinning (``libsdnmpi_idle.so``).

On the emulated cluster every MPI rank shares the machine's two cores with the
others and with the userspace switches.  MPI libraries wait for messages by
polling; Open MPI with ``mpi_yield_when_idle=1`` calls ``sched_yield()`` between
empty polls, but a rank that yields is still runnable, so a rank whose message
has just arrived waits for the scheduler to rotate through every other poller.
Measured on ``allreduce28`` at 10 Mbit/s with 16 Open MPI ranks: an
``MPI_Barrier`` took 60 ms (four rounds), eight rank pairs exchanging 512 KiB at
once on disjoint paths took 701 ms where one pair alone took 449 ms and the
links allow 439 ms.  With ``csrc/idle``'s library preloaded, ``sched_yield()``
sleeps 50 us, doubling up to 200 us while the rank stays idle: the barrier took
5 ms and the eight exchanges 494-520 ms.  A real cluster gives every rank a
core; this is what the emulator does instead.

:func:`idle_env` is the environment a rank needs (pure); :func:`find_library`
looks for the built library.  MPICH over UCX polls without yielding: the
library also interposes ``ucp_worker_progress()``, and a pass that found no
events sleeps on the same schedule.  Measured on ``allreduce28`` at 10 Mbit/s
with 8 MPICH ranks, a 1 MiB ``MPI_Bcast`` (scatter + ring allgather) took 3.29 s
spinning and 1.79 s with the library; the links allow 1.65 s at TCP's goodput.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from sdnmpi import artefacts
from sdnmpi.errors import ConfigError

LIBRARY_NAME = "libsdnmpi_idle.so"
#: ``first,longest`` sleep in microseconds (``csrc/idle/idle.h``'s defaults).
DEFAULT_IDLE_US = "50,200"
_IDLE_RE = re.compile(r"^(0|[1-9][0-9]{0,5})(,[1-9][0-9]{0,5})?$")


def check_idle_us(value: str) -> str:
    """``value`` if it is a valid ``SDNMPI_IDLE_US`` (``"0"``, ``"N"`` or ``"N,M"``, N <= M).

    >>> check_idle_us("50,200")
    '50,200'
    """
    m = _IDLE_RE.fullmatch(value)
    bad = m is None
    if m is not None:
        first = int(m.group(1))
        longest = int(m.group(2)[1:]) if m.group(2) else first
        bad = (first == 0 and bool(m.group(2))) or longest < first or longest > 100_000
    if bad:
        raise ConfigError(
            f"idle sleep {value!r}: want FIRST[,LONGEST] microseconds (FIRST <= LONGEST "
            "<= 100000), or 0 to spin"
        )
    return value


def idle_env(
    library: Path, rank_env: Mapping[str, str], idle_us: str = DEFAULT_IDLE_US
) -> dict[str, str]:
    """``rank_env`` plus what makes idle ranks sleep: the library first in
    ``LD_PRELOAD`` (before any the caller preloads), Open MPI's yield when idle,
    and ``SDNMPI_IDLE_US`` unless the caller set them.

    >>> idle_env(Path("/b/libsdnmpi_idle.so"), {"LD_PRELOAD": "/b/libsdnmpi.so"})["LD_PRELOAD"]
    '/b/libsdnmpi_idle.so /b/libsdnmpi.so'
    """
    out = {
        "OMPI_MCA_mpi_yield_when_idle": "1",
        "SDNMPI_IDLE_US": check_idle_us(idle_us),
        **rank_env,
    }
    preload = rank_env.get("LD_PRELOAD", "").split()
    if str(library) not in preload:
        out["LD_PRELOAD"] = " ".join([str(library), *preload])
    return out


def find_library(root: Path | None = None) -> Path | None:
    """The built library: ``$SDNMPI_IDLE_LIB``, else ``idle/`` of ``root`` (a build
    tree) or of the artefact directory (:mod:`sdnmpi.artefacts`); None if missing."""
    env = os.environ.get("SDNMPI_IDLE_LIB")
    if env:
        return Path(env) if Path(env).is_file() else None
    rel = f"idle/{LIBRARY_NAME}"
    path = root / rel if root is not None else artefacts.path(rel)
    return path if path.is_file() else None
