"""Overhead of the node side: ping-pong latency and streaming bandwidth between two hosts.

Run as root: ``.venv/bin/python scripts/exp_overhead.py [--quick] [--json FILE]``
(``make exp-overhead``).

One emulated leaf-spine (h1 and h3 on different leaves, so every message crosses a
spine), the controller, and node agents with the eBPF tagger on every host.
``sdnmpi-bench latency`` and ``bw`` (Open MPI, 2 ranks) run over message sizes in
three configurations, interleaved, ``--repeat`` times each:

- **none**: the plain program (the agents are up, but no connection is registered,
  so the tagger only looks its packets up and passes them);
- **tag**: ``LD_PRELOAD=libsdnmpi.so`` in tag mode: every packet is tagged and routed
  by tag rules, the real MAC restored at the last hop;
- **profile**: the library in profile mode (traces written at the end).

Per size it prints the median latency of each configuration and the difference to
``none`` in microseconds, the median bandwidth and the ratio to ``none``, and the
spread over repetitions (so noise shows).  The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import demo_fabric as harness

from sdnmpi.core.generators import leaf_spine

CONFIGS = ("none", "tag", "profile")
log = harness.log


def bench(name: str, kind: str, sizes: tuple[str, str], env: list[str]) -> dict[int, float]:
    """size -> latency_us (latency) or MB/s (bw), from one run."""
    program = [str(harness.BENCH), kind, "--min", sizes[0], "--max", sizes[1], "--json"]
    if kind == "bw":
        # warm-ups long enough for the agent to attribute the new connection (at most
        # one backed-off scan, 0.2 s) and the first tagged packets' reactive setup:
        # the figures are the steady state
        program += ["--window", "16", "--iters", "10", "--warmup", "10"]
    else:
        program += ["--iters", "200", "--warmup", "200"]
    doc, _ = harness.mpirun_json(name, ("h1", "h3"), program, env, 300)
    key = "latency_us" if kind == "latency" else "bandwidth_MBps"
    return {int(r["size_bytes"]): float(r[key]) for r in doc["results"]}


def summarize(runs: dict[str, list[dict[int, float]]], better: str) -> list[dict[str, Any]]:
    rows = []
    for size in sorted(runs["none"][0]):
        row: dict[str, Any] = {"size_bytes": size}
        base = statistics.median(r[size] for r in runs["none"])
        for cfg in CONFIGS:
            vals = [r[size] for r in runs[cfg]]
            med = statistics.median(vals)
            row[cfg] = {"median": med, "min": min(vals), "max": max(vals)}
            if cfg != "none":
                row[cfg]["vs_none"] = med - base if better == "lower" else med / base
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Fewer sizes and repetitions.")
    ap.add_argument("--repeat", type=int, help="Interleaved repetitions (default 5, quick 2).")
    ap.add_argument("--link-scale", type=float, default=0.05, help="Emulated rate factor.")
    ap.add_argument("--json", type=Path, help="Also write the summary here.")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("exp_overhead: needs root (emulated fabric, eBPF)", file=sys.stderr)
        return 2
    repeat = args.repeat or (2 if args.quick else 5)
    lat_sizes, bw_sizes = (
        (("1", "4K"), ("4K", "1M")) if args.quick else (("1", "64K"), ("1K", "4M"))
    )
    harness.build("mpibench", "pmpi", "bpf")
    topo = leaf_spine(2, 2, 2, host_bps=1e9, uplink_bps=1e9, name="overhead")
    name = f"ovh-{os.getpid()}"
    lat: dict[str, list[dict[int, float]]] = {c: [] for c in CONFIGS}
    bw: dict[str, list[dict[int, float]]] = {c: [] for c in CONFIGS}
    with (
        tempfile.TemporaryDirectory(prefix="sdnmpi-ovh-") as tmp,
        harness.cluster(Path(tmp), topo, name, "ovh", 4, args.link_scale) as ctl,
    ):
        tagging = harness.tag_env(name, ctl, "ovh")
        # ranks that yield leave the 2 cores to the switches (busy-polling ranks starve
        # ovs-vswitchd, and a message then waits a scheduler slice)
        y = "OMPI_MCA_mpi_yield_when_idle=1"
        envs = {
            "none": [y],
            "tag": [y, *tagging],
            "profile": [
                y,
                f"LD_PRELOAD={harness.LIBSDNMPI}",
                "SDNMPI_MODE=profile",
                f"SDNMPI_TRACE_DIR={tmp}",
            ],
        }
        for rep in range(repeat):
            for cfg in CONFIGS:
                lat[cfg].append(bench(name, "latency", lat_sizes, envs[cfg]))
                bw[cfg].append(bench(name, "bw", bw_sizes, envs[cfg]))
            log(f"repetition {rep + 1}/{repeat} done")
    summary = {
        "fabric": "leaf_spine(2, 2, 2), h1 -> h3 across a spine",
        "link_scale": args.link_scale,
        "repeat": repeat,
        "latency_us": summarize(lat, "lower"),
        "bandwidth_MBps": summarize(bw, "higher"),
    }
    print()
    print("latency (us, median over repetitions; tag and profile: difference to none)")
    for row in summary["latency_us"]:
        print(f"  {row['size_bytes']:>8} B  none {row['none']['median']:9.1f}"
              f"  tag {row['tag']['vs_none']:+8.1f}  profile {row['profile']['vs_none']:+8.1f}"
              f"  (none spread {row['none']['min']:.1f}..{row['none']['max']:.1f})")  # fmt: skip
    print("bandwidth (MB/s, median; tag and profile: ratio to none)")
    for row in summary["bandwidth_MBps"]:
        print(f"  {row['size_bytes']:>8} B  none {row['none']['median']:8.2f}"
              f"  tag x{row['tag']['vs_none']:.3f}  profile x{row['profile']['vs_none']:.3f}"
              f"  (none spread {row['none']['min']:.2f}..{row['none']['max']:.2f})")  # fmt: skip
    harness.emit(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
