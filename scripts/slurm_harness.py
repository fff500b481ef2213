"""A real Slurm on the emulated cluster for experiments: controller, fabric, manager, Slurm.

:func:`stack` brings up, in order, the controller and the emulated fabric
(``demo_fabric.cluster``: it holds the machine's fabric lock), ``sdnmpi manager run``
(SQLite in the work directory) and Slurm (slurmctld on the first host, one slurmd
per host, the SPANK plugin pointed at the manager), and takes all of it down
afterwards, also on error.  :func:`srun` runs one step and returns its wall time
and output.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import demo_fabric as harness

from sdnmpi.emu import slurm
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT
from sdnmpi.manager.client import ManagerClient
from sdnmpi.manager.model import ManagerError
from sdnmpi.wire import manager_pb2 as pb

log = harness.log
PLUGIN = harness.ROOT / "build" / "spank" / "sdnmpi_spank.so"


class Manager:
    """``sdnmpi manager run`` on one SQLite file, restartable with other options."""

    def __init__(self, workdir: Path, sock: Path, api: Path) -> None:
        self.sock, self.log_path = sock, workdir / "manager.log"
        self.argv = [*harness.CLI, "manager", "run", "--socket", str(sock)]
        self.argv += ["--db", str(workdir / "manager.db"), "--controller-api", str(api)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, rebalance: int = 8) -> None:
        self.stop()
        with self.log_path.open("ab") as out:
            argv = [*self.argv, "--rebalance", str(rebalance)]
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        harness.wait_for("the manager", self._serving, 30)

    def _serving(self) -> bool:
        if not self.sock.exists():
            return False
        try:
            with ManagerClient(f"unix:{self.sock}") as c:
                c.list_jobs()
        except ManagerError:  # not serving yet
            return False
        return True

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)
            self.proc = None

    def moves(self) -> int:
        """Running jobs moved for a new one so far (the manager's log lines)."""
        return self.log_path.read_text(errors="replace").count("moved for job")


@contextmanager
def stack(
    workdir: Path,
    topo: Any,
    name: str,
    link_scale: float,
    cpus: int,
    extra: tuple[str, ...] = (),
    plugin_args: dict[str, str] | None = None,
    logs_to: Path | None = None,
) -> Iterator[Any]:
    """Controller (``extra``: more ``controller run`` options, e.g. ``--router ecmp``),
    fabric, manager and Slurm with the plugin (``plugin_args`` added to its plugstack
    line); all torn down after, the daemons' logs first copied to ``logs_to`` if given.
    Yields ``(manager, slurm layout, controller)``."""
    nsw = len(topo.switches)
    with harness.cluster(workdir, topo, name, name, nsw, link_scale, extra) as ctl:
        sock = DEFAULT_STATE_ROOT / name / "manager.sock"
        mgr = Manager(workdir, sock, ctl.api_path)
        try:
            mgr.start()
            args = {"manager": f"unix:{sock}", "timeout": "60", **(plugin_args or {})}
            lay = slurm.up(name, plugin=PLUGIN, cpus=cpus, plugin_args=args)
            log(f"Slurm up: {len(topo.hosts)} nodes, manager {sock}")
            try:
                yield mgr, lay, ctl
            finally:
                if logs_to is not None:
                    keep_logs(logs_to, [*lay.dir.glob("*.log"), mgr.log_path, ctl.log_path])
                slurm.down(name)
        finally:
            mgr.stop()


def keep_logs(dest: Path, paths: list[Path]) -> None:
    """Copy the daemons' logs (what is left of them) to ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in paths:
        with contextlib.suppress(OSError):
            shutil.copyfile(path, dest / path.name)


def set_plugin(lay: slurm.SlurmLayout, text: str) -> None:
    """Rewrite plugstack.conf: Slurm reads it at every srun and step start."""
    lay.plugstack.write_text(text)


def srun(name: str, args: list[str], timeout_s: float = 300) -> tuple[float, str, str]:
    t0 = time.monotonic()
    res = slurm.run(name, ["srun", *args], capture=True, timeout_s=timeout_s)
    took = time.monotonic() - t0
    if res.returncode != 0:
        raise RuntimeError(
            f"srun {' '.join(args)} failed ({res.returncode}):\n{res.stderr[-3000:]}"
        )
    return took, res.stdout, res.stderr


@dataclass
class Stack:
    """What a job needs of the running stack: the manager and the controller."""

    mgr: Manager
    ctl: harness.Controller


def cleanup(fabric: str, job: str, st: Stack) -> str:
    """Cancel the job, finish its manager job, and say what was still there after."""
    slurm.run(fabric, ["scancel", "-n", job], capture=True, timeout_s=30)

    def gone() -> bool:
        res = slurm.run(fabric, ["squeue", "-h", "-n", job], capture=True, timeout_s=30)
        return not res.stdout.strip()

    with contextlib.suppress(RuntimeError):
        harness.wait_for(f"job {job} to end", gone, 60)
    with ManagerClient(f"unix:{st.mgr.sock}") as c:
        for j in c.list_jobs():
            if j.state != pb.JOB_STATE_FINISHED:
                c.finish_job(j.job_id)
    rules, _ = st.ctl.api({"op": "jobs"})
    left = [f"Slurm job {job}"] if not gone() else []
    left += [f"controller job {j}" for j in rules.get("jobs", {})]
    return ", ".join(left) if left else "no job, job routes or rank left"


def last_routes(st: Stack) -> dict[str, Any]:
    """The newest manager job: its state and routes (flow-mods, install seconds)."""
    with ManagerClient(f"unix:{st.mgr.sock}") as c:
        jobs = c.list_jobs(include_finished=True)
    if not jobs:
        return {"job": None}
    j = max(jobs, key=lambda j: j.job_id)
    r = j.routes
    return {
        "job": j.job_id,
        "state": pb.JobState.Name(j.state),
        "detail": r.detail,
        "pairs": r.pairs,
        "flow_mods": r.flow_mods,
        "install_s": r.install_s,
    }
