"""Many independent runs of the event loop, advanced together in lockstep.

In ``phases`` mode every phase is simulated on its own from an idle network
(:func:`sdnmpi.sim.engine.run_phases`), so the phases of a pattern are
independent runs.  Simulated one after the other, a pattern of a thousand
phases costs a thousand event loops, each event a few dozen numpy calls on a
few hundred flows: the time goes into call overhead, not arithmetic (FT with
512 ranks on ``fat_tree(8)``: about 50,000 events, 500 s).

Here a *batch* of runs (blocks) shares one loop.  Each block keeps its own
clock, and every iteration advances every block by its own next event, so a
batch takes as many iterations as its longest run has events, each a few
dozen numpy calls over all the batch's flows.  The arcs are private to a
block (a block's arc ``a`` is a resource of its own, *compressed* to the arcs
the block uses), and progressive filling runs per block
(:func:`~sdnmpi.sim.maxmin.maxmin_blocks`): each block's filling level, its
saturated arcs and its clock are computed with exactly the operations of
:class:`sdnmpi.sim.engine._Loop` on that run alone, in the same order, so a
block's trace equals the one :func:`~sdnmpi.sim.engine.run` gives for it
(the tests compare them).

Blocks carry no dependencies (every flow is released at time 0); runs with
dependencies (serialized exchanges) stay on :func:`~sdnmpi.sim.engine.run`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from sdnmpi.errors import SdnMpiError
from sdnmpi.sim.engine import _ULPS, Trace
from sdnmpi.sim.filling import Blocks, Filling
from sdnmpi.sim.maxmin import RTOL, row_positions, segment_starts
from sdnmpi.sim.platform import Platform

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Incidence entries (flow, arc) per batch: bounds a batch's memory (about 0.2 kB each).
BATCH_ENTRIES = 1 << 20


def batches(entries: Sequence[int], limit: int = BATCH_ENTRIES) -> list[range]:
    """Consecutive runs grouped so that each group holds at most ``limit`` entries
    (a run larger than that is a group of its own).

    >>> batches([3, 3, 5, 1, 9], limit=6)
    [range(0, 2), range(2, 4), range(4, 5)]
    """
    out: list[range] = []
    lo, total = 0, 0
    for i, n in enumerate(entries):
        if i > lo and total + n > limit:
            out.append(range(lo, i))
            lo, total = i, 0
        total += n
    if lo < len(entries):
        out.append(range(lo, len(entries)))
    return out


class _Layout:
    """The static part of a batch: flows, blocks and compressed arcs.

    Flows are numbered block after block (block ``b`` holds ``ptr[b]:ptr[b+1]``);
    compressed arc ``c`` is platform arc ``arc_global[c]`` of block ``arc_block[c]``,
    numbered by (block, platform arc), so each block's arcs are contiguous and in
    the platform's order.
    """

    def __init__(self, platform: Platform, incidences: Sequence[Any]) -> None:
        csrs = [sparse.csr_array(m) for m in incidences]
        sizes = np.array([int(m.shape[0]) for m in csrs], dtype=np.int64)
        self.nblocks = len(csrs)
        self.ptr = np.zeros(self.nblocks + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.ptr[1:])
        self.flow_block = np.repeat(np.arange(self.nblocks, dtype=np.int64), sizes)
        lengths = np.concatenate([np.diff(m.indptr) for m in csrs] or [np.zeros(0, np.int64)])
        self.indptr = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.indptr[1:])
        arcs = np.concatenate([m.indices for m in csrs] or [np.zeros(0)]).astype(np.int64)
        self.weights = np.concatenate([m.data for m in csrs] or [np.zeros(0)]).astype(np.float64)
        entry_block = np.repeat(self.flow_block, lengths)
        key = entry_block * platform.narcs + arcs
        uniq, inverse = np.unique(key, return_inverse=True)
        self.arcs = inverse.reshape(-1).astype(np.int64)
        self.arc_block = uniq // max(platform.narcs, 1)
        self.arc_global = uniq % max(platform.narcs, 1)
        self.blocks = Blocks.build(
            self.indptr,
            self.arcs,
            self.weights,
            self.flow_block,
            self.arc_block,
            platform.capacity_bps[self.arc_global],
        )


class _Segments:
    """The segments of every block, collected per iteration (rates on request)."""

    def __init__(self, arcs: bool, flows: bool) -> None:
        self.arcs, self.flows = arcs, flows
        self.block: list[IntArray] = []
        self.start: list[FloatArray] = []
        self.end: list[FloatArray] = []
        self.arc_rows: list[tuple[IntArray, IntArray, FloatArray]] = []
        self.flow_rows: list[tuple[IntArray, IntArray, FloatArray]] = []
        self.count = 0

    def add(
        self,
        layout: _Layout,
        blocks: IntArray,
        t0: FloatArray,
        t1: FloatArray,
        arc_rate: FloatArray,
        active: IntArray,
        rates: FloatArray,
    ) -> None:
        """Segments ``[t0, t1)`` of ``blocks`` (sorted), with the rates of their flows."""
        self.block.append(blocks)
        self.start.append(t0)
        self.end.append(t1)
        seg = np.full(layout.nblocks, -1, dtype=np.int64)
        seg[blocks] = self.count + np.arange(blocks.size)
        self.count += blocks.size
        if self.arcs:
            on = np.flatnonzero((arc_rate != 0) & (seg[layout.arc_block] >= 0))
            row = seg[layout.arc_block[on]]
            self.arc_rows.append((row, layout.arc_global[on], arc_rate[on]))
        if self.flows:
            fb = layout.flow_block[active]
            on = np.flatnonzero(seg[fb] >= 0)
            local = active[on] - layout.ptr[fb[on]]
            self.flow_rows.append((seg[fb[on]], local, rates[on]))

    def per_block(
        self, nblocks: int, narcs: int, nflows: IntArray
    ) -> list[tuple[FloatArray, FloatArray, Any, Any]]:
        """Each block's segment times and rate matrices, in time order."""
        block = _cat(self.block, np.int64)
        start, end = _cat(self.start, np.float64), _cat(self.end, np.float64)
        order = np.argsort(block, kind="stable")  # iterations are in time order
        ptr = np.zeros(nblocks + 1, dtype=np.int64)
        np.cumsum(np.bincount(block, minlength=nblocks), out=ptr[1:])
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        arcs = self._rows(self.arc_rows, rank, order.size, narcs) if self.arcs else None
        flows = self._rows(self.flow_rows, rank, order.size, 0) if self.flows else None
        out = []
        for b in range(nblocks):
            lo, hi = int(ptr[b]), int(ptr[b + 1])
            seg = order[lo:hi]
            a = arcs[lo:hi] if arcs is not None else None
            f = _widened(flows[lo:hi], int(nflows[b])) if flows is not None else None
            out.append((start[seg], end[seg], a, f))
        return out

    @staticmethod
    def _rows(
        rows: list[tuple[IntArray, IntArray, FloatArray]], rank: IntArray, nseg: int, ncols: int
    ) -> Any:
        seg, col, val = (_cat([r[k] for r in rows], t) for k, t in enumerate(_ROW_TYPES))
        new = rank[seg]
        order = np.argsort(new, kind="stable")
        indptr = np.zeros(nseg + 1, dtype=np.int64)
        np.cumsum(np.bincount(new, minlength=nseg), out=indptr[1:])
        width = max(ncols, int(col.max(initial=-1)) + 1)
        return sparse.csr_array((val[order], col[order], indptr), shape=(nseg, width))


_ROW_TYPES = (np.int64, np.int64, np.float64)


def _cat(parts: list[Any], dtype: Any) -> Any:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)


def _widened(matrix: Any, ncols: int) -> Any:
    """``matrix`` with exactly ``ncols`` columns (its entries all lie below)."""
    csr = sparse.csr_array(matrix)
    return sparse.csr_array((csr.data, csr.indices, csr.indptr), shape=(csr.shape[0], ncols))


class _Lockstep:
    """The state of a batch; :meth:`run` advances every block from event to event."""

    def __init__(
        self,
        platform: Platform,
        layout: _Layout,
        size_bits: FloatArray,
        latency_s: FloatArray,
        rtol: float,
        segments: _Segments,
    ) -> None:
        n = int(size_bits.size)
        self.platform, self.layout, self.rtol, self.segments = platform, layout, rtol, segments
        self.remaining = np.array(size_bits, dtype=np.float64)
        self.release = np.zeros(n)
        self.start = np.asarray(latency_s, dtype=np.float64) + 0.0
        self.finish = np.full(n, np.inf)
        self.active = np.zeros(0, dtype=np.int64)
        self.pending = np.arange(n, dtype=np.int64)  # sorted, and stays so
        self.peak = np.zeros(layout.arc_block.size)
        self.t = np.zeros(layout.nblocks)
        self.events = np.zeros(layout.nblocks, dtype=np.int64)
        self.filling = Filling(layout.blocks, rtol)

    def run(self, progress: Callable[[int], None]) -> list[Trace]:
        done, n = 0, self.remaining.size
        while self.active.size or self.pending.size:
            self._event()
            left = self.active.size + self.pending.size
            if n - left > done:
                done = n - left
                progress(done)
        return self._traces()

    def _event(self) -> None:
        """Every block with flows left advances to its next event."""
        lay = self.layout
        rates, arc_rate = self._rates()
        with np.errstate(divide="ignore", invalid="ignore"):
            to_go = np.where(np.isinf(rates), 0.0, self.remaining[self.active] / rates)
        ab = lay.flow_block[self.active]
        t_done = np.full(lay.nblocks, np.inf)
        blocks, low = _block_min(ab, to_go)
        t_done[blocks] = self.t[blocks] + low
        t_start = np.full(lay.nblocks, np.inf)
        blocks, low = _block_min(lay.flow_block[self.pending], self.start[self.pending])
        t_start[blocks] = low
        t_next = np.minimum(t_done, t_start)
        alive = np.zeros(lay.nblocks, dtype=np.bool_)
        alive[ab] = True
        alive[lay.flow_block[self.pending]] = True
        stalled = np.flatnonzero(alive & ~np.isfinite(t_next))
        if stalled.size:
            t = float(self.t[stalled[0]])
            raise SdnMpiError(f"simulation stalled at t={t!r} s: no flow can progress")
        dt = np.where(alive, t_next - self.t, 0.0)
        moving = np.zeros(lay.nblocks, dtype=np.bool_)
        moving[ab] = True
        moving &= dt > 0
        if moving.any():
            self._advance(dt, moving, rates, arc_rate)
        self.t = np.where(alive, t_next, self.t)
        self.events += alive
        tol = self.rtol * dt + _ULPS * np.abs(self.t)
        self._complete(to_go, ab, dt + tol)
        self._activate(tol)

    def _rates(self) -> tuple[FloatArray, FloatArray]:
        """Max-min rates of the transmitting flows, per block, and the arc rates."""
        lay, n = self.layout, self.active.size
        positions, lengths = row_positions(lay.indptr, self.active)
        flow = np.repeat(np.arange(n, dtype=np.int64), lengths)
        arc, weight = lay.arcs[positions], lay.weights[positions]
        self.filling.refill(self.active)
        rates = self.filling.rate[self.active]
        load = np.bincount(arc, weights=weight * rates[flow], minlength=lay.arc_block.size)
        return rates, load.astype(np.float64, copy=False)

    def _advance(
        self, dt: FloatArray, moving: BoolArray, rates: FloatArray, arc_rate: FloatArray
    ) -> None:
        lay = self.layout
        step = dt[lay.flow_block[self.active]]
        sent = np.where(np.isfinite(rates), rates * step, 0.0)
        self.remaining[self.active] -= sent
        on = moving[lay.arc_block]
        self.peak[on] = np.maximum(self.peak[on], arc_rate[on])
        blocks = np.flatnonzero(moving)
        t0 = self.t[blocks]
        self.segments.add(lay, blocks, t0, t0 + dt[blocks], arc_rate, self.active, rates)

    def _complete(self, to_go: FloatArray, block: IntArray, horizon: FloatArray) -> None:
        done = to_go <= horizon[block]
        finished = self.active[done]
        self.filling.leave(finished)
        self.finish[finished] = self.t[block[done]]
        self.remaining[finished] = 0.0
        self.active = self.active[~done]

    def _activate(self, tol: FloatArray) -> None:
        """Flows whose latency is paid start transmitting."""
        block = self.layout.flow_block[self.pending]
        due = self.start[self.pending] <= self.t[block] + tol[block]
        starting = self.pending[due]
        self.filling.arrive(starting)
        self.start[starting] = np.minimum(self.start[starting], self.t[block[due]])
        self.active = np.sort(np.concatenate([self.active, starting]), kind="stable")
        self.pending = self.pending[~due]

    def _traces(self) -> list[Trace]:
        lay, narcs = self.layout, self.platform.narcs
        nflows = np.diff(lay.ptr)
        segs = self.segments.per_block(lay.nblocks, narcs, nflows)
        arc_ptr = np.searchsorted(lay.arc_block, np.arange(lay.nblocks + 1))
        out = []
        for b, (s0, s1, arcs, flows) in enumerate(segs):
            lo, hi = int(lay.ptr[b]), int(lay.ptr[b + 1])
            peak = np.zeros(narcs)
            a0, a1 = int(arc_ptr[b]), int(arc_ptr[b + 1])
            peak[lay.arc_global[a0:a1]] = self.peak[a0:a1]
            rows = slice(lo, hi)
            out.append(
                Trace(
                    self.release[rows],
                    self.start[rows],
                    self.finish[rows],
                    s0,
                    s1,
                    arcs,
                    flows,
                    peak,
                    int(self.events[b]),
                )
            )
        return out


def _block_min(block: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray]:
    """The blocks present in ``block`` (sorted) and the least value of each."""
    if not block.size:
        return block, values
    starts = segment_starts(block)
    low: FloatArray = np.minimum.reduceat(values, starts)
    return block[starts], low


def run_batch(
    platform: Platform,
    incidences: Sequence[Any],
    size_bits: Sequence[FloatArray],
    latency_s: Sequence[FloatArray],
    *,
    timeline: bool = False,
    flow_rates: bool = False,
    rtol: float = RTOL,
    progress: Callable[[int], None] | None = None,
) -> list[Trace]:
    """:func:`sdnmpi.sim.engine.run` of each run (incidence rows, sizes, latencies),
    every flow released at time 0, all runs advanced together; one trace per run.
    ``progress(done)`` hears how many flows have completed, as they do."""
    if not incidences:
        return []
    layout = _Layout(platform, incidences)
    segments = _Segments(timeline, flow_rates)
    sizes = np.concatenate([np.asarray(s, dtype=np.float64) for s in size_bits])
    latency = np.concatenate([np.asarray(x, dtype=np.float64) for x in latency_s])
    loop = _Lockstep(platform, layout, sizes, latency, rtol, segments)
    return loop.run(progress or (lambda _done: None))
