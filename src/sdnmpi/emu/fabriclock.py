"""One emulated fabric per machine: the lock that programs bringing one up hold.

The userspace datapath's device is global, so only one fabric can be up at a time.
Experiments, ``sdnmpi calibrate`` and the integration tests hold :func:`fabric_lock`
while theirs is up, so two of them wait for each other instead of failing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

#: Only one emulated fabric can be up per machine (the userspace datapath's device is
#: global): programs that bring one up for a while (experiments, ``sdnmpi calibrate``,
#: the integration tests) hold this lock meanwhile, so that two of them wait for each
#: other instead of failing; ``flock /run/sdnmpi-fabric.lock COMMAND`` does the same
#: from a shell.
FABRIC_LOCK = Path("/run/sdnmpi-fabric.lock")
#: Set in the environment while a process holds the lock: its children (an experiment
#: run by a test, ``sdnmpi calibrate`` run by ``make reproduce``) inherit the hold
#: instead of waiting for their own parent forever.  Its value lists the holds as
#: ``PID:PATH`` entries separated by ``;`` (a lock is named by its file).
LOCK_HELD_ENV = "SDNMPI_FABRIC_LOCK_HELD"


#: (lock file, thread) pairs of this process that hold a lock now, with their depth
#: (reentrant within a thread).
_holders: dict[tuple[str, int], int] = {}


def _held_entries() -> list[tuple[int, str]]:
    entries = []
    for item in os.environ.get(LOCK_HELD_ENV, "").split(";"):
        pid, _, where = item.partition(":")
        if pid.isdigit() and where:
            entries.append((int(pid), where))
    return entries


@contextlib.contextmanager
def fabric_lock(
    progress: Callable[[str], None] = lambda _m: None, path: Path = FABRIC_LOCK
) -> Iterator[None]:
    """Hold the machine's fabric lock, waiting for it (one ``progress`` line if busy).

    Reentrant: within a thread that holds it, and in a child process of a holder
    (``LOCK_HELD_ENV`` names a live ancestor holding the same lock file), this returns
    at once, the outer hold covering the inner one.  Another thread of the holding
    process waits like any other program.
    """
    where = str(path.resolve())
    key = (where, threading.get_ident())
    before = os.environ.get(LOCK_HELD_ENV)
    inherited = any(w == where and pid != os.getpid() and _alive(pid) for pid, w in _held_entries())
    if inherited or key in _holders:
        _holders[key] = _holders.get(key, 0) + 1
        try:
            yield
        finally:
            _holders[key] -= 1
            if not _holders[key]:
                del _holders[key]
        return
    with path.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for {path} (another program has the fabric)")
            fcntl.flock(fh, fcntl.LOCK_EX)
        _holders[key] = 1
        mine = f"{os.getpid()}:{where}"
        os.environ[LOCK_HELD_ENV] = f"{before};{mine}" if before else mine
        try:
            yield
        finally:
            del _holders[key]
            if before is not None:
                os.environ[LOCK_HELD_ENV] = before
            else:
                os.environ.pop(LOCK_HELD_ENV, None)
            fcntl.flock(fh, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
