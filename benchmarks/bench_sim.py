"""Simulator benchmarks: how long predicting a routed pattern's time takes.

Run with ``.venv/bin/python benchmarks/bench_sim.py``.  Prints one line per case
with the wall time of the simulation (best of ``--repeat``; building the inputs
is not timed) and what it predicted.  Targets: the real CG trace on milk in
well under a second, one 1024-rank alltoall phase (about 1M flows) on a
1024-host fat-tree in seconds.  The MPICH pairwise alltoall on the same
fat-tree (1023 phases of 1024 flows) is timed in both modes for scale.

The routes come from two tiny routers written here (the real ones live in
``sdnmpi.core.routing``): first-found shortest paths for milk, and a vectorized
up-down destination-mod-k assignment for the k-ary fat-tree (Zahavi; Rodriguez
et al. 2009).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from sdnmpi.catalog import load_pattern, load_topology
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.placement import block
from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.core.workloads import build
from sdnmpi.formats.pfprof import recorded_placement
from sdnmpi.sim import Mode, SimResult, simulate

TRACES = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "pfsim-traces"
IntArray = npt.NDArray[np.int64]


def shortest_path(fabric: Fabric, src: int, dst: int) -> list[int]:
    """The first shortest path from host ``src`` to host ``dst`` (arcs in port order)."""
    dist = fabric.hops_to(dst)
    node, path = src, []
    while node != dst:
        arc = next(a for a in fabric.out_arcs[node] if dist[fabric.arc_dst[a]] == dist[node] - 1)
        path.append(arc)
        node = int(fabric.arc_dst[arc])
    return path


def shortest_routing(fabric: Fabric, demands: Demands) -> Routing:
    """One shortest path per (src, dst) host pair."""
    pairs, _, _ = demands.host_pairs()
    table = {(int(s), int(d)): shortest_path(fabric, int(s), int(d)) for s, d in pairs}
    return Routing.from_pair_paths("shortest", demands, table)


def dmodk_routing(fabric: Fabric, k: int, demands: Demands) -> Routing:
    """Up-down destination-mod-k paths on ``fat_tree(k)``, vectorized over flows."""
    half = k // 2
    idx = fabric.index
    edge = np.array([idx[f"edge{p + 1}_{e + 1}"] for p in range(k) for e in range(half)])
    agg = np.array([idx[f"agg{p + 1}_{a + 1}"] for p in range(k) for a in range(half)])
    core = np.array([idx[f"core{c + 1}"] for c in range(half * half)])
    s, d = demands.src, demands.dst
    es, ed = s // half, d // half
    ps, pd = es // half, ed // half
    a, c = d % half, (d // half) % half
    up_agg, core_sw, down_agg = agg[ps * half + a], core[a * half + c], agg[pd * half + a]
    nodes = np.full((s.size, 7), -1, dtype=np.int64)
    nodes[:, 0], nodes[:, 1] = s, edge[es]
    same_edge, same_pod = es == ed, (ps == pd) & (es != ed)
    other = ps != pd
    nodes[same_edge, 2] = d[same_edge]
    nodes[same_pod, 2:5] = np.stack([up_agg, edge[ed], d], axis=1)[same_pod]
    nodes[other, 2:7] = np.stack([up_agg, core_sw, down_agg, edge[ed], d], axis=1)[other]
    return Routing("dmodk", _arcs_of(fabric, nodes))


def _arcs_of(fabric: Fabric, nodes: IntArray) -> IntArray:
    table = np.full((fabric.nnodes, fabric.nnodes), -1, dtype=np.int64)
    table[fabric.arc_src, fabric.arc_dst] = np.arange(fabric.narcs)
    hop = (nodes[:, :-1] >= 0) & (nodes[:, 1:] >= 0)
    arcs = np.where(hop, table[np.maximum(nodes[:, :-1], 0), np.maximum(nodes[:, 1:], 0)], -1)
    return arcs


def cg_on_milk() -> tuple[str, Callable[[], SimResult]]:
    fabric = Fabric(load_topology("milk"))
    pattern = load_pattern(str(TRACES / "cg-c-128.tar.gz"))
    demands = Demands.from_pattern(fabric, pattern, recorded_placement(pattern))
    routing = shortest_routing(fabric, demands)
    label = f"CG trace cg-c-128 on milk ({len(demands)} flows)"
    return label, lambda: simulate(fabric, demands, routing)


def alltoall_fat_tree(k: int = 16, size_bytes: int = 65536) -> tuple[str, Callable[[], SimResult]]:
    fabric = Fabric(fat_tree(k))
    demands = Demands.all_pairs(fabric, size_bytes)
    routing = dmodk_routing(fabric, k, demands)
    label = f"alltoall phase fat-tree k={k} ({len(demands):,} flows)"
    return label, lambda: simulate(fabric, demands, routing)


def pairwise_alltoall(k: int, mode: Mode) -> tuple[str, Callable[[], SimResult]]:
    nprocs = k**3 // 4
    fabric = Fabric(fat_tree(k))
    pattern = build(f"alltoall:nprocs={nprocs},bytes=65536")
    demands = Demands.from_pattern(fabric, pattern, block(fabric.topology, nprocs))
    routing = dmodk_routing(fabric, k, demands)
    label = f"pairwise alltoall p={nprocs}, {demands.nphases} phases, {mode}"
    return label, lambda: simulate(fabric, demands, routing, mode=mode)


def best(fn: Callable[[], SimResult], repeat: int) -> tuple[float, SimResult]:
    """Best wall time of ``repeat`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    assert result is not None
    return min(times), result


def describe(result: SimResult) -> str:
    """Predicted time, events and peak link load of a result."""
    arc, util = result.max_utilization
    return (
        f"predicted {result.total_s * 1e3:.3f} ms, {result.events} events, "
        f"peak utilization {util:.3f} on {result.arc_names[arc]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("-k", type=int, default=16, help="fat-tree arity of the alltoall case")
    args = parser.parse_args()
    cases = [alltoall_fat_tree(args.k)]
    cases += [pairwise_alltoall(args.k, mode) for mode in ("phases", "ranks")]
    if (TRACES / "cg-c-128.tar.gz").is_file():
        cases.insert(0, cg_on_milk())
    print(f"{'case':52s} {'seconds':>9s}  result")
    for name, fn in cases:
        seconds, result = best(fn, args.repeat)
        print(f"{name:52s} {seconds:9.3f}  {describe(result)}")


if __name__ == "__main__":
    main()
