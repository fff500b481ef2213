"""The UnisonFlow experiment: Bcast traffic only through spine1, Reduce only through spine2.

Run as root: ``.venv/bin/python scripts/exp_unisonflow.py [--quick] [--json FILE]``
(``make exp-unisonflow``).

On the ``unisonflow`` topology (2 spines, 4 leaves of 6 hosts, 4-link LAG uplinks;
emulated at ``--link-scale``), eight real Open MPI ranks (two per leaf, root 0 on
the first leaf) run ``sdnmpi-bench coll --op bcast,reduce --duration D``: a loop of
MPI_Bcast from t1 to t2, then a loop of MPI_Reduce from t2 to t3 (wall-clock
times from the program).  Twice:

1. **tagged**: the controller with ``--primitives unisonflow`` (Bcast pinned to
   spine1, Reduce to spine2), node agents with the eBPF tagger on every host, the
   program under ``LD_PRELOAD=libsdnmpi.so`` in tag mode;
2. **ECMP**: the controller with ``--router ecmp`` default routes, no tags.

The script samples every spine port's counters (OVS) twice a second, prints the
fraction of each phase's spine bytes on each spine, and plots both spines'
throughput over time with t1-t3 marked, one panel per run
(``out/experiments/unisonflow.png``).  The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


import demo_fabric as harness

from sdnmpi import catalog
from sdnmpi.emu import runner
from sdnmpi.report.reproduce_api import Context, Row

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ("node01", "node02", "node07", "node08", "node13", "node14", "node19", "node20")
SPINES = ("spine1", "spine2")
log = harness.log


class Sampler:
    """Each spine's total received bytes (all ports), sampled with the wall clock."""

    def __init__(self, fabric: str, interval_s: float = 0.5) -> None:
        self.fabric, self.interval_s = fabric, interval_s
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            counters = runner.port_counters(self.fabric)
            totals = {s: sum(c["rx_bytes"] for c in counters[s].values()) for s in SPINES}
            self.samples.append((time.time(), totals))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def at(self, t: float) -> dict[str, float]:
        """Counters at time ``t``, interpolated between samples."""
        pts = self.samples
        for (t0, a), (t1, b) in itertools.pairwise(pts):
            if t0 <= t <= t1:
                w = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
                return {s: a[s] + w * (b[s] - a[s]) for s in SPINES}
        edge = pts[0] if t < pts[0][0] else pts[-1]
        return {s: float(v) for s, v in edge[1].items()}


def run_bench(name: str, size: int, duration_s: float, env: list[str]) -> list[dict[str, Any]]:
    program = [str(harness.BENCH), "coll", "--op", "bcast,reduce", "--size", str(size)]
    program += ["--duration", str(duration_s), "--warmup", "2", "--json"]
    doc, _ = harness.mpirun_json(name, HOSTS, program, env, 8 * duration_s + 240)
    rows: list[dict[str, Any]] = doc["results"]
    return rows


def one_run(
    workdir: Path, label: str, tagged: bool, size: int, duration_s: float, link_scale: float
) -> dict[str, Any]:
    topo = catalog.load_topology("unisonflow")
    name = f"uf{label[0]}-{os.getpid()}"
    extra = ("--primitives", "unisonflow") if tagged else ("--router", "ecmp")
    with harness.cluster(workdir, topo, name, label, 6, link_scale, extra) as ctl:
        env = harness.tag_env(name, ctl, f"unisonflow-{label}") if tagged else []
        with Sampler(name) as sampler:
            time.sleep(1.0)
            rows = run_bench(name, size, duration_s, env)
            time.sleep(1.0)
    bcast, reduce = rows
    t1, t2, t3 = bcast["start_unix_s"], reduce["start_unix_s"], reduce["end_unix_s"]
    at = [sampler.at(t) for t in (t1, t2, t3)]
    phases = {}
    for op, (a, b), want in (("bcast", (0, 1), "spine1"), ("reduce", (1, 2), "spine2")):
        moved = {s: at[b][s] - at[a][s] for s in SPINES}
        total = sum(moved.values())
        phases[op] = {
            "spine_bytes": {s: round(v) for s, v in moved.items()},
            "on_spine1": moved["spine1"] / total if total else 0.0,
            "on_intended": moved[want] / total if total else 0.0,
            "iterations": (bcast if op == "bcast" else reduce)["iterations"],
        }
        log(f"{label}: {op}: spine bytes {phases[op]['spine_bytes']}, "
            f"{100 * phases[op]['on_spine1']:.1f} % on spine1")  # fmt: skip
    return {"t": [t1, t2, t3], "phases": phases, "samples": sampler.samples}


def plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3.2 * len(runs)), sharey=True)
    for ax, (label, run) in zip(axes, runs.items(), strict=True):
        pts = run["samples"]
        t0 = run["t"][0]
        for s in SPINES:
            xs, ys = [], []
            for (ta, a), (tb, b) in itertools.pairwise(pts):
                xs.append((ta + tb) / 2 - t0)
                ys.append((b[s] - a[s]) * 8 / (tb - ta) / 1e6)
            ax.plot(xs, ys, label=s)
        for name, t in zip(("t1", "t2", "t3"), run["t"], strict=True):
            ax.axvline(t - t0, color="grey", linestyle="--", linewidth=0.8)
            ax.text(t - t0, ax.get_ylim()[1] * 0.95, name, ha="center", fontsize=8)
        ax.set_title(f"{label}: Bcast loop t1-t2, Reduce loop t2-t3")
        ax.set_ylabel("spine rx (Mbit/s)")
        ax.legend(loc="upper right")
    axes[-1].set_xlabel("time since t1 (s)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


EXPERIMENT = "000 UnisonFlow"


def rows(summary: dict[str, Any]) -> list[Row]:
    """Tagged: each primitive's spine bytes on its spine (paper: all of them); ECMP:
    Bcast's and Reduce's share on spine1, with ECMP's hashing as the prediction."""
    tag, ecmp = summary["runs"]["tagged"]["phases"], summary["runs"]["ecmp"]["phases"]
    settings = {"topology": "unisonflow", "link_scale": summary["link_scale"], "mpi": "openmpi",
                "size_bytes": summary["size_bytes"], "ranks": summary["ranks"]}  # fmt: skip
    out = []
    for op, spine, fig in (("bcast", "spine1", "Figs. 9-10 (Bcast, proposed)"),
                           ("reduce", "spine2", "Figs. 9-10 (Reduce, proposed)")):  # fmt: skip
        out.append(Row(
            EXPERIMENT, fig, f"{op.capitalize()} bytes via {spine}, tagged", "on_intended_pct",
            paper=100.0, paper_text=f"only {spine} carried MPI_{op.capitalize()}",
            measured=100 * tag[op]["on_intended"], predicted=100.0, settings=settings,
            network_limited=True, details={"spine_bytes": tag[op]["spine_bytes"]},
            reason="predicted: the controller pins the primitive to one spine",
        ))  # fmt: skip
    for op in ("bcast", "reduce"):
        out.append(Row(
            EXPERIMENT, "Figs. 7-8 (ECMP)", f"{op.capitalize()} bytes via spine1, ECMP",
            "on_intended_pct", paper_text="both spines carried both primitives",
            measured=100 * ecmp[op]["on_spine1"], settings=settings, network_limited=True,
            details={"spine_bytes": ecmp[op]["spine_bytes"]},
            reason="no prediction: ECMP hashes the TCP ports, which each run draws anew "
                   "(a share near 0 % or 100 % is one or two heavy flows on one spine)",
        ))  # fmt: skip
    return out


def reproduce(ctx: Context) -> list[Row]:
    """``make reproduce``: both runs (4 s phases in the quick form, 10 s otherwise)."""
    duration = 4.0 if ctx.quick else 10.0
    harness.build("mpibench", "pmpi", "bpf")
    size, scale = 1 << 20, 0.05
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="sdnmpi-uf-") as tmp:
        for label, tagged in (("tagged", True), ("ecmp", False)):
            runs[label] = one_run(Path(tmp), label, tagged, size, duration, scale)
    plot(runs, ctx.out / "unisonflow.png")
    summary = {
        "size_bytes": size,
        "link_scale": scale,
        "ranks": list(HOSTS),
        "runs": {k: {"t": v["t"], "phases": v["phases"]} for k, v in runs.items()},
    }
    save(ctx.out, summary)
    return rows(summary)


def save(out: Path, summary: dict[str, Any]) -> None:
    """The run's summary, where :func:`rows_from_saved` reads it."""
    (out / "unisonflow.json").write_text(json.dumps(summary) + "\n")


def rows_from_saved(out: Path) -> list[Row]:
    """The rows of the run whose summary :func:`reproduce` saved in ``out``
    (``reproduce.py --rederive``), with this checkout's row logic."""
    return rows(json.loads((out / "unisonflow.json").read_text()))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 s phases instead of 10 s.")
    ap.add_argument("--size", type=int, default=1 << 20, help="Bytes per Bcast/Reduce.")
    ap.add_argument("--link-scale", type=float, default=0.05, help="Emulated rate factor.")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "experiments")
    ap.add_argument("--json", type=Path, help="Also write the summary here.")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("exp_unisonflow: needs root (emulated fabric, eBPF)", file=sys.stderr)
        return 2
    duration = 4.0 if args.quick else 10.0
    harness.build("mpibench", "pmpi", "bpf")
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="sdnmpi-uf-") as tmp:
        for label, tagged in (("tagged", True), ("ecmp", False)):
            runs[label] = one_run(Path(tmp), label, tagged, args.size, duration, args.link_scale)
    png = args.out / "unisonflow.png"
    plot(runs, png)
    summary = {
        "topology": "unisonflow",
        "ranks": list(HOSTS),
        "size_bytes": args.size,
        "phase_s": duration,
        "link_scale": args.link_scale,
        "runs": {k: {"t": v["t"], "phases": v["phases"]} for k, v in runs.items()},
        "plot": str(png),
    }
    tag = runs["tagged"]["phases"]
    print()
    print(f"tagged: Bcast bytes on spine1 {100 * tag['bcast']['on_intended']:.1f} %, "
          f"Reduce bytes on spine2 {100 * tag['reduce']['on_intended']:.1f} %")  # fmt: skip
    ecmp = runs["ecmp"]["phases"]
    print(f"ECMP:   Bcast bytes on spine1 {100 * ecmp['bcast']['on_spine1']:.1f} %, "
          f"Reduce bytes on spine1 {100 * ecmp['reduce']['on_spine1']:.1f} %")  # fmt: skip
    print(f"plot: {png}")
    harness.emit(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
