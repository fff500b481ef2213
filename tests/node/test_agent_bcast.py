"""The agent's ``bcast_open`` / ``bcast_close`` (issue 14) without root: who may ask, what
is checked before anything reaches the controller, and what is relayed (a stand-in
controller on a Unix socket speaking docs/controller-api.md)."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from sdnmpi.node.agent import Agent, AgentConfig, LocalTagHub, RemoteTagHub
from sdnmpi.node.bpf import Tagger
from tests.node.test_agent_requests import FakeTagger, ask


class Controller:
    """A stand-in controller: records requests, answers from ``replies`` by op."""

    def __init__(self, path: Path) -> None:
        self.seen: list[dict[str, Any]] = []
        self.replies: dict[str, dict[str, Any]] = {
            "tag_join": {"ok": True, "job_slot": 3, "complete": False},
            "tag_bcast_open": {"ok": True, "group": "239.192.0.7", "port": 47000, "cached": False},
            "tag_bcast_close": {"ok": True},
            "tag_leave": {"ok": True, "job_done": False},
        }
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                req = json.loads(line)
                self.seen.append(req)
                stream.write(json.dumps(self.replies[req["op"]]).encode() + b"\n")
                stream.flush()

    def close(self) -> None:
        self.server.close()
        self.thread.join(timeout=5)


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    ctl = Controller(tmp_path / "api.sock")
    yield ctl
    ctl.close()


@pytest.fixture
def agent(tmp_path: Path, controller: Controller) -> Iterator[Agent]:
    hub = RemoteTagHub(tmp_path / "api.sock", "h2", timeout_s=5.0)
    agent = Agent(AgentConfig("lo", tmp_path / "a.sock"), hub, cast(Tagger, FakeTagger()))
    yield agent
    hub.close()


def register(agent: Agent, rank: int = 1, nprocs: int = 4) -> None:
    reply = ask(agent, {"op": "register", "job": "77", "rank": rank, "nprocs": nprocs})
    assert reply["ok"], reply


def test_open_and_close_are_relayed_for_the_ranks_own_job(
    agent: Agent, controller: Controller
) -> None:
    register(agent)
    reply = ask(agent, {"op": "bcast_open", "comm": [3, 0, 1], "root": 0})
    assert reply == {"ok": True, "group": "239.192.0.7", "port": 47000}
    assert ask(agent, {"op": "bcast_close", "group": "239.192.0.7"}) == {"ok": True}
    assert controller.seen[1:] == [
        {"op": "tag_bcast_open", "job": "77", "root": 0, "ranks": [3, 0, 1]},
        {"op": "tag_bcast_close", "job": "77", "group": "239.192.0.7"},
    ]


def test_the_controllers_refusal_reaches_the_rank_as_one_line(
    agent: Agent, controller: Controller
) -> None:
    register(agent)
    why = "switch leaf1 carries 1024 broadcast groups, the most allowed per switch"
    controller.replies["tag_bcast_open"] = {"ok": False, "error": why}
    assert ask(agent, {"op": "bcast_open", "comm": [0, 1], "root": 1}) == {
        "ok": False,
        "error": why,
    }


def test_an_unregistered_process_may_not_ask(agent: Agent, controller: Controller) -> None:
    reply = ask(agent, {"op": "bcast_open", "comm": [0, 1], "root": 0})
    assert reply["ok"] is False and "not registered" in reply["error"]
    register(agent)
    other = ask(agent, {"op": "bcast_open", "comm": [0, 1], "root": 0}, pid=os.getpid() + 1)
    assert other["ok"] is False and "not registered" in other["error"]
    assert [r["op"] for r in controller.seen] == ["tag_join"]  # nothing relayed


@pytest.mark.parametrize(
    ("request_", "needle"),
    [
        ({"op": "bcast_open", "comm": [], "root": 0}, "non-empty list"),
        ({"op": "bcast_open", "comm": "0,1", "root": 0}, "non-empty list"),
        ({"op": "bcast_open", "comm": [0, 4], "root": 0}, "comm rank 4 is not a world rank 0..3"),
        ({"op": "bcast_open", "comm": [0, -1], "root": 0}, "comm rank -1"),
        ({"op": "bcast_open", "comm": [0, True], "root": 0}, "comm rank True"),
        ({"op": "bcast_open", "comm": [0, None], "root": 0}, "comm rank None"),
        ({"op": "bcast_open", "comm": [0, 1, 1], "root": 0}, "in comm twice"),
        ({"op": "bcast_open", "comm": list(range(5)), "root": 0}, "comm has 5 ranks, the job 4"),
        ({"op": "bcast_open", "comm": list(range(10**5)), "root": 0}, "comm has 100000 ranks"),
        ({"op": "bcast_open", "comm": [0, 1], "root": 2}, "root 2 is not a rank of comm"),
        ({"op": "bcast_open", "comm": [0, 1], "root": "0"}, "root '0' is not a rank"),
        ({"op": "bcast_open", "comm": [0, 1]}, "missing ['root']"),
        ({"op": "bcast_open", "comm": [0, 1], "root": 0, "job": "other"}, "unknown ['job']"),
        ({"op": "bcast_close"}, "missing ['group']"),
        ({"op": "bcast_close", "group": "10.0.0.1"}, "not an IPv4 multicast address"),
        ({"op": "bcast_close", "group": 239}, "not an IPv4 multicast address"),
        ({"op": "bcast_close", "group": "239.1.1.1", "x": 1}, "unknown ['x']"),
    ],
)
def test_bad_requests_never_reach_the_controller(
    agent: Agent, controller: Controller, request_: dict[str, Any], needle: str
) -> None:
    register(agent)
    reply = ask(agent, request_)
    assert reply["ok"] is False and needle in reply["error"], reply
    assert [r["op"] for r in controller.seen] == ["tag_join"]


def test_without_a_controller_the_rank_is_told_so(tmp_path: Path) -> None:
    agent = Agent(AgentConfig("lo", tmp_path / "a.sock"), LocalTagHub(), cast(Tagger, FakeTagger()))
    register(agent)
    reply = ask(agent, {"op": "bcast_open", "comm": [0, 1], "root": 0})
    assert reply["ok"] is False and "need the controller" in reply["error"]


def test_an_unreachable_controller_is_one_line(tmp_path: Path) -> None:
    hub = RemoteTagHub(tmp_path / "nobody.sock", "h1", timeout_s=0.5)
    assert hub.bcast_open("77", 0, [0, 1]) == {
        "ok": False,
        "error": "tag_bcast_open: the controller is unreachable",
    }
