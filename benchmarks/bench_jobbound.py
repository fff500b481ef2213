"""Job-level bound: ``ours`` at job granularity against it, at phase granularity against
the per-phase bound (issue 15, item 4).

Run with ``make bench`` or ``.venv/bin/python benchmarks/bench_jobbound.py``;
``--large`` adds the issue's cases: ``fat_tree(16)``, 1024 ranks, one per host, block
and random placement (seed 0), CG, FT, Stencil3D, Allreduce and Alltoall (1 MiB and
64 KiB).  Without it the same patterns run on ``fat_tree(8)`` with 128 ranks.

For each case it prints the per-phase LP bound (``lp``), the job-level LP bound
(:mod:`sdnmpi.core.routing.jobbound`, ``job/lp`` and how it was found), the
single-path bound (``1path/lp``), ``ours`` at job granularity over the job bound
(``job: ours/job``) and at phase granularity over the per-phase bound (``phase:
ours/lp``), with the seconds each took.  The target is 1.02 for both ratios.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from sdnmpi import catalog
from sdnmpi.core import placement as placements
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.core.routing.bound import max_link_busy, pattern_bound
from sdnmpi.core.routing.jobbound import job_bound
from sdnmpi.evaluation import Options
from sdnmpi.evaluation import route as route_at

TARGET = 1.02
PATTERNS = (
    "cg:nprocs={n}",
    "ft:nprocs={n}",
    "stencil3d:nprocs={n}",
    "allreduce:nprocs={n},bytes=1048576",
    "alltoall:nprocs={n},bytes=65536",
)


@dataclass(frozen=True)
class Row:
    """One case's bounds and ratios."""

    name: str
    lp_s: float
    job_ratio: float
    job_status: str
    single_ratio: float
    ours_job: float
    ours_phase: float
    seconds: tuple[float, float, float, float]


def case(k: int, spec: str, where: str) -> Row:
    """Bounds and ``ours`` at both granularities on one workload."""
    topo = fat_tree(k)
    fabric = Fabric(topo)
    pattern = catalog.load_pattern(spec)
    if where == "block":
        place = placements.block(topo, pattern.nprocs, ranks_per_host=1)
    else:
        place = catalog.resolve_placement(pattern, topo, where, ranks_per_host=1, seed=0)
    demands = Demands.from_pattern(fabric, pattern, place)
    t0 = time.perf_counter()
    bound = pattern_bound(fabric, demands)
    t1 = time.perf_counter()
    job = job_bound(fabric, demands, bound.phases)
    t2 = time.perf_counter()
    at_job = max_link_busy(fabric, demands, route("ours", fabric, demands)).total_s
    t3 = time.perf_counter()
    per_phase = route_at("ours", fabric, demands, Options(("ours",), granularity="phase"))
    at_phase = max_link_busy(fabric, demands, per_phase).total_s
    t4 = time.perf_counter()
    lp = bound.lp_max_link_busy_s
    return Row(
        f"{spec} {where} k={k}",
        lp,
        job.ratio,
        job.status,
        bound.single_path_max_link_busy_s / lp,
        at_job / job.lp_max_link_busy_s,
        at_phase / lp,
        (t1 - t0, t2 - t1, t3 - t2, t4 - t3),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--large", action="store_true", help="fat_tree(16), 1024 ranks")
    parser.add_argument("--only", default="", help="run the patterns whose spec has this text")
    args = parser.parse_args()
    k, n = (16, 1024) if args.large else (8, 128)
    print(
        f"{'case':50s} {'lp':>9s} {'job/lp':>7s} {'how':>10s} {'1path/lp':>8s} "
        f"{'ours/job':>8s} {'ours/lp':>8s}  seconds: bound, job bound, ours job, ours phase"
    )
    missed = []
    for pattern in PATTERNS:
        spec = pattern.format(n=n)
        if args.only not in spec:
            continue
        for where in ("block", "random"):
            r = case(k, spec, where)
            secs = ", ".join(f"{s:.1f}" for s in r.seconds)
            print(
                f"{r.name:50s} {r.lp_s:9.4g} {r.job_ratio:7.4f} {r.job_status:>10s} "
                f"{r.single_ratio:8.4f} {r.ours_job:8.4f} {r.ours_phase:8.4f}  {secs}",
                flush=True,
            )
            if max(r.ours_job, r.ours_phase) > TARGET:
                missed.append(r.name)
    print(f"\nours within {TARGET:.2f}x of the job bound (job) and the per-phase bound (phase):")
    print("  all cases" if not missed else "  MISSED: " + "; ".join(missed))


if __name__ == "__main__":
    main()
