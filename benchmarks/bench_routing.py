"""Routing benchmarks: the baseline routers on all pairs of a 1024-host fat-tree.

Run with ``.venv/bin/python benchmarks/bench_routing.py``.  The fabric is
``fat_tree(16)`` (1024 hosts, 320 switches); the demands are every ordered host
pair (1,047,552 flows), what a controller installs as default routes or an
all-to-all needs.  D-mod-K, ECMP, min-hop, the spanning tree and ours route all
pairs for real; each run starts from a fresh :class:`Fabric`, so the times include
building distance and forwarding tables (``cold``), and a second call on the
same fabric shows the table-cached time (``warm``).  The per-pair Dijkstra of
the SDN Allreduce router is timed on a random sample of pairs and its per-pair
time multiplied by the number of pairs: that figure is EXTRAPOLATED, not run.
Prints wall times (best of ``--repeat``); compare ratios within one run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Demands, Fabric, Routing, route, subset


def best(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_vectorized(name: str, k: int, repeat: int) -> tuple[float, float, Routing]:
    """Cold (fresh fabric) and warm (cached tables) times of one router on all pairs."""
    topo = fat_tree(k)
    demands = Demands.all_pairs(Fabric(topo))
    result: list[Routing] = []

    def cold() -> None:
        result[:] = [route(name, Fabric(topo), demands)]

    cold_s = best(cold, repeat)
    fabric = Fabric(topo)
    route(name, fabric, demands)
    warm_s = best(lambda: route(name, fabric, demands), repeat)
    return cold_s, warm_s, result[0]


def bench_per_pair(k: int, sample: int, seed: int) -> tuple[float, int, int]:
    """Seconds of the allreduce router on ``sample`` random pairs, and the pair counts."""
    fabric = Fabric(fat_tree(k))
    demands = Demands.all_pairs(fabric)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(demands), size=sample, replace=False))
    sample_demands = subset(demands, pick)
    t0 = time.perf_counter()
    route("allreduce", fabric, sample_demands)
    return time.perf_counter() - t0, sample, len(demands)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--k", type=int, default=16, help="fat-tree arity (16: 1024 hosts)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sample", type=int, default=2000, help="pairs timed for allreduce")
    args = parser.parse_args()
    hosts = args.k**3 // 4
    print(f"fat_tree({args.k}): {hosts} hosts, {hosts * (hosts - 1):,} ordered pairs")
    print(f"{'router':10s} {'cold s':>8s} {'warm s':>8s}  paths")
    cold: dict[str, float] = {}
    for name in ("dmodk", "ecmp", "minhop", "single", "ours"):
        cold_s, warm_s, routing = bench_vectorized(name, args.k, args.repeat)
        cold[name] = cold_s
        print(f"{name:10s} {cold_s:8.3f} {warm_s:8.3f}  {len(routing):,} x {routing.arcs.shape[1]}")
    seconds, sample, pairs = bench_per_pair(args.k, args.sample, seed=0)
    per_pair = seconds / sample
    print(
        f"allreduce  {seconds:8.3f} s for {sample:,} sampled pairs = {per_pair * 1e3:.3f} ms/pair; "
        f"EXTRAPOLATED to {pairs:,} pairs: {per_pair * pairs:,.0f} s "
        f"({per_pair * pairs / 3600:.1f} h)"
    )
    for name in ("ours", "dmodk"):
        ratio = per_pair * pairs / cold[name]
        print(f"{name} (cold) is {ratio:,.0f}x faster than the per-pair Dijkstra (extrapolated)")


if __name__ == "__main__":
    main()
