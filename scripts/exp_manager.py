"""Many jobs on one fabric under Slurm (issue 6): start latency and concurrent jobs.

Run as root: ``.venv/bin/python scripts/exp_manager.py [--quick] [--json FILE]``
(``make exp-manager``).  Real slurmctld and slurmds in the emulated hosts, the
SPANK plugin, ``sdnmpi manager`` (SQLite) and the controller.

1. **Start latency** on ``milk`` (20 hosts, 8 CPUs each): ``srun -N20 -n160
   --comm-pattern=SPEC true``, repeated, against the same ``srun`` with the plugin
   removed from ``plugstack.conf`` (Slurm rereads it for every step).  Reported:
   srun's wall time both ways (the added start latency), and job start (the
   manager's job creation by slurmstepd) to routes installed (the last node's "routes
   installed" line in slurmd's log, measured by the plugin).
2. **Concurrent jobs** on ``leaf_spine(2, 4, 2)`` at 10 Mbit/s: 2 and 4 jobs of
   two ranks each, placed so that D-mod-K puts each leaf's two flows on one
   uplink; each job streams 2 MiB messages (``sdnmpi-bench pairs --oneway``).
   Each job's time per message with the manager's routes (the plugin on) vs
   default routes (the plugin off), all jobs started together.  Then four jobs
   arriving one by one in several orders, with the manager moving running jobs
   for a new one (``--rebalance 8``, the default) and without (``--rebalance 0``).

The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import demo_fabric as harness
from slurm_harness import Manager, set_plugin, srun, stack

from sdnmpi import catalog
from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import slurm
from sdnmpi.manager.client import ManagerClient
from sdnmpi.wire import manager_pb2 as pb

log = harness.log
#: (sender, receiver) of each job on leaf_spine(2, 4, 2) (h1, h2 on leaf1 ... h7, h8 on
#: leaf4): D-mod-K sends the first two over one uplink of leaf1 and one downlink of
#: leaf3/leaf4's spine, the last two likewise from leaf2; a conflict-free assignment exists.
JOBS = (("h1", "h6"), ("h2", "h8"), ("h3", "h7"), ("h4", "h5"))


def installed_at(lay: slurm.SlurmLayout, job_id: int) -> list[float]:
    """Unix times of the nodes' "routes installed" lines for ``job_id`` (slurmd logs)."""
    pat = re.compile(rf"^\[([0-9T:.-]+)\] .*sdnmpi: job {job_id} routes installed", re.M)
    out = []
    for path in lay.dir.glob("slurmd-*.log"):
        for stamp in pat.findall(path.read_text(errors="replace")):
            out.append(datetime.fromisoformat(stamp).timestamp())
    return out


def start_latency(workdir: Path, quick: bool) -> dict[str, Any]:
    topo = catalog.load_topology("milk")
    name = f"mgs-{os.getpid()}"
    reps = 2 if quick else 5
    spec = "stencil3d:nprocs=160"
    with stack(workdir, topo, name, 0.01, 8) as (mgr, lay, _ctl):
        with_plugin = lay.plugstack.read_text()
        plain: list[float] = []
        routed: list[float] = []
        to_routes: list[float] = []
        nodes_waited: list[int] = []
        for rep in range(reps):
            set_plugin(lay, "")
            plain.append(srun(name, ["-N20", "-n160", "true"])[0])
            set_plugin(lay, with_plugin)
            took, _, _ = srun(name, ["-N20", "-n160", f"--comm-pattern={spec}", "true"])
            routed.append(took)
            with ManagerClient(f"unix:{mgr.sock}") as c:
                job = max(c.list_jobs(include_finished=True), key=lambda j: j.job_id)
            stamps = installed_at(lay, job.job_id)
            nodes_waited.append(len(stamps))
            if stamps:
                to_routes.append(max(stamps) - job.created_unix_s)
            log(f"rep {rep + 1}: srun {plain[-1]:.2f} s plain, {took:.2f} s with routes; job "
                f"{job.job_id} routed {job.routes.flow_mods} flow-mods, install "
                f"{job.routes.install_s:.3f} s, {len(stamps)} nodes logged")  # fmt: skip
    return {
        "topology": "milk (20 hosts x 8 CPUs)",
        "ranks": 160,
        "pattern": spec,
        "srun_plain_s": plain,
        "srun_routed_s": routed,
        "added_start_s_median": statistics.median(routed) - statistics.median(plain),
        "job_start_to_routes_s": to_routes,
        "nodes_logging_routes": nodes_waited,
    }


def concurrent(workdir: Path, quick: bool) -> dict[str, Any]:
    topo = leaf_spine(2, 4, 2, name="contention")
    name = f"mgc-{os.getpid()}"
    size, iters = (1 << 20, 3) if quick else (2 << 20, 4)
    patt = workdir / "pair.json"
    catalog.save_pattern(harness.pattern(2, 1, size), patt)
    bench = [str(harness.BENCH), "pairs", "--oneway", "--size", str(size), "--iters", str(iters)]
    bench += ["--warmup", "1", "--json"]
    out: dict[str, Any] = {"topology": "leaf_spine(2, 4, 2) at 10 Mbit/s", "size_bytes": size}
    with stack(workdir, topo, name, 0.01, 2) as (mgr, lay, _ctl):
        argv = [*harness.CLI, "pattern", "put", "pair", str(patt), "--manager", str(mgr.sock)]
        put = subprocess.run(argv, capture_output=True, text=True, check=False)
        if put.returncode != 0:
            raise RuntimeError(put.stderr)
        with_plugin = lay.plugstack.read_text()
        for njobs in (2, 4):
            row: dict[str, Any] = {}
            for mode in ("default", "manager"):
                set_plugin(lay, with_plugin if mode == "manager" else "")
                row[mode] = run_jobs(name, JOBS[:njobs], bench, mode == "manager")
            row["speedup_per_job"] = ratios(row["default"], row["manager"])
            log(f"{njobs} jobs: default {fmt(row['default'])} s, manager {fmt(row['manager'])} s"
                f" per message; speedups {fmt(row['speedup_per_job'])}")  # fmt: skip
            out[f"{njobs}_jobs"] = row
        out["4_jobs_by_launch_order"] = by_order(mgr, lay, name, bench, with_plugin, quick)
    return out


#: Arrival orders of the four jobs for the order experiment: as listed, and two whose
#: first two jobs share no leaf (how their tie is broken decides the later jobs').
ORDERS = ((0, 1, 2, 3), (0, 2, 1, 3), (1, 3, 0, 2))
#: Seconds between the launches of the order experiment (jobs route in about 1.5 s).
STAGGER_S = 3.0


def by_order(mgr: Manager, lay: slurm.SlurmLayout, name: str, bench: list[str],
             with_plugin: str, quick: bool) -> list[dict[str, Any]]:  # fmt: skip
    """Four jobs arriving in a chosen order, with and without moving running jobs.

    Jobs launched together register in a race, so here each is launched
    :data:`STAGGER_S` after the previous one (and, with the plugin, only once that
    one is ROUTED): the manager sees them in the given order.  The same stagger
    runs on default routes for the baseline.  Each job sends more messages than in
    the part above, so the jobs overlap for most of their run."""
    rows = []
    bench = [*bench, "--iters", "6" if quick else "8"]  # the last --iters wins
    for order in ORDERS[:2] if quick else ORDERS:
        jobs = tuple(JOBS[i] for i in order)
        set_plugin(lay, "")
        row: dict[str, Any] = {"order": [f"{a}>{b}" for a, b in jobs]}
        row["default"] = run_jobs(name, jobs, bench, False, lambda _: time.sleep(STAGGER_S))
        set_plugin(lay, with_plugin)
        for rebalance in (0, 8):
            mgr.start(rebalance)
            before = mgr.moves()
            key = f"rebalance_{rebalance}"
            row[key] = run_jobs(name, jobs, bench, True, lambda n: wait_routed(mgr, n))
            row[f"{key}_speedup"] = ratios(row["default"], row[key])
            row[f"{key}_moves"] = mgr.moves() - before
            log(f"order {' '.join(row['order'])}: --rebalance {rebalance}: speedups "
                f"{fmt(row[f'{key}_speedup'])}, {row[f'{key}_moves']} job(s) moved")  # fmt: skip
        log(f"order {' '.join(row['order'])}: default {fmt(row['default'])} s, "
            f"no moves {fmt(row['rebalance_0'])} s, moves {fmt(row['rebalance_8'])} s")  # fmt: skip
        rows.append(row)
    mgr.start()
    return rows


def wait_routed(mgr: Manager, launched: int) -> None:
    """At least :data:`STAGGER_S`, and until ``launched`` running jobs are ROUTED."""
    t0 = time.monotonic()

    def routed() -> bool:
        with ManagerClient(f"unix:{mgr.sock}") as c:
            jobs = c.list_jobs()
        return sum(bool(j.state == pb.JOB_STATE_ROUTED) for j in jobs) >= launched

    harness.wait_for(f"{launched} jobs routed", routed, 60)
    time.sleep(max(0.0, STAGGER_S - (time.monotonic() - t0)))


def ratios(default: list[float], routed: list[float]) -> list[float]:
    return [d / m for d, m in zip(default, routed, strict=True)]


def fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def run_jobs(name: str, jobs: tuple[tuple[str, str], ...], bench: list[str], routed: bool,
             after_launch: Callable[[int], None] | None = None) -> list[float]:  # fmt: skip
    """Start the jobs (together, or calling ``after_launch(n)`` after the n-th); each
    one's time per message (s)."""
    extra = ["--comm-pattern=pair"] if routed else []
    env = {"OMPI_MCA_mpi_yield_when_idle": "1"}
    procs = []
    for a, b in jobs:
        argv = ["srun", "-w", f"{a},{b}", "-N2", "-n2", *extra, *bench]
        plan_env = {**os.environ, **env}
        procs.append(subprocess.Popen(
            [*harness.CLI, "emu", "slurm", "run", "--name", name, "--", *argv],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=plan_env))  # fmt: skip
        if after_launch is not None and len(procs) < len(jobs):
            after_launch(len(procs))
    times = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"job failed ({p.returncode}):\n{stderr[-3000:]}")
        doc = json.loads(next(ln for ln in stdout.splitlines() if ln.startswith("{")))
        times.append(float(doc["results"][0]["time_max_s"]))
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Fewer repetitions, smaller messages.")
    ap.add_argument("--only", choices=("start", "concurrent"), help="Run one part.")
    ap.add_argument("--json", type=Path, help="Also write the summary here.")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("exp_manager: needs root (emulated fabric, Slurm)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    harness.build("mpibench", "spank")
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sdnmpi-mgr-") as tmp:
        os.chmod(tmp, 0o755)
        if args.only in (None, "start"):
            summary["start_latency"] = start_latency(Path(tmp), args.quick)
        if args.only in (None, "concurrent"):
            summary["concurrent"] = concurrent(Path(tmp), args.quick)
    harness.emit(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
