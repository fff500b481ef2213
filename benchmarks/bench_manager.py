"""Manager benchmark: jobs arriving one by one, routed without and with moves.

Run with ``.venv/bin/python benchmarks/bench_manager.py [--quick | --large | --largest]
[--seed S]``.
The manager's service core (:class:`ManagerService`, in-memory store, the fake
controller that checks every path) routes jobs as their last rank registers,
each with ``ours`` against the load of the jobs already running.  Jobs get random
disjoint host sets of a fat-tree and patterns from the workload catalogue, and
arrive in order; nothing finishes.  The same arrivals run with ``--rebalance 0``
(running jobs never move) and ``--rebalance 8`` (the default).

Printed per scenario and mode: the time to route each arriving job (the manager
holds its lock that long), the running jobs moved, and the quality of the final
state: the sum and the maximum over jobs of :func:`planning.job_costs` (each
job's predicted seconds per pattern with the link capacity shared by relative
load).  Ratios are rebalance 8 over rebalance 0 within one run.

``--largest`` instead measures the largest job the manager accepts: the all-to-all
at the pattern cell budget (:data:`LARGEST`, 724 ranks on ``milk``'s
20 hosts), created from its spec and routed by each router in a fresh process: the
seconds CreateJob and the last RegisterProcess (routing and install) take, the
longest another caller's GetJob waited meanwhile (the lock released while routes are
computed, and for ours also held, as before), and the process's peak memory.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import random
import resource
import statistics
import threading
import time
from dataclasses import dataclass

from sdnmpi import catalog
from sdnmpi.core import workloads
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Fabric
from sdnmpi.formats import native
from sdnmpi.manager import planning
from sdnmpi.manager.fake import FakeController
from sdnmpi.manager.memory import MemoryStore
from sdnmpi.manager.model import Caller, Install, JobState
from sdnmpi.manager.requests import CreateJob, PatternUpload
from sdnmpi.manager.service import ManagerService, Pairs, released

SCHED = Caller(0, is_scheduler=True)
PATTERNS = (
    "cg:nprocs={n}",
    "ft:nprocs={n}",
    "stencil3d:nprocs={n}",
    "alltoall:nprocs={n},bytes=65536",
)


@dataclass(frozen=True)
class Scenario:
    name: str
    k: int  # fat-tree arity
    jobs: int
    ranks: int


@dataclass
class Result:
    route_s: list[float]
    moves: int
    total_cost: float
    max_cost: float


def run(sc: Scenario, rebalance: int, seed: int) -> Result:
    topo = fat_tree(sc.k)
    controller = FakeController(topo)
    moves = 0
    real = controller.install

    def counting(job_id: int, pairs: Pairs) -> Install:
        nonlocal moves
        if job_id in controller.held:
            moves += 1
        return real(job_id, pairs)

    controller.install = counting  # type: ignore[method-assign]
    svc = ManagerService(MemoryStore(), controller, time.monotonic, rebalance=rebalance)
    rng = random.Random(seed)
    hosts = [h.name for h in topo.hosts]
    rng.shuffle(hosts)
    times = []
    for j in range(sc.jobs):
        spec = PATTERNS[j % len(PATTERNS)].format(n=sc.ranks)
        pattern = workloads.build(spec)
        upload = PatternUpload("p.json", native.dumps(pattern).encode())
        job_id = j + 1
        svc.create_job(SCHED, CreateJob(job_id, spec, 0, sc.ranks, pattern_file=upload))
        svc.start_job(SCHED, job_id)
        nodes = hosts[j * sc.ranks : (j + 1) * sc.ranks]
        for rank, node in enumerate(nodes[:-1]):
            svc.register_process(SCHED, job_id, rank, node)
        t0 = time.perf_counter()
        job = svc.register_process(SCHED, job_id, sc.ranks - 1, nodes[-1])
        times.append(time.perf_counter() - t0)
        assert job.state is JobState.ROUTED, job.detail
    fab = Fabric(topo)
    loads = {j.job_id: planning.arc_bytes(fab, j.routes) for j in svc.list_jobs(SCHED)}
    costs = planning.job_costs(fab, loads)
    return Result(times, moves, sum(costs.values()), max(costs.values()))


#: The largest job the manager accepts: an all-to-all just under the pattern cell
#: budget (``patternfile.MAX_PATTERN_CELLS``: 724 * 723 cells), on milk's 20 hosts.
LARGEST = ("alltoall:nprocs=724,bytes=1024", 724, "milk")


def largest(router: str, release: bool = True) -> dict[str, float]:
    """CreateJob and the routing RegisterProcess of :data:`LARGEST` with ``router``,
    under a lock as the server takes it (released while routes are computed, unless
    not ``release``), with another thread calling GetJob under the same lock all the
    while (its slowest call is what another user waits).  Run in a fresh process:
    its peak memory is the job's."""
    spec, nprocs, topo_name = LARGEST
    topo = catalog.load_topology(topo_name)
    hosts = [h.name for h in topo.hosts]
    svc = ManagerService(MemoryStore(), FakeController(topo), time.monotonic)
    cond = threading.Condition()
    if release:
        svc.unlocked = functools.partial(released, cond)
    base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    svc.create_job(SCHED, CreateJob(1, "largest", 0, nprocs, pattern_name=spec, router=router))
    create_s = time.perf_counter() - t0
    svc.create_job(SCHED, CreateJob(2, "other", 0, 2))  # another user's job, looked at
    svc.start_job(SCHED, 1)
    for rank in range(nprocs - 1):
        svc.register_process(SCHED, 1, rank, hosts[rank * len(hosts) // nprocs])
    done = threading.Event()
    waits: list[float] = []

    def look() -> None:
        while not done.is_set():
            t = time.perf_counter()
            with cond:
                svc.get_job(SCHED, 2)
            waits.append(time.perf_counter() - t)
            time.sleep(0.01)

    looker = threading.Thread(target=look)
    looker.start()
    t0 = time.perf_counter()
    with cond:
        job = svc.register_process(SCHED, 1, nprocs - 1, hosts[-1])
    route_s = time.perf_counter() - t0
    done.set()
    looker.join()
    assert job.state is JobState.ROUTED, job.detail
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "create_s": create_s,
        "route_s": route_s,
        "getjob_max_s": max(waits),
        "getjob_calls": float(len(waits)),
        "pairs": float(len(job.routes)),
        "peak_mib": peak_kib / 1024,
        "added_mib": (peak_kib - base_kib) / 1024,
    }


def run_largest() -> None:
    spec, nprocs, topo_name = LARGEST
    print(f"== the largest job accepted: {spec} ({nprocs} ranks) on {topo_name}")
    ctx = multiprocessing.get_context("spawn")
    out = {}
    for router, release in (("dmodk", True), ("ours", True), ("ours", False)):
        with ctx.Pool(1) as pool:
            out[router, release] = r = pool.apply(largest, (router, release))
        lock = "lock released while routing" if release else "lock held (as before)"
        print(
            f"  {router:6s} {lock}: CreateJob {r['create_s']:.2f} s, routing RegisterProcess "
            f"{r['route_s']:.2f} s ({r['pairs']:.0f} host pairs); another GetJob waited "
            f"{r['getjob_max_s'] * 1e3:.1f} ms at most ({r['getjob_calls']:.0f} calls); "
            f"peak memory {r['peak_mib']:.0f} MiB ({r['added_mib']:.0f} MiB for the job)"
        )
    a, b, c = out["dmodk", True], out["ours", True], out["ours", False]
    print(
        f"  ratio ours/dmodk: routing x{b['route_s'] / a['route_s']:.2f}; slowest GetJob during "
        f"ours' routing, lock held / released: x{c['getjob_max_s'] / b['getjob_max_s']:.0f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="The small scenario only.")
    ap.add_argument("--large", action="store_true", help="Also 4 x 256 ranks (about 10 min).")
    ap.add_argument(
        "--largest", action="store_true", help="Only the largest job accepted (about 1 min)."
    )
    ap.add_argument("--seed", type=int, default=1, help="Host placement seed.")
    args = ap.parse_args()
    if args.largest:
        run_largest()
        return 0
    scenarios = [Scenario("fat_tree(8), 8 jobs x 16 ranks", 8, 8, 16)]
    if not args.quick:
        scenarios.append(Scenario("fat_tree(8), 4 jobs x 32 ranks", 8, 4, 32))
    if args.large:
        scenarios.append(Scenario("fat_tree(16), 4 jobs x 256 ranks", 16, 4, 256))
    for sc in scenarios:
        print(f"== {sc.name}, patterns {', '.join(p.split(':')[0] for p in PATTERNS)}")
        res = {r: run(sc, r, args.seed) for r in (0, 8)}
        for r, x in res.items():
            print(
                f"  --rebalance {r}: route per job median {statistics.median(x.route_s):.3f} s, "
                f"max {max(x.route_s):.3f} s; {x.moves} job(s) moved; predicted cost sum "
                f"{x.total_cost:.4g} s, max {x.max_cost:.4g} s"
            )
        a, b = res[0], res[8]
        med = statistics.median(b.route_s) / statistics.median(a.route_s)
        print(
            f"  ratio 8/0: route time median x{med:.2f}, max x{max(b.route_s) / max(a.route_s):.2f}"
            f"; cost sum x{b.total_cost / a.total_cost:.3f}, max x{b.max_cost / a.max_cost:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
