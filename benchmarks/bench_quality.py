"""Routing quality: every router on the seed evaluation's workloads, against the LP bound.

Run with ``make bench`` or ``.venv/bin/python benchmarks/bench_quality.py``.

Workloads (issue 3): the seed evaluation's mini-apps on ``milk`` with 8 ranks per
host (Stencil2D, Stencil3D, Butterfly, SpMV at 160 ranks; NPB CG and FT at 128,
the largest power of two they accept), the two real traces on ``milk`` with the
placement they recorded, and Allreduce / Bcast / Alltoall (1 MiB) on
``allreduce28`` and on k-ary fat-trees (k=4, k=8) with one rank per host.

For each workload and router it prints the simulated communication time, the
speedup over D-mod-K, and ``max_link_busy_s / lp_max_link_busy_s`` (1.0 = the LP
optimum, the best any routing could do).  The summary checks the issue's
targets for ``ours``: ratio <= 1.10 (or the single-path bound, where the LP's
fractional optimum cannot be reached by any one-path-per-pair routing) and never
slower than D-mod-K.  Compare ratios within one run.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from sdnmpi import catalog, evaluation
from sdnmpi.core import placement as placements
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import ROUTERS
from sdnmpi.core.topology import Topology
from sdnmpi.formats.pfprof import recorded_placement

TRACES = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "pfsim-traces"
TARGET = 1.10


@dataclass(frozen=True)
class Case:
    """One workload on one topology."""

    topology: Topology
    workload: evaluation.Workload


def _spec_case(topo: Topology, spec: str, ranks_per_host: int | None) -> Case:
    pattern = catalog.load_pattern(spec)
    place = placements.block(topo, pattern.nprocs, ranks_per_host=ranks_per_host)
    return Case(topo, evaluation.Workload(spec, pattern, place))


def cases(quick: bool) -> list[Case]:
    """The quality workloads (``quick``: a subset for a fast look)."""
    milk = catalog.load_topology("milk")
    out = []
    apps = [
        "stencil2d:nprocs=160",
        "stencil3d:nprocs=160",
        "butterfly:nprocs=160",
        "spmv:nprocs=160",
    ]
    apps += ["cg:nprocs=128,klass=C", "ft:nprocs=128,klass=C"]
    for spec in apps[:2] if quick else apps:
        out.append(_spec_case(milk, spec, 8))
    for trace in ("cg-c-128.tar.gz", "ft-c-128.tar.gz"):
        path = TRACES / trace
        if path.is_file():
            pattern = catalog.load_pattern(str(path))
            place = recorded_placement(pattern)
            out.append(Case(milk, evaluation.Workload(trace, pattern, place)))
    fabrics = [catalog.load_topology("allreduce28"), fat_tree(4), fat_tree(8)]
    for topo in fabrics[:2] if quick else fabrics:
        n = len(topo.hosts)
        for coll in ("allreduce", "bcast", "alltoall"):
            out.append(_spec_case(topo, f"{coll}:nprocs={n},bytes=1048576", 1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--routers", default=",".join(ROUTERS))
    parser.add_argument("--quick", action="store_true", help="a subset of the workloads")
    args = parser.parse_args()
    options = evaluation.Options(tuple(args.routers.split(",")))
    ours_rows: list[evaluation.RouterResult] = []
    started = time.perf_counter()
    print(
        f"{'workload':42s} {'topology':12s} {'router':18s} {'time s':>10s} "
        f"{'vs dmodk':>8s} {'util/LP':>8s} {'route s':>8s}"
    )
    for case in cases(args.quick):
        rows = evaluation.evaluate(case.topology, case.workload, options, clock=time.perf_counter)
        for r in rows:
            speed = f"{r.speedup_vs_dmodk:.3f}" if r.speedup_vs_dmodk is not None else "-"
            print(
                f"{r.workload[:42]:42s} {r.topology[:12]:12s} {r.router:18s} {r.comm_time_s:10.4g} "
                f"{speed:>8s} {r.bound_ratio:8.3f} {r.route_time_s:8.3f}"
            )
        sp = (
            rows[0].single_path_bound_s / rows[0].lp_max_link_busy_s
            if rows[0].lp_max_link_busy_s
            else 1.0
        )
        print(f"{'':42s} {'':12s} {'(single-path bound)':18s} {'':10s} {'':>8s} {sp:8.3f}")
        ours_rows += [r for r in rows if r.router == "ours"]
    _summary(ours_rows, time.perf_counter() - started)


def _summary(rows: list[evaluation.RouterResult], elapsed: float) -> None:
    if not rows:
        return
    print(f"\nours on {len(rows)} workloads ({elapsed:.0f} s):")
    worst = max(rows, key=lambda r: r.bound_ratio)
    print(f"  worst util/LP: {worst.bound_ratio:.3f} ({worst.workload} on {worst.topology})")
    for r in rows:
        sp = r.single_path_bound_s / r.lp_max_link_busy_s if r.lp_max_link_busy_s else 1.0
        target = max(TARGET, sp)
        ok = r.bound_ratio <= target + 1e-9
        slower = r.speedup_vs_dmodk is not None and r.speedup_vs_dmodk < 1 - 1e-9
        flag = "ok" if ok and not slower else "MISSED"
        gap = f" (single-path bound {sp:.3f})" if sp > TARGET else ""
        speed = f"{r.speedup_vs_dmodk:.3f}x" if r.speedup_vs_dmodk is not None else "-"
        print(
            f"  {flag:6s} {r.workload[:40]:40s} util/LP {r.bound_ratio:.3f}{gap}, vs dmodk {speed}"
        )


if __name__ == "__main__":
    main()
