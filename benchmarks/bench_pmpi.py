"""Overhead of libsdnmpi.so in profile mode on sdnmpi-bench latency and bandwidth.

Runs ``build/<flavour>/sdnmpi-bench latency`` and ``bw`` (csrc/mpibench) on
localhost with 2 ranks, without and with ``LD_PRELOAD=build/<flavour>/libsdnmpi.so``
(``SDNMPI_MODE=profile``, traces into a temporary directory), alternating the two
``--repeat`` times so that machine noise shows as spread between repetitions
rather than as a bias.  Prints per message size the one-way latency difference
(with - without, microseconds) and the bandwidth ratio (with / without), each
repetition's value and their median; latency both from the mean and from the
fastest round trip (``time_min_s``), the latter being less sensitive to noise.

Needs ``make mpibench pmpi`` first.  MPICH runs with ``UCX_TLS=sm,self``, Open MPI
with ``--mca btl self,vader`` (shared memory: the case where a per-call cost is
most visible).  Usage::

    .venv/bin/python benchmarks/bench_pmpi.py [--flavour mpich] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FLAVOURS = ("mpich", "openmpi")
TIMEOUT_S = 300
Results = dict[int, float]  # size_bytes -> metric


def command(flavour: str, preload: Path | None, args: list[str]) -> list[str]:
    bench = str(REPO / "build" / flavour / "sdnmpi-bench")
    if flavour == "mpich":
        extra = ["-genv", "LD_PRELOAD", str(preload)] if preload else []
        return ["mpiexec.mpich", "-n", "2", *extra, bench, *args, "--json"]
    extra = ["-x", f"LD_PRELOAD={preload}", "-x", "SDNMPI_MODE", "-x", "SDNMPI_TRACE_DIR"]
    return [
        "mpirun.openmpi",
        "--allow-run-as-root",
        "--oversubscribe",
        "--mca",
        "btl",
        "self,vader",
        "-n",
        "2",
        *(extra if preload else []),
        bench,
        *args,
        "--json",
    ]


def run_once(
    flavour: str, preload: Path | None, args: list[str], trace_dir: str
) -> dict[str, Results]:
    env = dict(os.environ, SDNMPI_MODE="profile", SDNMPI_TRACE_DIR=trace_dir)
    env.update(UCX_TLS="sm,self", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(
        command(flavour, preload, args),
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"bench_pmpi: {flavour} {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(
        next(ln for ln in proc.stdout.splitlines() if ln.startswith('{"benchmark"'))
    )
    rows = doc["results"]
    if args[0] != "latency":
        return {"bw": {int(r["size_bytes"]): float(r["bandwidth_MBps"]) for r in rows}}
    return {
        "mean": {int(r["size_bytes"]): float(r["latency_us"]) for r in rows},
        "min": {int(r["size_bytes"]): float(r["time_min_s"]) * 1e6 for r in rows},
    }


def measure(
    flavour: str, args: list[str], repeat: int, lib: Path
) -> tuple[list[dict[str, Results]], list[dict[str, Results]]]:
    """``repeat`` interleaved (without, with) pairs of runs."""
    plain: list[dict[str, Results]] = []
    traced: list[dict[str, Results]] = []
    with tempfile.TemporaryDirectory(prefix="bench-pmpi-") as trace_dir:
        for _ in range(repeat):
            plain.append(run_once(flavour, None, args, trace_dir))
            traced.append(run_once(flavour, lib, args, trace_dir))
    return plain, traced


def report(
    title: str,
    runs: tuple[list[dict[str, Results]], list[dict[str, Results]]],
    metric: str,
) -> None:
    plain = [r[metric] for r in runs[0]]
    traced = [r[metric] for r in runs[1]]
    latency = metric != "bw"
    what = "latency diff (us, with - without)" if latency else "bandwidth ratio (with/without)"
    print(f"-- {title}: {what}")
    print(f"{'size_B':>9}  {'without':>10}  {'with':>10}  {'median':>8}  per repetition")
    for size in sorted(plain[0]):
        base = [r[size] for r in plain]
        prof = [r[size] for r in traced]
        vals = [p - b if latency else p / b for b, p in zip(base, prof, strict=True)]
        unit = ".2f" if latency else ".3f"
        reps = " ".join(f"{v:{unit}}" for v in vals)
        print(
            f"{size:>9}  {statistics.median(base):>10.2f}  {statistics.median(prof):>10.2f}"
            f"  {statistics.median(vals):>8{unit}}  {reps}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--flavour", choices=FLAVOURS, action="append")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lat-max", default="64K", help="largest latency size (default 64K)")
    ap.add_argument("--bw-max", default="1M", help="largest bandwidth size (default 1M)")
    opts = ap.parse_args()
    for flavour in opts.flavour or FLAVOURS:
        lib = REPO / "build" / flavour / "libsdnmpi.so"
        if not lib.exists() or not (REPO / "build" / flavour / "sdnmpi-bench").exists():
            sys.exit(
                f"bench_pmpi: build/{flavour} lacks libsdnmpi.so or sdnmpi-bench: run "
                "`make mpibench pmpi`"
            )
        lat = ["latency", "--max", opts.lat_max]
        bw = ["bw", "--min", "1K", "--max", opts.bw_max]
        print(f"== {flavour}, 2 ranks on localhost, {opts.repeat} interleaved repetitions")
        lat_runs = measure(flavour, lat, opts.repeat, lib)
        report(f"{flavour} latency (mean one-way)", lat_runs, "mean")
        report(f"{flavour} latency (fastest one-way)", lat_runs, "min")
        report(f"{flavour} bw", measure(flavour, bw, opts.repeat, lib), "bw")
    return 0


if __name__ == "__main__":
    sys.exit(main())
