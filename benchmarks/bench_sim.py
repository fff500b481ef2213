"""Simulator benchmarks: how long predicting a routed pattern's time takes.

Run with ``.venv/bin/python benchmarks/bench_sim.py [--large]``.  Prints one line
per case with the wall time of the simulation (best of ``--repeat``; building the
inputs is not timed) and what it predicted.  Targets: the real CG trace on milk in
well under a second, one 1024-rank alltoall phase (about 1M flows) on a
1024-host fat-tree in seconds.  The MPICH pairwise alltoall on the same
fat-tree (1023 phases of 1024 flows) is timed in both modes for scale.

Then the C phase engine (``sdnmpi.sim.native``, csrc/sim; the default when
built) and the batched numpy loop (``sdnmpi.sim.batch``, phases advanced
together, fillings resumed) against the reference (every phase alone,
``batched=False``) on small cases: seconds of each and their ratios.  The traces
are the same bit for bit (``tests/sim/test_native.py``, ``tests/sim/test_batch.py``).

``--large`` adds issue 15's two cases, each in a fresh process for its peak
memory: ``sdnmpi evaluate`` of ``alltoall:nprocs=1024,bytes=65536`` on
``fat_tree(16)`` with the default routers (target: under 60 s and 1 GB), and FT
with 512 ranks on ``fat_tree(8)`` under random placement (4 ranks per host),
simulated per router (target: under 10 s each; issue 15 measured about 500 s).

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
from sdnmpi.sim import FlowSet, Mode, Platform, SimResult, simulate
from sdnmpi.sim.engine import run_phases

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


def batched_vs_reference(
    spec: str, k: int, per_host: int, router: str
) -> tuple[str, list[Callable[[], object]]]:
    """A pattern under random placement: the C engine, the batched loop and the
    reference (the C engine's time is empty when its library is not built)."""
    from sdnmpi.catalog import resolve_placement
    from sdnmpi.core.routing import route
    from sdnmpi.sim import native

    topo = fat_tree(k)
    pattern = load_pattern(spec)
    place = resolve_placement(pattern, topo, "random", ranks_per_host=per_host, seed=0)
    fabric = Fabric(topo)
    demands = Demands.from_pattern(fabric, pattern, place)
    platform = Platform.from_fabric(fabric)
    flowset = FlowSet.from_demands(platform, demands, route(router, fabric, demands))
    label = f"{spec} fat_tree({k}) {router} ({len(demands):,} flows, {demands.nphases} ph)"
    engines: list[Callable[[], object]] = [
        lambda: run_phases(platform, flowset, native=False),
        lambda: run_phases(platform, flowset, batched=False),
    ]
    if native.available():
        engines.insert(0, lambda: run_phases(platform, flowset, native=True))
    return label, engines


def _large_alltoall() -> list[str]:
    """Issue 15: ``sdnmpi evaluate`` of a 1024-rank alltoall on fat_tree(16)."""
    from sdnmpi import evaluation
    from sdnmpi.cli.evaluate import DEFAULT_ROUTERS

    topo = fat_tree(16)
    work = evaluation.Workload(
        "alltoall:nprocs=1024,bytes=65536",
        build("alltoall:nprocs=1024,bytes=65536"),
        block(topo, 1024),
    )
    options = evaluation.Options(tuple(DEFAULT_ROUTERS.split(",")))
    t0 = time.perf_counter()
    rows = evaluation.evaluate(topo, work, options, clock=time.perf_counter)
    total = time.perf_counter() - t0
    out = [f"  {'all (evaluate, default routers)':40s} {total:9.1f}"]
    out += [
        f"  {r.router:40s} route {r.route_time_s:7.1f} s, simulate {r.sim_time_s:7.1f} s, "
        f"predicted {r.comm_time_s:.4g} s"
        for r in rows
    ]
    return out


def _large_ft() -> list[str]:
    """Issue 15: FT, 512 ranks on fat_tree(8), random placement: each router simulated."""
    from sdnmpi.catalog import resolve_placement
    from sdnmpi.cli.evaluate import DEFAULT_ROUTERS
    from sdnmpi.core.routing import route
    from sdnmpi.sim import native

    topo = fat_tree(8)
    pattern = load_pattern("ft:nprocs=512")
    place = resolve_placement(pattern, topo, "random", ranks_per_host=4, seed=0)
    fabric = Fabric(topo)
    demands = Demands.from_pattern(fabric, pattern, place)
    out = [f"  engine: {native.status()}"]
    for router in DEFAULT_ROUTERS.split(","):
        routing = route(router, fabric, demands)
        t0, c0 = time.perf_counter(), time.process_time()
        result = simulate(fabric, demands, routing)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        out.append(
            f"  {router:40s} simulate {seconds:7.1f} s (CPU {cpu:5.1f} s), x{seconds / 10:.2f} "
            f"of the 10 s target, {result.events:,} events, predicted {result.total_s:.4g} s"
        )
    return out


def _vm_hwm_kb() -> int:
    """This process's peak resident set (kB), as ``/proc/self/status`` gives it."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def _in_child(name: str, queue: object) -> None:
    import resource

    t0 = time.perf_counter()
    lines = {"alltoall": _large_alltoall, "ft": _large_ft}[name]()
    seconds = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM, not ru_maxrss: a spawned child's ru_maxrss starts at its parent's peak
    # (Linux keeps the high-water mark across fork and exec), here the small cases'.
    peak_mb = _vm_hwm_kb() / 1024
    cpu = usage.ru_utime + usage.ru_stime
    queue.put((seconds, cpu, peak_mb, lines))  # type: ignore[attr-defined]


#: Issue 15's targets: wall seconds and peak MB (1 GB) of the whole case.
_TARGETS = {"alltoall": (60.0, 1024)}


def large(name: str, label: str) -> None:
    """Run one large case in a fresh process; print its seconds and peak RSS."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_in_child, args=(name, queue))
    child.start()
    seconds, cpu, peak_mb, lines = queue.get()
    child.join()
    print(f"{label:52s} {seconds:9.1f}  CPU {cpu:.1f} s  peak RSS {peak_mb:,.0f} MB")
    if name in _TARGETS:
        limit_s, limit_mb = _TARGETS[name]
        print(
            f"  {'issue 15 target':40s} {limit_s:.0f} s, {limit_mb:,} MB: "
            f"x{seconds / limit_s:.2f} of the time, x{peak_mb / limit_mb:.2f} of the memory"
        )
    for line in lines:
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("-k", type=int, default=16, help="fat-tree arity of the alltoall case")
    parser.add_argument("--large", action="store_true", help="issue 15's cases (minutes)")
    args = parser.parse_args()
    cases = [alltoall_fat_tree(args.k)]
    cases += [pairwise_alltoall(args.k, mode) for mode in ("phases", "ranks")]
    if (TRACES / "cg-c-128.tar.gz").is_file():
        cases.insert(0, cg_on_milk())
    print(f"{'case':52s} {'seconds':>9s}  result")
    for name, fn in cases:
        seconds, result = best(fn, args.repeat)
        print(f"{name:52s} {seconds:9.3f}  {describe(result)}")
    print(
        f"\n{'C engine, batched numpy, reference (phases mode)':70s} "
        f"{'C':>8s} {'batched':>8s} {'alone':>8s} ratios to alone"
    )
    for spec, k, per_host, router in (
        ("ft:nprocs=128", 8, 1, "dmodk"),
        ("ft:nprocs=64", 4, 4, "ecmp"),
        ("alltoall:nprocs=128,bytes=65536", 8, 1, "ecmp"),
    ):
        label, engines = batched_vs_reference(spec, k, per_host, router)
        times = [best(fn, 1)[0] for fn in engines]  # type: ignore[arg-type]
        if len(times) == 2:
            times.insert(0, float("nan"))
        ratios = ", ".join(f"x{times[2] / t:.1f}" for t in times[:2])
        print(f"{label:70s} {times[0]:8.3f} {times[1]:8.3f} {times[2]:8.3f} {ratios}")
    if args.large:
        print(f"\n{'issue 15 (fresh process each)':52s} {'seconds':>9s}")
        large("alltoall", "alltoall:nprocs=1024,bytes=65536 on fat_tree(16)")
        large("ft", "ft:nprocs=512 on fat_tree(8), random, 4 per host")


if __name__ == "__main__":
    main()
