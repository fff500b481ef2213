"""Small helpers for tests and demos that drive real daemons: free ports, bounded waits."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout_s: float,
    error: type[Exception] = AssertionError,
) -> float:
    """Poll ``check`` until true; seconds it took, or ``error`` after ``timeout_s``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            raise error(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - start
