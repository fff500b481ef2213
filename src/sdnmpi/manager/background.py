"""Work no manager call waits for, on a thread of its own that takes the calls' lock.

The server passes :meth:`Background.submit` as :attr:`JobRouting.background`:
rebalancing after a job arrives or ends, and the routing reconcile finds to do,
run here one task at a time, each holding the lock as a call does (and releasing
it while it plans, :attr:`JobRouting.unlocked`), then waking WaitRoutes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures

log = logging.getLogger(__name__)


class Background:
    """One worker thread running tasks under ``cond`` (the calls' lock)."""

    def __init__(self, cond: threading.Condition, name: str = "planner") -> None:
        self.cond = cond
        self._pool = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._pending: set[futures.Future[None]] = set()
        self._lock = threading.Lock()

    def submit(self, task: Callable[[], None]) -> None:
        """Queue ``task``; it runs holding the lock, and waiters are woken after it."""

        def run() -> None:
            with self.cond:
                try:
                    task()
                except Exception:  # a task logs its own failures; this is the last net
                    log.exception("background task failed")
                finally:
                    self.cond.notify_all()

        with self._lock:
            future = self._pool.submit(run)
            self._pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: futures.Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every queued task ran (tasks may queue more); False on timeout."""
        deadline = threading.Event()
        timer = threading.Timer(timeout_s, deadline.set)
        timer.start()
        try:
            while not deadline.is_set():
                with self._lock:
                    pending = list(self._pending)
                if not pending:
                    return True
                futures.wait(pending, timeout=0.05)
            return False
        finally:
            timer.cancel()

    def stop(self) -> None:
        """Drop the queued tasks; the running one finishes."""
        self._pool.shutdown(wait=False, cancel_futures=True)
