"""Bringing emulated fabrics up and down: crashes, failed ``up``, controller connection.

Each test uses its own fabric (leaf_spine(1, 2, 2)) and the ``fabrics`` fixture
checks afterwards that no namespace, interface, file or OVS daemon is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import runner, slurm
from sdnmpi.emu.naming import netns_name
from sdnmpi.emu.plan import make_plan
from tests.emu.support import (
    Fabrics,
    assert_clean,
    daemon_pids,
    ofctl,
    require_root_and_tools,
    sdnmpi,
    unique_name,
)

pytestmark = [pytest.mark.root, pytest.mark.integration]


def test_crash_then_down_cleans_everything(fabrics: Fabrics):
    plan = fabrics.up("crash")
    pids = daemon_pids(plan)
    assert len(pids) == 2
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    res = sdnmpi("emu", "down", "--name", plan.name)
    assert res.returncode == 0, res.stderr
    assert_clean(plan, pids)
    again = sdnmpi("emu", "down", "--name", plan.name)
    assert again.returncode == 0 and "not up" in again.stdout


def test_up_refuses_to_take_over_existing_things(small_topology: Path):
    """Something of the fabric's already exists (here h3's /etc/netns entry): exit 2, no change."""
    require_root_and_tools()
    name = unique_name("clash")
    blocker = Path("/etc/netns") / netns_name(name, "h3")
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not ours\n")
    try:
        res = sdnmpi("emu", "up", "--topology", str(small_topology), "--name", name)
        assert res.returncode == 2, res.stderr
        assert "already exist" in res.stderr and str(blocker) in res.stderr
        assert blocker.read_text() == "not ours\n"
    finally:
        blocker.unlink()
    assert_clean(make_plan(leaf_spine(1, 2, 2), name), [])


def test_failed_up_rolls_back(monkeypatch: pytest.MonkeyPatch):
    """A step fails half-way (adding h3's uplink): ``up`` removes everything it made."""
    require_root_and_tools()
    name = unique_name("fail")
    real = runner.run_cmd
    seen: list[tuple[str, ...]] = []

    def failing(argv: tuple[str, ...], env: dict[str, str] | None = None) -> str:
        seen.append(argv)
        if argv[:3] == ("ip", "link", "add") and f"sdnmpi-{name}-h3" in argv:
            raise runner.EmuError("injected failure")
        return real(argv, env)

    monkeypatch.setattr(runner, "run_cmd", failing)
    plan = make_plan(leaf_spine(1, 2, 2), name)
    with pytest.raises(runner.EmuError, match="injected"):
        runner.up(leaf_spine(1, 2, 2), name)
    monkeypatch.setattr(runner, "run_cmd", real)
    assert any(a[:3] == ("ip", "netns", "add") for a in seen)  # it did get half-way
    assert_clean(plan, [])


class FakeController:
    """Just enough OpenFlow 1.3 for OVS to count as connected: HELLO and echo replies."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.conns.append(conn)
            conn.sendall(struct.pack("!BBHI", 4, 0, 8, 1))  # OFPT_HELLO
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not self.stop.is_set():
                head = conn.recv(8, socket.MSG_WAITALL)
                if len(head) < 8:
                    return
                version, kind, length, xid = struct.unpack("!BBHI", head)
                body = conn.recv(length - 8, socket.MSG_WAITALL) if length > 8 else b""
                if kind == 2:  # ECHO_REQUEST -> ECHO_REPLY
                    conn.sendall(struct.pack("!BBHI", version, 3, length, xid) + body)

    def close(self) -> None:
        self.stop.set()
        for conn in self.conns:
            conn.close()
        self.server.close()


@pytest.fixture
def controller() -> Iterator[FakeController]:
    ctl = FakeController()
    try:
        yield ctl
    finally:
        ctl.close()


def test_controller_connection_and_status(fabrics: Fabrics, controller: FakeController):
    target = f"tcp:127.0.0.1:{controller.port}"
    plan = fabrics.up("ctl", "--controller", target)
    deadline = time.monotonic() + 15
    while True:
        status = json.loads(sdnmpi("emu", "status", "--name", plan.name, "--json").stdout)
        connected = [b["controller_connected"] for b in status["bridges"]]
        if all(connected) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert connected == [True, True, True]
    assert status["controller"] == target
    assert len(controller.conns) >= 3
    table = sdnmpi("emu", "status", "--name", plan.name)
    assert table.returncode == 0 and "spine1" in table.stdout
    # secure fail mode: no flows of its own, nothing forwarded without the controller
    for b in plan.bridges:
        assert "actions=" not in ofctl(plan, "dump-flows", b.bridge)


def test_l2_learning_forwards_on_a_loop_free_fabric(fabrics: Fabrics):
    plan = fabrics.up("l2", "--l2-learning")
    res = sdnmpi("emu", "exec", "h1", "--name", plan.name, "--", "ping", "-c", "2", "-W", "2", "h4")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "actions=NORMAL" in ofctl(plan, "dump-flows", plan.bridges[0].bridge)
    # a stray process in a host namespace does not keep the fabric alive after down
    sdnmpi(
        "emu", "exec", "h2", "--name", plan.name, "--", "sh", "-c", "sleep 300 >/dev/null 2>&1 &"
    )


def test_down_stale_removes_a_crashed_fabric_and_keeps_a_live_one(fabrics: Fabrics):
    """What a run killed before its teardown leaves (the switch daemons gone, everything
    else there, Slurm's daemons included) blocks the next ``emu up``: ``emu down
    --stale`` removes it, and leaves a fabric whose daemons run alone."""
    plan = fabrics.up("stale", "--l2-learning")  # Slurm needs traffic between hosts
    lay = slurm.up(plan.name)
    slurmds = list(json.loads(lay.daemons.read_text()).values())
    live = sdnmpi("emu", "down", "--stale")
    assert live.returncode == 0, live.stderr
    assert plan.name not in live.stdout and plan.state_dir.exists()
    assert all(_runs(pid) for pid in slurmds)
    pids = daemon_pids(plan)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    res = sdnmpi("emu", "down", "--stale")
    assert res.returncode == 0, res.stderr
    assert f"stale fabrics removed: {plan.name}" in res.stdout
    assert_clean(plan, pids)
    assert not [pid for pid in slurmds if _runs(pid)]


def _runs(pid: int) -> bool:
    """``pid`` exists and is not a zombie (this process started Slurm's daemons)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
