"""Seed 003 (NetSA) on the emulated cluster: hop count, collectives, NPB kernels, rule install.

Run as root: ``.venv/bin/python scripts/exp_netsa.py [--quick] [--json FILE]``
(``make exp-netsa``; ``make reproduce`` calls :func:`reproduce`).

1. **Hop count** (Figs. 5-6): one host and a chain of six switches with a host on
   each (:func:`netsa_model.chain`, routed by ``minhop``), so the paths cross 1 to 6
   switches.  ``sdnmpi-bench latency`` at :data:`LATENCY_SCALE` (the paper's 1 Gbit/s:
   a ping-pong is not bandwidth-bound, and the emulator's token bucket forwards a
   lone frame at once whatever the rate, so a slower link would only hide the
   serialization a real switch adds per hop), ``bw`` at the experiment's link scale.
2. **Collectives** (Fig. 10): 16 Open MPI ranks, one per host, ``sdnmpi-bench coll``
   for Allreduce, Allgather (ranks in a seeded random host order, as the paper) and
   Bcast over sizes, three ways (:data:`netsa_model.WAYS`): one switch, LACP
   (``--router ecmp`` on the LAG fabric), NetSA (the ``netsa`` router's routes for
   the benchmark's classified pattern, installed as a job through the controller's API).
3. **NPB kernels** (Fig. 11): the core's CG and FT patterns, scaled down, as real MPI
   traffic (``sdnmpi-replay``), the same three ways.  bt and lu have no pattern here.
4. **Rule programming** (Sec. V-D): the NetSA way's install requests, from sending
   ``install_job`` to the controller's reply after every switch confirmed by barrier.

Every case is predicted by the simulator on the calibration (Open MPI's protocol);
collectives and kernels also get the LP bound.  The last line printed is a JSON
summary (``--json`` writes it too); :func:`netsa_rows.rows` builds the report's rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import demo_fabric as harness
import netsa_model as model
import netsa_rows

from sdnmpi import catalog
from sdnmpi.core.generators import GBPS
from sdnmpi.core.pattern import Pattern
from sdnmpi.core.routing.model import Fabric
from sdnmpi.emu import runner
from sdnmpi.emu.idle import DEFAULT_IDLE_US
from sdnmpi.formats.replay import save_replay
from sdnmpi.report.reproduce_api import Context, Row, require_programs
from sdnmpi.sim import Mode
from sdnmpi.sim.calibration import Calibration

ROOT = Path(__file__).resolve().parent.parent
REPLAY = ROOT / "build" / "openmpi" / "sdnmpi-replay"
#: Link scale of the latency runs: the paper's 1 Gbit/s (see the module docstring).
LATENCY_SCALE = 1.0
#: Ranks yield while they wait (with libsdnmpi_idle.so, which emu mpirun preloads).
ENV = ["OMPI_MCA_mpi_yield_when_idle=1"]
#: How the two latency ranks wait (``SDNMPI_IDLE_US``): ``poll``, plain ``sched_yield``
#: between polls, as MPI spins on a host of its own (two ranks do not starve the
#: switches); ``sleep``, emu mpirun's default sleeps of 50-200 us, which ``sdnmpi
#: calibrate`` measures with: a wait then ends on a wake-up step.
IDLE = {"poll": "0", "sleep": DEFAULT_IDLE_US}
#: Bytes in flight in one ``bw`` window for large messages (the window is this / size).
WINDOW_BYTES = 1 << 20
log = harness.log


@dataclass(frozen=True)
class Plan:
    """What one run of the experiment measures (quick or full)."""

    quick: bool
    hops: tuple[int, ...]
    latency_sizes: tuple[int, ...]
    bandwidth_sizes: tuple[int, ...]
    repeats: int
    collectives: dict[str, tuple[int, ...]]
    coll_seconds: float
    kernels: dict[str, tuple[str, int]] = field(default_factory=dict)
    kernel_iters: int = 2

    @classmethod
    def make(cls, quick: bool) -> Plan:
        """The quick form (CI: minutes) or the full one."""
        if quick:
            return cls(True, (1, 6), (512,), (256 * 1024,), 1, {"allgather": (64 * 1024,)}, 0)
        pow2 = tuple(1 << k for k in range(22))
        coll = tuple(1 << k for k in range(10, 21))  # 1 KiB .. 1 MiB, OSU's range
        return cls(
            False, (1, 2, 3, 4, 5, 6), pow2, (64, 512, 4096, 32768, 262144, 2 << 20), 3,
            {"allreduce": coll, "allgather": coll[:-2], "bcast": coll}, 3.0,
            {"cg": ("W", 5), "ft": ("W", 10)},
        )  # fmt: skip


# -- part 1: hop count ----------------------------------------------------------------------


def window(size: int) -> int:
    """Messages per ``bw`` window: osu_bw's 64, fewer for large messages.

    >>> window(512), window(256 * 1024), window(4 << 20)
    (64, 4, 1)
    """
    return max(1, min(64, WINDOW_BYTES // size))


def latency_programs(sizes: Sequence[int]) -> list[list[str]]:
    """``sdnmpi-bench latency`` runs covering ``sizes``: many iterations below 8 KiB,
    few above (a 2 MiB ping-pong takes seconds on a slow link)."""
    small = [s for s in sizes if s < 8192]
    large = [s for s in sizes if s >= 8192]
    out = []
    for part, iters in ((small, 200), (large, 10)):
        if part:
            lo, hi = str(min(part)), str(max(part))
            warmup = str(max(2, iters // 10))
            out.append([str(harness.BENCH), "latency", "--min", lo, "--max", hi,
                        "--iters", str(iters), "--warmup", warmup, "--json"])  # fmt: skip
    return out


def bandwidth_program(size: int, quick: bool) -> list[str]:
    """One ``sdnmpi-bench bw`` run of ``size``-byte messages."""
    iters = 20 if size < 4096 else (2 if quick else 3)
    return [str(harness.BENCH), "bw", "--size", str(size), "--window", str(window(size)),
            "--iters", str(iters), "--warmup", "1", "--json"]  # fmt: skip


def hop_latency(plan: Plan, workdir: Path, scale: float) -> dict[str, Any]:
    """Median one-way latency (us) per waiting style (:data:`IDLE`), hop count and size,
    over ``plan.repeats`` interleaved repetitions, on a chain at link scale ``scale``."""
    topo = model.chain(max(plan.hops))
    name = f"nsh-{os.getpid()}"
    runs: dict[str, dict[int, dict[int, list[float]]]] = {
        style: {k: {} for k in plan.hops} for style in IDLE
    }
    with harness.cluster(workdir, topo, name, "chain-lat", len(topo.switches), scale,
                         ("--router", "minhop")), harness.CpuMonitor(name) as cpu:  # fmt: skip
        for _ in range(plan.repeats):
            for k in plan.hops:
                for style, idle in IDLE.items():
                    env = [*ENV, f"SDNMPI_IDLE_US={idle}"]
                    for program in latency_programs(plan.latency_sizes):
                        doc, _ = harness.mpirun_json(name, ("src", f"d{k}"), program, env, 600)
                        for r in doc["results"]:
                            size = int(r["size_bytes"])
                            runs[style][k].setdefault(size, []).append(float(r["latency_us"]))
    return {
        "link_scale": scale,
        "repeats": plan.repeats,
        "idle_us": IDLE,
        "us": {style: {str(k): {str(s): statistics.median(v) for s, v in by.items()}
                       for k, by in per_hop.items()}
               for style, per_hop in runs.items()},
        "cpu": cpu.result,
    }  # fmt: skip


def hop_bandwidth(plan: Plan, workdir: Path, scale: float) -> dict[str, Any]:
    """MB/s per hop count and size on a chain at link scale ``scale``."""
    topo = model.chain(max(plan.hops))
    name = f"nsb-{os.getpid()}"
    mbps: dict[str, dict[str, float]] = {str(k): {} for k in plan.hops}
    with harness.cluster(workdir, topo, name, "chain-bw", len(topo.switches), scale,
                         ("--router", "minhop")), harness.CpuMonitor(name) as cpu:  # fmt: skip
        for k in plan.hops:
            for size in plan.bandwidth_sizes:
                program = bandwidth_program(size, plan.quick)
                doc, _ = harness.mpirun_json(name, ("src", f"d{k}"), program, ENV, 600)
                mbps[str(k)][str(size)] = float(doc["results"][0]["bandwidth_MBps"])
    windows = {str(s): window(s) for s in plan.bandwidth_sizes}
    return {"link_scale": scale, "MBps": mbps, "windows": windows, "cpu": cpu.result}


def hop_predictions(plan: Plan, cal: Calibration, scale: float) -> dict[str, Any]:
    """The model's latency (us) per hop count and size at :data:`LATENCY_SCALE`, and
    ``bw`` rates (MB/s) at ``scale``."""
    lat_rate = GBPS * LATENCY_SCALE
    bw_rate = GBPS * scale
    latency = {
        str(k): {str(s): 1e6 * model.latency_s(s, k, lat_rate, cal) for s in plan.latency_sizes}
        for k in plan.hops
    }
    bandwidth = {
        str(k): {
            str(s): window(s) * s / model.window_s(s, window(s), k, bw_rate, cal) / 1e6
            for s in plan.bandwidth_sizes
        }
        for k in plan.hops
    }
    return {"latency_us": latency, "bandwidth_MBps": bandwidth}


# -- parts 2-4: collectives, kernels and rule installs, three ways ---------------------------


@dataclass(frozen=True)
class Benchmark:
    """One MPI run on each way: its program, hosts and the NetSA job routes for it."""

    name: str
    kind: str  # "coll" or "kernel"
    hosts: tuple[str, ...]
    program: tuple[str, ...]
    parts: dict[int, Pattern]  # size (coll) or 0 (kernel) -> one call / one pass
    job: dict[model.Pair, model.ArcPath]


def collective(op: str, sizes: tuple[int, ...], seconds: float) -> Benchmark:
    """``sdnmpi-bench coll`` over ``sizes``; NetSA's job routes for the whole run."""
    parts = {s: model.coll_pattern(op, s) for s in sizes}
    program = [str(harness.BENCH), "coll", "--op", op, "--min", str(min(sizes)),
               "--max", str(max(sizes)), "--warmup", "1", "--json"]  # fmt: skip
    program += ["--duration", str(seconds)] if seconds else ["--iters", "3"]
    hosts = model.hosts_of(op)
    bench = model.benchmark_pattern(list(parts.values()), op)
    return Benchmark(op, "coll", hosts, tuple(program), parts, _job(bench, hosts))


def kernel(name: str, klass: str, niter: int, iters: int, workdir: Path) -> Benchmark:
    """``sdnmpi-replay`` of the core's NPB pattern; NetSA's job routes for it."""
    pattern = catalog.load_pattern(model.kernel_spec(name, klass, niter))
    path = workdir / f"{name}.replay"
    save_replay(pattern, path)
    program = [str(REPLAY), "--iters", str(iters), "--warmup", "1", "--json", str(path)]
    hosts = model.hosts_of(name)
    return Benchmark(name, "kernel", hosts, tuple(program), {0: pattern}, _job(pattern, hosts))


def _job(pattern: Pattern, hosts: tuple[str, ...]) -> dict[model.Pair, model.ArcPath]:
    fabric = Fabric(model.fabric_of("netsa"))
    return model.netsa_paths(fabric, model.demands_of(fabric, pattern, hosts))


def run_way(way: str, benches: Sequence[Benchmark], workdir: Path, scale: float) -> dict[str, Any]:
    """Every benchmark on one fabric of ``way``: times, CPU figures, uplink counters,
    and (NetSA) the job installs.  A failed benchmark records its error."""
    topo = model.fabric_of(way)
    router, netsa = model.WAYS[way]
    name = f"nsw-{os.getpid()}"
    out: dict[str, Any] = {}
    with harness.cluster(workdir, topo, name, way, len(topo.switches), scale,
                         ("--router", router)) as ctl:  # fmt: skip
        for job_id, bench in enumerate(benches, 1):
            log(f"{way}: {bench.name}")
            try:
                out[bench.name] = _run_one(ctl, name, bench, job_id if netsa else None)
            except Exception as exc:  # one failed case; the others run
                out[bench.name] = {"error": str(exc).strip().splitlines()[-1][:300]}
                log(f"{way}: {bench.name} failed: {out[bench.name]['error']}")
    return out


def _run_one(
    ctl: harness.Controller, name: str, bench: Benchmark, job_id: int | None
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if job_id is not None:
        pairs = model.job_request(Fabric(model.fabric_of("netsa")), bench.job)
        reply, secs = ctl.api({"op": "install_job", "job_id": job_id, "pairs": pairs})
        result["install"] = {"seconds": secs, "pairs": len(pairs),
                             "flow_mods": reply.get("flow_mods"), "switches": reply.get("switches"),
                             "controller_s": reply.get("seconds")}  # fmt: skip
    try:
        before = _uplinks(name)
        with harness.CpuMonitor(name) as cpu:
            doc, _ = harness.mpirun_json(name, bench.hosts, list(bench.program), ENV, 1800)
        after = _uplinks(name)
    finally:
        if job_id is not None:
            ctl.api({"op": "remove_job", "job_id": job_id})
    result["uplink_tx_bytes"] = {k: after[k] - before[k] for k in after}
    result["cpu"] = {**cpu.result, "cpu_bound": cpu.cpu_bound, "evidence": cpu.evidence()}
    if bench.kind == "coll":
        result["time_s"] = {str(r["size_bytes"]): float(r["time_max_s"]) for r in doc["results"]}
        result["time_avg_s"] = {
            str(r["size_bytes"]): float(r["time_avg_s"]) for r in doc["results"]
        }
    else:
        result["time_s"] = {"0": float(doc["total_s"])}
    return result


def _uplinks(name: str) -> dict[str, int]:
    """``"tor1:9 tx"`` -> bytes sent so far out of every ToR-spine port (OVS counters)."""
    counters = runner.port_counters(name)
    out = {}
    for arc in model.uplink_arcs(model.fabric_of("netsa")):
        sw = counters.get(arc.src, {})
        if arc.src_port in sw:
            out[f"{arc.src}:{arc.src_port} tx"] = sw[arc.src_port]["tx_bytes"]
    return out


def predictions(bench: Benchmark, cal: Calibration) -> dict[str, Any]:
    """Per size (coll) or pass (kernel): each way's simulated seconds, the LP bound's
    least increase over one switch on the NetSA and LACP fabrics; and each way's
    uplink bytes (all parts once)."""
    mode: Mode = "ranks" if bench.kind == "coll" else "phases"
    out: dict[str, Any] = {"time_s": {w: {} for w in model.WAYS}, "bound_pct": {}, "mode": mode}
    uplinks: dict[str, dict[str, float]] = {"lacp": {}, "netsa": {}}
    for key, pattern in bench.parts.items():
        for way in model.WAYS:
            run = model.Run(way, model.fabric_of(way), pattern, bench.hosts,
                            bench.job if way == "netsa" else {})  # fmt: skip
            out["time_s"][way][str(key)] = model.predicted_s(run, cal, mode)
            if way in uplinks:
                for port, b in model.uplink_bytes(*model.routed(run)).items():
                    uplinks[way][port] = uplinks[way].get(port, 0.0) + b
        single = model.bound_s(model.fabric_of("single"), pattern, bench.hosts)
        out["bound_pct"][str(key)] = {
            w: model.increase_pct(model.bound_s(model.fabric_of(w), pattern, bench.hosts), single)
            for w in ("lacp", "netsa")
        }
    out["uplink_bytes"] = uplinks
    return out


def collectives_and_kernels(
    plan: Plan, cal: Calibration, scale: float, workdir: Path
) -> dict[str, Any]:
    """Parts 2-4: every benchmark three ways, measured and predicted."""
    benches = [collective(op, sizes, plan.coll_seconds) for op, sizes in plan.collectives.items()]
    benches += [kernel(k, c, n, plan.kernel_iters, workdir) for k, (c, n) in plan.kernels.items()]
    measured: dict[str, dict[str, Any]] = {}
    for way in model.WAYS:
        try:
            measured[way] = run_way(way, benches, workdir, scale)
        except Exception as exc:  # the fabric or controller: every case of this way
            err = str(exc).strip().splitlines()[-1][:300]
            measured[way] = {b.name: {"error": err} for b in benches}
    return {
        b.name: {
            "kind": b.kind,
            "hosts": list(b.hosts),
            "program": " ".join(Path(a).name if a.startswith("/") else a for a in b.program),
            "spec": model.kernel_spec(b.name, *plan.kernels[b.name]) if b.kind == "kernel" else "",
            "job_pairs": len(b.job),
            "measured": {w: measured[w][b.name] for w in model.WAYS},
            "predicted": predictions(b, cal),
        }
        for b in benches
    }


def experiment(plan: Plan, cal: Calibration, scale: float, out: Path) -> dict[str, Any]:
    """Every part of the experiment; the summary :func:`netsa_rows.rows` reads."""
    harness.build("mpibench", "replay")
    t0 = time.monotonic()
    summary: dict[str, Any] = {"quick": plan.quick, "link_scale": scale,
                               "latency_scale": LATENCY_SCALE,
                               "calibration": cal.to_dict()}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="sdnmpi-netsa-") as tmp:
        workdir = Path(tmp)
        summary["hops"] = _guarded(lambda: {
            "latency": hop_latency(plan, workdir, LATENCY_SCALE),
            "bandwidth": hop_bandwidth(plan, workdir, scale),
            "predicted": hop_predictions(plan, cal, scale),
        })  # fmt: skip
        summary["benchmarks"] = collectives_and_kernels(plan, cal, scale, workdir)
    summary["duration_s"] = time.monotonic() - t0
    out.mkdir(parents=True, exist_ok=True)
    (out / "netsa.json").write_text(json.dumps(summary) + "\n")
    plot(summary, out / "netsa-increase.png")
    return summary


def plot(summary: dict[str, Any], path: Path) -> None:
    """Per benchmark, the increase over one switch per size: LACP and NetSA, measured
    (solid) and predicted (dashed), as the paper's Figs. 10-11 draw it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = {n: b for n, b in summary["benchmarks"].items() if _increases(b, "netsa")}
    if not benches:
        return
    fig, axes = plt.subplots(1, len(benches), figsize=(4 * len(benches), 3.6), squeeze=False)
    for ax, (name, bench) in zip(axes[0], benches.items(), strict=True):
        for way, color in (("lacp", "tab:red"), ("netsa", "tab:blue")):
            for kind, style in (("measured", "-"), ("predicted", "--")):
                pts = _increases(bench, way, kind)
                ax.plot(range(len(pts)), [v for _, v in pts], style, marker="o", color=color,
                        label=f"{netsa_rows.WAY_NAMES[way]} {kind}")  # fmt: skip
        labels = [netsa_rows.size_label(int(s)) if s != "0" else name for s, _ in pts]
        ax.set_xticks(range(len(labels)), labels, rotation=45, fontsize=7)
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_title(name)
    axes[0][0].set_ylabel("increase over one switch (%)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _increases(bench: dict[str, Any], way: str, kind: str = "measured") -> list[tuple[str, float]]:
    """(size, % over one switch) of ``way``, measured or predicted, where both ran."""
    if kind == "measured":
        runs = bench["measured"]
        times = {w: runs[w].get("time_s", {}) for w in ("single", way)}
    else:
        times = {w: bench["predicted"]["time_s"][w] for w in ("single", way)}
    keys = sorted(set(times["single"]) & set(times[way]), key=int)
    return [(k, model.increase_pct(times[way][k], times["single"][k])) for k in keys]


def _guarded(part: Any) -> dict[str, Any]:
    """``part()``, or ``{"error": ...}`` when it failed (the other parts still run)."""
    try:
        result: dict[str, Any] = part()
        return result
    except Exception as exc:  # a failed part becomes failed rows
        return {"error": str(exc).strip().splitlines()[-1][:300]}


def reproduce(ctx: Context) -> list[Row]:
    """``make reproduce``: the quick form is hops 1 and 6, Allgather at 64 KiB, and the
    rule installs; the full form every size, collective and kernel."""
    require_programs({str(harness.BENCH): "make mpibench", str(REPLAY): "make replay"})
    plan = Plan.make(ctx.quick)
    summary = experiment(plan, ctx.calibration, ctx.link_scale, ctx.out)
    return netsa_rows.rows(summary)


def rows_from_saved(out: Path) -> list[Row]:
    """The rows of the run whose summary :func:`experiment` saved in ``out``
    (``reproduce.py --rederive``), with this checkout's row logic."""
    return netsa_rows.rows(json.loads((out / "netsa.json").read_text()))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Hops 1 and 6, one collective.")
    ap.add_argument("--link-scale", type=float, default=0.01, help="Emulated rate factor.")
    ap.add_argument("--calibration", type=Path, help="sdnmpi calibrate's output.")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "experiments" / "netsa")
    ap.add_argument("--json", type=Path, help="Also write the summary here.")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("exp_netsa: needs root (emulated fabric)", file=sys.stderr)
        return 2
    cal = Calibration.load_or_nominal(args.calibration, args.link_scale)
    summary = experiment(Plan.make(args.quick), cal, cal.link_scale, args.out)
    for r in netsa_rows.rows(summary):
        print(netsa_rows.line(r))
    harness.emit(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
