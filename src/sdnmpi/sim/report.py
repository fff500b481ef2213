"""Simulation results: dataclasses, their JSON-ready dicts and the timeline as CSV.

:class:`SimResult` holds the total time, the per-phase times, per-arc bytes and
peak utilizations, and (on request) the :class:`Timeline` of arc rates.  This is
the only module of :mod:`sdnmpi.sim` that writes files, and only through the
explicit ``write_*`` methods.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from sdnmpi.sim.engine import PhaseRun, Trace
from sdnmpi.sim.flowset import FlowSet, Steps
from sdnmpi.sim.platform import Platform

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

CSV_HEADER = (
    "segment",
    "start_s",
    "end_s",
    "repeat",
    "period_s",
    "arc",
    "arc_name",
    "rate_bps",
    "utilization",
)


@dataclass(frozen=True, eq=False)
class Timeline:
    """Arc rates over time as piecewise-constant segments.

    Segment i covers ``[start_s[i], end_s[i])`` with the arc rates of row i of
    ``rate_bps`` (sparse: idle arcs cost nothing), and recurs ``repeat[i]``
    times, every ``period_s[i]`` seconds (a repeated phase is stored once).
    Time not covered by a segment has no traffic.
    """

    start_s: FloatArray
    end_s: FloatArray
    repeat: IntArray
    period_s: FloatArray
    rate_bps: Any
    arc_names: tuple[str, ...]
    capacity_bps: FloatArray

    def __len__(self) -> int:
        return int(self.start_s.size)

    def arc_bits(self) -> FloatArray:
        """Bits each arc carried over the whole timeline (rate x duration x repeat)."""
        weight = (self.end_s - self.start_s) * self.repeat
        out: FloatArray = np.asarray(weight @ self.rate_bps, dtype=np.float64).reshape(-1)
        return out

    def sample(self, times_s: npt.ArrayLike) -> FloatArray:
        """Arc rates (bit/s) at the given times: shape ``(len(times_s), narcs)``."""
        t = np.asarray(times_s, dtype=np.float64).reshape(-1, 1)
        offset = t - self.start_s
        period = np.where(self.period_s > 0, self.period_s, np.inf)
        k = np.clip(np.floor(offset / period), 0, self.repeat - 1)
        local = offset - k * np.where(np.isfinite(period), period, 0.0)
        inside = (offset >= 0) & (local < self.end_s - self.start_s)
        out: FloatArray = np.asarray(inside.astype(np.float64) @ self.rate_bps)
        return out.reshape(t.shape[0], -1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: segment columns and the rates as CSR (``indptr``, ``arc``, ``rate_bps``)."""
        csr = sparse.csr_array(self.rate_bps)
        return {
            "start_s": self.start_s.tolist(),
            "end_s": self.end_s.tolist(),
            "repeat": self.repeat.tolist(),
            "period_s": self.period_s.tolist(),
            "indptr": csr.indptr.tolist(),
            "arc": csr.indices.tolist(),
            "rate_bps": csr.data.tolist(),
        }

    def to_csv(self) -> str:
        """One row per (segment, busy arc), with the arc's rate and utilization."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(CSV_HEADER)
        csr = sparse.csr_array(self.rate_bps)
        for i in range(len(self)):
            for j in range(int(csr.indptr[i]), int(csr.indptr[i + 1])):
                writer.writerow(self._csv_row(i, int(csr.indices[j]), float(csr.data[j])))
        return buf.getvalue()

    def _csv_row(self, i: int, arc: int, rate: float) -> list[object]:
        util = rate / float(self.capacity_bps[arc])
        return [
            i,
            repr(float(self.start_s[i])),
            repr(float(self.end_s[i])),
            int(self.repeat[i]),
            repr(float(self.period_s[i])),
            arc,
            self.arc_names[arc],
            repr(rate),
            repr(util),
        ]


@dataclass(frozen=True)
class PhaseResult:
    """Timing of one phase.

    ``duration_s`` is one occurrence, ``total_s`` all ``repeat`` occurrences, and
    ``[start_s, end_s]`` where they sit in the run.  In ``phases`` mode
    ``total_s = repeat * duration_s = end_s - start_s``.  In ``ranks`` mode
    phases overlap: ``[start_s, end_s]`` runs from the first release to the last
    completion of its flows, ``duration_s`` is the longest single occurrence.
    """

    label: str
    repeat: int
    flows: int
    size_bytes: float
    duration_s: float
    total_s: float
    start_s: float
    end_s: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "label": self.label,
            "repeat": self.repeat,
            "flows": self.flows,
            "size_bytes": self.size_bytes,
            "duration_s": self.duration_s,
            "total_s": self.total_s,
            "start_s": self.start_s,
            "end_s": self.end_s,
        }


@dataclass(frozen=True, eq=False)
class SimResult:
    """The predicted communication time of a routed pattern and the link loads.

    Per-flow times (one entry per demand row): in ``phases`` mode they are
    relative to the start of the flow's phase (the same in every repeat); in
    ``ranks`` mode they are absolute, for the flow's last occurrence.
    ``flow_start_s`` is when the flow starts transmitting (release + path
    latency).  ``arc_max_utilization`` is the peak over time of rate/capacity.
    """

    mode: str
    total_s: float
    phases: tuple[PhaseResult, ...]
    arc_names: tuple[str, ...]
    capacity_bps: FloatArray
    arc_bytes: FloatArray
    arc_max_utilization: FloatArray
    flow_release_s: FloatArray
    flow_start_s: FloatArray
    flow_finish_s: FloatArray
    events: int
    timeline: Timeline | None = None
    notes: tuple[str, ...] = ()

    @property
    def max_link_bytes(self) -> tuple[int, float]:
        """The most loaded arc by bytes, and its bytes (``(-1, 0.0)`` without traffic)."""
        return _argmax(self.arc_bytes)

    @property
    def max_utilization(self) -> tuple[int, float]:
        """The arc with the highest peak utilization, and that utilization."""
        return _argmax(self.arc_max_utilization)

    def to_dict(self, *, flows: bool = False) -> dict[str, Any]:
        """JSON-ready summary; busy arcs only; per-flow times with ``flows=True``."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "total_s": self.total_s,
            "events": self.events,
            "notes": list(self.notes),
            "phases": [p.to_dict() for p in self.phases],
            "max_link_load": self._max_load_dict(),
            "arcs": self._arcs_dict(),
        }
        if flows:
            out["flows"] = {
                "release_s": self.flow_release_s.tolist(),
                "start_s": self.flow_start_s.tolist(),
                "finish_s": self.flow_finish_s.tolist(),
            }
        if self.timeline is not None:
            out["timeline"] = self.timeline.to_dict()
        return out

    def _max_load_dict(self) -> dict[str, Any]:
        arc_b, nbytes = self.max_link_bytes
        arc_u, util = self.max_utilization
        return {
            "bytes": {"arc": arc_b, "name": self._name(arc_b), "bytes": nbytes},
            "utilization": {"arc": arc_u, "name": self._name(arc_u), "utilization": util},
        }

    def _arcs_dict(self) -> list[dict[str, Any]]:
        busy = np.flatnonzero((self.arc_bytes > 0) | (self.arc_max_utilization > 0))
        return [
            {
                "arc": int(a),
                "name": self.arc_names[a],
                "capacity_bps": float(self.capacity_bps[a]),
                "bytes": float(self.arc_bytes[a]),
                "max_utilization": float(self.arc_max_utilization[a]),
            }
            for a in busy
        ]

    def _name(self, arc: int) -> str | None:
        return self.arc_names[arc] if arc >= 0 else None

    def timeline_csv(self) -> str:
        """The timeline as CSV text (header only when no timeline was recorded)."""
        if self.timeline is None:
            return ",".join(CSV_HEADER) + "\n"
        return self.timeline.to_csv()

    def write_json(self, path: str | Path, *, flows: bool = False) -> None:
        """Write :meth:`to_dict` as JSON to ``path``."""
        Path(path).write_text(json.dumps(self.to_dict(flows=flows), indent=2) + "\n")

    def write_timeline_csv(self, path: str | Path) -> None:
        """Write :meth:`timeline_csv` to ``path``."""
        Path(path).write_text(self.timeline_csv())


def _argmax(values: FloatArray) -> tuple[int, float]:
    """Index and value of the maximum; ``(-1, 0.0)`` when nothing is positive."""
    i = int(np.argmax(values)) if values.size else -1
    return (i, float(values[i])) if i >= 0 and values[i] > 0 else (-1, 0.0)


def phases_result(
    platform: Platform,
    flowset: FlowSet,
    runs: Sequence[PhaseRun],
    *,
    timeline: bool,
    notes: tuple[str, ...] = (),
) -> SimResult:
    """Assemble a ``phases``-mode result: phase p runs ``repeat`` times back to back,
    each occurrence taking the phase's expected duration."""
    traces = [(r.rows, r.trace) for r in runs]
    duration = np.array([r.duration_s for r in runs], dtype=np.float64)
    repeat = flowset.phase_repeat.astype(np.int64)
    total = duration * repeat
    start = np.concatenate([[0.0], np.cumsum(total)])[:-1] if traces else np.zeros(0)
    n = len(flowset)
    release, begin, finish = (np.zeros(n) for _ in range(3))
    peak = np.zeros(platform.narcs)
    for rows, trace in traces:
        release[rows], begin[rows], finish[rows] = trace.release_s, trace.start_s, trace.finish_s
        np.maximum(peak, trace.arc_peak_bps, out=peak)
    phases = tuple(
        _phase(flowset, p, float(duration[p]), float(total[p]), float(start[p]))
        for p in range(flowset.nphases)
    )
    line = _phases_timeline(platform, traces, start, repeat, duration) if timeline else None
    return SimResult(
        "phases",
        float(total.sum()),
        phases,
        platform.arc_names,
        platform.capacity_bps,
        flowset.arc_bytes(platform.narcs),
        peak / platform.capacity_bps,
        release,
        begin,
        finish,
        sum(t.events for _, t in traces),
        line,
        notes,
    )


def _phase(flowset: FlowSet, p: int, duration: float, total: float, start: float) -> PhaseResult:
    rows = flowset.phase_rows(p)
    return PhaseResult(
        flowset.phase_labels[p],
        int(flowset.phase_repeat[p]),
        int(rows.size),
        float(flowset.size_bytes[rows].sum()),
        duration,
        total,
        start,
        start + total,
    )


def _phases_timeline(
    platform: Platform,
    traces: list[tuple[IntArray, Trace]],
    start: FloatArray,
    repeat: IntArray,
    duration: FloatArray,
) -> Timeline:
    counts = [t.segment_start_s.size for _, t in traces]
    offset = np.repeat(start, counts) if traces else np.zeros(0)
    cat = [np.concatenate([getattr(t, f) for _, t in traces] or [np.zeros(0)]) for f in _SEG]
    rates = [t.arc_rate_bps for _, t in traces]
    matrix = sparse.vstack(rates, format="csr") if rates else _empty_rates(platform)
    return Timeline(
        cat[0] + offset,
        cat[1] + offset,
        np.repeat(repeat, counts).astype(np.int64),
        np.repeat(duration, counts).astype(np.float64),
        sparse.csr_array(matrix),
        platform.arc_names,
        platform.capacity_bps,
    )


_SEG = ("segment_start_s", "segment_end_s")


def _empty_rates(platform: Platform) -> Any:
    return sparse.csr_array((0, platform.narcs), dtype=np.float64)


def ranks_result(
    platform: Platform,
    flowset: FlowSet,
    steps: Steps,
    trace: Trace,
    *,
    timeline: bool,
    notes: tuple[str, ...] = (),
) -> SimResult:
    """Assemble a ``ranks``-mode result from the unrolled run."""
    n = len(flowset)
    last = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last, steps.flow, np.arange(len(steps), dtype=np.int64))
    times = [a[last] for a in (trace.release_s, trace.start_s, trace.finish_s)]
    phases = _ranks_phases(flowset, steps, trace)
    line = _ranks_timeline(platform, trace) if timeline else None
    return SimResult(
        "ranks",
        trace.makespan_s,
        phases,
        platform.arc_names,
        platform.capacity_bps,
        flowset.arc_bytes(platform.narcs),
        trace.arc_peak_bps / platform.capacity_bps,
        times[0],
        times[1],
        times[2],
        trace.events,
        line,
        notes,
    )


def _ranks_phases(flowset: FlowSet, steps: Steps, trace: Trace) -> tuple[PhaseResult, ...]:
    nsteps = steps.step_phase.size
    first = np.full(nsteps, np.inf)
    last = np.zeros(nsteps)
    np.minimum.at(first, steps.step, trace.release_s)
    np.maximum.at(last, steps.step, trace.finish_s)
    out = []
    for p in range(flowset.nphases):
        mine = np.flatnonzero(steps.step_phase == p)
        mine = mine[np.isfinite(first[mine])]
        lo = float(first[mine].min()) if mine.size else 0.0
        hi = float(last[mine].max()) if mine.size else lo
        longest = float((last[mine] - first[mine]).max()) if mine.size else 0.0
        rows = flowset.phase_rows(p)
        out.append(
            PhaseResult(
                flowset.phase_labels[p],
                int(flowset.phase_repeat[p]),
                int(rows.size),
                float(flowset.size_bytes[rows].sum()),
                longest,
                hi - lo,
                lo,
                hi,
            )
        )
    return tuple(out)


def _ranks_timeline(platform: Platform, trace: Trace) -> Timeline:
    nseg = trace.segment_start_s.size
    return Timeline(
        trace.segment_start_s,
        trace.segment_end_s,
        np.ones(nseg, dtype=np.int64),
        np.zeros(nseg),
        sparse.csr_array(trace.arc_rate_bps),
        platform.arc_names,
        platform.capacity_bps,
    )
