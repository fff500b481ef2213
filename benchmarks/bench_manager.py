"""Manager benchmark: jobs arriving one by one, routed without and with moves.

Run with ``.venv/bin/python benchmarks/bench_manager.py [--quick | --large | --largest |
--scale] [--seed S]``.
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

``--scale`` measures the manager at cluster scale on ``fat_tree(16)`` (1024 hosts),
under a lock and a background thread as the server runs them (:func:`scale`): the
seconds to route a 1024-rank job, one rank per host, on an empty fabric (the first
job of the process, which builds the topology's routing tables, then the same job
again); then, with 8 jobs of 64 ranks running on half the hosts, a 1024-rank job
(2 ranks per host on the other half) routed alone, and again while 8 more 32-rank
jobs arrive and end and another caller polls GetJob: the seconds that routing took,
and the longest any caller waited for the lock meanwhile, in milliseconds (the
targets: 5 s and 100 ms).
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sdnmpi import catalog
from sdnmpi.core import workloads
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Fabric
from sdnmpi.emu.scale import process_stats
from sdnmpi.formats import native
from sdnmpi.manager import planning
from sdnmpi.manager.background import Background
from sdnmpi.manager.fake import FakeController
from sdnmpi.manager.memory import MemoryStore
from sdnmpi.manager.model import Caller, Install, JobState
from sdnmpi.manager.requests import CreateJob, PatternUpload
from sdnmpi.manager.server import YIELD_S
from sdnmpi.manager.service import ManagerService, Pairs, released

SCHED = Caller(0, is_scheduler=True)
T = TypeVar("T")
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
    # VmHWM, not ru_maxrss: in a spawned child ru_maxrss starts at the parent's peak.
    base_mib = process_stats(os.getpid())["peak_rss_mib"]
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
    peak_mib = process_stats(os.getpid())["peak_rss_mib"]
    return {
        "create_s": create_s,
        "route_s": route_s,
        "getjob_max_s": max(waits),
        "getjob_calls": float(len(waits)),
        "pairs": float(len(job.routes)),
        "peak_mib": peak_mib,
        "added_mib": peak_mib - base_mib,
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


#: --scale: the patterns of the job as large as the fabric (its ranks: {n}).
SCALE_BIG = ("cg:nprocs={n}", "stencil3d:nprocs={n}")


class TimedLock:
    """A lock that records how long each acquisition waited and each holder held it,
    by thread name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waits: list[tuple[str, float]] = []
        self.holds: list[tuple[str, float]] = []
        self._since = 0.0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        t0 = time.perf_counter()
        got = self._lock.acquire(blocking, timeout)
        if got:  # Condition.notify tries acquire(False) to check the caller holds it
            self._since = time.perf_counter()
            self.waits.append((threading.current_thread().name, self._since - t0))
        return got

    def release(self) -> None:
        self.holds.append((threading.current_thread().name, time.perf_counter() - self._since))
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class Cluster:
    """The service on fat_tree(16) under a timed lock and a background thread."""

    def __init__(self, k: int) -> None:
        self.topo = fat_tree(k)
        self.hosts = [h.name for h in self.topo.hosts]
        self.controller = FakeController(self.topo)
        self.svc = ManagerService(MemoryStore(), self.controller, time.monotonic)
        self.lock = TimedLock()
        self.cond = threading.Condition(self.lock)  # type: ignore[arg-type]
        self.svc.unlocked = functools.partial(released, self.cond)
        self.background = Background(self.cond)
        self.svc.routing.background = self.background.submit
        self.svc.routing.yield_s = YIELD_S
        self.cpu_s = 0.0

    def call(self, fn: Callable[[], T]) -> T:
        with self.cond:
            try:
                return fn()
            finally:
                self.cond.notify_all()

    def prepare(self, job_id: int, spec: str, nodes: list[str]) -> None:
        """Create and start a job and register all its ranks but the last."""
        pattern = workloads.build(spec)
        upload = PatternUpload("p.json", native.dumps(pattern).encode())
        req = CreateJob(job_id, spec, 0, len(nodes), pattern_file=upload)
        self.call(lambda: self.svc.create_job(SCHED, req))
        self.call(lambda: self.svc.start_job(SCHED, job_id))
        for rank, node in enumerate(nodes[:-1]):
            self.call(functools.partial(self.svc.register_process, SCHED, job_id, rank, node))

    def route(self, job_id: int, nodes: list[str]) -> float:
        """The last registration (it routes the job): its seconds; :attr:`cpu_s` the
        process's CPU seconds meanwhile (the call's own when nothing else runs)."""
        last = len(nodes) - 1
        t0, c0 = time.perf_counter(), time.process_time()
        job = self.call(lambda: self.svc.register_process(SCHED, job_id, last, nodes[last]))
        took, self.cpu_s = time.perf_counter() - t0, time.process_time() - c0
        assert job.state is JobState.ROUTED, job.detail
        return took


def scale(seed: int, k: int = 16) -> dict[str, float]:
    """The --scale figures (see the module docstring; sizes for ``fat_tree(k)``, whose
    ``n`` hosts are 1024 for k = 16: jobs of n, n/16 and n/32 ranks)."""
    c = Cluster(k)
    n = len(c.hosts)
    out: dict[str, float] = {}
    for i, spec in enumerate(s.format(n=n) for s in SCALE_BIG):
        for run_ in ("first", "again"):
            job_id = 100 + 2 * i + (run_ == "again")
            c.prepare(job_id, spec, c.hosts)
            out[f"{spec} {run_} s"] = c.route(job_id, c.hosts)
            out[f"{spec} {run_} cpu s"] = c.cpu_s
            c.call(functools.partial(c.svc.finish_job, SCHED, job_id))
            assert c.background.wait_idle(600)
    rng = random.Random(seed)
    hosts = c.hosts[:]
    rng.shuffle(hosts)
    running, free = hosts[: n // 2], hosts[n // 2 :]
    for j in range(8):
        nodes = running[j * n // 16 : (j + 1) * n // 16]
        c.prepare(200 + j, PATTERNS[j % len(PATTERNS)].format(n=n // 16), nodes)
        c.route(200 + j, nodes)
    assert c.background.wait_idle(600)
    big_nodes = [free[r // 2] for r in range(n)]
    c.prepare(299, SCALE_BIG[0].format(n=n), big_nodes)
    out["among running jobs, alone s"] = c.route(299, big_nodes)
    out["among running jobs, alone cpu s"] = c.cpu_s
    c.call(functools.partial(c.svc.finish_job, SCHED, 299))
    assert c.background.wait_idle(600)
    c.prepare(300, SCALE_BIG[0].format(n=n), big_nodes)
    out |= _concurrent(c, lambda: c.route(300, big_nodes), rng, running)
    c.background.stop()
    return out


def _concurrent(
    c: Cluster, route: Callable[[], float], rng: random.Random, running: list[str]
) -> dict[str, float]:
    """``route()`` while 8 jobs arrive and end on ``running`` hosts and another thread
    polls GetJob: its seconds, and the lock's waits meanwhile."""
    n = len(c.hosts)
    c.lock.waits.clear()
    c.lock.holds.clear()
    done = threading.Event()
    polls: list[float] = []

    def poll() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            c.call(lambda: c.svc.get_job(SCHED, 200))
            polls.append(time.perf_counter() - t0)
            time.sleep(0.01)

    def stream() -> None:
        for j in range(8):
            nodes = rng.sample(running, n // 32)
            c.prepare(400 + j, PATTERNS[j % len(PATTERNS)].format(n=n // 32), nodes)
            c.route(400 + j, nodes)
            c.call(functools.partial(c.svc.finish_job, SCHED, 400 + j))

    threads = [
        threading.Thread(target=poll, name="poll"),
        threading.Thread(target=stream, name="stream"),
    ]
    for t in threads:
        t.start()
    route_s = route()
    threads[1].join()
    assert c.background.wait_idle(600)
    done.set()
    threads[0].join()
    callers = [w for name, w in c.lock.waits if not name.startswith("planner")]
    holder, held = max(c.lock.holds, key=lambda h: h[1])
    return {
        "longest hold ms": 1e3 * held,
        "longest holder is the background": float(holder.startswith("planner")),
        "among running jobs s": route_s,
        "longest lock wait of a call ms": 1e3 * max(callers),
        "longest GetJob ms": 1e3 * max(polls),
        "GetJob calls": float(len(polls)),
        "lock waits": float(len(callers)),
    }


def run_scale(seed: int, k: int = 16) -> None:
    n = k**3 // 4
    print(f"== scale: fat_tree({k}), {n} hosts (a lock and a background thread as the server's)")
    r = scale(seed, k)
    for spec in (s.format(n=n) for s in SCALE_BIG):
        print(
            f"  {spec}, one rank per host, empty fabric: routed in {r[f'{spec} first s']:.2f} s "
            f"({r[f'{spec} first cpu s']:.2f} s CPU; the process's first such job), "
            f"{r[f'{spec} again s']:.2f} s again ({r[f'{spec} again cpu s']:.2f} s CPU)"
        )
    print(
        f"  {SCALE_BIG[0].format(n=n)} on {n // 2} hosts beside 8 running {n // 16}-rank jobs: "
        f"routed in {r['among running jobs, alone s']:.2f} s "
        f"({r['among running jobs, alone cpu s']:.2f} s CPU); again while 8 {n // 32}-rank jobs "
        f"arrive and end (planned in the same process): {r['among running jobs s']:.2f} s"
    )
    print(
        f"  longest wait for the lock of any call meanwhile: "
        f"{r['longest lock wait of a call ms']:.1f} ms ({r['lock waits']:.0f} acquisitions); "
        f"longest GetJob: {r['longest GetJob ms']:.1f} ms ({r['GetJob calls']:.0f} calls); "
        f"longest hold of the lock: {r['longest hold ms']:.1f} ms (by "
        f"{'the background thread' if r['longest holder is the background'] else 'a call'})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="The small scenario only.")
    ap.add_argument("--large", action="store_true", help="Also 4 x 256 ranks (about 10 min).")
    ap.add_argument(
        "--largest", action="store_true", help="Only the largest job accepted (about 1 min)."
    )
    ap.add_argument(
        "--scale", action="store_true", help="Only the cluster-scale figures (about 2 min)."
    )
    ap.add_argument("--seed", type=int, default=1, help="Host placement seed.")
    args = ap.parse_args()
    if args.largest:
        run_largest()
        return 0
    if args.scale:
        run_scale(args.seed)
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
