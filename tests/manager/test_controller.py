"""The controller adapter against the controller's real API handler, in process on a Unix
socket (its planner on the fake OpenFlow network)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdnmpi.controller import Planner, PlannerConfig
from sdnmpi.controller.api import ApiHandler
from sdnmpi.core.topology import Topology
from sdnmpi.manager.client import ManagerClient
from sdnmpi.manager.controller_client import ControllerClient
from sdnmpi.manager.model import Kind, ManagerError, ResyncPendingError
from sdnmpi.testing import FakeClock, FakeOFNetwork, discover
from sdnmpi.wire import manager_pb2 as pb
from sdnmpi.wire.controller_api import encode_pairs
from tests.manager.test_server import write_pattern


class InProcessController:
    """The controller's real API handler (:class:`ApiHandler`) over a planner and the fake
    OpenFlow network, served on a Unix socket in this process (no os-ken, no switches).

    ``fail``: answer every request with this error instead (a controller refusing all);
    :meth:`restart`: a controller restarted without its state file."""

    def __init__(self, path: Path, topo: Topology) -> None:
        self.topo = topo
        self.requests: list[dict[str, Any]] = []
        self.fail: str | None = None
        self.retry = False  # with ``fail``: the reply says retry (a switch reconnecting)
        self.last: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.restart()
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(8)
        threading.Thread(target=self._loop, daemon=True).start()

    def restart(self) -> None:
        with self.lock:
            self.network = FakeOFNetwork(self.topo)
            self.planner = Planner(self.topo, PlannerConfig(router="dmodk"))
            self.network.apply(discover(self.planner, self.topo))
            self.api = ApiHandler(self.planner)
            self.api.synced = True

    @property
    def jobs(self) -> dict[str, dict[str, list[str]]]:
        """The job routes the controller holds, as its ``jobs`` reply has them."""
        with self.lock:
            return {str(job): encode_pairs(p) for job, p in self.api.job_pairs.items()}

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            # a client killed mid-request (test_kill) resets its connection: serve the next
            with contextlib.suppress(OSError), conn, conn.makefile("rwb") as stream:
                for line in stream:
                    stream.write(json.dumps(self.answer(json.loads(line))).encode() + b"\n")
                    stream.flush()

    def answer(self, req: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(req)
        if self.fail:
            return {"ok": False, "error": self.fail} | ({"retry": True} if self.retry else {})
        with self.lock:
            answer = self.api.handle(json.dumps(req).encode())
            self.network.apply(answer.messages)
            self.last = answer.complete(True, 0.0)
            return self.last


@pytest.fixture
def standin(sock_dir: Path, topo: Topology) -> Iterator[InProcessController]:
    s = InProcessController(sock_dir / "ctl.sock", topo)
    yield s
    s.server.close()


def test_ops_round_trip(standin: InProcessController, sock_dir: Path, topo: Topology):
    clock = FakeClock()
    ctl = ControllerClient(sock_dir / "ctl.sock", clock=clock)
    first = ctl.topology()
    assert [h.name for h in first.hosts] == [h.name for h in topo.hosts]
    ctl.topology()
    assert [r["op"] for r in standin.requests] == ["topology"]  # cached
    clock.advance(5)
    assert ctl.topology() is first  # asked again, unchanged: the same object (its tables)
    assert len(standin.requests) == 2
    path = ["h1", "leaf1", "spine1", "leaf2", "h5"]
    result = ctl.install(4, {("h1", "h5"): path})
    assert (result.flow_mods, result.switches) == (
        standin.last["flow_mods"],
        standin.last["switches"],
    )
    assert result.flow_mods > 0
    assert standin.requests[-1] == {"op": "install_job", "job_id": 4, "pairs": {"h1>h5": path}}
    assert ctl.jobs() == {4: {("h1", "h5"): path}}
    ctl.remove(4)
    assert ctl.jobs() == {}
    before = len(standin.requests)
    ctl.remove(4)  # nothing held: asks, and sends no remove_job (which would be refused)
    assert [r["op"] for r in standin.requests[before:]] == ["jobs"]


def test_refusal_and_absence_are_unavailable(standin: InProcessController, sock_dir: Path):
    standin.fail = "the fabric is not discovered yet"
    ctl = ControllerClient(sock_dir / "ctl.sock")
    with pytest.raises(ManagerError, match="not discovered") as exc:
        ctl.jobs()
    assert exc.value.kind is Kind.UNAVAILABLE
    gone = ControllerClient(sock_dir / "missing.sock")
    with pytest.raises(ManagerError, match=r"missing\.sock") as exc:
        gone.topology()
    assert exc.value.kind is Kind.UNAVAILABLE


def test_an_install_taken_back_for_a_reconnecting_switch_says_so(
    standin: InProcessController, sock_dir: Path
):
    """The controller's ``retry`` (a switch disconnected before confirming) becomes
    :class:`ResyncPendingError` (the manager plans again after a wait); a refusal
    without it stays a plain UNAVAILABLE."""
    ctl = ControllerClient(sock_dir / "ctl.sock")
    path = ["h1", "leaf1", "spine1", "leaf2", "h5"]
    standin.fail, standin.retry = "switch 0x1 disconnected before confirming", True
    with pytest.raises(ResyncPendingError, match="disconnected") as exc:
        ctl.install(4, {("h1", "h5"): path})
    assert exc.value.kind is Kind.UNAVAILABLE
    standin.retry = False
    with pytest.raises(ManagerError) as refused:
        ctl.install(4, {("h1", "h5"): path})
    assert not isinstance(refused.value, ResyncPendingError)


def _start_manager(sock_dir: Path, name: str) -> subprocess.Popen[str]:
    sock = sock_dir / f"{name}.sock"
    sock.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-c",
        "from sdnmpi.cli.main import main; main()",
        "manager",
        "run",
        "--socket",
        str(sock),
        "--db",
        str(sock_dir / "run.db"),
        "--controller-api",
        str(sock_dir / "ctl.sock"),
        "--log-level",
        "warning",
        "--metrics-port",
        "0",
    ]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not sock.exists():
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read() if proc.stderr else "manager died")
        assert time.monotonic() < deadline, "manager did not start"
        time.sleep(0.05)
    return proc


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.terminate()
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return err


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_manager_run_command_against_the_controller(standin: InProcessController, sock_dir: Path):
    """``sdnmpi manager run`` end to end: routes reach the controller, SIGTERM ends it."""
    proc = _start_manager(sock_dir, "run")
    try:
        with ManagerClient(str(sock_dir / "run.sock")) as c:
            c.create_job(3, "e2e", 0, 2, pattern_file=write_pattern(sock_dir / "p.json"))
            c.start_job(3)
            c.register_process(3, 0, "h1")
            c.register_process(3, 1, "h5")
            assert c.wait_routes(3, 5000).installed
            assert "3" in standin.jobs
            c.finish_job(3)
            assert standin.jobs == {}
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_sigkill_mid_job_then_restart(standin: InProcessController, sock_dir: Path):
    """Issue 6's target: the manager is killed with SIGKILL during a job; after a restart
    the job's routes are known (reinstalled where the controller lost them) and removed
    at job end, leaving no flow behind."""
    first = _start_manager(sock_dir, "a")
    try:
        with ManagerClient(str(sock_dir / "a.sock")) as c:
            c.create_job(8, "long", 0, 2, pattern_file=write_pattern(sock_dir / "p.json"))
            c.start_job(8)
            c.register_process(8, 0, "h1")
            c.register_process(8, 1, "h5")
            assert c.wait_routes(8, 5000).installed
        routes = dict(standin.jobs)
        first.kill()
    finally:
        _stop(first)  # a failed step above leaves no manager running
    standin.restart()  # the controller restarted too, without its state
    other = {
        "op": "install_job",
        "job_id": 77,
        "pairs": {"h2>h6": ["h2", "leaf1", "spine2", "leaf2", "h6"]},
    }
    assert standin.answer(other)["ok"]  # a job that is not the manager's
    second = _start_manager(sock_dir, "b")
    try:
        assert standin.jobs == routes
        with ManagerClient(str(sock_dir / "b.sock")) as c:
            assert c.get_job(8).state == pb.JOB_STATE_ROUTED
            c.finish_job(8)
        assert standin.jobs == {}
    finally:
        err = _stop(second)
    assert second.returncode == 0, err
