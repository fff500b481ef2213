"""The SDN_MPI_Allreduce experiment: Allreduce time over message sizes, three ways.

Run as root: ``.venv/bin/python scripts/exp_allreduce.py [--quick] [--json FILE]``
(``make exp-allreduce``).

Eight real Open MPI ranks, one per host of an emulated leaf-spine (2 spines, 4
leaves, 2 hosts per leaf), run ``sdnmpi-bench coll --op allreduce`` over message
sizes:

- **default**: D-mod-K default routes, the plain program;
- **push/dijkstra**: ``libsdnmpi.so`` in tag and push mode, the controller routing
  Allreduce tags with the seed paper's router (Dijkstra per pair on route-count
  weights, ``--primitives allreduce=allreduce``);
- **push/ours**: the same with our router on the Allreduce pattern
  (``allreduce=pattern:ours``).

Before each call's first run, rank 0 pushes the call to the controller and waits
for its routes (the seed's SDN_MPI_Allreduce); later calls hit the cache.  The
script prints the mean time per Allreduce of each way and the speedup over the
default, and plots the speedup curves (``out/experiments/allreduce.png``).  The
last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import demo_fabric as harness

from sdnmpi import catalog
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import route
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.sim import simulate

ROOT = Path(__file__).resolve().parent.parent
#: Rank r on HOSTS[r]: a placement whose Allreduce contends under D-mod-K (the
#: simulator predicts x2.0 for both routers at 1 MiB; checked at run time).
HOSTS = ("h1", "h8", "h7", "h6", "h5", "h3", "h2", "h4")
WAYS = {
    "default": None,
    "push/dijkstra": "allreduce=allreduce",
    "push/ours": "allreduce=pattern:ours",
}
log = harness.log


def run_way(
    workdir: Path, way: str, spec: str | None, sizes: tuple[str, str], iters: int, scale: float
) -> dict[int, float]:
    """size -> mean seconds per Allreduce (the slowest rank's mean)."""
    topo = leaf_spine(2, 4, 2, host_bps=1e9, uplink_bps=1e9, name="allreduce")
    name = f"ar-{abs(hash(way)) % 1000}-{os.getpid()}"
    extra = ("--primitives", spec) if spec else ()
    with harness.cluster(workdir, topo, name, way.replace("/", "-"), 6, scale, extra) as ctl:
        env = ["OMPI_MCA_mpi_yield_when_idle=1"]  # 8 ranks share 2 cores with OVS
        if spec:
            env += harness.tag_env(name, ctl, f"ar-{way}", "tag,push")
            env.append("SDNMPI_PUSH_TIMEOUT_MS=10000")
        program = [str(harness.BENCH), "coll", "--op", "allreduce", "--min", sizes[0]]
        program += ["--max", sizes[1], "--iters", str(iters), "--warmup", "1", "--json"]
        doc, stderr = harness.mpirun_json(name, HOSTS, program, env, 900)
        if "not confirmed" in stderr:
            log(f"{way}: {stderr.strip().splitlines()[-1]}")
    return {int(r["size_bytes"]): float(r["time_max_s"]) for r in doc["results"]}


def predicted(size: int, scale: float) -> dict[str, float]:
    """The simulator's speedup over D-mod-K for this Allreduce (MPICH's algorithm)."""
    topo = leaf_spine(2, 4, 2, host_bps=1e9 * scale, uplink_bps=1e9 * scale)
    fabric = Fabric(topo)
    pat = catalog.load_pattern(f"allreduce:nprocs={len(HOSTS)},bytes={size}")
    demands = Demands.from_pattern(fabric, pat, Placement(HOSTS))
    base = simulate(fabric, demands, route("dmodk", fabric, demands)).total_s
    out = {}
    for way, router in (("push/dijkstra", "allreduce"), ("push/ours", "ours")):
        out[way] = base / simulate(fabric, demands, route(router, fabric, demands)).total_s
    return out


def plot(times: dict[str, dict[int, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    sizes = sorted(times["default"])
    for way in WAYS:
        if way == "default":
            continue
        ax.plot(sizes, [times["default"][s] / times[way][s] for s in sizes], marker="o", label=way)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("Allreduce message (bytes)")
    ax.set_ylabel("speedup over default routes")
    ax.set_title("MPI_Allreduce, 8 ranks on an emulated leaf-spine")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Two sizes, few iterations.")
    ap.add_argument(
        "--link-scale",
        type=float,
        default=0.01,
        help="Emulated rate factor (0.01: 10 Mbit/s, so the links, not the 2 cores, limit).",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "experiments")
    ap.add_argument("--json", type=Path, help="Also write the summary here.")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("exp_allreduce: needs root (emulated fabric, eBPF)", file=sys.stderr)
        return 2
    sizes, iters = (("256K", "1M"), 3) if args.quick else (("64K", "4M"), 5)
    harness.build("mpibench", "pmpi", "bpf")
    times: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="sdnmpi-ar-") as tmp:
        for way, spec in WAYS.items():
            times[way] = run_way(Path(tmp), way, spec, sizes, iters, args.link_scale)
            log(f"{way}: " + ", ".join(f"{s} B {t * 1e3:.1f} ms" for s, t in times[way].items()))
    png = args.out / "allreduce.png"
    plot(times, png)
    rows: list[dict[str, Any]] = []
    print()
    print(f"{'bytes':>9} " + " ".join(f"{w:>15}" for w in WAYS) + "   speedups")
    for size in sorted(times["default"]):
        row: dict[str, Any] = {"size_bytes": size, **{w: times[w][size] for w in WAYS}}
        ups = {w: times["default"][size] / times[w][size] for w in WAYS if w != "default"}
        row["speedup"] = ups
        row["predicted_speedup"] = pred = predicted(size, args.link_scale)
        rows.append(row)
        cells = " ".join(f"{times[w][size] * 1e3:13.1f}ms" for w in WAYS)
        print(f"{size:>9} {cells}   " + "  ".join(
            f"{w} x{u:.2f} (sim x{pred[w]:.2f})" for w, u in ups.items()))  # fmt: skip
    print(f"plot: {png}")
    summary = {"ranks": list(HOSTS), "link_scale": args.link_scale, "rows": rows, "plot": str(png)}
    harness.emit(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
