"""SIGUSR1's stack dump (:mod:`sdnmpi.stacks`), as the controller and the node agent
install it: every thread's stack logged, threads with the same stack counted once,
while other threads start and end (a C-level dump crashed the agent then)."""

from __future__ import annotations

import logging
import os
import signal
import threading

import pytest

from sdnmpi import daemon


def _parked(stop: threading.Event) -> None:
    stop.wait(30)


def test_sigusr1_logs_every_threads_stack_while_threads_come_and_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("sdnmpi.test.stacks")
    stop = threading.Event()
    parked = [threading.Thread(target=_parked, args=(stop,), name=f"parked-{i}") for i in range(3)]
    for t in parked:
        t.start()
    churn_stop = threading.Event()

    def churn() -> None:  # threads that end while the stacks are read
        while not churn_stop.is_set():
            t = threading.Thread(target=lambda: None)
            t.start()
            t.join()

    churner = threading.Thread(target=churn, name="churn")
    churner.start()
    old = signal.getsignal(signal.SIGUSR1)
    try:
        daemon.on_sigusr1(log)
        with caplog.at_level(logging.WARNING, logger=log.name):
            for _ in range(20):
                os.kill(os.getpid(), signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, old)
        churn_stop.set()
        stop.set()
        churner.join()
        for t in parked:
            t.join()
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "MainThread" in m]) == 20
    grouped = [m for m in said if m.startswith("3 thread(s), e.g. parked-")]
    assert len(grouped) == 20 and all("_parked" in m for m in grouped)


def test_wait_ends_on_a_signal_the_kernel_gave_another_thread() -> None:
    """SIGTERM's handler sets the event, but the signal reached another thread (as
    when a tracer holds the main thread): the main thread's blocking wait is not
    interrupted, and ``daemon.wait`` still ends, by the handler (a plain
    ``Event.wait()`` ends only when the guard timer sets the event)."""
    done = threading.Event()
    parked = threading.Event()
    fell_back = threading.Event()

    def guard() -> None:  # a test that hangs would be worse than one that fails
        fell_back.set()
        done.set()

    def other() -> None:
        parked.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    old = signal.getsignal(signal.SIGUSR2)
    signal.signal(signal.SIGUSR2, lambda signum, frame: done.set())
    try:
        assert thread.ident is not None
        threading.Timer(0.2, signal.pthread_kill, (thread.ident, signal.SIGUSR2)).start()
        timer = threading.Timer(30, guard)
        timer.start()
        daemon.wait(done, tick_s=0.1)
        timer.cancel()
    finally:
        signal.signal(signal.SIGUSR2, old)
        parked.set()
        thread.join()
    assert done.is_set() and not fell_back.is_set()
