"""The console process's HTTP side against the controller's real API handler on the fake
fabric (served on a Unix socket in this process): what it serves, that it refuses to
change anything, and its limits on requests and connections."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdnmpi.console.server import MAX_LINE, Console, ConsoleSettings
from sdnmpi.controller.portstats import PortRate
from sdnmpi.core.generators import leaf_spine
from sdnmpi.testing.waits import wait_for
from tests.manager.test_controller import InProcessController

PATH = ["h1", "leaf1", "spine2", "leaf2", "h3"]


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sdnmpi-con-") as d:
        yield Path(d)


@pytest.fixture
def standin(sock_dir: Path) -> Iterator[InProcessController]:
    s = InProcessController(sock_dir / "ctl.sock", leaf_spine(2, 2, 2))
    yield s
    s.server.close()


def start(sock: Path, **kw: Any) -> Console:
    cfg = ConsoleSettings(controller_api=sock, port=0, fabric_interval_s=0.2, **kw)
    console = Console(cfg)
    console.start()
    return console


@pytest.fixture
def console(standin: InProcessController, sock_dir: Path) -> Iterator[Console]:
    c = start(sock_dir / "ctl.sock", max_clients=4, client_timeout_s=2.0)
    yield c
    c.close()


def get(console: Console, path: str, method: str = "GET") -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{console.port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def doc(console: Console, path: str) -> dict[str, Any]:
    status, body = get(console, path)
    assert status == 200
    out: dict[str, Any] = json.loads(body)
    return out


def test_serves_the_page_the_fabric_and_the_loads(
    standin: InProcessController, console: Console
) -> None:
    status, page = get(console, "/")
    assert status == 200 and b'<svg id="fabric"' in page and b"console.js" in page
    assert get(console, "/console.js")[0] == 200
    with standin.lock:
        standin.network.apply(
            standin.api.handle(
                json.dumps({"op": "install_job", "job_id": 7, "pairs": {"h1>h3": PATH}}).encode()
            ).messages
        )
        leaf1 = standin.topo.switch("leaf1").dpid
        standin.api.port_rates = lambda: [PortRate(leaf1, 3, time.time(), 0.0, 4e6)]
    wait_for("the job on the page's fabric", lambda: "7" in doc(console, "/api/fabric")["jobs"], 5)
    fabric = doc(console, "/api/fabric")
    assert fabric["jobs"]["7"]["h1>h3"] == ["h1|leaf1", "leaf1|spine2", "leaf2|spine2", "h3|leaf2"]
    assert {s["name"] for s in fabric["switches"]} == {"leaf1", "leaf2", "spine1", "spine2"}
    assert fabric["table"] == [{"job_id": 7, "state": "routed", "pairs": 1}]
    loads = doc(console, "/api/loads")
    busy = [ln for ln in loads["links"] if ln["fwd_bps"] or ln["rev_bps"]]
    assert len(busy) == 1 and max(busy[0]["fwd_bps"], busy[0]["rev_bps"]) == 4e6
    assert 0 <= loads["age_s"] < 5


def test_nothing_changes_through_it(standin: InProcessController, console: Console) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert get(console, "/api/fabric", method)[0] == 405
    assert get(console, "/api/../etc/passwd")[0] == 404
    assert get(console, "/api/jobs")[0] == 404
    assert {r["op"] for r in standin.requests} <= {"topology", "jobs", "tagged", "port_stats"}


def raw(console: Console, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", console.port), timeout=5) as s:
        s.sendall(data)
        return s.recv(200)


def test_garbage_and_oversized_requests_get_an_error(console: Console) -> None:
    assert raw(console, b"\x00\xff garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(console, b"GET /" + b"a" * MAX_LINE + b" HTTP/1.1\r\n\r\n").startswith(
        b"HTTP/1.1 414"
    )
    headers = b"".join(b"X-%d: 1\r\n" % i for i in range(40))
    assert raw(console, b"GET / HTTP/1.1\r\n" + headers + b"\r\n").startswith(b"HTTP/1.1 431")
    assert get(console, "/")[0] == 200  # and it goes on serving


def test_connections_over_the_limit_are_refused_then_served_again(console: Console) -> None:
    idle = [socket.create_connection(("127.0.0.1", console.port), timeout=5) for _ in range(4)]
    try:
        time.sleep(0.2)  # accepted, each holds a slot
        assert raw(console, b"GET / HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 503")
    finally:
        for s in idle:
            s.close()
    wait_for(
        "a free slot",
        lambda: raw(console, b"GET / HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 200"),
        5,
    )


def test_idle_clients_are_dropped_after_the_timeout(console: Console) -> None:
    with socket.create_connection(("127.0.0.1", console.port), timeout=5) as s:
        s.sendall(b"GET / HT")  # never finished
        t0 = time.monotonic()
        assert s.recv(100) == b""  # closed by the console
        assert time.monotonic() - t0 < 4


def test_without_a_controller_the_page_says_so(sock_dir: Path) -> None:
    c = start(sock_dir / "nothing.sock")
    try:
        wait_for("an error", lambda: "error" in doc(c, "/api/fabric"), 5)
        assert "controller API" in doc(c, "/api/fabric")["error"]
        assert get(c, "/")[0] == 200
    finally:
        c.close()


def test_bad_settings_exit_2_with_one_line(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()", "console", "run",
            "--controller-api", str(tmp_path / "s"), "--port", "70000"]  # fmt: skip
    res = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--port must be 0..65535" in res.stderr
