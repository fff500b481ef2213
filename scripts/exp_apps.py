"""Real applications through the whole system (issue 11, item 3): LAMMPS and HPCC under Slurm.

Run as root: ``.venv/bin/python scripts/exp_apps.py [--quick] [--apps lammps,hpcc]
[--json FILE]`` (``make exp-apps``); ``make reproduce`` calls :func:`reproduce`.

Two unmodified Debian applications (``lmp``, ``hpcc``; docs/apps.md) run as Slurm
jobs (real slurmctld and slurmds in the emulated hosts, the SPANK plugin,
``sdnmpi manager`` and the controller) on ``leaf_spine(2, 4, 2)``: 8 hosts on 4
leaves, 2 spines, every link 1 Gbit/s emulated at a scale of the link scale, Open
MPI ranks one per host.  For each application:

1. **profile**: one run with ``libsdnmpi.so`` in profile mode (block placement,
   D-mod-K default routes); ``sdnmpi pattern record NAME --trace DIR -o FILE``.
2. **placement**: the seeded search of ``apps_report.search_placement`` for the
   rank order where one path per rank pair (what ours can reach; the LP bound splits
   flows) allows the most over D-mod-K on the recorded pattern (block placement gives
   D-mod-K little or no contention); Slurm places
   rank r on the r-th host of ``-w`` (``--distribution=arbitrary``).  The bound's
   gain is in every row, so a reader sees whether routing could gain at all.
3. ``sdnmpi pattern put NAME FILE --manager``; then, with the controller's
   ``--router dmodk``, runs without a pattern (**dmodk**) and with
   ``--comm-pattern=NAME`` (**ours**: the manager routes the job with ``ours``);
   then a fresh stack with ``--router ecmp`` (**ecmp**, no pattern).

Every run has the same MPI settings: the full-duplex eager limits (the SPANK plugin
sets them for jobs with a pattern; here they are in every job's environment, so the
baselines get them too) and ``libsdnmpi_idle.so`` (waiting ranks sleep instead of
spinning on the 2 cores).  ``demo_fabric.CpuMonitor`` watches each run (HPCC: each
section): a CPU-bound run gives ``cpu-bound`` rows, not routing results.

- **LAMMPS**: ``scripts/apps/in.lj`` on 8 ranks (32,000 atoms, 2x2x2 ranks, 283 KB
  per rank per step, every message eager) at :data:`LAMMPS_SCALE` times the link
  scale (5 Mbit/s); its loop time and its own Comm breakdown.
- **HPCC**: 4 ranks, N=1000 on a 1x4 grid, PTRANS at :data:`PTRANS_N`; the sections PTRANS,
  MPIFFT and LatencyBandwidth (b_eff) timed by ``scripts/apps/hpcc_watch.py``.  b_eff
  sends 792 MB per rank whatever the input, so HPCC runs at :data:`HPCC_SCALE` times
  the link scale (20 Mbit/s: 12-13 minutes a run) and only in the full form.

Predictions: the recorded pattern (HPCC: each section's part of it, cut at the
section's times) simulated on the calibration under D-mod-K, the manager's
``ours`` routes and ECMP (mean of :data:`apps_report.ECMP_SEEDS` hash draws), plus
the unit's measured non-communication time.  HPCC's traffic differs from run to run
(b_eff's random rings are drawn with the time as the seed), so every HPCC run is
traced too and each routing is predicted from its own runs' traces, ours still
routed as the manager routed the profile's pattern (``App.traced``).  The last line
printed is a JSON summary; ``apps_report.rows`` gives the rows of ``make reproduce``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "apps"))

import appout
import apps_report
import apptrace
import demo_fabric as harness
import hpccinf
from cpu_timeline import CpuTimeline
from slurm_harness import Stack, cleanup, last_routes, srun, stack

from sdnmpi import catalog
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern
from sdnmpi.errors import SdnMpiError
from sdnmpi.node import duplex
from sdnmpi.report.reproduce_api import Context, Row, require_programs
from sdnmpi.sim.calibration import Calibration

ROOT = Path(__file__).resolve().parent.parent
APPS_DIR = ROOT / "scripts" / "apps"
IDLE = ROOT / "build" / "idle" / "libsdnmpi_idle.so"
TOPOLOGY = leaf_spine(2, 4, 2, host_bps=1e9, uplink_bps=1e9, name="apps-leaf-spine")
TOPOLOGY_TEXT = "leaf_spine(2, 4, 2): 8 hosts, 4 leaves, 2 spines, all links 1 Gbit/s"
#: LAMMPS's links run at this times the link scale: at 10 Mbit/s the ``ours`` run,
#: which keeps every host link busy, made the switch wait for a core 21 % of the run
#: with the machine 97 % busy (CPU-bound by CpuMonitor's rule); at 5 Mbit/s the
#: switches forward half the frames per second.
LAMMPS_SCALE = 0.5
#: HPCC's links run this many times faster than the link scale: b_eff sends 792 MB
#: per rank whatever the input (9-10 minutes a run at 20 Mbit/s).  4 ranks, so
#: that the fabric carries as many frames per second as LAMMPS's 8 at 10 Mbit/s.
HPCC_SCALE = 2.0
#: PTRANS's extra size: 2000 moves about 33 MB per rank on 1x4 (4000: 133 MB, 90 s).
PTRANS_N = 2000
HPCC_SECTIONS = ("PTRANS", "MPIFFT", "LatencyBandwidth")
#: What the simulator leaves out, said when measured and predicted disagree (the
#: switches' waits for a core are added from each run's CpuMonitor figures).
KNOWN_GAP = {
    "lammps": (
        "not explained by the model; on 2026-11-27 an ours run that shared the 2 cores "
        "with a type check measured 20 % slower than the next one (the switches' waits "
        "for a core are given below)"
    ),
    "hpcc": (
        "b_eff times each ring and ping-pong and collects the timings with collectives, "
        "where ranks that finished early wait for the others (about 40 s of the 498 s "
        "section in the profile run of 2026-11-28); the model's steps run in lockstep"
    ),
}
#: A section's own reason, where it differs from its application's.
UNIT_GAP = {
    ("hpcc", "MPIFFT"): (
        "MPIFFT is six MPI_Alltoall of 64 KiB per rank pair; one alone "
        "(scripts/probe_alltoall.py, 2026-11-29, 20 Mbit/s, two runs) took as long as the "
        "model says where D-mod-K puts 4 flows on a link (0.127-0.129 s, predicted "
        "0.126 s), but 11-21 % longer where no link carries more than a host's own 3 flows "
        "(0.109-0.115 s, predicted 0.095-0.098 s; 16 KiB +35-46 %, 256 KiB +2-5 %): three "
        "flows starting at once into each host link take longer to reach their fair "
        "shares than the model's, a start cost not modeled, so it overstates ours' gain "
        "here (one alltoall alone: measured x1.11-1.18, predicted x1.29); HPCC again on "
        "2026-11-29 (sections stamped at their writes, one run per routing) measured "
        "MPIFFT x1.29 against x1.30 predicted (D-mod-K 0.85 s, ours 0.66 s), and the "
        "full run after it x1.13 (0.81 s, 0.71 s), the next (09:51) x1.15 (0.79 s, 0.68 "
        "s): one run of a 0.7 s section varies this much, and the four runs' mean, x1.16, "
        "is what the start cost leaves"
    ),
    ("hpcc", "LatencyBandwidth"): (
        "b_eff's rings are not the same from run to run: besides the naturally ordered "
        "ring it times 10 (bandwidth) and 30 (latency) randomly ordered rings drawn with "
        "the time as the seed (bench_lat_bw.c, ring_lat_bw_loop), so each run sends over "
        "other rank pairs than the profile run whose pattern ours was routed for; each "
        "run is therefore traced and predicted from its own trace (on 2026-11-29 09:51 "
        "the profile's pattern said x1.34, the runs' own traces x1.13, measured x1.14). "
        "Ranks that finished a ring early wait for the others in the collectives that "
        "gather b_eff's timings (about 40 s of the 498 s section in the profile run of "
        "2026-11-28), which the model's lockstep steps leave out: each routing measured "
        "7-8 % over its own prediction that day"
    ),
}
log = harness.log


@dataclass(frozen=True)
class App:
    """One application: how to run it, how big, and how to read its results."""

    key: str
    label: str
    figure: str
    program: str
    package: str
    nprocs: int
    scale: float
    timeout_s: float
    reps: int
    args: tuple[str, ...]
    #: Every run traced (profile mode) and predicted from its own trace: the
    #: application's traffic differs from run to run (HPCC's b_eff).
    traced: bool = False


def apps_for(quick: bool) -> dict[str, App]:
    """The two applications at the quick or the full size."""
    steps = 20 if quick else 150  # quick: CI's check (a loop of 12-20 s per run)
    lj = ["-in", str(APPS_DIR / "in.lj"), "-var", "steps", str(steps)]
    lj += [a for d in ("nx", "ny", "nz") for a in ("-var", d, "20")]
    lammps = App("lammps", f"LAMMPS LJ, 32,000 atoms, {steps} steps", "LAMMPS in.lj", "lmp",
                 "lammps", 8, LAMMPS_SCALE, 600.0, 1 if quick else 2, tuple(lj))  # fmt: skip
    hpcc = App("hpcc", f"HPCC N=1000 (1x4), PTRANS {PTRANS_N}", "HPCC", "hpcc", "hpcc", 4,
               HPCC_SCALE, 1800.0, 1, (), traced=True)  # fmt: skip
    return {"lammps": lammps, "hpcc": hpcc}


def job_env(profile_dir: Path | None, job: str) -> dict[str, str]:
    """The ranks' environment: one OpenMP thread, yield when idle, the full-duplex
    eager limits, libsdnmpi_idle (and libsdnmpi in profile mode for the profile run)."""
    env = {"OMP_NUM_THREADS": "1", "OMPI_MCA_mpi_yield_when_idle": "1", **duplex.duplex_env()}
    if profile_dir is None:
        return {**env, "LD_PRELOAD": str(IDLE)}
    return {
        **env,
        "LD_PRELOAD": f"{IDLE} {harness.LIBSDNMPI}",
        "SDNMPI_MODE": "profile",
        "SDNMPI_TRACE_DIR": str(profile_dir),
        "SDNMPI_JOB": job,
    }


def srun_args(
    app: App, hosts: tuple[str, ...], wd: Path, env: dict[str, str], job: str, pattern: str | None
) -> list[str]:
    """``srun`` options: rank r on ``hosts[r]``, the job's directory and environment."""
    args = ["-J", job, f"-N{len(hosts)}", f"-n{len(hosts)}", "-w", ",".join(hosts)]
    args += ["--distribution=arbitrary", f"--chdir={wd}"]
    args.append("--export=ALL," + ",".join(f"{k}={v}" for k, v in env.items()))
    if pattern is not None:
        args.append(f"--comm-pattern={pattern}")
    if app.key == "lammps":
        return [*args, app.program, *app.args, "-log", str(wd / "log.lammps"), "-screen", "none"]
    return [*args, app.program]


def prepare(app: App, wd: Path) -> None:
    """The job's directory (visible to every host: /tmp is shared), with HPCC's input."""
    wd.mkdir(parents=True, exist_ok=True)
    os.chmod(wd, 0o777)
    if app.key == "hpcc":
        p, q = 1, app.nprocs  # a 2x2 grid leaves 2 of 4 ranks idle in PTRANS
        (wd / "hpccinf.txt").write_text(hpccinf.render(1000, 80, p, q, [PTRANS_N]))


def results(app: App, wd: Path, cpu: CpuTimeline, trace: Path | None) -> apps_report.Run:
    """What a finished job reports: LAMMPS's loop and Comm share; HPCC's section times."""
    if app.key == "lammps":
        fig = apps_report.lammps_run(appout.parse_lammps((wd / "log.lammps").read_text()))
        return apps_report.Run(
            0.0,
            {"loop time": cpu.window()},
            {"loop time": fig["loop_s"]},
            {"loop time": fig["comm_share"]},
            {"loop time": fig["other_s"]},
        )
    times = json.loads((wd / "times.json").read_text())
    secs = apps_report.section_seconds(times)
    missing = [s for s in HPCC_SECTIONS if s not in secs]
    if missing:
        raise RuntimeError(f"hpcc: no times for sections {missing} in {wd / 'times.json'}")
    run = apps_report.Run(0.0, {}, {}, {}, {})
    for s in HPCC_SECTIONS:
        begin, end = times["sections"][s]
        run.cpu[s] = cpu.window(begin, end)
        run.units[s] = secs[s]
        if trace is not None:
            share = apps_report.mpi_share(trace, (begin, end))
            run.comm_share[s], run.other_s[s] = share, secs[s] * (1 - share)
    return run


@contextmanager
def hpcc_watch(app: App, wd: Path) -> Iterator[None]:
    """``hpcc_watch.py`` next to an HPCC job (section start and end times); stopped by PID."""
    if app.key != "hpcc":
        yield
        return
    argv = [
        sys.executable,
        str(APPS_DIR / "hpcc_watch.py"),
        str(wd / "hpccoutf.txt"),
        str(wd / "times.json"),
        "--timeout",
        str(app.timeout_s),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)


def run_job(
    fabric: str,
    app: App,
    hosts: tuple[str, ...],
    wd: Path,
    st: Stack,
    routing: str,
    trace: Path | None = None,
    pattern: str | None = None,
) -> apps_report.Run:
    """One job, start to end; on failure or timeout nothing of it is left behind.  A job
    that fails within :data:`START_FAILURE_S` of its start (Open MPI 4.1.4's start-up
    crash under ``srun``, docs/emulator-fidelity.md) runs once more (``Run.retried``)."""
    job = f"{app.key}-{routing}"
    args = srun_args(app, hosts, wd, job_env(trace, job), job, pattern)
    retried = ""
    for attempt in (1, 2):
        prepare(app, wd)
        log(
            f"{app.key}/{routing}: srun on {','.join(hosts)}" + (f" ({pattern})" if pattern else "")
        )
        started = time.monotonic()
        try:
            with CpuTimeline(fabric) as cpu, hpcc_watch(app, wd):
                took, _, _ = srun(fabric, args, app.timeout_s)
            break
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            left = cleanup(fabric, job, st)
            why = f"{failure(exc)}; cleaned up: {left}"
            quick = time.monotonic() - started < START_FAILURE_S
            if attempt == 2 or isinstance(exc, subprocess.TimeoutExpired) or not quick:
                raise RuntimeError(why) from exc
            retried = why
            log(f"{app.key}/{routing}: failed at start, once more: {why}")
    run = results(app, wd, cpu, trace)
    if trace is not None:
        run.parts = {u: unit_pattern(app, trace, wd, u) for u in run.units}
    run.wall_s = took
    run.retried = retried
    log(
        f"{app.key}/{routing}: {took:.1f} s wall; "
        + ", ".join(f"{u} {t:.2f} s" for u, t in run.units.items())
    )
    return run


#: A job that fails this soon after its start is run once more (the start-up crash).
START_FAILURE_S = 90.0


def failure(exc: BaseException) -> str:
    """One line for a failed job: the time limit, or srun's exit code and last line."""
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"hung: no end after {exc.timeout:g} s, cancelled"
    head, _, rest = str(exc).partition("\n")
    code = re.search(r"failed \((-?\d+)\):?$", head)
    last = next((ln.strip() for ln in reversed(rest.splitlines()) if ln.strip()), "")
    what = f"srun exited {code[1]}" if code else head[:200]
    return f"{what}: {last[:300]}" if last else what


def cli(*args: str) -> None:
    """An ``sdnmpi`` command; its error as RuntimeError."""
    harness.sdnmpi(*args, timeout=300)


@contextmanager
def routing_stack(workdir: Path, router: str, scale: float) -> Iterator[tuple[str, Stack]]:
    """Controller (``--router``), fabric, manager and Slurm; torn down after."""
    name = f"apps-{os.getpid()}"
    with stack(workdir, TOPOLOGY, name, scale, 2, ("--router", router)) as (mgr, _lay, ctl):
        yield name, Stack(mgr, ctl)


class Recorder:
    """Collects one application's runs into the summary ``apps_report`` reads."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.runs: dict[str, list[apps_report.Run]] = {r: [] for r in apps_report.ROUTINGS}
        self.failed: dict[str, str] = {}

    def attempt(self, routing: str, fn: Callable[[], apps_report.Run]) -> None:
        """Run one job; a failure becomes the routing's reason (the others go on)."""
        if routing in self.failed:
            return
        try:
            self.runs[routing].append(fn())
        except (RuntimeError, SdnMpiError, OSError, ValueError) as exc:
            self.failed[routing] = (
                str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            )
            log(f"{self.app.key}/{routing}: FAILED: {exc}")


@dataclass
class Profile:
    """The profile run: its figures, the recorded pattern, each unit's part of it, and
    the placement chosen on it with the LP bound's gain over D-mod-K."""

    run: apps_report.Run
    pattern: Pattern
    parts: dict[str, Pattern | None]
    hosts: tuple[str, ...]
    gain: float


def profile_and_place(fabric: str, app: App, work: Path, out: Path, st: Stack) -> Profile:
    """The profile run, its recorded pattern (stored in the manager) and the placement."""
    trace = work / f"{app.key}-trace"
    block = tuple(h.name for h in TOPOLOGY.hosts[: app.nprocs])
    wd = work / f"{app.key}-profile"
    prof = run_job(fabric, app, block, wd, st, "profile", trace)
    name = f"{app.key}-{app.nprocs}"
    pfile = out / f"{name}.pattern.json"
    cli("pattern", "record", name, "--trace", str(trace), "-o", str(pfile))
    cli("pattern", "put", name, str(pfile), "--manager", str(st.mgr.sock), "--replace")
    pattern = catalog.load_pattern(str(pfile))
    hosts, gain = apps_report.search_placement(TOPOLOGY, pattern)
    log(
        f"{app.key}: pattern {name} recorded; ranks on {','.join(hosts)} (the most one "
        f"path per rank pair gains over D-mod-K): the LP bound allows x{gain:.2f}"
    )
    parts = {u: unit_pattern(app, trace, wd, u) for u in prof.units}
    return Profile(prof, pattern, parts, hosts, gain)


def measure_app(app: App, ctx: Context, skip_ecmp: str | None) -> dict[str, Any]:
    """Profile, place, run every routing; the application's summary (with predictions)."""
    scale = ctx.link_scale * app.scale
    rec = Recorder(app)
    out = ctx.out / app.key
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sdnmpi-apps-", dir="/tmp") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        try:
            with routing_stack(work, "dmodk", scale) as (fabric, st):
                prof = profile_and_place(fabric, app, work, out, st)
                hosts = prof.hosts
                for rep in range(app.reps):
                    routed_runs(fabric, app, work, hosts, st, rec, rep)
            if skip_ecmp is None:
                rec.attempt("ecmp", lambda: ecmp_runs(app, work, hosts, scale, rec))
        finally:
            keep_logs(work, out)
    return summarize(app, ctx, rec, prof, scale, skip_ecmp)


def routed_runs(
    fabric: str, app: App, work: Path, hosts: tuple[str, ...], st: Stack, rec: Recorder, rep: int
) -> None:
    """One D-mod-K run (no pattern) and one run with the job's pattern (ours)."""
    for r, pattern in (("dmodk", None), ("ours", f"{app.key}-{app.nprocs}")):
        wd = work / f"{app.key}-{r}-{rep}"

        def one(r: str = r, pattern: str | None = pattern, wd: Path = wd) -> apps_report.Run:
            trace = run_trace(app, wd)
            return with_routes(run_job(fabric, app, hosts, wd, st, r, trace, pattern), st, pattern)

        rec.attempt(r, one)


def ecmp_runs(
    app: App, work: Path, hosts: tuple[str, ...], scale: float, rec: Recorder
) -> apps_report.Run:
    """A fresh stack with the controller's ECMP default routes; its runs but the last
    recorded directly, the last returned (so a stack failure fails the routing)."""
    with routing_stack(work, "ecmp", scale) as (fabric, st):
        wds = [work / f"{app.key}-ecmp-{rep}" for rep in range(app.reps)]
        for wd in wds[:-1]:
            rec.runs["ecmp"].append(run_job(fabric, app, hosts, wd, st, "ecmp", run_trace(app, wd)))
        return run_job(fabric, app, hosts, wds[-1], st, "ecmp", run_trace(app, wds[-1]))


def run_trace(app: App, wd: Path) -> Path | None:
    """Where a routed run of a traced application writes its trace (next to ``wd``,
    so :func:`keep_logs` keeps it); None for the others."""
    return wd.with_name(f"{wd.name}-trace") if app.traced else None


def with_routes(run: apps_report.Run, st: Stack, pattern: str | None) -> apps_report.Run:
    """Attach the manager's record of the job's routes to a run with a pattern."""
    if pattern is not None:
        run.routes = last_routes(st)
        if not run.routes.get("flow_mods"):
            log(f"job routes not installed as planned: {run.routes}")
    return run


def keep_logs(work: Path, out: Path) -> None:
    """Each job's LAMMPS log, HPCC output and section times, and the profile run's
    trace (``<app>-trace/``, so predictions can be derived again), into the
    experiment's dir."""
    for f in (*work.glob("*/log.lammps"), *work.glob("*/hpccoutf.txt"), *work.glob("*/times.json")):
        shutil.copy(f, out / f"{f.parent.name}-{f.name}")
    for trace in work.glob("*-trace"):
        shutil.copytree(trace, out / trace.name, dirs_exist_ok=True)


def summarize(
    app: App, ctx: Context, rec: Recorder, p: Profile, scale: float, skip_ecmp: str | None
) -> dict[str, Any]:
    """The application's summary: per unit, measured runs and predictions."""
    cal = dataclasses.replace(ctx.calibration, link_scale=scale)
    proto = cal.protocol("openmpi-duplex")
    units: dict[str, Any] = {}
    hosts = p.hosts
    block = tuple(h.name for h in TOPOLOGY.hosts[: app.nprocs])
    for u, part in p.parts.items():
        pred = apps_report.predict(cal, TOPOLOGY, p.pattern, hosts, proto, part)
        at_block = own = None
        if app.key == "hpcc":  # its shares come from the profile run, on the block placement
            at_block = apps_report.predict(cal, TOPOLOGY, p.pattern, block, proto, part)["dmodk"]
        if app.traced:  # each run's own traffic, ours routed from the profile's pattern
            own = {
                r: [apps_report.predict(cal, TOPOLOGY, p.pattern, hosts, proto, x.parts[u])
                    for x in runs if x.parts.get(u) is not None]
                for r, runs in rec.runs.items()
            }  # fmt: skip
        units[u] = apps_report.unit_summary(rec.runs, p.run, u, pred, at_block, own)
        units[u]["known_gap"] = known_gap(app.key, u)
    return {
        "label": app.label,
        "figure": app.figure,
        "case": f"{app.nprocs} ranks on leaf_spine(2, 4, 2), {scale * 1e3:g} Mbit/s links",
        "settings": {
            "mpi": "openmpi",
            "protocol": proto.spec,
            "mpi_settings": "duplex",
            "topology": TOPOLOGY_TEXT,
            "link_scale": scale,
            "placement": list(hosts),
            "slurm": "-w PLACEMENT --distribution=arbitrary",
            "program": app.program,
            "args": list(app.args),
            "reps": app.reps,
        },
        "bound_gain_placement": p.gain,
        "profile": {"wall_s": p.run.wall_s, "units": p.run.units, "comm_share": p.run.comm_share},
        "failed": rec.failed,
        "retried": {r: [x.retried for x in runs if x.retried] for r, runs in rec.runs.items()},
        "not_run": {"ecmp": skip_ecmp} if skip_ecmp else {},
        "units": units,
    }


def unit_pattern(app: App, trace: Path, wd: Path, unit: str) -> Pattern | None:
    """HPCC: the part of the recorded pattern in the section's window; LAMMPS: all."""
    if app.key != "hpcc":
        return None
    times = json.loads((wd / "times.json").read_text())
    t0 = apptrace.job_start(trace)
    begin, end = times["sections"][unit]
    part: Pattern = apptrace.load_window(trace, begin - t0, end - t0)
    return part


def experiment(ctx: Context, keys: list[str]) -> dict[str, Any]:
    """Every application asked for (skipped with one line if its package is missing)."""
    harness.build("pmpi", "idle", "spank")
    apps = apps_for(ctx.quick)
    summary: dict[str, Any] = {
        "topology": TOPOLOGY_TEXT,
        "quick": ctx.quick,
        "apps": {},
    }
    for key in keys:
        app = apps[key]
        if key == "hpcc" and ctx.quick:
            why = "HPCC only in the full form: b_eff sends 792 MB per rank (10 min a run)"
            summary["apps"][key] = {"label": app.label, "figure": app.figure, "skipped": why}
            continue
        if shutil.which(app.program) is None:
            why = f"{app.program} not installed: apt-get install {app.package}"
            summary["apps"][key] = {"label": app.label, "figure": app.figure, "skipped": why}
            log(f"{key}: skipped: {why}")
            continue
        try:
            summary["apps"][key] = measure_app(app, ctx, None)
        except (RuntimeError, SdnMpiError, OSError, ValueError) as exc:  # the profile run or the
            # first stack failed: nothing to compare
            log(f"{key}: FAILED: {exc}")
            summary["apps"][key] = failed_app(app, exc)
    return summary


def failed_app(app: App, exc: Exception) -> dict[str, Any]:
    """An application whose profile run or first stack failed: one failed row."""
    return {
        "label": app.label,
        "figure": app.figure,
        "case": f"{app.nprocs} ranks",
        "settings": {"topology": TOPOLOGY_TEXT},
        "error": str(exc).splitlines()[0],
    }


def reproduce(ctx: Context) -> list[Row]:
    """``make reproduce``: LAMMPS (quick: 20 steps, one run per routing; full: 150
    steps, two) and, in the full form only, HPCC."""
    require_programs({"srun": "apt-get install slurm-wlm slurm-client"})
    summary = experiment(ctx, list(apps_for(ctx.quick)))
    (ctx.out / "apps.json").write_text(json.dumps(summary, indent=1) + "\n")
    return apps_report.rows(summary)


def known_gap(app_key: str, unit: str) -> str:
    """What the model leaves out for ``unit`` of ``app_key``, said when they disagree.

    >>> known_gap("hpcc", "MPIFFT").startswith("MPIFFT is six MPI_Alltoall")
    True
    >>> known_gap("hpcc", "PTRANS") == KNOWN_GAP["hpcc"]
    True
    """
    return UNIT_GAP.get((app_key, unit), KNOWN_GAP[app_key])


def rows_from_saved(out: Path) -> list[Row]:
    """The rows of the run whose summary :func:`reproduce` saved in ``out``
    (``reproduce.py --rederive``); the reasons for gaps are today's (what is known
    now about a run's figures), the figures the run's."""
    summary = json.loads((out / "apps.json").read_text())
    for key, app in summary.get("apps", {}).items():
        if key not in KNOWN_GAP:
            continue
        for unit, fig in app.get("units", {}).items():
            fig["known_gap"] = known_gap(key, unit)
    return apps_report.rows(summary)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="LAMMPS only, 20 steps, one run each.")
    ap.add_argument("--apps", default="lammps,hpcc", help="Which applications (lammps,hpcc).")
    ap.add_argument(
        "--link-scale",
        type=float,
        default=harness.LINK_SCALE,
        help="Emulated rate factor (0.01: 10 Mbit/s; HPCC runs at HPCC_SCALE times it).",
    )
    ap.add_argument("--calibration", type=Path, help="sdnmpi calibrate's output.")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "experiments" / "apps")
    ap.add_argument("--json", type=Path, help="Also write the summary here.")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    if os.geteuid() != 0:
        print("exp_apps: needs root (emulated fabric, Slurm)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # tear the stack down
    keys = [k for k in args.apps.split(",") if k]
    if unknown := set(keys) - {"lammps", "hpcc"}:
        print(f"exp_apps: unknown applications {sorted(unknown)}", file=sys.stderr)
        return 2
    cal = Calibration.load_or_nominal(args.calibration, args.link_scale)
    args.out.mkdir(parents=True, exist_ok=True)
    ctx = Context(args.quick, args.out, cal, logging.getLogger("exp_apps"), args.calibration)
    summary = experiment(ctx, keys)
    print()
    for row in apps_report.rows(summary):
        m = row.metric_def
        print(
            f"{row.status:>9}  {row.case}: measured {m.format(row.measured)}, predicted "
            f"{m.format(row.predicted)}, bound {m.format(row.bound)}  {row.reason}"
        )
    harness.emit(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
