"""End-to-end demo: real MPI on an emulated leaf-spine, default (D-mod-K) vs ``ours`` job routes.

Run as root: ``.venv/bin/python scripts/demo_fabric.py [--quick] [--no-large] [--json FILE]``.

Steps: write a leaf-spine topology (2 spines, 4 leaves, 2 hosts per leaf, 1 Gbit/s links,
emulated at ``--link-scale`` 0.01 = 10 Mbit/s, see LINK_SCALE); start ``sdnmpi controller
run`` (free 127.0.0.1 port, ``--router dmodk``, ``--api-socket``, ``--stats-out``);
``sdnmpi emu up``; wait for LLDP discovery; build ``sdnmpi-bench`` (Open MPI); run
``pairs`` with a placement and shift that the simulator says contends under D-mod-K
and not under ``ours``; install the ``ours`` routes of that job's host pairs over the
API socket (timed), rerun, remove the job; then (unless ``--no-large``) bring up a
36-host leaf-spine (2x4x9) with a fresh controller and time 64-pair and 1000-pair
job-route installs there (8 hosts have only 56 ordered pairs).  Cleanup (controller
stopped by PID, ``emu down``) is in ``finally``, also on Ctrl-C.  The last line printed
is a JSON summary (``--json FILE`` also writes it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sdnmpi import artefacts, catalog
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import route
from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.core.topology import Topology
from sdnmpi.emu import agents, fabriclock, runner
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT
from sdnmpi.emu.runner import stop_child
from sdnmpi.sim import simulate
from sdnmpi.testing import waits
from sdnmpi.wire import controller_api

ROOT = Path(__file__).resolve().parent.parent
GBPS = 1e9
#: 1 Gbit/s -> 10 Mbit/s.  At 0.05 (50 Mbit/s) 8 busy Open MPI ranks plus the userspace
#: OVS saturate the 2 cores and the links stop being the bottleneck (measured x1.1-1.2).
LINK_SCALE = 0.01
#: Rank r runs on PLACEMENT[r]; ranks 0-3 (leaves 1 and 2) send to ranks 4-7 (``pairs
#: --oneway --shift 4``), and both hosts of a leaf send to hosts that D-mod-K reaches
#: through the same spine (checked with the simulator at run time).  One-way, because
#: MPI over TCP serializes the two directions of an exchange on the connection a pair
#: shares (csrc/mpibench/README.md), which no flow-level model predicts.
PLACEMENT = ("h1", "h2", "h3", "h4", "h6", "h8", "h7", "h5")
SHIFT = 4
CLI = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()"]


def log(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float) -> float:
    return waits.wait_for(what, check, timeout_s, error=RuntimeError)


def sdnmpi(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if res.returncode != 0:
        raise RuntimeError(f"sdnmpi {' '.join(args)} failed ({res.returncode}):\n{res.stderr}")
    return res


class Controller:
    """``sdnmpi controller run`` as a child process, stopped by its PID."""

    def __init__(
        self, workdir: Path, topology: Path, tag: str, extra: tuple[str, ...] = ()
    ) -> None:
        self.port = waits.free_port()
        self.metrics_port = waits.free_port()  # not 9791: a cluster's controller may hold it
        self.api_path = workdir / f"api-{tag}.sock"
        self.stats_path = workdir / f"port-stats-{tag}.json"
        self.log_path = workdir / f"controller-{tag}.log"
        argv = [*CLI, "controller", "run", "--port", str(self.port)]
        argv += list(extra) if "--router" in extra else ["--router", "dmodk", *extra]
        argv += ["--topology", str(topology), "--stats-interval", "1"]
        argv += ["--stats-out", str(self.stats_path), "--api-socket", str(self.api_path)]
        argv += ["--metrics-port", str(self.metrics_port)]
        with self.log_path.open("wb") as out:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT
            )
        wait_for("the controller to listen", lambda: "listening on" in self.log(), 30)

    def log(self) -> str:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"controller exited:\n{self.log_path.read_text(errors='replace')}")
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # as before: not waited for
                stop_child(proc, timeout_s=5)

    def api(self, request: dict[str, Any], timeout_s: float = 60) -> tuple[dict[str, Any], float]:
        """One request (docs/controller-api.md); (reply, seconds from send to confirmed
        reply).  RuntimeError when the controller cannot be asked or refuses."""
        client = controller_api.Client(self.api_path, timeout_s=timeout_s)
        try:
            reply = client.request(request)
        except controller_api.ControllerApiError as exc:
            raise RuntimeError(str(exc)) from None
        return reply, client.last_seconds


@contextlib.contextmanager
def cluster(
    workdir: Path,
    topo: Topology,
    name: str,
    tag: str,
    switches: int,
    link_scale: float,
    extra: tuple[str, ...] = (),
) -> Iterator[Controller]:
    """Controller + emulated fabric; both always torn down (controller by PID, emu down).
    Holds :data:`FABRIC_LOCK` meanwhile."""
    with fabriclock.fabric_lock(log):
        yield from _cluster(workdir, topo, name, tag, switches, link_scale, extra)


def _cluster(
    workdir: Path,
    topo: Topology,
    name: str,
    tag: str,
    switches: int,
    link_scale: float,
    extra: tuple[str, ...],
) -> Iterator[Controller]:
    build("bpf")  # the switch ports' ECN marker (emu up --queues ecn, the default)
    topo_file = workdir / f"{tag}.json"
    catalog.save_topology(topo, topo_file)
    ctl: Controller | None = None
    upped = False
    try:
        ctl = Controller(workdir, topo_file, tag, extra)
        log(f"controller pid {ctl.proc.pid if ctl.proc else '?'} on 127.0.0.1:{ctl.port}, "
            f"metrics on http://127.0.0.1:{ctl.metrics_port}/metrics")  # fmt: skip
        upped = True  # emu up removes a half-built fabric itself; down is idempotent
        sdnmpi(
            "emu", "up", "--topology", str(topo_file), "--name", name,
            "--link-scale", str(link_scale), "--controller", f"tcp:127.0.0.1:{ctl.port}",
        )  # fmt: skip
        c = ctl
        secs = wait_for("LLDP discovery", lambda: "discovery complete" in c.log(), 60)
        wait_for(
            "default routes confirmed",
            lambda: c.log().count("all flow-mods confirmed") >= switches,
            60,
        )
        log(f"fabric {name} up, discovered after {secs:.1f} s, default routes confirmed")
        yield ctl
    finally:
        if ctl is not None:
            ctl.stop()
            log("controller stopped")
        if upped:
            _down(name)


#: Attempts of ``emu down`` at the end of a cluster.  One failed in a clean-clone
#: `make test` (rc=1, 2026-11-27 00:28, NetSA's one-switch fabric) and the same
#: command succeeded 4 s later: the next fabric of that name then found the old one
#: "already up" and its rows failed.
DOWN_ATTEMPTS = 3


def _down(name: str) -> None:
    """``emu down`` until it succeeds (a few attempts, 1 s then 2 s apart), saying why
    an attempt failed."""
    for attempt in range(1, DOWN_ATTEMPTS + 1):
        res = subprocess.run(
            [*CLI, "emu", "down", "--name", name], capture_output=True, text=True, check=False
        )
        log(f"emu down {name}: rc={res.returncode}")
        if res.returncode == 0:
            return
        why = " ".join((res.stderr or res.stdout).strip().splitlines()[-2:])[:300]
        log(f"emu down {name} failed (attempt {attempt} of {DOWN_ATTEMPTS}): {why}")
        if attempt < DOWN_ATTEMPTS:
            time.sleep(attempt)


class CpuMonitor:
    """Whether a run was limited by the machine's CPU rather than the emulated links.

    Two figures over the run: the machine's busy share (``/proc/stat``, all cores)
    and the share of the run the switch process (``ovs-vswitchd``, every thread)
    spent runnable but waiting for a core (``/proc/PID/task/*/schedstat``).  The
    emulated links only limit a run if the switches forward every frame as it
    comes: when the switch waits for a core for more than :data:`SWITCH_WAIT_LIMIT`
    of the run while the cores are saturated, the run is CPU-bound.
    """

    SWITCH_WAIT_LIMIT = 0.2
    BUSY_LIMIT = 0.95

    def __init__(self, fabric: str) -> None:
        plan = runner.make_plan_for(fabric, DEFAULT_STATE_ROOT)
        self.pid = int((plan.run_dir / "ovs-vswitchd.pid").read_text().split()[0])
        self.result: dict[str, float] = {}

    @staticmethod
    def _stat() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]

    def _wait_ns(self) -> int:
        total = 0
        for f in Path(f"/proc/{self.pid}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(f.read_text().split()[1])
        return total

    def sample(self) -> tuple[float, int, int, int]:
        """Now: (monotonic seconds, CPU jiffies in all, idle jiffies, switch wait ns)."""
        total, idle = self._stat()
        return time.monotonic(), total, idle, self._wait_ns()

    @staticmethod
    def figures(a: tuple[float, int, int, int], b: tuple[float, int, int, int]) -> dict[str, float]:
        """The figures between two :meth:`sample` results (what ``result`` holds)."""
        wall = max(b[0] - a[0], 1e-9)
        busy = 1 - (b[2] - a[2]) / max(b[1] - a[1], 1)
        return {"machine_busy": busy, "switch_wait": (b[3] - a[3]) / 1e9 / wall, "wall_s": wall}

    @classmethod
    def bound(cls, figures: dict[str, float]) -> bool:
        """Whether :meth:`figures` say CPU-bound (see :attr:`cpu_bound`)."""
        return figures.get("machine_busy", 0) > cls.BUSY_LIMIT and figures.get("switch_wait", 0) > (
            cls.SWITCH_WAIT_LIMIT
        )

    def __enter__(self) -> CpuMonitor:
        self._first = self.sample()
        return self

    def __exit__(self, *exc: object) -> None:
        self.result = self.figures(self._first, self.sample())

    @property
    def cpu_bound(self) -> bool:
        """Both cores saturated and the switch kept waiting for one."""
        return self.bound(self.result)

    def evidence(self) -> str:
        r = self.result
        return (
            f"machine busy {100 * r.get('machine_busy', 0):.0f} %, switch waited for a core "
            f"{100 * r.get('switch_wait', 0):.0f} % of the run"
        )


def host_namespaces(fabric: str, hosts: Sequence[str] | None = None) -> list[str]:
    """The network namespaces of ``hosts`` (default: every host) of fabric ``fabric``
    (for :class:`~sdnmpi.emu.tcpstats.TcpLoss`)."""
    plan = runner.make_plan_for(fabric, DEFAULT_STATE_ROOT)
    names = dict.fromkeys(hosts) if hosts is not None else [h.name for h in plan.hosts]
    return [plan.host(h).netns for h in names]


def pattern(nprocs: int, shift: int, size: int) -> Pattern:
    """What ``sdnmpi-bench pairs --oneway --shift S`` sends: r -> r + S for (r / S) even."""
    cells = [(r, r + shift, size) for r in range(nprocs) if (r // shift) % 2 == 0]
    return Pattern("pairs-oneway", nprocs, (Phase.from_cells(f"shift {shift}", cells),))


def job_pairs(fabric: Fabric, routing: Routing, nflows: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i in range(nflows):
        path = routing.node_path(fabric, i)
        out[f"{path[0]}>{path[-1]}"] = list(path)
    return out


def spine_tx_bytes(name: str, spines: tuple[str, ...]) -> dict[str, int]:
    """``"spine:port rx|tx"`` -> bytes through that spine port (OVS counters)."""
    counters = runner.port_counters(name)
    return {
        f"{sw}:{p} {d}": c[f"{d}_bytes"]
        for sw in spines
        for p, c in counters[sw].items()
        for d in ("rx", "tx")
    }


def spine_names(topo: Topology) -> tuple[str, ...]:
    levels = topo.levels
    top = max(levels[sw.name] for sw in topo.switches)
    return tuple(sw.name for sw in topo.switches if levels[sw.name] == top)


def expected_spine_bytes(fabric: Fabric, routing: Routing, nbytes: int) -> dict[str, int]:
    """``"spine:port rx|tx"`` -> payload bytes the routing sends through that spine port."""
    arcs, spines = fabric.topology.arcs, set(spine_names(fabric.topology))
    out: dict[str, int] = {}
    for i in range(len(routing.arcs)):
        for a in routing.path(i):
            arc = arcs[a]
            for key in (f"{arc.src}:{arc.src_port} tx", f"{arc.dst}:{arc.dst_port} rx"):
                if key.split(":")[0] in spines:
                    out[key] = out.get(key, 0) + nbytes
    return out


def check_spines(
    label: str, measured: dict[str, int], expected: dict[str, int], flow_bytes: int
) -> bool:
    """Every port the routing uses carried its payload; the others carried < 10 % of a flow."""
    ok = True
    for key in sorted(measured):
        want, got = expected.get(key, 0), measured[key]
        good = got >= want if want else got < flow_bytes // 10
        ok &= good
        if want or not good:
            log(f"{label}: {key} {got} B, routing says {want} B {'ok' if good else 'WRONG'}")
    return ok


#: From the artefact directory (sdnmpi.artefacts): this checkout's build/, or, when run by
#: an installation's Python (PREFIX/lib/sdnmpi/venv/bin/python), the installed files.
BENCH = artefacts.path("openmpi/sdnmpi-bench")
LIBSDNMPI = artefacts.path("openmpi/libsdnmpi.so")


def build(*targets: str) -> None:
    """``make TARGET`` for the C parts a script runs (mpibench, pmpi, bpf), when they come
    from this checkout's build/ (an installation has them built)."""
    if artefacts.root().resolve() != (ROOT / "build").resolve():
        return
    for target in targets:
        subprocess.run(["make", "-s", "-C", str(ROOT), target], check=True, capture_output=True)


def tag_env(name: str, ctl: Controller, job: str, mode: str = "tag") -> list[str]:
    """Start the fabric's node agents (the controller as hub) and return the ranks'
    environment for libsdnmpi in ``mode``."""
    agents.up(name, controller_api=ctl.api_path)
    plan = runner.make_plan_for(name, DEFAULT_STATE_ROOT)
    return [
        f"LD_PRELOAD={LIBSDNMPI}",
        f"SDNMPI_MODE={mode}",
        f"SDNMPI_JOB={job}",
        f"SDNMPI_AGENT_SOCKET={agents.socket_template(plan)}",
    ]


def mpirun_json(
    name: str,
    hosts: tuple[str, ...],
    program: list[str],
    env: list[str],
    timeout_s: float,
    mpi: str = "openmpi",
    allow_untagged: bool = False,
    results_before_hang: bool = False,
) -> tuple[dict[str, Any], str]:
    """``program`` (an sdnmpi-bench or sdnmpi-replay ``--json`` run) as MPI ranks of
    flavour ``mpi`` on ``hosts``: its JSON document and stderr.  A failure, or a rank
    running untagged (unless ``allow_untagged``: the caller reads :data:`UNTAGGED` in the
    stderr), raises; on Ctrl-C the CLI child gets SIGINT and stops its MPI job.  With
    ``results_before_hang``, a run stopped at its timeout (exit 124) after rank 0 printed
    its JSON (the program hung after measuring, in ``MPI_Finalize``) gives that JSON with
    ``"stopped_after_results": true``."""
    argv = ["emu", "mpirun", "--name", name, "-n", str(len(hosts)), "--mpi", mpi]
    argv += ["--hosts", ",".join(hosts), "--timeout", str(round(timeout_s))]
    argv += [a for e in env for a in ("--env", e)]
    proc = subprocess.Popen(
        [*CLI, *argv, "--", *program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s + 60)
    except BaseException:
        for sig, wait_s in ((signal.SIGINT, 10.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=wait_s)
                break
        raise
    printed = next((ln for ln in stdout.splitlines() if ln.startswith("{")), None)
    if proc.returncode == 124 and results_before_hang and printed is not None:
        return {**json.loads(printed), "stopped_after_results": True}, stderr
    if proc.returncode != 0 or printed is None:
        raise RuntimeError(f"sdnmpi emu mpirun failed ({proc.returncode}):\n{stderr[-3000:]}")
    if UNTAGGED in stderr and not allow_untagged:
        raise RuntimeError(f"sdnmpi emu mpirun: the job ran untagged:\n{stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(printed)
    return doc, stderr


#: What a rank of the PMPI library prints when it (or, from rank 0, the whole job) runs
#: untagged: no agent, or a rank without a job slot (csrc/pmpi/node.c).
UNTAGGED = "running untagged"


def emit(summary: dict[str, Any], path: Path | None) -> None:
    """Print the JSON summary as the last line (and write it to ``path``)."""
    text = json.dumps(summary)
    if path is not None:
        path.write_text(text + "\n")
    print(text)


def run_bench(name: str, size: int, iters: int) -> dict[str, Any]:
    """The demo's ``pairs --oneway`` exchange over the fabric; its result row."""
    program = [str(BENCH), "pairs", "--oneway", "--shift", str(SHIFT), "--size", str(size)]
    program += ["--iters", str(iters), "--warmup", "1", "--json"]
    env = ["OMPI_MCA_mpi_yield_when_idle=1"]
    doc, _ = mpirun_json(name, PLACEMENT, program, env, 150)
    result: dict[str, Any] = doc["results"][0]
    return result


def large_installs(workdir: Path, name: str, link_scale: float) -> dict[str, Any]:
    """64- and 1000-pair job installs on a 36-host fabric (8 hosts have only 56 pairs)."""
    out: dict[str, Any] = {"large_fabric": "leaf_spine(2, 4, 9): 36 hosts, 1260 ordered pairs"}
    big = leaf_spine(2, 4, 9, host_bps=GBPS, uplink_bps=GBPS, name="demo-2x4x9")
    bfab = Fabric(big)
    routed = route("ours", bfab, Demands.all_pairs(bfab))
    with cluster(workdir, big, f"{name}-big", "big", 6, link_scale) as bctl:
        for n in (64, 1000):
            p = job_pairs(bfab, routed, n)
            rep, secs = bctl.api({"op": "install_job", "job_id": n, "pairs": p})
            log(f"{n}-pair job: {rep['flow_mods']} flow-mods confirmed in {secs:.3f} s")
            out[f"install_{n}_pairs_s"] = secs
            out[f"install_{n}_flow_mods"] = rep["flow_mods"]
            bctl.api({"op": "remove_job", "job_id": n})
    return out


def predict(
    topo: Topology, size: int, link_scale: float
) -> tuple[dict[str, list[str]], float, float, dict[str, dict[str, int]]]:
    """The ``ours`` job pairs, simulated dmodk and ours times at the emulated rate, and
    the payload per spine port of one exchange under each routing."""
    fabric = Fabric(topo)
    sim_topo = leaf_spine(2, 4, 2, host_bps=GBPS * link_scale, uplink_bps=GBPS * link_scale)
    sim_fabric = Fabric(sim_topo)
    pat = pattern(len(PLACEMENT), SHIFT, size)
    demands = Demands.from_pattern(fabric, pat, Placement(PLACEMENT))
    sim_demands = Demands.from_pattern(sim_fabric, pat, Placement(PLACEMENT))
    ours = route("ours", fabric, demands)
    t_dmodk = simulate(sim_fabric, sim_demands, route("dmodk", sim_fabric, sim_demands)).total_s
    t_ours = simulate(sim_fabric, sim_demands, route("ours", sim_fabric, sim_demands)).total_s
    predicted = t_dmodk / t_ours
    log(f"simulator: dmodk {t_dmodk:.3f} s, ours {t_ours:.3f} s per exchange, x{predicted:.2f}")
    if predicted < 1.2:
        raise RuntimeError(f"placement does not contend under dmodk (x{predicted:.2f})")
    spines = {
        "default": expected_spine_bytes(fabric, route("dmodk", fabric, demands), size),
        "job": expected_spine_bytes(fabric, ours, size),
    }
    return job_pairs(fabric, ours, len(demands)), t_dmodk, t_ours, spines


def report(summary: dict[str, Any], link_scale: float) -> None:
    """The figures, one per line."""
    print()
    print(f"measured time, default routes (dmodk): {summary['default_time_s']:.3f} s/exchange")
    print(f"measured time, job routes (ours):      {summary['job_time_s']:.3f} s/exchange")
    print(f"measured speedup:  x{summary['measured_speedup']:.2f}")
    mbps = link_scale * GBPS / 1e6
    print(f"predicted speedup: x{summary['predicted_speedup']:.2f} (simulator, {mbps:.0f} Mbit/s)")
    print(f"agreement:         {summary['agreement_pct']:.1f} %")
    ok = "yes" if summary["spine_bytes_as_routed"] else "NO (see the log above)"
    print(f"MPI bytes on the spine ports each routing chose (OVS counters): {ok}")
    ms = summary["install_s"] * 1000
    print(f"job install ({summary['job_pairs']} pairs): {ms:.1f} ms request-to-confirmed")
    for n in (64, 1000):
        if f"install_{n}_pairs_s" in summary:
            secs = summary[f"install_{n}_pairs_s"]
            print(f"job install ({n} pairs, 36-host fabric): {secs:.3f} s request-to-confirmed")
    print(f"port stats: {summary['port_stats']}, plot: {summary['port_plot']}")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Small message and few iterations.")
    ap.add_argument("--no-large", action="store_true", help="Skip the 36-host install timing.")
    ap.add_argument("--json", type=Path, help="Also write the summary here.")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "demo", help="Plots, stats.")
    ap.add_argument("--link-scale", type=float, default=LINK_SCALE, help="Emulated rate factor.")
    ap.add_argument("--size", type=int, help="Message bytes (default 2 MiB, quick 1 MiB).")
    ap.add_argument("--iters", type=int, help="Timed exchanges (default 3, quick 2).")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    if os.geteuid() != 0:
        print("demo_fabric: skipped, the emulated fabric needs root", file=sys.stderr)
        return 2
    size, iters = (1 << 20, 2) if args.quick else (2 << 20, 3)
    size, iters = args.size or size, args.iters or iters
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"demo-{os.getpid()}"
    summary: dict[str, Any] = {"fabric": name, "placement": PLACEMENT, "shift": SHIFT}
    summary.update(size_bytes=size, iters=iters, link_scale=args.link_scale)

    topo = leaf_spine(2, 4, 2, host_bps=GBPS, uplink_bps=GBPS, name="demo-leaf-spine")
    pairs, t_dmodk, t_ours, per_spine = predict(topo, size, args.link_scale)
    spines = spine_names(topo)
    exchanges = iters + 1  # one warmup
    predicted = t_dmodk / t_ours

    build("mpibench")
    if not BENCH.exists():
        raise RuntimeError(f"{BENCH} was not built (apt-get install openmpi-bin libopenmpi-dev)")
    stats = args.out / "demo-fabric-port-stats.json"
    plot = args.out / "demo-fabric-port-stats.png"

    with tempfile.TemporaryDirectory(prefix="sdnmpi-demo-") as tmp:
        workdir = Path(tmp)
        with cluster(workdir, topo, name, "small", 6, args.link_scale) as ctl:
            before = spine_tx_bytes(name, spines)
            default = run_bench(name, size, iters)
            log(f"default routes (dmodk): {default['time_max_s']:.3f} s per exchange")
            after = spine_tx_bytes(name, spines)
            spines_ok = check_spines(
                "default", {k: after[k] - before[k] for k in after},
                {k: v * exchanges for k, v in per_spine["default"].items()}, size * exchanges,
            )  # fmt: skip
            reply, install_s = ctl.api({"op": "install_job", "job_id": 1, "pairs": pairs})
            log(f"job routes ({len(pairs)} pairs, {reply['flow_mods']} flow-mods) "
                f"confirmed in {install_s * 1000:.1f} ms")  # fmt: skip
            before = spine_tx_bytes(name, spines)
            job = run_bench(name, size, iters)
            log(f"job routes (ours): {job['time_max_s']:.3f} s per exchange")
            after = spine_tx_bytes(name, spines)
            spines_ok &= check_spines(
                "job", {k: after[k] - before[k] for k in after},
                {k: v * exchanges for k, v in per_spine["job"].items()}, size * exchanges,
            )  # fmt: skip
            _, remove_s = ctl.api({"op": "remove_job", "job_id": 1})
            time.sleep(1.2)  # one more stats poll
        if ctl.stats_path.exists():
            stats.write_bytes(ctl.stats_path.read_bytes())
        res = subprocess.run(
            [*CLI, "controller", "plot-stats", str(stats), "-o", str(plot)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        measured = default["time_max_s"] / job["time_max_s"]
        summary.update(
            default_time_s=default["time_max_s"],
            job_time_s=job["time_max_s"],
            measured_speedup=measured,
            predicted_speedup=predicted,
            predicted_default_s=t_dmodk,
            predicted_job_s=t_ours,
            agreement_pct=100.0 * (1 - abs(measured - predicted) / predicted),
            job_pairs=len(pairs),
            spine_bytes_as_routed=spines_ok,
            install_s=install_s,
            remove_s=remove_s,
            port_stats=str(stats),
            port_plot=str(plot) if res.returncode == 0 else None,
        )
        if not args.no_large:
            summary.update(large_installs(workdir, name, args.link_scale))

    report(summary, args.link_scale)
    emit(summary, args.json)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("demo_fabric: interrupted (fabric and controller were cleaned up)", file=sys.stderr)
        sys.exit(130)
