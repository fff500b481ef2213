"""What the daemons share for signals: every thread's stack logged on SIGUSR1, and a
wait for SIGTERM that cannot miss it.

The stack dump is a Python signal handler: the main thread runs it between bytecodes
and reads the frames with :func:`sys._current_frames` under the GIL.
:mod:`faulthandler`'s C handler was tried for the node agent first: it walks the
other threads' frames while they run, and the agent crashed (SIGSEGV) when one of
them was ending at the moment of the signal.

A Python handler runs in the main thread, and only once that thread runs bytecode.
A signal the kernel gives another thread (one the main thread's state makes it skip,
as a tracer's stop does) does not interrupt the main thread's blocking wait, so a
daemon parked in ``Event.wait()`` could sit on its SIGTERM (a traced agent once did
not stop in 20 s).  :func:`wait` wakes every ``tick_s`` to run what is pending.
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


def wait(event: threading.Event, tick_s: float = 0.5) -> None:
    """Block until ``event`` is set (by a signal handler), waking every ``tick_s`` so
    that a signal delivered to another thread is handled within that time."""
    while not event.wait(tick_s):
        pass
