"""The bounded metrics HTTP server: it answers, it refuses what is not a scrape, and
garbage, oversized heads, slow clients and too many connections leave it answering."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from sdnmpi.errors import ConfigError
from sdnmpi.metrics import server as metrics_server
from sdnmpi.metrics.server import MAX_CONNECTIONS, MAX_REQUEST_BYTES, MetricsServer
from sdnmpi.testing.waits import wait_for
from tests.metrics.support import scrape


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, Counter]]:
    registry = CollectorRegistry()
    counter = Counter("demo_events", "Events.", ["kind"], registry=registry)
    counter.labels("a").inc(3)
    srv = MetricsServer(registry, "127.0.0.1", 0).start()
    yield srv, counter
    srv.stop()


def raw(port: int, data: bytes) -> bytes:
    """Send ``data``, half-close, read the answer to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_serves_the_registry(served):
    srv, counter = served
    assert scrape(srv.port)[("demo_events_total", (("kind", "a"),))] == 3.0
    counter.labels("a").inc()
    assert scrape(srv.port)[("demo_events_total", (("kind", "a"),))] == 4.0
    head = raw(srv.port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n")


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", b"405"),
        (b"GET /admin HTTP/1.1\r\n\r\n", b"404"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"400"),  # TLS hello
        (b"GET\r\n\r\n", b"400"),
    ],
)
def test_refuses_what_is_not_a_scrape(served, request_bytes: bytes, status: bytes):
    srv, _ = served
    assert raw(srv.port, request_bytes).split(b" ")[1] == status
    assert scrape(srv.port)  # and still answers


def test_oversized_head_is_dropped(served):
    srv, _ = served
    try:  # closed unanswered: the rest of the head is never read, so the client's
        # send, half-close or read may fail (reset, broken pipe, not connected)
        answer = raw(srv.port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * (2 * MAX_REQUEST_BYTES))
    except OSError:
        answer = b""
    assert answer == b""
    assert srv.dropped >= 1
    assert scrape(srv.port)


def test_slow_and_surplus_connections_are_closed(served, monkeypatch):
    """MAX_CONNECTIONS connections that never finish their request: one more closes
    the oldest, and a scrape still gets its answer; the idle ones are dropped at the
    request deadline."""
    srv, _ = served
    monkeypatch.setattr(metrics_server, "REQUEST_TIMEOUT_S", 1.0)
    idle = []
    try:
        for _ in range(MAX_CONNECTIONS):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(b"GET /metr")  # slowloris: a head that never ends
            idle.append(s)
        wait_for("the server to hold them", lambda: len(srv._conns) == MAX_CONNECTIONS, 5)
        assert scrape(srv.port)  # evicts the oldest idle one
        assert srv.refused == 1 and idle[0].recv(10) == b""
        wait_for("the idle ones to be dropped", lambda: not srv._conns, 5)
        assert all(s.recv(10) == b"" for s in idle)
    finally:
        for s in idle:
            s.close()
    assert scrape(srv.port)


def test_many_garbage_clients_then_it_still_answers(served):
    srv, _ = served
    t0 = time.monotonic()
    for i in range(300):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            s.sendall(bytes((i * 7 + k) % 256 for k in range(512)))
    assert time.monotonic() - t0 < 60
    assert scrape(srv.port)[("demo_events_total", (("kind", "a"),))] == 3.0


def test_a_port_in_use_is_a_config_error(served):
    srv, _ = served
    with pytest.raises(ConfigError, match=f"127.0.0.1:{srv.port}"):
        MetricsServer(CollectorRegistry(), "127.0.0.1", srv.port)


def test_stop_closes_the_port():
    srv = MetricsServer(CollectorRegistry(), "127.0.0.1", 0).start()
    port = srv.port
    srv.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_a_rendering_is_served_again_within_cache_s():
    registry = CollectorRegistry()
    counter = Counter("demo_events", "Events.", registry=registry)
    srv = MetricsServer(registry, "127.0.0.1", 0, cache_s=60.0).start()
    try:
        first = scrape(srv.port)
        counter.inc()
        assert scrape(srv.port) == first and srv.renders == 1
        srv.cache_s = 0.0
        assert scrape(srv.port)[("demo_events_total", ())] == 1.0 and srv.renders == 2
    finally:
        srv.stop()
