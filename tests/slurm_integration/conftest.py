"""A real Slurm on the emulated fabric, with the manager and the SPANK plugin.

Module fixture: the controller and ``leaf_spine(2, 2, 2)`` (h1, h2 on leaf1; h3,
h4 on leaf2), ``sdnmpi manager run`` (SQLite in the test's directory) on the
controller's API, and ``sdnmpi emu slurm up`` with ``build/spank/sdnmpi_spank.so``
pointed at the manager.  Everything is torn down by PID and by ``emu down``.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sdnmpi import catalog
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.emu import slurm
from sdnmpi.emu.plan import FabricPlan
from sdnmpi.testing.waits import wait_for
from tests.controller_integration.support import Controller, api, controlled_fabric
from tests.emu.support import require_root_and_tools

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()"]
BENCH = ROOT / "build" / "openmpi" / "sdnmpi-bench"
PLUGIN = ROOT / "build" / "spank" / "sdnmpi_spank.so"


def shift_pattern(nprocs: int, shift: int, size: int) -> Pattern:
    """What ``sdnmpi-bench pairs --oneway --shift S`` sends: r -> r + S for (r / S) even."""
    cells = [(r, r + shift, size) for r in range(nprocs) if (r // shift) % 2 == 0]
    return Pattern("pairs-oneway", nprocs, (Phase.from_cells(f"shift {shift}", cells),))


class Manager:
    """``sdnmpi manager run`` as a child process (SQLite file kept across restarts)."""

    def __init__(self, workdir: Path, controller_api: Path, socket_path: Path) -> None:
        self.socket = socket_path
        self.db = workdir / "manager.db"
        self.log_path = workdir / "manager.log"
        self.controller_api = controller_api
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [*CLI, "manager", "run", "--socket", str(self.socket), "--db", str(self.db)]
        argv += ["--controller-api", str(self.controller_api), "--log-level", "debug"]
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        wait_for("the manager to listen", self._listening, 30)

    def _listening(self) -> bool:
        """A connection succeeds (a killed manager leaves its socket file behind)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(self.socket))
            except OSError:
                return False
        return True

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class SlurmCluster:
    plan: FabricPlan
    controller: Controller
    manager: Manager
    workdir: Path

    def srun(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return slurm.run(self.plan.name, ["srun", *args], capture=True, timeout_s=timeout_s)

    def srun_async(self, *args: str) -> subprocess.Popen[str]:
        argv = [*CLI, "emu", "slurm", "run", "--name", self.plan.name, "--", "srun", *args]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def controller_jobs(self) -> dict[str, Any]:
        """The job routes the controller holds (its ``jobs`` op)."""
        reply = api(self.controller, {"op": "jobs"})
        assert reply["ok"] is True, reply
        jobs: dict[str, Any] = reply["jobs"]  # type: ignore[assignment]
        return jobs

    def slurmd_logs(self) -> str:
        d = slurm.layout(self.plan).dir
        return "".join(p.read_text(errors="replace") for p in sorted(d.glob("slurmd-*.log")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    require_root_and_tools()
    res = subprocess.run(["make", "-s", "-C", str(ROOT), "spank", "mpibench"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    workdir = tmp_path_factory.mktemp("slurm")
    workdir.chmod(0o755)
    with controlled_fabric(workdir, leaf_spine(2, 2, 2), "slm", "--router", "dmodk") as (plan, ctl):
        mgr = Manager(workdir, ctl.api_path, plan.state_dir / "manager.sock")
        try:
            mgr.start()
            for nprocs, shift in ((2, 1), (4, 2)):
                path = workdir / f"shift{nprocs}.json"
                catalog.save_pattern(shift_pattern(nprocs, shift, 1 << 20), path)
                put = subprocess.run([*CLI, "pattern", "put", f"shift{nprocs}", str(path),
                                      "--manager", str(mgr.socket)],
                                     capture_output=True, text=True, check=False)  # fmt: skip
                assert put.returncode == 0, put.stderr
            slurm.up(plan.name, plugin=PLUGIN,
                     plugin_args={"manager": f"unix:{mgr.socket}", "timeout": "15"})  # fmt: skip
            yield SlurmCluster(plan, ctl, mgr, workdir)
        finally:
            slurm.down(plan.name)
            mgr.stop()
