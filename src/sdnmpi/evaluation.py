"""Route a pattern with several routers, bound the optimum, and simulate each.

This composes the pure parts (:mod:`sdnmpi.core.routing`, its LP bound, and
:mod:`sdnmpi.sim`) into what ``sdnmpi evaluate`` reports: one
:class:`RouterResult` per (workload, router), with the simulated communication
time, the routing's maximum link utilization, the LP optimum of that quantity
and the lower bound on time.  Definitions are those of
:mod:`sdnmpi.core.routing.bound`.

Granularity: ``job`` routes all phases at once (one path per flow, what the
controller installs when a job starts); ``phase`` routes every phase separately
(what per-primitive routing can install).  Oblivious routers give the same
paths either way.

Two bounds on the routing's ``max_link_busy``: the per-phase LP bound (the best of
any routing, even one per phase) and, unless ``Options.job_bound`` is off, the
job-level LP bound (the best of one fractional routing for all phases,
:mod:`sdnmpi.core.routing.jobbound`): the one to judge a router at ``job``
granularity by, where the per-phase bound judges it at ``phase`` granularity.

The lower bound on time assumes phases run one after another (``phases``
mode); in ``ranks`` mode, where phases overlap, it is the LP bound of all
phases' bytes together (:func:`collapsed`).

Broadcasts (``Options.bcast``): ``library`` evaluates the pattern as written (an
``MPI_Bcast`` is its algorithm's messages); ``replicated`` first puts one
switch-replicated transfer in place of each ``MPI_Bcast`` call
(:func:`sdnmpi.core.broadcasts.replicated`, issue 14): each router routes the other
flows, the transfer goes on a tree grown over what they load
(:func:`~sdnmpi.core.routing.replication.route_replicated`), and the metric, the
bound and the simulator load each tree arc once; ``both`` gives both records, the
replicated ones with ``speedup_vs_library``.  It ignores the MPI library's
point-to-point protocol (``Options.protocol``, :mod:`sdnmpi.sim.protocol`),
which only the simulation models: a serializing protocol makes
``comm_time_s`` longer, never the bound.

``Options.simulate=False`` skips the simulation (routing, metric and bounds
only): ``comm_time_s`` and what derives from it are then ``None``.

Time and progress are passed in (``clock``, ``progress``: a :class:`Step` per
stage, and as a simulation's flows complete), so this module stays free of side
effects.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import gc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from sdnmpi.core import broadcasts
from sdnmpi.core.pattern import Pattern
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import ROUTERS, Demands, Fabric, Routing, jobbound, phase_demands, validate
from sdnmpi.core.routing import bound as lp
from sdnmpi.core.routing import multicast_bound as mb
from sdnmpi.core.routing.candidates import host_phases
from sdnmpi.core.routing.replication import load_entries, route_replicated
from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError
from sdnmpi.sim import IDEAL, Protocol, simulate

Granularity = Literal["job", "phase"]
Bcast = Literal["library", "replicated", "both"]
BCASTS: tuple[str, ...] = ("library", "replicated", "both")
SCHEMA = "sdnmpi.evaluation/2"
BASELINE = "dmodk"


@dataclass(frozen=True)
class Workload:
    """A named pattern with the placement of its ranks (None for host-level patterns)."""

    name: str
    pattern: Pattern
    placement: Placement | None


@dataclass(frozen=True)
class RouterResult:
    """What one router achieves on one workload."""

    router: str
    workload: str
    topology: str
    comm_time_s: float | None
    max_link_busy_s: float
    lp_max_link_busy_s: float
    lower_bound_s: float
    single_path_bound_s: float
    route_time_s: float
    sim_time_s: float
    flows: int
    phases: int
    max_link_bytes: float
    busiest_link: str
    speedup_vs_dmodk: float | None = None
    arc_utilization: tuple[float, ...] = field(default=(), repr=False)
    timeline_csv: str = field(default="", repr=False)
    protocol: str = IDEAL.spec
    bcast: str = "library"
    speedup_vs_library: float | None = None
    job_lp_max_link_busy_s: float | None = None

    @property
    def bound_ratio(self) -> float:
        """``max_link_busy_s / lp_max_link_busy_s`` (1.0 is optimal)."""
        return (
            self.max_link_busy_s / self.lp_max_link_busy_s if self.lp_max_link_busy_s > 0 else 1.0
        )

    @property
    def job_bound_ratio(self) -> float | None:
        """``max_link_busy_s / job_lp_max_link_busy_s`` (None without the job bound)."""
        job = self.job_lp_max_link_busy_s
        if job is None:
            return None
        return self.max_link_busy_s / job if job > 0 else 1.0

    @property
    def time_ratio(self) -> float | None:
        """``comm_time_s / lower_bound_s`` (None when not simulated)."""
        if self.comm_time_s is None:
            return None
        return self.comm_time_s / self.lower_bound_s if self.lower_bound_s > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON record (docs/cli-json.md, ``sdnmpi.evaluation/2``)."""
        return {
            "router": self.router,
            "workload": self.workload,
            "topology": self.topology,
            "comm_time_s": self.comm_time_s,
            "speedup_vs_dmodk": self.speedup_vs_dmodk,
            "max_link_busy_s": self.max_link_busy_s,
            "lp_max_link_busy_s": self.lp_max_link_busy_s,
            "bound_ratio": self.bound_ratio,
            "job_lp_max_link_busy_s": self.job_lp_max_link_busy_s,
            "job_bound_ratio": self.job_bound_ratio,
            "single_path_bound_s": self.single_path_bound_s,
            "lower_bound_s": self.lower_bound_s,
            "time_ratio": self.time_ratio,
            "max_link_bytes": self.max_link_bytes,
            "busiest_link": self.busiest_link,
            "flows": self.flows,
            "phases": self.phases,
            "route_time_s": self.route_time_s,
            "sim_time_s": self.sim_time_s,
            "protocol": self.protocol,
            "bcast": self.bcast,
            "speedup_vs_library": self.speedup_vs_library,
        }


@dataclass(frozen=True)
class Options:
    """How to evaluate.

    ``protocol`` is the MPI library's point-to-point protocol the simulation
    models (:mod:`sdnmpi.sim.protocol`; :data:`~sdnmpi.sim.IDEAL` by default);
    ``bcast`` how ``MPI_Bcast`` calls are evaluated (the module's text);
    ``simulate=False`` skips the simulation; ``job_bound`` whether to compute the job-level LP bound
    (:mod:`sdnmpi.core.routing.jobbound`).
    """

    routers: tuple[str, ...]
    granularity: Granularity = "job"
    mode: Literal["phases", "ranks"] = "phases"
    seed: int = 0
    check_paths: bool = True
    timeline: bool = False
    protocol: Protocol = IDEAL
    bcast: Bcast = "library"
    simulate: bool = True
    job_bound: bool = True


@dataclass(frozen=True)
class Step:
    """How far one workload's evaluation is: ``done`` of ``total`` units (the bound
    counts one, each router's routing one and its simulation one, in fractions as
    its flows complete)."""

    message: str
    done: float
    total: float


Report = Callable[[Step], None]


def check_routers(names: Sequence[str]) -> tuple[str, ...]:
    """Validate router names (unknown ones are a :class:`ConfigError`)."""
    unknown = [n for n in names if n not in ROUTERS]
    if unknown:
        raise ConfigError(f"unknown router(s) {unknown}; known: {', '.join(ROUTERS)}")
    if not names:
        raise ConfigError("no router given")
    return tuple(dict.fromkeys(names))


def evaluate(
    topology: Topology,
    workload: Workload,
    options: Options,
    *,
    clock: Callable[[], float],
    progress: Report = lambda _step: None,
) -> list[RouterResult]:
    """Every router of ``options`` on one workload, with the shared lower bound
    (library and replicated records one after the other with ``bcast="both"``)."""
    if options.bcast not in BCASTS:
        raise ConfigError(f"bcast must be one of {', '.join(BCASTS)}, got {options.bcast!r}")
    if options.bcast != "both":
        return _evaluate(topology, workload, options, clock, progress)
    library = _evaluate(topology, workload, replace(options, bcast="library"), clock, progress)
    ours = _evaluate(topology, workload, replace(options, bcast="replicated"), clock, progress)
    base = {r.router: r.comm_time_s for r in library}
    return library + [replace(r, speedup_vs_library=_ratio(base[r.router], r)) for r in ours]


def _ratio(before: float | None, result: RouterResult) -> float | None:
    """``before / result.comm_time_s``, None when either is missing or zero."""
    after = result.comm_time_s
    return before / after if before is not None and after else None


def _evaluate(
    topology: Topology,
    workload: Workload,
    options: Options,
    clock: Callable[[], float],
    progress: Report,
) -> list[RouterResult]:
    routers = check_routers(options.routers)
    fabric = Fabric(topology)
    pattern = workload.pattern
    if options.bcast == "replicated":
        pattern = broadcasts.replicated(pattern)
    demands = Demands.from_pattern(fabric, pattern, workload.placement)
    total = 1 + len(routers) * (2 if options.simulate else 1)
    what = f"{workload.name} ({demands.nphases:,} phases, {len(demands):,} flows)"
    progress(Step(f"{what}: lower bound", 0, total))
    bound = lp.pattern_bound(fabric, demands, clock=clock)
    job: float | None = None
    if options.job_bound:
        progress(Step(f"{what}: job-level bound", 0.5, total))
        value = jobbound.job_bound(fabric, demands, bound.phases, clock=clock).lp_max_link_busy_s
        job = None if math.isnan(value) else value
    time_bound = bound.lower_bound_s
    if options.mode == "ranks" and demands.nphases > 1:
        time_bound = overlapped_bound(fabric, demands, clock)
    results = []
    for i, name in enumerate(routers):
        at = 1 + i * (total - 1) // len(routers)
        tell = _Teller(progress, f"{what}: {name}", at, total)
        release_freed_memory()  # the last router's routing and simulation are garbage
        results.append(_one(fabric, demands, workload.name, name, bound, options, clock, tell))
    progress(Step(f"{what}: done", total, total))
    return _with_speedups(
        [replace(r, lower_bound_s=time_bound, job_lp_max_link_busy_s=job) for r in results]
    )


def release_freed_memory() -> bool:
    """Collect garbage and hand the C heap's free memory back to the system (glibc's
    ``malloc_trim``; False where there is none), so that each router's large arrays
    do not add to the next one's peak.  Changes no result."""
    gc.collect()
    trim = _malloc_trim()
    return bool(trim is not None and trim(0) >= 0)


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


@dataclass(frozen=True)
class _Teller:
    """One router's steps: routing at ``at``, its simulation from ``at + 1``."""

    progress: Report
    what: str
    at: int
    total: int

    def routing(self) -> None:
        self.progress(Step(f"{self.what}: routing", self.at, self.total))

    def simulating(self, done: int, flows: int) -> None:
        frac = done / flows if flows else 1.0
        msg = f"{self.what}: simulating, {done:,} of {flows:,} flows done"
        self.progress(Step(msg, self.at + 1 + frac * 0.999, self.total))


def overlapped_bound(
    fabric: Fabric, demands: Demands, clock: Callable[[], float] | None = None
) -> float:
    """The lower bound on time when phases may overlap (``ranks`` mode): the LP of
    all phases' bytes together (:func:`collapsed`), each replicated transfer kept as
    one (its bytes times its phase's repeat), against the largest least latency."""
    multicasts, unicast = mb.phase_multicasts(fabric, demands)
    if not multicasts:
        return lp.pattern_bound(fabric, collapsed(demands), clock=clock).lower_bound_s
    rep = demands.phase_repeat
    every = [
        mb.Multicast(m.root, m.receivers, m.size_bytes * int(rep[p]))
        for p, ms in multicasts.items()
        for m in ms
    ]
    s = t = b = np.zeros(0, dtype=np.int64)
    if len(unicast):
        hp = host_phases(collapsed(unicast), fabric.nhosts)
        s, t, b = hp.phase(0)
    lam = mb.multicast_lambda(fabric, s, t, b, every)[0]
    latency = max(ph.latency_s for ph in lp.phase_bounds(fabric, demands, single_path=False))
    return max(lam, latency)


def collapsed(demands: Demands) -> Demands:
    """All phases as one (bytes times repeat): the bound when phases may overlap.

    In ``ranks`` mode a rank moves on as soon as its own step is done, so phases
    overlap and the sum of per-phase bounds does not hold; the whole pattern's
    bytes still have to cross the network, so the LP of their sum does.
    """
    repeat = demands.phase_repeat[demands.phase]
    size = demands.size_bytes * repeat
    size.setflags(write=False)
    messages = demands.message_counts * repeat
    messages.setflags(write=False)
    zero = np.zeros(len(demands), dtype=np.int64)
    zero.setflags(write=False)
    one = np.ones(1, dtype=np.int64)
    one.setflags(write=False)
    return dataclasses.replace(
        demands,
        size_bytes=size,
        phase=zero,
        phase_labels=("all phases",),
        phase_repeat=one,
        messages=messages,
    )


def _one(
    fabric: Fabric,
    demands: Demands,
    workload: str,
    name: str,
    bound: lp.PatternBound,
    options: Options,
    clock: Callable[[], float],
    tell: _Teller,
) -> RouterResult:
    tell.routing()
    t0 = clock()
    routing = route(name, fabric, demands, options)
    t1 = clock()
    if options.check_paths:
        validate(fabric, demands, routing)
    t2 = clock()
    sim = None
    if options.simulate:
        sim = simulate(
            fabric,
            demands,
            routing,
            mode=options.mode,
            timeline=options.timeline,
            protocol=options.protocol,
            progress=tell.simulating,
        )
    t3 = clock()
    util = lp.max_link_busy(fabric, demands, routing)
    arc_bytes = sim.arc_bytes if sim is not None else _arc_bytes(fabric, demands, routing)
    busiest = int(np.argmax(arc_bytes)) if len(arc_bytes) else 0
    return RouterResult(
        router=name,
        workload=workload,
        topology=fabric.topology.name,
        comm_time_s=sim.total_s if sim is not None else None,
        max_link_busy_s=util.total_s,
        lp_max_link_busy_s=bound.lp_max_link_busy_s,
        lower_bound_s=bound.lower_bound_s,
        single_path_bound_s=bound.single_path_max_link_busy_s,
        route_time_s=t1 - t0,
        sim_time_s=t3 - t2,
        flows=len(demands),
        phases=demands.nphases,
        max_link_bytes=float(arc_bytes.max(initial=0.0)),
        busiest_link=_arc_name(fabric, busiest) if len(arc_bytes) else "",
        arc_utilization=tuple(float(x) for x in _arc_utilization(fabric, demands, routing)),
        timeline_csv=sim.timeline_csv() if sim is not None and options.timeline else "",
        protocol=options.protocol.spec,
        bcast=options.bcast,
    )


def _arc_utilization(fabric: Fabric, demands: Demands, routing: Routing) -> np.ndarray:
    """Seconds of load per arc over the pattern (bytes * 8 / capacity), for heat maps."""
    out: np.ndarray = _arc_bytes(fabric, demands, routing) * 8.0 / fabric.capacity_bps
    return out


def _arc_bytes(fabric: Fabric, demands: Demands, routing: Routing) -> np.ndarray:
    """Bytes per arc over the pattern (phases weighted by repeat); a replicated
    transfer loads each arc of its tree once."""
    flow, arc = load_entries(demands, routing)
    weight = (demands.size_bytes * demands.phase_repeat[demands.phase])[flow]
    del flow
    load: np.ndarray = np.bincount(arc, weights=weight.astype(np.float64), minlength=fabric.narcs)
    return load


def _arc_name(fabric: Fabric, arc: int) -> str:
    """``src->dst`` of a fabric arc, as the simulator's platform names it."""
    a = fabric.topology.arcs[arc]
    return f"{a.src}->{a.dst}"


def route(name: str, fabric: Fabric, demands: Demands, options: Options) -> Routing:
    """Route ``demands`` with router ``name`` at ``options.granularity``: all phases at
    once (``job``) or each phase by itself (``phase``), replicated transfers on trees."""
    if options.granularity == "job" or demands.nphases <= 1:
        return route_replicated(name, fabric, demands, seed=options.seed)
    width = 0
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for p in range(demands.nphases):
        rows = np.flatnonzero(demands.phase == p)
        if rows.size:
            sub = route_replicated(name, fabric, phase_demands(demands, p), seed=options.seed)
            parts.append((rows, sub.arcs))
            width = max(width, sub.arcs.shape[1])
    arcs = np.full((len(demands), width), -1, dtype=np.int64)
    for rows, sub_arcs in parts:
        arcs[rows, : sub_arcs.shape[1]] = sub_arcs
    arcs.setflags(write=False)
    return Routing(name, arcs, {"granularity": "phase"})


def _with_speedups(results: list[RouterResult]) -> list[RouterResult]:
    base = next((r for r in results if r.router == BASELINE), None)
    if base is None:
        return results
    return [dataclasses.replace(r, speedup_vs_dmodk=_ratio(base.comm_time_s, r)) for r in results]


def report(results: Sequence[RouterResult]) -> dict[str, Any]:
    """The ``--json`` document: schema, one record per (router, workload)."""
    return {"schema": SCHEMA, "records": [r.to_dict() for r in results]}
