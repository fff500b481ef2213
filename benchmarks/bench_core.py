"""Core benchmarks: how long building topologies and patterns takes at scale.

Run with ``make bench`` (or ``.venv/bin/python benchmarks/bench_core.py``).  Prints
one line per case with the wall time (best of ``--repeat``) and a throughput, so
runs on noisy machines compare by ratio within one run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from sdnmpi.core.capacity import bisection
from sdnmpi.core.collectives import expand
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.miniapps import MINIAPPS
from sdnmpi.formats.pfprof import load_pfprof

TRACES = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "pfsim-traces"


def alltoall_1024() -> str:
    s = expand("alltoall", 1024, 1, algorithm="scattered")
    return f"{sum(len(st.messages) for st in s.steps):,} messages"


def ring_allreduce_1024() -> str:
    p = expand("allreduce", 1024, 2**20, algorithm="ring", type_bytes=8).to_pattern()
    return f"{len(p.phases)} phases"


def cg_1024() -> str:
    return f"{MINIAPPS['cg'].build({'nprocs': 1024, 'klass': 'D'}).total_bytes / 2**30:.1f} GiB"


def fat_tree_bisection() -> str:
    return f"{bisection(fat_tree(16)).bandwidth_bps / 1e9:.0f} Gbit/s"


def load_cg_trace() -> str:
    return f"{load_pfprof(TRACES / 'cg-c-128.tar.gz').nprocs} ranks"


CASES: list[tuple[str, Callable[[], str]]] = [
    ("expand alltoall scattered p=1024 (1M messages)", alltoall_1024),
    ("expand+pattern allreduce ring p=1024, 8 MiB", ring_allreduce_1024),
    ("miniapp cg p=1024 class D", cg_1024),
    ("bisection of fat-tree k=16 (1024 hosts)", fat_tree_bisection),
    ("load pfprof trace cg-c-128", load_cg_trace),
]


def best(fn: Callable[[], str], repeat: int) -> tuple[float, str]:
    """Best wall time of ``repeat`` calls, and the last call's description."""
    times, result = [], ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'case':48s} {'seconds':>9s}  result")
    for name, fn in CASES:
        if fn is load_cg_trace and not (TRACES / "cg-c-128.tar.gz").is_file():
            continue
        seconds, result = best(fn, args.repeat)
        print(f"{name:48s} {seconds:9.3f}  {result}")


if __name__ == "__main__":
    main()
