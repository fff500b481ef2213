"""The controller's API from both sides: the one client (:mod:`sdnmpi.wire.controller_api`)
against a socket that answers as told, and what it sends parsed by the controller's
own request parser."""

from __future__ import annotations

import contextlib
import doctest
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sdnmpi.controller.api import parse_request
from sdnmpi.errors import FormatError
from sdnmpi.wire import controller_api
from sdnmpi.wire.controller_api import (
    Client,
    ControllerRefusedError,
    ControllerUnreachableError,
    decode_pairs,
    encode_pairs,
    pair_key,
    split_pair_key,
)

Answer = Callable[[dict[str, Any]], bytes]


class Server:
    """A Unix socket at ``path`` answering each request line with ``answer(request)``;
    ``one_reply``: close each connection after its first reply (a restarted controller)."""

    def __init__(self, path: Path, answer: Answer, *, one_reply: bool = False) -> None:
        self.path, self.answer, self.one_reply = path, answer, one_reply
        self.requests: list[dict[str, Any]] = []
        self.lines: list[bytes] = []
        self.connections = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn, conn.makefile("rb") as lines, contextlib.suppress(OSError):
                for line in lines:  # a client that gave up closes: broken pipe, fine
                    self.lines.append(line)
                    self.requests.append(json.loads(line))
                    conn.sendall(self.answer(self.requests[-1]))
                    if self.one_reply:
                        break

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(answer: Answer, **kw: Any) -> Server:
        servers.append(Server(tmp_path / f"api{len(servers)}.sock", answer, **kw))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def ok(**fields: Any) -> Answer:
    return lambda req: json.dumps({"ok": True, **fields}).encode() + b"\n"


def test_module_examples() -> None:
    assert doctest.testmod(controller_api).failed == 0


def test_pair_keys_round_trip_and_refuse_what_they_cannot_carry() -> None:
    pairs = {("h1", "h3"): ["h1", "leaf1", "spine2", "leaf2", "h3"], ("h3", "h1"): ["h3", "h1"]}
    assert decode_pairs(encode_pairs(pairs)) == pairs
    assert split_pair_key(pair_key("node01", "node20")) == ("node01", "node20")
    with pytest.raises(FormatError, match="may not contain"):
        pair_key("a>b", "c")
    for bad in ("h1", "h1>", ">h3", "h1>h2>h3", 7):
        with pytest.raises(FormatError, match="src>dst"):
            split_pair_key(bad)
    raws: list[object] = [[], {"h1>h3": "h1 h3"}, {"h1>h3": ["h1", 3]}]
    for raw in raws:
        with pytest.raises(FormatError):
            decode_pairs(raw)


def test_what_the_client_sends_the_controller_parses(serve: Callable[..., Server]) -> None:
    srv = serve(ok(job_id=4, flow_mods=6, switches=3, seconds=0.01))
    path = ["h1", "leaf1", "spine1", "leaf3", "h5"]
    done = Client(srv.path).install_job(4, {("h1", "h5"): path})
    assert done == controller_api.Installed(4, 6, 3, 0.01)
    assert parse_request(srv.lines[-1]) == ("install_job", 4, {("h1", "h5"): path})
    Client(srv.path).remove_job(4)
    assert parse_request(srv.lines[-1]) == ("remove_job", 4, {})
    for req in srv.requests:  # every request has exactly the keys its op takes
        assert set(req) == controller_api.OPS[req["op"]]


def test_typed_replies(serve: Callable[..., Server]) -> None:
    def answer(req: dict[str, Any]) -> bytes:
        replies: dict[str, dict[str, Any]] = {
            "jobs": {"jobs": {"7": {"h1>h3": ["h1", "s", "h3"]}}},
            "measure_read": {"bytes": {"h1>h3": 1200, "h3>h1": 0}},
            "tag_join": {"job_slot": 9},
            "tag_conn": {"peer": None},
            "tag_push": {"cached": True},
            "tag_bcast_open": {"group": "239.192.0.3", "port": 47000, "cached": False},
        }
        return json.dumps({"ok": True, **replies.get(req["op"], {})}).encode() + b"\n"

    api = Client(serve(answer).path)
    assert api.jobs() == {7: {("h1", "h3"): ["h1", "s", "h3"]}}
    assert api.measure_read(2**40) == {("h1", "h3"): 1200, ("h3", "h1"): 0}
    assert api.tag_join("j", 0, 4, "h1") == 9
    assert api.tag_conn("j", 0, "10.0.0.1:4000", "10.0.0.2:5000") is None
    assert api.tag_push("j", {"name": "bcast"}) is True
    got = api.tag_bcast_open("j", 1, [0, 1, 2])
    assert got == controller_api.BcastGroup("239.192.0.3", 47000, cached=False)
    api.tag_bcast_close("j", "239.192.0.3")


def test_bcast_requests_have_their_ops_keys_and_bad_replies_are_unreachable(
    serve: Callable[..., Server],
) -> None:
    srv = serve(lambda req: b'{"ok": true, "group": 5, "port": 47000}\n')
    api = Client(srv.path)
    with pytest.raises(ControllerUnreachableError, match="bad tag_bcast_open reply"):
        api.tag_bcast_open("j", 0, (0, 1))
    api.tag_bcast_close("j", "239.192.0.1")
    assert srv.requests == [
        {"op": "tag_bcast_open", "job": "j", "root": 0, "ranks": [0, 1]},
        {"op": "tag_bcast_close", "job": "j", "group": "239.192.0.1"},
    ]
    for req in srv.requests:
        assert set(req) == controller_api.OPS[req["op"]]


def test_a_refusal_carries_the_op_and_the_reason(serve: Callable[..., Server]) -> None:
    srv = serve(lambda req: b'{"ok": false, "error": "the fabric is not discovered yet"}\n')
    api = Client(srv.path)
    with pytest.raises(ControllerRefusedError, match=r"install_job: the fabric is not disc"):
        api.install_job(1, {})
    assert api.send({"op": "jobs"})["ok"] is False  # send returns what came back


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (b"{not json\n", "not JSON"),
        (b"[1, 2]\n", "not an object"),
        (b"", "connection closed"),
        (b'{"ok": true}', "connection closed"),  # no end of line before the close
        (b'{"ok": true, "jobs": []}\n', "no jobs object"),
        (b'{"ok": true, "jobs": {"x": {}}}\n', "bad jobs reply"),
    ],
)
def test_garbage_is_unreachable(serve: Callable[..., Server], reply: bytes, why: str) -> None:
    srv = serve(lambda req: reply, one_reply=True)
    with pytest.raises(ControllerUnreachableError, match=why):
        Client(srv.path, timeout_s=2).jobs()


def test_a_missing_or_silent_controller_is_unreachable(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    with pytest.raises(ControllerUnreachableError, match=r"nobody\.sock"):
        Client(tmp_path / "nobody.sock").jobs()
    silent = threading.Event()
    srv = serve(lambda req: (silent.wait(2), b"")[1])  # answers after the client gave up
    with pytest.raises(ControllerUnreachableError, match="timed out"):
        Client(srv.path, timeout_s=0.2).jobs()
    silent.set()


def test_connections_per_request_or_kept_across_a_restart(
    serve: Callable[..., Server],
) -> None:
    once = serve(ok(jobs={}))
    api = Client(once.path)
    api.jobs()
    api.jobs()
    assert once.connections == 2  # one per request
    kept_srv = serve(ok(jobs={}))
    kept = Client(kept_srv.path, persistent=True)
    for _ in range(3):
        kept.jobs()
    assert kept_srv.connections == 1
    restarting = serve(ok(jobs={}), one_reply=True)  # closes after each reply
    again = Client(restarting.path, persistent=True)
    for _ in range(3):
        assert again.jobs() == {}
    assert restarting.connections == 3  # each dead connection replaced once, silently
    again.close()


def test_inspection_requests_are_what_the_controller_checks(serve: Callable[..., Server]) -> None:
    from sdnmpi.controller import inspectapi

    srv = serve(ok())
    api = Client(srv.path)
    api.route_trace("h1", "h3")
    api.route_trace(0, 1, job="7", primitive="bcast", source="intended")
    api.route_table("leaf1")
    api.status()
    assert [r["op"] for r in srv.requests] == ["route_trace"] * 2 + ["route_table", "status"]
    assert srv.requests[1] == {"op": "route_trace", "src": 0, "dst": 1, "job": "7",
                               "primitive": "bcast", "source": "intended"}  # fmt: skip
    for req in srv.requests:
        assert set(req) <= controller_api.OPS[req["op"]]
        assert inspectapi.check(req) == req["op"]


def test_a_request_longer_than_the_controller_reads_is_not_sent(
    serve: Callable[..., Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = serve(ok(flow_mods=0, switches=0, seconds=0.0))
    monkeypatch.setattr(controller_api, "MAX_REQUEST_BYTES", 200)
    client = Client(srv.path, timeout_s=2)
    small = {("h1", "h2"): ["h1", "s1", "h2"]}
    client.install_job(1, small)
    big = {(f"h{i}", f"h{i + 1}"): [f"h{i}", "s1", f"h{i + 1}"] for i in range(20)}
    with pytest.raises(controller_api.ControllerApiError, match="more than the 200 the controller"):
        client.install_job(2, big)
    assert [r["job_id"] for r in srv.requests] == [1] and srv.connections == 1
