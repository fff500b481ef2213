"""The event loop: flows are released, pay their latency, share bandwidth, complete.

Flow model (the one of SimGrid's CM02 network model, Casanova and Marchal 2002;
Velho and Legrand, SIMUTools 2009): a flow released at time r first pays the
latency L of its path (the sum of its arcs' ``latency_s``) without using any
bandwidth, then transmits its ``size_bytes * 8`` bits at the max-min fair rate
of the transmitting flows (:mod:`sdnmpi.sim.maxmin`), which is recomputed at
every event.  It completes when its last bit is sent.  A lone flow over a
bottleneck of capacity C thus takes ``L + 8 * size_bytes / C``, the usual
latency-bandwidth cost.  Charging the latency before the transfer rather than
after it only shifts contending flows against each other by the difference of
their path latencies (microseconds); it is what SimGrid does, so the reference
check compares like with like.

Events are releases, transmission starts (release + latency) and completions.
Between two events the rates are constant, so the loop jumps from event to
event: the time to the next completion is ``min(remaining / rate)``.  Flows
whose completion (or start) times coincide within a relative tolerance
(``rtol`` of the step, plus a few ulps of the clock) are processed in the same
event; a completing flow's residual, at most that tolerance, is dropped.  All
work per event is vectorized over the flows (numpy and scipy.sparse), with no
Python loop over flows.

:func:`run_phases` and :func:`run_ranks` implement the two synchronization
modes described in :mod:`sdnmpi.sim` on top of :func:`run`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from scipy import sparse

from sdnmpi.errors import PatternError, SdnMpiError
from sdnmpi.sim.flowset import (
    Dependencies,
    FlowSet,
    Steps,
    phase_deps,
    rank_steps,
)
from sdnmpi.sim.maxmin import RTOL, gather_rows, maxmin_entries, row_positions
from sdnmpi.sim.platform import Platform
from sdnmpi.sim.protocol import IDEAL, Protocol

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
#: Which direction of a serialized exchange goes first (see ``run_phases``).
Order = Literal["random", "lower-first"]
ORDERS: tuple[str, ...] = ("random", "lower-first")
#: Called with (flows completed, flows in all) as a simulation progresses.
Progress = Callable[[int, int], None]
#: Samples of a phase with serialized exchanges under ``order="random"``.
DEFAULT_SAMPLES = 8

_ULPS = 8 * float(np.finfo(np.float64).eps)


@dataclass(frozen=True, eq=False)
class Trace:
    """What one run of the event loop produced.

    Times are seconds from the start of the run.  ``segments`` are the intervals
    between events during which some flow transmits; ``arc_rate_bps`` (when
    recorded) has one row per segment, ``flow_rate_bps`` (when recorded) one row
    per segment and one column per flow, both sparse.
    """

    release_s: FloatArray
    start_s: FloatArray
    finish_s: FloatArray
    segment_start_s: FloatArray
    segment_end_s: FloatArray
    arc_rate_bps: Any
    flow_rate_bps: Any
    arc_peak_bps: FloatArray
    events: int

    @property
    def makespan_s(self) -> float:
        """Completion time of the last flow (0 without flows)."""
        return float(self.finish_s.max(initial=0.0))


class _Groups:
    """Counters of the dependency groups (see :class:`~sdnmpi.sim.flowset.Dependencies`)."""

    def __init__(self, deps: Dependencies, nflows: int) -> None:
        m_flow, m_group = deps.member_entries()
        order = np.argsort(m_flow, kind="stable")
        self.member_group = m_group[order]
        self.member_ptr = np.zeros(nflows + 1, dtype=np.int64)
        np.cumsum(np.bincount(m_flow, minlength=nflows), out=self.member_ptr[1:])
        self.left = np.bincount(m_group, minlength=deps.ngroups).astype(np.int64)
        w_flow, w_group = deps.wait_entries()
        self.wait_left = np.bincount(w_flow, minlength=nflows).astype(np.int64)
        order = np.argsort(w_group, kind="stable")
        self.waiters = w_flow[order]
        self.ptr = np.zeros(deps.ngroups + 1, dtype=np.int64)
        np.cumsum(np.bincount(w_group, minlength=deps.ngroups), out=self.ptr[1:])

    def initial(self) -> IntArray:
        """Flows that wait for nothing."""
        return np.flatnonzero(self.wait_left == 0).astype(np.int64)

    def on_finished(self, flows: IntArray) -> IntArray:
        """Count ``flows`` as completed; return the flows this releases."""
        groups = gather_rows(self.member_ptr, self.member_group, flows)
        uniq, counts = np.unique(groups, return_counts=True)
        self.left[uniq] -= counts
        done = uniq[self.left[uniq] == 0]
        waiting = gather_rows(self.ptr, self.waiters, done)
        uniq, counts = np.unique(waiting, return_counts=True)
        self.wait_left[uniq] -= counts
        released: IntArray = uniq[self.wait_left[uniq] == 0]
        return released


class _Recorder:
    """Collects the segments (and optionally their rates) as sparse rows."""

    def __init__(self, narcs: int, nflows: int, arcs: bool, flows: bool) -> None:
        self.narcs, self.nflows = narcs, nflows
        self.arcs, self.flows = arcs, flows
        self.start: list[float] = []
        self.end: list[float] = []
        self.arc_rows: list[tuple[IntArray, FloatArray]] = []
        self.flow_rows: list[tuple[IntArray, FloatArray]] = []

    def add(
        self, t0: float, t1: float, arc_rate: FloatArray, active: IntArray, rates: FloatArray
    ) -> None:
        self.start.append(t0)
        self.end.append(t1)
        if self.arcs:
            nz = np.flatnonzero(arc_rate)
            self.arc_rows.append((nz, arc_rate[nz]))
        if self.flows:
            self.flow_rows.append((active.copy(), rates.copy()))

    def matrices(self) -> tuple[Any, Any]:
        arcs = _csr(self.arc_rows, self.narcs) if self.arcs else None
        flows = _csr(self.flow_rows, self.nflows) if self.flows else None
        return arcs, flows


def _csr(rows: list[tuple[IntArray, FloatArray]], ncols: int) -> Any:
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([r[0].size for r in rows], out=indptr[1:])
    cat = [np.concatenate([r[k] for r in rows]) if rows else np.zeros(0) for k in (0, 1)]
    return sparse.csr_array((cat[1], cat[0].astype(np.int64), indptr), shape=(len(rows), ncols))


class _Loop:
    """The state of one run; :meth:`run` drives it from event to event."""

    def __init__(
        self,
        platform: Platform,
        incidence: Any,
        size_bits: FloatArray,
        latency_s: FloatArray,
        deps: Dependencies | None,
        rtol: float,
        recorder: _Recorder,
    ) -> None:
        n = int(size_bits.size)
        inc = sparse.csr_array(incidence)
        self.indptr = inc.indptr.astype(np.int64)
        self.arcs, self.weights = inc.indices.astype(np.int64), inc.data.astype(np.float64)
        self.entry_flow = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.indptr))
        self.capacity = platform.capacity_bps
        self.remaining = np.array(size_bits, dtype=np.float64)
        self.latency = np.asarray(latency_s, dtype=np.float64)
        self.release = np.full(n, np.inf)
        self.start = np.full(n, np.inf)
        self.finish = np.full(n, np.inf)
        self.active = np.zeros(0, dtype=np.int64)
        self.pending = np.zeros(0, dtype=np.int64)
        self.peak = np.zeros(platform.narcs)
        self.groups = _Groups(deps, n) if deps is not None else None
        self.rtol, self.recorder = rtol, recorder
        self.t, self.events = 0.0, 0
        first = self.groups.initial() if self.groups else np.arange(n, dtype=np.int64)
        self._release(first)

    def run(self) -> Trace:
        while self.active.size or self.pending.size:
            self._event()
        if np.isinf(self.finish).any():
            stuck = int(np.flatnonzero(np.isinf(self.finish))[0])
            raise PatternError(f"flow {stuck} is never released: its dependencies form a cycle")
        arcs, flows = self.recorder.matrices()
        return Trace(
            self.release,
            self.start,
            self.finish,
            np.array(self.recorder.start),
            np.array(self.recorder.end),
            arcs,
            flows,
            self.peak,
            self.events,
        )

    def _event(self) -> None:
        """Advance to the next event and process everything due at it."""
        rates, arc_rate = self._rates()
        with np.errstate(divide="ignore", invalid="ignore"):
            to_go = np.where(np.isinf(rates), 0.0, self.remaining[self.active] / rates)
        t_done = self.t + float(to_go.min()) if to_go.size else np.inf
        t_start = float(self.start[self.pending].min()) if self.pending.size else np.inf
        t_next = min(t_done, t_start)
        if not np.isfinite(t_next):
            raise SdnMpiError(f"simulation stalled at t={self.t!r} s: no flow can progress")
        dt = t_next - self.t
        if dt > 0 and self.active.size:
            self._advance(dt, rates, arc_rate)
        self.t = t_next
        self.events += 1
        tol = self.rtol * dt + _ULPS * abs(t_next)
        finished = self._complete(to_go, dt + tol)
        if self.groups is not None and finished.size:
            self._release(self.groups.on_finished(finished))
        self._activate(tol)

    def _rates(self) -> tuple[FloatArray, FloatArray]:
        """Max-min rates of the transmitting flows, and the resulting arc rates."""
        n = self.active.size
        if n == self.indptr.size - 1:  # everyone transmits (active is sorted): no gather
            flow, arc, weight = self.entry_flow, self.arcs, self.weights
        else:
            positions, lengths = row_positions(self.indptr, self.active)
            flow = np.repeat(np.arange(n, dtype=np.int64), lengths)
            arc, weight = self.arcs[positions], self.weights[positions]
        rates = maxmin_entries(flow, arc, weight, n, self.capacity, rtol=self.rtol)
        load = np.bincount(arc, weights=weight * rates[flow], minlength=self.capacity.size)
        return rates, load.astype(np.float64, copy=False)

    def _advance(self, dt: float, rates: FloatArray, arc_rate: FloatArray) -> None:
        finite = np.isfinite(rates)
        sent = np.where(finite, rates * dt, 0.0)
        self.remaining[self.active] -= sent
        np.maximum(self.peak, arc_rate, out=self.peak)
        self.recorder.add(self.t, self.t + dt, arc_rate, self.active, rates)

    def _complete(self, to_go: FloatArray, horizon: float) -> IntArray:
        """Finish the transmitting flows due within ``horizon`` of the previous event."""
        done = to_go <= horizon
        finished = self.active[done]
        self.finish[finished] = self.t
        self.remaining[finished] = 0.0
        self.active = self.active[~done]
        return finished

    def _release(self, flows: IntArray) -> None:
        self.release[flows] = self.t
        self.start[flows] = self.t + self.latency[flows]
        self.pending = np.concatenate([self.pending, flows])

    def _activate(self, tol: float) -> None:
        """Flows whose latency is paid start transmitting."""
        due = self.start[self.pending] <= self.t + tol
        starting = self.pending[due]
        self.start[starting] = np.minimum(self.start[starting], self.t)
        # Sorted, so that gathering the active rows reads the incidence matrix in order
        # (two sorted runs: the stable sort merges them in linear time).
        self.active = np.sort(np.concatenate([self.active, starting]), kind="stable")
        self.pending = self.pending[~due]


def run(
    platform: Platform,
    incidence: Any,
    size_bits: FloatArray,
    latency_s: FloatArray,
    deps: Dependencies | None = None,
    *,
    timeline: bool = False,
    flow_rates: bool = False,
    rtol: float = RTOL,
) -> Trace:
    """Simulate flows (rows of ``incidence``) released at time 0, or as ``deps`` allow.

    ``timeline`` records the arc rates of every segment, ``flow_rates`` the rate
    of every flow in every segment (for checks on small cases).
    """
    n = int(np.asarray(size_bits).size)
    recorder = _Recorder(platform.narcs, n, timeline, flow_rates)
    return _Loop(platform, incidence, size_bits, latency_s, deps, rtol, recorder).run()


class PhaseRun(NamedTuple):
    """One phase simulated on its own: its flows (flowset rows), the trace of its
    first sample, and its expected duration (the mean makespan over samples)."""

    rows: IntArray
    trace: Trace
    duration_s: float


def run_phases(
    platform: Platform,
    flowset: FlowSet,
    *,
    protocol: Protocol = IDEAL,
    order: Order = "random",
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    timeline: bool = False,
    flow_rates: bool = False,
    rtol: float = RTOL,
    batched: bool = True,
    native: bool | None = None,
    progress: Progress | None = None,
) -> list[PhaseRun]:
    """Each phase on its own, from time 0.

    A phase starts when every flow of the previous one has completed, so phases
    never overlap and each is simulated once; the caller multiplies by the
    repeat (the event loop is deterministic: identical phases give identical
    traces).  A phase with exchanges that ``protocol`` serializes is, with
    ``order="random"``, simulated ``samples`` times, each drawing which
    direction of every exchange goes first; its duration is the mean, the
    expected time of one occurrence.  ``order="lower-first"`` fixes the order.

    ``batched`` runs the phases without serialized exchanges together
    (:mod:`sdnmpi.sim.batch`, the same traces much faster); ``False`` runs
    every phase alone (the reference).  ``native`` runs those phases on the C
    engine (:mod:`sdnmpi.sim.native`, the same traces again, faster still, on
    several threads) when neither timeline nor flow rates are recorded:
    ``None`` whenever its library is built, ``True`` raises if it is not.
    ``progress(done, total)`` hears how many flows have completed, as they do.
    """
    from sdnmpi.sim.batch import batches, run_batch  # batch builds on this module

    serialized = flowset.serialized(protocol)
    has_serialized = np.bincount(flowset.phase[serialized], minlength=flowset.nphases) > 0
    alone = [p for p in range(flowset.nphases) if has_serialized[p] or not batched]
    traces: dict[int, list[Trace]] = {}
    report = progress or (lambda _done, _total: None)
    finished, total = 0, len(flowset)
    rng = np.random.default_rng(seed) if order == "random" else None
    for p in alone:
        traces[p] = _phase_samples(
            platform, flowset, p, serialized, rng, samples, timeline, flow_rates, rtol
        )
        finished += int(flowset.phase_rows(p).size)
        report(finished, total)
    together = [p for p in range(flowset.nphases) if p not in traces]
    if _use_native(native, batched, timeline or flow_rates, flowset):
        finished = _native_phases(platform, flowset, together, rtol, traces, report, finished)
        together = []
    lengths = np.diff(flowset.incidence.indptr)
    entries = np.bincount(flowset.phase, weights=lengths, minlength=flowset.nphases)
    for group in batches(entries[together].astype(np.int64).tolist()):
        phases = [together[i] for i in group]
        rows = [flowset.phase_rows(p) for p in phases]
        done = run_batch(
            platform,
            [flowset.incidence[r] for r in rows],
            [flowset.size_bits[r] for r in rows],
            [flowset.latency_s[r] for r in rows],
            timeline=timeline,
            flow_rates=flow_rates,
            rtol=rtol,
            progress=functools.partial(_offset, report, finished, total),
        )
        traces.update((p, [t]) for p, t in zip(phases, done, strict=True))
        finished += sum(int(r.size) for r in rows)
    out = []
    for p in range(flowset.nphases):
        mean = float(np.mean([t.makespan_s for t in traces[p]]))
        out.append(PhaseRun(flowset.phase_rows(p), traces[p][0], mean))
    return out


def _use_native(native: bool | None, batched: bool, recording: bool, flowset: FlowSet) -> bool:
    """Whether the phases ``run_phases`` would batch go to the C engine."""
    from sdnmpi.sim import native as c_engine  # it builds on this module

    if native is False or not batched or recording:
        return False
    if native and not c_engine.available():
        raise SdnMpiError(f"the C phase engine was asked for: {c_engine.status()}")
    return bool(c_engine.available() and c_engine.integral(flowset.incidence.data))


def _native_phases(
    platform: Platform,
    flowset: FlowSet,
    phases: list[int],
    rtol: float,
    traces: dict[int, list[Trace]],
    report: Progress,
    finished: int,
) -> int:
    """``phases`` on the C engine, a phase per task on as many threads as CPUs
    (the call releases the GIL); returns the flows completed so far."""
    from concurrent.futures import ThreadPoolExecutor

    from sdnmpi.sim import native as c_engine  # it builds on this module

    def one(p: int) -> Trace:
        rows = flowset.phase_rows(p)
        return c_engine.run_phase(
            platform.capacity_bps,
            flowset.incidence[rows],
            flowset.size_bits[rows],
            flowset.latency_s[rows],
            rtol=rtol,
        )

    workers = max(1, min(len(phases), len(os.sched_getaffinity(0))))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for p, trace in zip(phases, pool.map(one, phases), strict=True):
            traces[p] = [trace]
            finished += int(flowset.phase_rows(p).size)
            report(finished, len(flowset))
    return finished


def _offset(report: Progress, base: int, total: int, done: int) -> None:
    report(base + done, total)


def _phase_samples(
    platform: Platform,
    flowset: FlowSet,
    p: int,
    serialized: npt.NDArray[np.bool_],
    rng: np.random.Generator | None,
    samples: int,
    timeline: bool,
    flow_rates: bool,
    rtol: float,
) -> list[Trace]:
    """One phase run alone, ``samples`` times when it has exchanges drawn by ``rng``."""
    rows = flowset.phase_rows(p)
    traces: list[Trace] = []
    for _ in range(samples if rng is not None and serialized[rows].any() else 1):
        traces.append(
            run(
                platform,
                flowset.incidence[rows],
                flowset.size_bits[rows],
                flowset.latency_s[rows],
                phase_deps(flowset, rows, serialized, rng),
                timeline=timeline and not traces,
                flow_rates=flow_rates and not traces,
                rtol=rtol,
            )
        )
    return traces


def run_ranks(
    platform: Platform,
    flowset: FlowSet,
    *,
    max_flows: int,
    protocol: Protocol = IDEAL,
    order: Order = "random",
    seed: int = 0,
    timeline: bool = False,
    flow_rates: bool = False,
    rtol: float = RTOL,
) -> tuple[Steps, Trace]:
    """All phases at once, each flow released by its ranks' previous steps (unrolled repeats).

    The ``protocol``'s serialized exchanges add an edge per exchange and step;
    with ``order="random"`` every occurrence draws which direction goes first.
    """
    rng = np.random.default_rng(seed) if order == "random" else None
    steps = rank_steps(flowset, max_flows, protocol, rng)
    trace = run(
        platform,
        flowset.incidence[steps.flow],
        flowset.size_bits[steps.flow],
        flowset.latency_s[steps.flow],
        steps.deps,
        timeline=timeline,
        flow_rates=flow_rates,
        rtol=rtol,
    )
    return steps, trace
