"""A switch connection's outgoing bytes, handed over by a thread of its own.

os-ken's ``Datapath.send`` blocks once 16 buffers wait for a switch's sender thread.
The app sends while it holds its lock, so a switch that stopped reading (because it
waits for the controller to read its own replies, which wait for that lock) stopped the
whole controller: fat_tree(16) after a reconnect, thousands of threads in futex waits
and no barrier answered (docs/controller-scale.md).  An :class:`Outbox` takes the bytes
at once, in order, and a thread of the connection's own hands them to the switch, so
nobody holding the app's lock ever waits for a switch.

Memory is bounded: a connection whose unsent bytes pass ``limit_bytes`` is given up
(``on_overflow``: the app closes it; the switch reconnects and is resynced), never
queued without end.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Unsent bytes after which a switch connection is given up (a fat_tree(16) default
#: sync sends a switch about 60 kB; a 16,384-pair job about 10 kB).
DEFAULT_LIMIT_BYTES = 64 << 20
#: Buffers joined into one hand-over (fewer trips through os-ken's 16-slot queue).
JOIN_BYTES = 256 << 10


class Outbox:
    """Bytes for one connection, sent in the order put by a daemon thread.

    ``send`` is the connection's ``Datapath.send``: it may block, and returns false
    once the connection is closed (the outbox then closes too).

    >>> got = []
    >>> box = Outbox(lambda buf: got.append(buf) or True, "doc")
    >>> box.put(b"a"), box.put(b"b")
    (True, True)
    >>> box.flush(5.0), b"".join(got)
    (True, b'ab')
    >>> box.close(); box.put(b"c")
    False
    """

    def __init__(
        self,
        send: Callable[[bytes], object],
        name: str,
        limit_bytes: int = DEFAULT_LIMIT_BYTES,
        on_overflow: Callable[[], object] | None = None,
    ) -> None:
        self._send = send
        self._limit = limit_bytes
        self._on_overflow = on_overflow
        self._queue: deque[bytes] = deque()
        self._cv = threading.Condition()
        self._pending_bytes = 0
        self._busy = False  # a hand-over is under way (outside the condition's lock)
        self._closed = False
        self.name = name
        self._thread = threading.Thread(target=self._run, name=f"outbox-{name}", daemon=True)
        self._thread.start()

    @property
    def pending_bytes(self) -> int:
        """Bytes put and not yet handed to the connection."""
        return self._pending_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, buf: bytes) -> bool:
        """Queue ``buf`` (never blocks); false if the outbox is closed or overflowed."""
        overflow = False
        with self._cv:
            if self._closed:
                return False
            if self._pending_bytes + len(buf) > self._limit:
                self._closed, overflow = True, True
                self._drop()
            else:
                self._queue.append(buf)
                self._pending_bytes += len(buf)
                self._cv.notify()
        if overflow:
            log.error(
                "%s: more than %d bytes not taken by the switch: connection given up",
                self.name, self._limit,
            )  # fmt: skip
            if self._on_overflow is not None:  # not on the caller's thread: it may hold a lock
                threading.Thread(target=self._on_overflow, daemon=True).start()
            return False
        return True

    def close(self) -> None:
        """Drop what is unsent and stop the thread (the connection is gone)."""
        with self._cv:
            self._closed = True
            self._drop()
            self._cv.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything put was handed over (or dropped); false on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def _drop(self) -> None:
        self._queue.clear()
        self._pending_bytes = 0

    def _take(self) -> bytes | None:
        """The next hand-over (several buffers joined), or None once closed."""
        with self._cv:
            while not self._queue and not self._closed:
                self._cv.wait()
            if self._closed:
                return None
            parts: list[bytes] = []
            size = 0
            while self._queue and (not parts or size + len(self._queue[0]) <= JOIN_BYTES):
                part = self._queue.popleft()
                parts.append(part)
                size += len(part)
            self._pending_bytes -= size
            self._busy = True
            return b"".join(parts)

    def _run(self) -> None:
        while (buf := self._take()) is not None:
            try:
                sent = self._send(buf)
            except Exception:  # a broken connection: logged, the outbox closes
                log.exception("%s: send failed", self.name)
                sent = False
            with self._cv:
                self._busy = False
                if sent is False:
                    self._closed = True
                    self._drop()
                self._cv.notify_all()
