"""Agent request handling without root: bad requests are refused with a reason."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest

from sdnmpi.node.agent import Agent, AgentConfig, LocalTagHub, RemoteTagHub
from sdnmpi.node.bpf import ConnContext, Counters, FourTuple, Tagger
from sdnmpi.node.procnet import Endpoint
from sdnmpi.wire.controller_api import connect_unix


class FakeTagger:
    """Records map operations; hands out a pipe end as the context descriptor."""

    def __init__(self) -> None:
        self.contexts: set[int] = set()
        self.conns: dict[FourTuple, ConnContext] = {}
        self.attached_to = "lo"

    def create_context(self, ctx_slot: int) -> int:
        r, w = os.pipe()
        os.close(w)
        self.contexts.add(ctx_slot)
        return r

    def remove_context(self, ctx_slot: int) -> None:
        self.contexts.remove(ctx_slot)

    def add_connection(self, conn: FourTuple, ctx: ConnContext) -> None:
        self.conns[conn] = ctx

    def remove_connection(self, conn: FourTuple) -> bool:
        return self.conns.pop(conn, None) is not None

    def counters(self) -> Counters:
        return Counters()


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    return Agent(AgentConfig("lo", tmp_path / "a.sock"), LocalTagHub(), cast(Tagger, FakeTagger()))


def ask(agent: Agent, obj: Any, pid: int | None = None) -> dict[str, Any]:
    line = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    reply, fds = agent.request(pid or os.getpid(), os.getuid(), line)
    for fd in fds:
        os.close(fd)
    return reply


@pytest.mark.parametrize(
    ("request_", "needle"),
    [
        (b"{not json", "Expecting property name"),
        ([1, 2], "want a JSON object"),
        ({"op": "fly"}, "unknown op 'fly'"),
        ({"op": "register", "job": "j", "rank": 0}, "missing ['nprocs']"),
        ({"op": "register", "job": "j", "rank": 0, "nprocs": 2, "x": 1}, "unknown ['x']"),
        ({"op": "register", "job": 5, "rank": 0, "nprocs": 2}, "job must be a string"),
        ({"op": "register", "job": "j", "rank": True, "nprocs": 2}, "integers"),
        ({"op": "register", "job": "j", "rank": 0, "nprocs": 2, "job_slot": "3"}, "job_slot"),
        ({"op": "register", "job": "j", "rank": 0, "nprocs": 2, "job_slot": 300}, "1..127"),
        ({"op": "register", "job": "j", "rank": 0, "nprocs": 2, "tag": "no"}, "true or false"),
        ({"op": "register", "job": "j", "rank": 0, "nprocs": 2, "tag": 0}, "true or false"),
        ({"op": "ranks", "table": []}, "non-empty list"),
        ({"op": "ranks", "table": [[0, "10.0.0.1", 1]]}, "bad rank table row"),
        ({"op": "ranks", "table": [[0, "10.0.0.x", 1, []]]}, "bad address"),
        ({"op": "ranks", "table": [[0, "10.0.0.1", 1, []]]}, "not registered"),
    ],
)
def test_bad_requests_are_refused(agent: Agent, request_: Any, needle: str) -> None:
    reply = ask(agent, request_)
    assert reply["ok"] is False
    assert needle in reply["error"]


def test_register_status_unregister(agent: Agent) -> None:
    reply = ask(agent, {"op": "register", "job": "j", "rank": 1, "nprocs": 2, "job_slot": 4})
    assert (reply["ok"], reply["ctx_slot"], reply["ip"]) == (True, 0, "127.0.0.1")
    assert reply["job_slot"] == 4  # the hub's slot: the ranks check they all have one
    assert isinstance(reply["listen_ports"], list)
    status = ask(agent, {"op": "status"})
    assert [(r["job"], r["rank"], r["pid"]) for r in status["ranks"]] == [("j", 1, os.getpid())]
    table = [[0, "10.0.0.1", 1, [1024]], [1, "127.0.0.1", os.getpid(), []]]
    assert ask(agent, {"op": "ranks", "table": table}) == {"ok": True}
    assert ask(agent, {"op": "unregister"}) == {"ok": True}
    assert ask(agent, {"op": "unregister"}) == {"ok": False}
    assert ask(agent, {"op": "status"})["ranks"] == []


def test_register_without_a_slot_says_so(agent: Agent) -> None:
    reply = ask(agent, {"op": "register", "job": "j", "rank": 0, "nprocs": 2})
    assert (reply["ok"], reply["job_slot"]) == (True, None)


def test_controller_hub_fails_open_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hub = RemoteTagHub(tmp_path / "nobody.sock", "h1", timeout_s=0.5)
    assert hub.joined("7", 0, 2, None) is None
    assert hub.resolve("7", 0, (Endpoint("10.0.0.1", 1), Endpoint("10.0.0.2", 2))) is None
    hub.left("7", 0)
    assert sum("unreachable" in r.message for r in caplog.records) == 1


def test_controller_hub_speaks_the_tag_ops(tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    seen: list[dict[str, Any]] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                req = json.loads(line)
                seen.append(req)
                reply: dict[str, Any] = {"ok": True, "job_slot": 9, "peer": 3}
                if req["op"] == "tag_leave":
                    reply = {"ok": False, "error": "no"}
                stream.write(json.dumps(reply).encode() + b"\n")
                stream.flush()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    hub = RemoteTagHub(path, "h4")
    try:
        assert hub.joined("7", 1, 4, 2) == 9
        conn = (Endpoint("10.0.0.4", 1024), Endpoint("10.0.0.1", 50000))
        assert hub.resolve("7", 1, conn) == 3
        hub.left("7", 1)  # refused: logged, not raised
    finally:
        hub.close()
        thread.join(timeout=5)
        server.close()
    assert seen == [
        {"op": "tag_join", "job": "7", "rank": 1, "nprocs": 4, "host": "h4"},
        {"op": "tag_conn", "job": "7", "rank": 1, "local": "10.0.0.4:1024",
         "remote": "10.0.0.1:50000"},
        {"op": "tag_leave", "job": "7", "rank": 1},
    ]  # fmt: skip


def _full_listener(path: Path) -> tuple[socket.socket, list[socket.socket]]:
    """A Unix listener whose queue of pending connections is full, and the pending ones."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(0)
    pending: list[socket.socket] = []
    while True:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.setblocking(False)
        try:
            client.connect(str(path))
        except BlockingIOError:
            client.close()
            return server, pending
        pending.append(client)


def test_a_connect_to_a_full_listener_waits_for_room(tmp_path: Path) -> None:
    """A listener with every pending slot taken refuses a Unix connect with EAGAIN (16
    agents connecting at once to the controller's backlog of 8: their ranks ran
    untagged); the connect is tried again, here as soon as the listener accepts one."""
    path = tmp_path / "busy.sock"
    server, pending = _full_listener(path)
    accepted: list[socket.socket] = []

    def accept_one(_pause: float) -> None:
        accepted.append(server.accept()[0])

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as single:
            single.settimeout(5.0)  # as the hub's: the kernel refuses rather than waits
            with pytest.raises(BlockingIOError):
                single.connect(str(path))
        sock = connect_unix(path, 5.0, sleep=accept_one)
        sock.close()
        assert len(accepted) == 1
    finally:
        for s in [server, *pending, *accepted]:
            s.close()


def test_a_connect_to_a_full_listener_gives_up_at_its_deadline(tmp_path: Path) -> None:
    path = tmp_path / "busy.sock"
    server, pending = _full_listener(path)
    now = [0.0]
    pauses: list[float] = []

    def sleep(pause: float) -> None:
        pauses.append(pause)
        now[0] += pause

    try:
        with pytest.raises(BlockingIOError):
            connect_unix(path, 1.0, clock=lambda: now[0], sleep=sleep)
    finally:
        for s in [server, *pending]:
            s.close()
    assert now[0] <= 1.0 and len(pauses) > 3  # backed off, never past the deadline
    assert max(pauses) == 0.2 and pauses == sorted(pauses)


def test_a_connect_to_a_missing_socket_fails_at_once(tmp_path: Path) -> None:
    def no_sleep(_pause: float) -> None:
        raise AssertionError("a missing socket is not retried")

    with pytest.raises(FileNotFoundError):
        connect_unix(tmp_path / "nobody.sock", 5.0, sleep=no_sleep)


def test_an_idle_agent_does_not_scan_until_a_rank_registers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No rank, no scan (an idle agent scanned 100 times a second); a registration wakes
    the scanner at once, and stop() ends an idle loop without waiting out its sleep."""
    agent = Agent(AgentConfig("lo", tmp_path / "a.sock"), LocalTagHub(), cast(Tagger, FakeTagger()))
    scans: list[float] = []
    real_scan = agent.scan_once

    def counted() -> bool:
        scans.append(time.monotonic())
        return real_scan()

    monkeypatch.setattr(agent, "scan_once", counted)
    agent.start()
    try:
        time.sleep(0.3)
        assert scans == []
        registered = time.monotonic()
        reply = ask(agent, {"op": "register", "job": "j", "rank": 0, "nprocs": 2, "job_slot": 3})
        assert reply["ok"] is True
        time.sleep(0.3)
        assert scans and scans[0] - registered < 0.2
    finally:
        stopping = time.monotonic()
        agent.stop()
    assert time.monotonic() - stopping < 0.5


def test_a_rank_that_does_not_tag_is_never_scanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank registered with ``"tag": false`` (register or bcast mode alone) wakes no
    scanner and its sockets are never read, though it is registered (status) and has a
    job slot; a rank that tags, registered beside it, is scanned and only it (the scan
    only feeds the tagger; it ran every 10 ms for 5 s after any registration)."""
    agent = Agent(AgentConfig("lo", tmp_path / "a.sock"), LocalTagHub(), cast(Tagger, FakeTagger()))
    scans: list[float] = []
    read: list[int] = []
    real_scan = agent.scan_once

    def counted() -> bool:
        scans.append(time.monotonic())
        return real_scan()

    def sockets(pid: int) -> list[Any]:
        read.append(pid)
        return []

    monkeypatch.setattr(agent, "scan_once", counted)
    monkeypatch.setattr("sdnmpi.node.procnet.process_sockets", sockets)
    agent.start()
    try:
        req = {"op": "register", "job": "j", "rank": 0, "nprocs": 2, "job_slot": 3}
        assert ask(agent, {**req, "tag": False})["ok"] is True
        read.clear()  # the reply's listening ports were read once
        time.sleep(0.3)
        assert scans == [] and read == []
        assert [r["rank"] for r in ask(agent, {"op": "status"})["ranks"]] == [0]
        assert agent.scan_once() is True and read == []  # nothing to scan but itself
        other = os.getpid() + 1_000_000  # a pid no process has: scanned, then dropped
        assert ask(agent, {**req, "rank": 1, "tag": True}, pid=other)["ok"] is True
        read.clear()
        time.sleep(0.3)
        assert read and set(read) == {other}
    finally:
        agent.stop()
