"""A cluster's job stream replayed with D-mod-K, ECMP, ours and ours with rebalancing
(issue 15, item 5; docs/job-stream.md).

Run with ``make bench`` or ``.venv/bin/python benchmarks/bench_stream.py``.  The quick
case replays a synthetic stream (:func:`sdnmpi.cluster.jobs.synthetic`, seed 1) on
``fat_tree(8)`` (128 hosts, 24 jobs of 2 to 32 ranks); ``--large`` replays one on
``fat_tree(16)`` (1024 hosts, 60 jobs of 2 to 256 ranks), the issue's case.  Both use
contiguous-first and random allocation, FCFS scheduling, and the default mix (CG, FT,
stencil3d, Allreduce, Alltoall; communication share uniform in 0.3..0.7).

The quick case first checks the model of one job alone against the flow simulator
(the five patterns with 32 ranks on ``fat_tree(8)``, block and random placement,
D-mod-K and ours).  For each router it then prints the mean, median and p99
slowdown, the makespan, the throughput (nominal host-seconds over hosts times
makespan), its gain over D-mod-K
(the target is +17.7 %, Domke and Hoefler, SC16), the routing seconds per arrival
(median and max; CPU seconds of this process, so that other work on the machine does
not count), and the exact per-pair rules on the busiest switch (peak and
time-averaged).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from sdnmpi.cluster import sharing, summary
from sdnmpi.cluster.jobs import DEFAULT_MIX, Synthetic, describe, synthetic
from sdnmpi.cluster.replay import ROUTERS, ReplayConfig, replay
from sdnmpi.core import workloads
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.manager import planning, rebalance
from sdnmpi.sim import simulate

TARGET = 0.177
MIX = tuple(e.template for e in DEFAULT_MIX)


def run(
    k: int,
    njobs: int,
    load: float,
    seed: int,
    allocation: str,
    routers: list[str],
    rebalance_jobs: int = rebalance.JOBS,
) -> None:
    topo = fat_tree(k)
    hosts = len(topo.hosts)
    params = Synthetic(njobs=njobs, load=load, max_size=hosts // 4)
    stream = synthetic(params, hosts, seed)
    info = describe(stream)
    print(
        f"fat_tree({k}), {hosts} hosts, {allocation} allocation; synthetic stream seed {seed}: "
        f"{njobs} jobs, load {load}, sizes 2..{hosts // 4}, mean size {info['mean_nprocs']:.1f}, "
        f"mean duration {info['mean_duration_s']:.0f} s, "
        f"mean comm share {info['mean_comm_share']:.2f}, arrivals over {info['span_s']:.0f} s; "
        f"rebalancing moves up to {rebalance_jobs} jobs per event"
    )
    print(
        f"  {'router':15} {'sd mean':>8} {'median':>7} {'p99':>6} {'makespan':>9} {'thru':>6} "
        f"{'vs dmodk':>8} {'sd -%':>6} {'route med/max s':>16} {'rules max/avg':>14} {'wall':>6}",
        flush=True,
    )
    sums: list[dict[str, Any]] = []
    for router in routers:
        t0 = time.perf_counter()
        cfg = ReplayConfig(router, allocation, seed, rebalance_jobs)
        rep = replay(topo, stream, cfg, time.process_time)
        s = summary.summarize(rep)
        s["wall_s"] = time.perf_counter() - t0
        sums.append(s)
        ratios = summary.compare(sums)
        r = ratios.get(
            router, {"throughput_gain": float("nan"), "slowdown_reduction": float("nan")}
        )
        print(
            f"  {s['router']:15} {s['slowdown_mean']:8.3f} {s['slowdown_median']:7.3f} "
            f"{s['slowdown_p99']:6.3f} {s['makespan_s']:9.0f} {s['throughput']:6.3f} "
            f"{r['throughput_gain']:+8.1%} {r['slowdown_reduction']:+6.1%} "
            f"{s['routing_s_median']:7.3f}/{s['routing_s_max']:8.3f} "
            f"{s['rules_max']:6d}/{s['rules_max_timeavg']:7.0f} {s['wall_s']:5.0f}s",
            flush=True,
        )
    ratios = summary.compare(sums)
    best = max((ratios[s["router"]]["throughput_gain"] for s in sums), default=0.0)
    verdict = "met" if best >= TARGET else "NOT met"
    print(f"  best throughput gain over D-mod-K {best:+.1%} (target {TARGET:+.1%}): {verdict}")


def validate(k: int = 8, nprocs: int = 32, seed: int = 0) -> None:
    """One job alone: the replay's alone time (per-phase bottlenecks under the job's
    routes, :func:`sdnmpi.cluster.sharing.job_traffic`) against the flow simulator."""
    fab = Fabric(fat_tree(k))
    hosts = [h.name for h in fab.topology.hosts]
    rng = np.random.default_rng(seed)
    print(f"alone-job model vs flow simulator, fat_tree({k}), {nprocs} ranks (seed {seed}):")
    for template in MIX:
        pattern = workloads.build(template.format(n=nprocs))
        for place in ("block", "random"):
            picked = range(nprocs) if place == "block" else rng.choice(len(hosts), nprocs, False)
            placement = Placement(tuple(hosts[i] for i in sorted(picked)))
            dem = Demands.from_pattern(fab, pattern, placement).per_host_pair()
            cells = []
            for router in ("dmodk", "ours"):
                routing = route(router, fab, dem)
                sim_s = simulate(fab, dem, routing).total_s
                traffic = sharing.job_traffic(fab, dem, planning.pair_routes(fab, dem, routing))
                cells.append(f"{router} sim {sim_s:8.4f} s model/sim {traffic.alone_s / sim_s:.3f}")
            name = template.partition(":")[0]
            print(f"  {name:10} {place:7} " + "   ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--large", action="store_true", help="fat_tree(16), 1024 hosts")
    parser.add_argument("--jobs", type=int, default=None, help="jobs in the stream")
    parser.add_argument("--load", type=float, default=1.0, help="offered load")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--allocation", default="contiguous,random")
    parser.add_argument("--routers", default=",".join(ROUTERS))
    parser.add_argument(
        "--rebalance-jobs", type=int, default=rebalance.JOBS, help="jobs one event may move"
    )
    args = parser.parse_args()
    k, njobs = (16, 60) if args.large else (8, 24)
    if not args.large:
        validate()
    for allocation in args.allocation.split(","):
        routers = args.routers.split(",")
        run(k, args.jobs or njobs, args.load, args.seed, allocation, routers, args.rebalance_jobs)


if __name__ == "__main__":
    main()
