"""A cluster's job stream replayed on a fabric, with the manager's planning in the loop.

Event-driven over arrivals and ends.  The scheduler is FCFS without backfilling: the
queue's head starts as soon as enough hosts are free, one rank per host.  Hosts are
allocated *contiguous-first* (the lowest-numbered run of free hosts long enough, else
the lowest-numbered free hosts) or at *random* (seeded).  Each started job is routed:

- ``dmodk``, ``ecmp``: the manager's planning (:func:`~sdnmpi.manager.offline.
  plan_arrival`) with that oblivious router (the running jobs' load cannot change its
  choice, so it is not computed);
- ``ours``: the same planning with the ``ours`` router against the running jobs' load;
- ``ours+rebalance``: that, then the manager's rebalancing after each arrival and end
  (:func:`~sdnmpi.manager.offline.rebalance_arrival`, ``rebalance_end``).

Between events every running job communicates at its max-min fair speed
(:func:`~sdnmpi.cluster.sharing.speeds`), its run time stretched accordingly
(:func:`~sdnmpi.cluster.sharing.stretched_s`).  A job's *slowdown* is its run time over
its duration alone on an ideal fabric (>= 1; queueing is reported apart as the wait).

*Rules per switch* count the exact per-host-pair rules of the running jobs' routes: one
per pair at each switch of its path (D-mod-K and ECMP counted the same, as if installed
as job routes; as defaults they need no per-pair rule).  The clock that times routing
is passed in.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sdnmpi.cluster import sharing
from sdnmpi.cluster.jobs import StreamJob
from sdnmpi.core import workloads
from sdnmpi.core.pattern import Pattern
from sdnmpi.core.routing import Demands, Fabric
from sdnmpi.core.routing.model import FloatArray
from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError
from sdnmpi.manager import offline, patternfile, planning, rebalance
from sdnmpi.manager.model import Job, RoutePair

#: The routers a replay compares.
ROUTERS = ("dmodk", "ecmp", "ours", "ours+rebalance")
ALLOCATIONS = ("contiguous", "random")
#: A job ends when this little of its work is left (float noise).
_EPS = 1e-12


@dataclass(frozen=True)
class ReplayConfig:
    """How to replay: the router, the host allocation, the seed of random allocation,
    and how many running jobs one arrival or end may move (``ours+rebalance``)."""

    router: str = "ours"
    allocation: str = "contiguous"
    seed: int = 0
    rebalance_jobs: int = rebalance.JOBS

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise ConfigError(f"router {self.router!r}: choose one of {', '.join(ROUTERS)}")
        if self.allocation not in ALLOCATIONS:
            raise ConfigError(
                f"allocation {self.allocation!r}: choose one of {', '.join(ALLOCATIONS)}"
            )


@dataclass(frozen=True)
class JobResult:
    """One job as replayed: when it waited and ran, its slowdown, its routing."""

    job_id: int
    nprocs: int
    pattern: str
    comm_share: float
    arrival_s: float
    start_s: float
    end_s: float
    duration_s: float
    slowdown: float
    alone_speed: float
    mean_speed: float
    routing_s: float
    pairs: int
    moves: int
    hosts: tuple[int, ...]

    @property
    def wait_s(self) -> float:
        return self.start_s - self.arrival_s


@dataclass(frozen=True)
class RuleSample:
    """Exact per-pair rules at time ``time_s``: the busiest switch's and the mean."""

    time_s: float
    running: int
    max_rules: int
    mean_rules: float


@dataclass(frozen=True)
class Replay:
    """A replay's per-job results, rules over time, and the routing time per arrival."""

    router: str
    allocation: str
    hosts: int
    jobs: tuple[JobResult, ...]
    rules: tuple[RuleSample, ...]
    #: Seconds the rebalancing after each end took (``ours+rebalance`` only).
    end_routing_s: tuple[float, ...] = ()


@dataclass
class _Running:
    job: StreamJob
    hosts: tuple[int, ...]
    record: Job
    demands: Demands | None
    traffic: sharing.JobTraffic
    rules: FloatArray
    start_s: float
    alone_speed: float
    routing_s: float
    speed: float = 1.0
    done: float = 0.0  # fraction of the job's work done
    speed_time: float = 0.0  # integral of speed over run time
    moves: int = 0


@dataclass
class _State:
    topo: Topology
    fabric: Fabric
    config: ReplayConfig
    clock: Callable[[], float]
    host_names: tuple[str, ...]
    switch_index: dict[str, int]
    free: list[int]
    rng: np.random.Generator
    patterns: dict[str, tuple[Pattern, bytes]] = field(default_factory=dict)
    running: dict[int, _Running] = field(default_factory=dict)
    results: list[JobResult] = field(default_factory=list)
    samples: list[RuleSample] = field(default_factory=list)
    end_routing_s: list[float] = field(default_factory=list)


def replay(
    topo: Topology,
    jobs: Sequence[StreamJob],
    config: ReplayConfig,
    clock: Callable[[], float],
) -> Replay:
    """Replay ``jobs`` (any order; by arrival) on ``topo``; ``clock`` times the routing."""
    hosts = tuple(h.name for h in topo.hosts)
    too_big = [j.job_id for j in jobs if j.nprocs > len(hosts)]
    if too_big:
        raise ConfigError(f"jobs {too_big[:5]} need more than the {len(hosts)} hosts")
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise ConfigError("job ids of a stream must be unique")
    st = _State(
        topo,
        Fabric(topo),
        config,
        clock,
        hosts,
        {s.name: i for i, s in enumerate(topo.switches)},
        list(range(len(hosts))),
        np.random.default_rng(config.seed),
    )
    _loop(st, sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)))
    results = tuple(sorted(st.results, key=lambda r: r.job_id))
    return Replay(
        config.router,
        config.allocation,
        len(hosts),
        results,
        tuple(st.samples),
        tuple(st.end_routing_s),
    )


def _loop(st: _State, arrivals: list[StreamJob]) -> None:
    queue: list[StreamJob] = []
    nxt, now = 0, 0.0
    while nxt < len(arrivals) or queue or st.running:
        t_arrival = arrivals[nxt].arrival_s if nxt < len(arrivals) else float("inf")
        now = _advance(st, now, min(t_arrival, _next_end(st, now)))
        for run in [r for r in st.running.values() if r.done >= 1.0 - _EPS]:
            _end(st, run, now)
        while nxt < len(arrivals) and arrivals[nxt].arrival_s <= now:
            queue.append(arrivals[nxt])
            nxt += 1
        while queue and queue[0].nprocs <= len(st.free):
            _start(st, queue.pop(0), now)
        _share(st)
        _sample(st, now)


def _next_end(st: _State, now: float) -> float:
    ends = [
        now + (1.0 - r.done) * sharing.stretched_s(r.job.duration_s, r.job.comm_share, r.speed)
        for r in st.running.values()
    ]
    return min(ends, default=float("inf"))


def _advance(st: _State, now: float, until: float) -> float:
    """Move the running jobs' work forward to ``until``; the one due then is done."""
    if until == float("inf"):
        return now
    dt = until - now
    for r in st.running.values():
        total = sharing.stretched_s(r.job.duration_s, r.job.comm_share, r.speed)
        if now + (1.0 - r.done) * total <= until:
            r.done = 1.0
        else:
            r.done = min(1.0, r.done + dt / total)
        r.speed_time += dt * r.speed
    return until


def _start(st: _State, job: StreamJob, now: float) -> None:
    hosts = _allocate(st, job.nprocs)
    names = [st.host_names[h] for h in hosts]
    pattern, spec_json = _pattern(st, job.pattern)
    router = "ours" if st.config.router.startswith("ours") else st.config.router
    record = offline.routed_job(job.job_id, spec_json, names, router)
    routed = {j: r.record for j, r in st.running.items()}
    t0 = st.clock()
    routes = (
        offline.plan_arrival(st.topo, record, routed if router == "ours" else {})
        if spec_json
        else ()
    )
    record = _with_routes(record, routes)
    run = _running(st, job, hosts, record, pattern, now)
    st.running[job.job_id] = run
    if st.config.router == "ours+rebalance" and routes:
        routed[job.job_id] = record
        moves = offline.rebalance_arrival(job.job_id, routed, st.topo, st.config.rebalance_jobs)
        _apply(st, moves)
    run.routing_s = st.clock() - t0


def _pattern(st: _State, spec: str) -> tuple[Pattern | None, bytes]:
    if not spec:
        return None, b""
    if spec not in st.patterns:
        pattern = workloads.build(spec)
        st.patterns[spec] = (pattern, patternfile.canonical(pattern))
    return st.patterns[spec]


def _with_routes(record: Job, routes: tuple[RoutePair, ...]) -> Job:
    return dataclasses.replace(record, routes=routes)


def _running(
    st: _State,
    job: StreamJob,
    hosts: tuple[int, ...],
    record: Job,
    pattern: Pattern | None,
    now: float,
) -> _Running:
    demands = None
    if pattern is not None and record.routes:
        demands = planning.demands_for(st.fabric, pattern, record.processes)
    traffic = _traffic(st, demands, record.routes)
    alone = sharing.speeds(st.fabric, {0: traffic})[0]
    rules = _rules(st, record.routes)
    return _Running(job, hosts, record, demands, traffic, rules, now, alone, 0.0)


def _traffic(
    st: _State, demands: Demands | None, routes: tuple[RoutePair, ...]
) -> sharing.JobTraffic:
    if demands is None:
        return sharing.JobTraffic(np.zeros(st.fabric.narcs), 0.0, 0.0)
    return sharing.job_traffic(st.fabric, demands, routes)


def _apply(st: _State, moves: dict[int, tuple[RoutePair, ...]]) -> None:
    for j, routes in moves.items():
        run = st.running[j]
        run.record = _with_routes(run.record, routes)
        run.traffic = _traffic(st, run.demands, routes)
        run.rules = _rules(st, routes)
        run.moves += 1


def _end(st: _State, run: _Running, now: float) -> None:
    del st.running[run.job.job_id]
    for h in run.hosts:
        bisect.insort(st.free, h)
    job = run.job
    run_s = now - run.start_s
    st.results.append(
        JobResult(
            job.job_id,
            job.nprocs,
            job.pattern,
            job.comm_share,
            job.arrival_s,
            run.start_s,
            now,
            job.duration_s,
            max(1.0, run_s / job.duration_s),
            run.alone_speed,
            run.speed_time / run_s if run_s > 0 else 1.0,
            run.routing_s,
            len(run.record.routes),
            run.moves,
            run.hosts,
        )
    )
    if st.config.router == "ours+rebalance" and run.record.routes and st.running:
        t0 = st.clock()
        routed = {j: r.record for j, r in st.running.items()}
        _apply(st, offline.rebalance_end(run.record, routed, st.topo, st.config.rebalance_jobs))
        st.end_routing_s.append(st.clock() - t0)


def _allocate(st: _State, n: int) -> tuple[int, ...]:
    free = st.free
    if st.config.allocation == "random":
        picked = sorted(st.rng.choice(len(free), size=n, replace=False).tolist())
        chosen = tuple(free[i] for i in picked)
    else:
        chosen = _contiguous(free, n)
    taken = set(chosen)
    st.free = [h for h in free if h not in taken]
    return chosen


def _contiguous(free: list[int], n: int) -> tuple[int, ...]:
    """The lowest run of ``n`` consecutive free hosts, else the ``n`` lowest free ones.

    >>> _contiguous([0, 2, 3, 4, 7], 3), _contiguous([0, 2, 5], 2)
    ((2, 3, 4), (0, 2))
    """
    run = 1
    for i in range(1, len(free) + 1):
        if run >= n:
            return tuple(free[i - n : i])
        if i < len(free):
            run = run + 1 if free[i] == free[i - 1] + 1 else 1
    return tuple(free[:n])


def _rules(st: _State, routes: Sequence[RoutePair]) -> FloatArray:
    out = np.zeros(len(st.switch_index), dtype=np.float64)
    index = st.switch_index
    for r in routes:
        for hop in r.path[1:-1]:
            out[index[hop.partition(":")[0]]] += 1
    return out


def _share(st: _State) -> None:
    got = sharing.speeds(st.fabric, {j: r.traffic for j, r in st.running.items()})
    for j, s in got.items():
        st.running[j].speed = s


def _sample(st: _State, now: float) -> None:
    total = sum((r.rules for r in st.running.values()), np.zeros(len(st.switch_index)))
    sample = RuleSample(now, len(st.running), int(total.max(initial=0)), float(total.mean()))
    if st.samples and st.samples[-1].time_s == now:
        st.samples[-1] = sample
    else:
        st.samples.append(sample)
