"""Issue 16: the emulated demo from the installed files only.  ``make install`` of the
working tree into a fresh prefix (tests/install/conftest.py), then the installed CLI
runs the controller, the fabric (its ECN marker: the installed ecn.bpf.o), the node
agents (the installed tagger.bpf.o) and a real Open MPI job under the installed
libsdnmpi.so, from another directory and without the checkout on PYTHONPATH.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi import catalog
from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import agents, runner
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT, make_plan
from sdnmpi.testing.waits import free_port, wait_for
from tests.emu.support import (
    assert_clean,
    daemon_pids,
    port_rx_bytes,
    require_root_and_tools,
    unique_name,
)
from tests.install.support import Installed, clean_env, run

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration, pytest.mark.slow]


class InstalledController:
    """The installed ``sdnmpi controller run`` as our child, stopped by its PID."""

    def __init__(self, inst: Installed, workdir: Path, topology: Path, *extra: str) -> None:
        self.port = free_port()
        self.api_path = workdir / "api.sock"
        self.log_path = workdir / "controller.log"
        argv = [str(inst.bin), "controller", "run", "--port", str(self.port), "--topology",
                str(topology), "--api-socket", str(self.api_path), "--stats-interval", "1",
                *extra]  # fmt: skip
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=clean_env(), cwd=workdir
            )
        wait_for("the controller to listen", lambda: "listening on" in self.log(), 30)

    def log(self) -> str:
        if self.proc.poll() is not None:
            raise AssertionError(f"controller exited:\n{self.log_path.read_text()}")
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)


@pytest.fixture
def demo_fabric(
    installed: Installed, tmp_path: Path
) -> Iterator[tuple[Path, str, InstalledController]]:
    require_root_and_tools()
    model = leaf_spine(2, 2, 2)
    topo = tmp_path / "topology.json"
    catalog.save_topology(model, topo)
    plan = make_plan(model, unique_name("inst"), state_root=DEFAULT_STATE_ROOT)
    cli = [str(installed.bin)]
    env = clean_env()
    pinned = ("--primitives", "bcast=pinned:spine1,reduce=pinned:spine2")
    ctl = InstalledController(installed, tmp_path, topo, *pinned)
    pids: list[int] = []
    try:
        run([*cli, "emu", "up", "--topology", str(topo), "--name", plan.name,
             "--controller", f"tcp:127.0.0.1:{ctl.port}"], env=env, cwd=tmp_path)  # fmt: skip
        pids = daemon_pids(plan)
        wait_for("LLDP discovery", lambda: "discovery complete" in ctl.log(), 60)
        run([*cli, "emu", "agents", "up", "--name", plan.name, "--controller-api",
             str(ctl.api_path)], env=env, cwd=tmp_path)  # fmt: skip
        yield tmp_path, plan.name, ctl
    finally:
        subprocess.run([*cli, "emu", "agents", "down", "--name", plan.name], env=env,
                       capture_output=True, check=False)  # fmt: skip
        ctl.stop()
        runner.down(plan.name)
        assert_clean(plan, pids)


def test_demo_runs_from_the_installed_files_only(
    installed: Installed, demo_fabric: tuple[Path, str, InstalledController]
) -> None:
    """Controller, fabric (ECN marker), node agents (tagger) and a real Open MPI job
    under LD_PRELOAD=libsdnmpi.so (tag mode), every program and object from the prefix:
    the Bcast loop's packets are tagged and cross spine1, as the pinned module says."""
    workdir, name, ctl = demo_fabric
    lib = installed.libdir / "openmpi"
    plan = make_plan(leaf_spine(2, 2, 2), name, state_root=DEFAULT_STATE_ROOT)
    spine1 = next(b.bridge for b in plan.bridges if b.switch == "spine1")
    spine2 = next(b.bridge for b in plan.bridges if b.switch == "spine2")
    size, iters = 1 << 20, 8
    sock = agents.socket_template(plan)
    env = [f"LD_PRELOAD={lib / 'libsdnmpi.so'}", "SDNMPI_MODE=tag", "SDNMPI_JOB=installed",
           f"SDNMPI_AGENT_SOCKET={sock}"]  # fmt: skip
    before = (sum(port_rx_bytes(plan, spine1).values()), sum(port_rx_bytes(plan, spine2).values()))
    argv = [str(installed.bin), "emu", "mpirun", "--name", name, "-n", "2", "--mpi", "openmpi",
            "--hosts", "h1,h3", "--timeout", "90", *(a for e in env for a in ("--env", e)),
            "--", str(lib / "sdnmpi-bench"), "coll", "--op", "bcast", "--size", str(size),
            "--iters", str(iters), "--warmup", "1", "--json"]  # fmt: skip
    res = run(argv, env=clean_env(), cwd=workdir, timeout=150)
    after = (sum(port_rx_bytes(plan, spine1).values()), sum(port_rx_bytes(plan, spine2).values()))
    moved = {"spine1": after[0] - before[0], "spine2": after[1] - before[1]}
    print(f"\ninstalled demo: spine bytes during the Bcast loop {moved}\n{res.stdout[-600:]}")
    assert "running untagged" not in res.stderr, res.stderr
    assert moved["spine1"] >= size * iters and moved["spine2"] < size * iters // 10, moved
    assert "listening on" in ctl.log()  # and the installed controller still runs
