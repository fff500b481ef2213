"""A bounded, read-only HTTP server for one Prometheus registry, on one OS thread.

``prometheus_client.start_http_server`` starts a thread per connection with no limit
on how many, how long a request may take or how large it may be: a client holding
connections open (slowloris) or sending garbage costs the process threads and
processor time, and the controller's OpenFlow handling shares that process (and its
GIL).  This server is one thread with a ``selectors`` loop:

* at most :data:`MAX_CONNECTIONS` connections; one more closes the oldest still
  sending its request (so a client holding every slot open does not lock a scraper
  out: the scraper's request, sent at once, is answered before its slot is taken);
* a request head larger than :data:`MAX_REQUEST_BYTES`, or not complete within
  :data:`REQUEST_TIMEOUT_S` of the connection (however slowly it trickles in), closes
  the connection;
* ``GET /metrics`` (and ``/``) answers the registry's text exposition; any other
  method or path gets 405/404; anything that is not HTTP gets 400; one request per
  connection (``Connection: close``);
* nothing is written anywhere: it needs no write access.

The registry is rendered on this thread, so the metrics' collection must be lock-free
with respect to the daemon (the daemons update their metric objects as events happen,
or publish a snapshot the collector reads).  Rendering is Python work that holds the
GIL (fat_tree(16)'s 5,120 ports: about 0.5 s, docs/METRICS.md), so with ``cache_s`` a
rendering is served again to every scrape within that many seconds: a scrape flood
costs the daemon one rendering per ``cache_s``, not one per request.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sdnmpi.errors import ConfigError

log = logging.getLogger(__name__)

#: Connections served at once; more are closed when accepted.
MAX_CONNECTIONS = 32
#: Largest request head accepted (request line and headers).
MAX_REQUEST_BYTES = 8192
#: Seconds a connection has to send its request head.
REQUEST_TIMEOUT_S = 2.0
#: Seconds a connection has to take its answer.
WRITE_TIMEOUT_S = 5.0


@dataclass
class _Conn:
    sock: socket.socket
    deadline: float
    inbox: bytearray = field(default_factory=bytearray)
    outbox: memoryview | None = None


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def answer(request_head: bytes, render: Callable[[], bytes] = bytes) -> bytes:
    """The response to one request head (``render``: the exposition, called only when
    it is served).

    >>> answer(b"GET /metrics HTTP/1.1", lambda: b"x 1\\n").split(b"\\r\\n")[0]
    b'HTTP/1.1 200 OK'
    >>> answer(b"\\x16\\x03\\x01garbage").split(b"\\r\\n")[0]
    b'HTTP/1.1 400 Bad Request'
    >>> answer(b"POST /metrics HTTP/1.1").split(b"\\r\\n")[0]
    b'HTTP/1.1 405 Method Not Allowed'
    """
    line = request_head.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
    words = line.split()
    if len(words) != 3 or not words[2].startswith(b"HTTP/1."):
        return _response("400 Bad Request", b"bad request\n")
    method, target = words[0], words[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        return _response("405 Method Not Allowed", b"read-only: GET /metrics\n")
    if target not in (b"/metrics", b"/"):
        return _response("404 Not Found", b"see /metrics\n")
    body = render()
    out = _response("200 OK", body, CONTENT_TYPE_LATEST)
    return out[: len(out) - len(body)] if method == b"HEAD" else out


class MetricsServer:
    """Serves ``registry`` on ``address``:``port`` (0: any free port; see :attr:`port`)
    from one daemon thread until :meth:`stop`."""

    def __init__(
        self, registry: CollectorRegistry, address: str, port: int, cache_s: float = 0.0
    ) -> None:
        self.registry = registry
        self.cache_s = cache_s
        self._rendered: tuple[float, bytes] = (-1e18, b"")
        self.renders = 0
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind((address, port))
        except OSError as exc:
            self._listener.close()
            raise ConfigError(f"metrics: cannot listen on {address}:{port}: {exc}") from None
        self._listener.listen(MAX_CONNECTIONS)
        self._listener.setblocking(False)
        self.address = address
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._conns: dict[int, _Conn] = {}
        self._stopping = False
        self.refused = 0  # connections closed for a new one (over MAX_CONNECTIONS)
        self.dropped = 0  # connections closed for a slow, large or broken request
        self._thread = threading.Thread(target=self._loop, name="metrics-http", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", self.address, self.port)
        return self

    def stop(self) -> None:
        """Stop serving and close every socket (waits for the thread)."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(5)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    # -- the loop -----------------------------------------------------------------------
    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            while not self._stopping:
                for key, events in sel.select(self._timeout()):
                    if key.fileobj is self._listener:
                        self._accept(sel)
                    elif key.fileobj is self._wake_r:
                        continue
                    elif events & selectors.EVENT_READ:
                        self._read(sel, key.data)
                    else:
                        self._write(sel, key.data)
                self._expire(sel)
        except Exception:  # a bug here must not take the daemon down: log, stop serving
            log.exception("metrics server stopped")
        finally:
            for conn in list(self._conns.values()):
                self._close(sel, conn)
            sel.close()

    def _timeout(self) -> float:
        if not self._conns:
            return 1.0
        soonest = min(c.deadline for c in self._conns.values())
        return max(0.0, min(1.0, soonest - time.monotonic()))

    def _accept(self, sel: selectors.BaseSelector) -> None:
        for _ in range(MAX_CONNECTIONS):  # a burst of connects, without starving reads
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: try again on the next event
                log.warning("metrics: accept failed: %s", exc)
                return
            if len(self._conns) >= MAX_CONNECTIONS and not self._evict(sel):
                self.refused += 1
                sock.close()
                continue
            sock.setblocking(False)
            conn = _Conn(sock, time.monotonic() + REQUEST_TIMEOUT_S)
            self._conns[sock.fileno()] = conn
            sel.register(sock, selectors.EVENT_READ, conn)

    def _evict(self, sel: selectors.BaseSelector) -> bool:
        """Close the oldest connection still sending its request; whether there was one."""
        reading = [c for c in self._conns.values() if c.outbox is None]
        if not reading:
            return False
        self.refused += 1
        self._close(sel, min(reading, key=lambda c: c.deadline))
        return True

    def _read(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(MAX_REQUEST_BYTES + 1 - len(conn.inbox))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sel, conn)
            return
        conn.inbox += data
        end = conn.inbox.find(b"\r\n\r\n")
        if end < 0:
            end = conn.inbox.find(b"\n\n")
        if end < 0:
            if len(conn.inbox) > MAX_REQUEST_BYTES:
                self._drop(sel, conn)
            return
        head = bytes(conn.inbox[:end])
        conn.outbox = memoryview(answer(head, self._render))
        conn.deadline = time.monotonic() + WRITE_TIMEOUT_S
        sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(sel, conn)

    def _write(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        assert conn.outbox is not None
        try:
            sent = conn.sock.send(conn.outbox)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(sel, conn)
            return
        conn.outbox = conn.outbox[sent:]
        if not conn.outbox:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_WR)
            self._close(sel, conn)

    def _expire(self, sel: selectors.BaseSelector) -> None:
        now = time.monotonic()
        for conn in [c for c in self._conns.values() if c.deadline <= now]:
            self._drop(sel, conn)

    def _drop(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        self.dropped += 1
        self._close(sel, conn)

    def _close(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        self._conns.pop(conn.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(conn.sock)
        conn.sock.close()

    def _render(self) -> bytes:
        now = time.monotonic()
        if now - self._rendered[0] >= self.cache_s or not self._rendered[1]:
            self._rendered = (now, bytes(generate_latest(self.registry)))
            self.renders += 1
        return self._rendered[1]
