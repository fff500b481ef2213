"""Every thread's stack, logged: what the daemons do on SIGUSR1.

A Python signal handler (run by the main thread between bytecodes, also while it
waits on a lock or an event) reads the frames with :func:`sys._current_frames`
under the GIL.  :mod:`faulthandler`'s C handler was tried for the node agent first:
it walks the other threads' frames while they run, and the agent crashed
(SIGSEGV) when one of them was ending at the moment of the signal.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import traceback
from types import FrameType


def log_stacks(log: logging.Logger) -> int:
    """Log every thread's stack, threads with the same stack counted once (the most
    common first); how many distinct stacks."""
    names = {t.ident: t.name for t in threading.enumerate()}
    groups: dict[str, list[str]] = {}
    for ident, top in sys._current_frames().items():
        text = "".join(traceback.format_stack(top))
        groups.setdefault(text, []).append(names.get(ident, str(ident)))
    for text, threads in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        log.warning("%d thread(s), e.g. %s:\n%s", len(threads), threads[0], text)
    return len(groups)


def on_sigusr1(log: logging.Logger) -> None:
    """Make SIGUSR1 log every thread's stack to ``log`` (main thread only)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        log_stacks(log)

    signal.signal(signal.SIGUSR1, handler)
