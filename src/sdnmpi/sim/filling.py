"""Progressive filling of many independent blocks at once, resumed where a change starts.

The batched event loop (:mod:`sdnmpi.sim.batch`) recomputes the max-min rates
of its transmitting flows at every event.  Done from scratch as in
:func:`sdnmpi.sim.maxmin.maxmin_entries`, a phase of 16,000 flows with a few
hundred distinct fair shares costs a few hundred filling stages per event, and
that is where a dense phase's time goes.  Two observations make it cheaper,
without changing a single bit of the rates:

* *Blocks.*  Independent runs (phases) have disjoint arcs; every stage raises
  each block to its own next level with the operations of
  :func:`~sdnmpi.sim.maxmin._fill_stage` on that block alone.  Arc loads are
  kept by subtracting the flows a stage freezes (exact: integer weights), so a
  stage costs the arcs still in use, not every unfrozen entry.
* *Resuming.*  When flows leave (complete), every stage below the first stage
  s at which a leaving flow froze is unchanged: before s a leaving flow was
  unfrozen, so none of its arcs was the least share (it would have frozen), and
  without it those arcs only have more room; the same arcs saturate at the same
  levels and freeze the same flows.  So flows frozen before s keep their rates,
  and the filling restarts at stage s from the level of stage s-1.  The arcs
  still in use at s are put in the state a filling without the leaving flows
  would reach, by replaying their subtractions ``capacity - delta_0 load_0 -
  ... - delta_(s-1) load_(s-1)`` in order with the loads counted without them:
  the same floating-point operations as a filling from scratch.  Arriving flows
  restart their block at stage 0.

In a dense phase flows tend to complete from the top level down, so most
events refill a few stages.  The tests compare every rate with a filling from
scratch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sdnmpi.errors import RoutingError
from sdnmpi.sim.maxmin import RTOL, row_positions

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class Blocks:
    """Independent blocks of flows and arcs.

    Flow ``i`` (block ``flow_block[i]``, non-decreasing) crosses arcs
    ``arc[indptr[i]:indptr[i+1]]`` with those ``weight`` s; arc ``a`` belongs to
    block ``arc_block[a]`` (non-decreasing) and has ``capacity[a]``.  ``by_arc``
    lists the entries of each arc (CSC: flows ``by_arc_flow`` and weights
    ``by_arc_weight`` from ``by_arc_ptr[a]`` to ``by_arc_ptr[a+1]``, flows in
    increasing order).
    """

    indptr: IntArray
    arc: IntArray
    weight: FloatArray
    flow_block: IntArray
    arc_block: IntArray
    capacity: FloatArray
    by_arc_ptr: IntArray
    by_arc_flow: IntArray
    by_arc_weight: FloatArray

    @property
    def nflows(self) -> int:
        """Number of flows."""
        return int(self.indptr.size - 1)

    @property
    def nblocks(self) -> int:
        """Number of blocks (one more than the last block index)."""
        last = max(self.flow_block[-1:].tolist() + self.arc_block[-1:].tolist(), default=-1)
        return int(last) + 1

    @classmethod
    def build(
        cls,
        indptr: IntArray,
        arc: IntArray,
        weight: FloatArray,
        flow_block: IntArray,
        arc_block: IntArray,
        capacity: FloatArray,
    ) -> Blocks:
        """The blocks, with the per-arc entries built here.  Weights must be
        integers, so that loads kept by subtraction are exact."""
        if not np.array_equal(weight, np.round(weight)):
            raise RoutingError("batched max-min needs integer incidence weights")
        entry_flow = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))
        order = np.argsort(arc, kind="stable")
        ptr = np.zeros(capacity.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(arc, minlength=capacity.size), out=ptr[1:])
        return cls(
            indptr,
            arc,
            weight,
            flow_block,
            arc_block,
            capacity,
            ptr,
            entry_flow[order],
            weight[order],
        )


class Filling:
    """Max-min fair rates of the live flows of :class:`Blocks`, kept across changes.

    :meth:`arrive` and :meth:`leave` change the live flows; :meth:`refill`
    recomputes what they changed; :attr:`rate` holds every live flow's rate.

    >>> b = Blocks.build(np.arange(6), np.array([0, 0, 1, 1, 1]), np.ones(5),
    ...                  np.array([0, 0, 1, 1, 1]), np.array([0, 1]), np.array([8.0, 9.0]))
    >>> f = Filling(b)
    >>> f.arrive(np.arange(5)); _ = f.refill(); f.rate.tolist()  # 2 then 3 flows
    [4.0, 4.0, 3.0, 3.0, 3.0]
    >>> f.leave(np.array([4])); f.refill().tolist(), f.rate[2:4].tolist()
    ([2, 3], [4.5, 4.5])
    """

    def __init__(self, blocks: Blocks, rtol: float = RTOL) -> None:
        n, nb = blocks.nflows, blocks.nblocks
        self.blocks, self.rtol = blocks, rtol
        self.live = np.zeros(n, dtype=np.bool_)
        self.rate = np.full(n, np.inf)
        self.stage = np.full(n, -1, dtype=np.int64)  # the stage each live flow froze at
        self.nstages = np.zeros(nb, dtype=np.int64)
        self.resume = np.full(nb, np.iinfo(np.int64).max, dtype=np.int64)
        self.delta = np.zeros((nb, 8))  # each block's stage increments
        self.level = np.zeros((nb, 8))  # and levels after each stage

    def arrive(self, flows: IntArray) -> None:
        """``flows`` start transmitting: their blocks refill from stage 0."""
        self.live[flows] = True
        self.stage[flows] = -1
        self.resume[self.blocks.flow_block[flows]] = 0

    def leave(self, flows: IntArray) -> None:
        """``flows`` stop: their blocks refill from the first stage one of them froze at."""
        self.live[flows] = False
        self.rate[flows] = np.inf
        np.minimum.at(self.resume, self.blocks.flow_block[flows], self.stage[flows])

    def refill(self, active: IntArray | None = None) -> IntArray:
        """Recompute the rates that arrivals and departures changed; returns the
        flows refilled (their rate may be the same as before).

        ``active`` (sorted) are the live flows, if the caller has them at hand.
        """
        b = self.blocks
        if active is None:
            active = np.flatnonzero(self.live)
        blk = b.flow_block[active]
        start = np.maximum(np.minimum(self.resume, self.nstages), 0)
        begin = start[blk]
        redo = active[(self.stage[active] >= begin) | (self.stage[active] < 0)]
        self.resume[:] = np.iinfo(np.int64).max
        if not redo.size:
            return redo
        positions, _ = row_positions(b.indptr, redo)
        load: FloatArray = np.bincount(
            b.arc[positions], weights=b.weight[positions], minlength=b.arc_block.size
        ).astype(np.float64, copy=False)
        used = np.flatnonzero(load > 0)
        remaining = np.array(b.capacity, dtype=np.float64)
        self._replay(used, start, remaining)
        self._stages(redo, used, load, remaining, start)
        return redo

    def _replay(self, used: IntArray, start: IntArray, remaining: FloatArray) -> None:
        """Set ``remaining`` of the ``used`` arcs of blocks resuming at a stage s > 0
        to ``capacity - delta_0 load_0 - ... - delta_(s-1) load_(s-1)``, in order."""
        b = self.blocks
        arcs = used[start[b.arc_block[used]] > 0]
        if not arcs.size:
            return
        s = start[b.arc_block[arcs]]
        positions, lengths = row_positions(b.by_arc_ptr, arcs)
        flow = b.by_arc_flow[positions]
        local = np.repeat(np.arange(arcs.size, dtype=np.int64), lengths)
        on = self.live[flow]
        flow, local, weight = flow[on], local[on], b.by_arc_weight[positions][on]
        width = int(s.max())
        last = np.minimum(self.stage[flow], s[local] - 1)  # unfrozen through stage `last`
        count = np.bincount(local * width + last, weights=weight, minlength=arcs.size * width)
        load = np.cumsum(count.reshape(arcs.size, width)[:, ::-1], axis=1)[:, ::-1]
        steps = self.delta[b.arc_block[arcs], :width] * load
        steps[np.arange(width)[None, :] >= s[:, None]] = 0.0
        columns = np.concatenate([b.capacity[arcs][:, None], steps], axis=1)
        remaining[arcs] = np.subtract.accumulate(columns, axis=1)[:, -1]

    def _stages(
        self,
        redo: IntArray,
        used: IntArray,
        load: FloatArray,
        remaining: FloatArray,
        start: IntArray,
    ) -> None:
        """Fill the ``redo`` flows stage by stage from each block's ``start`` stage."""
        b = self.blocks
        unfrozen = np.zeros(b.nflows, dtype=np.bool_)
        unfrozen[redo] = True
        stage = start.copy()
        level = np.where(start > 0, self._at(self.level, start - 1), 0.0)
        while used.size:
            saturated, delta = _fill_blocks(used, load, remaining, level, b.arc_block, self.rtol)
            moved = np.flatnonzero(np.isfinite(delta))
            self._record(moved, stage[moved], delta[moved], level[moved])
            crossing = b.by_arc_flow[row_positions(b.by_arc_ptr, saturated)[0]]
            hit = np.unique(crossing[unfrozen[crossing]])
            unfrozen[hit] = False
            hb = b.flow_block[hit]
            self.rate[hit] = level[hb]
            self.stage[hit] = stage[hb]
            stage[moved] += 1
            freed, _ = row_positions(b.indptr, hit)
            np.subtract.at(load, b.arc[freed], b.weight[freed])
            used = used[load[used] > 0]
        touched = np.unique(b.flow_block[redo])
        self.nstages[touched] = stage[touched]

    @staticmethod
    def _at(table: FloatArray, column: IntArray) -> FloatArray:
        out: FloatArray = table[np.arange(column.size), np.maximum(column, 0)]
        return out

    def _record(
        self, blocks: IntArray, stage: IntArray, delta: FloatArray, level: FloatArray
    ) -> None:
        """Keep each block's stage increment and level (the columns grow as needed)."""
        if stage.size and int(stage.max()) >= self.delta.shape[1]:
            grow = max(self.delta.shape[1], int(stage.max()) + 1)
            pad = np.zeros((self.delta.shape[0], grow))
            self.delta = np.concatenate([self.delta, pad], axis=1)
            self.level = np.concatenate([self.level, pad], axis=1)
        self.delta[blocks, stage] = delta
        self.level[blocks, stage] = level


def _fill_blocks(
    used: IntArray,
    load: FloatArray,
    remaining: FloatArray,
    level: FloatArray,
    arc_block: IntArray,
    rtol: float,
) -> tuple[IntArray, FloatArray]:
    """:func:`~sdnmpi.sim.maxmin._fill_stage` in every block with arcs in ``used``
    (updates ``remaining`` and ``level``); returns the arcs that saturate and each
    block's increment (``inf`` for a block without used arcs)."""
    share = np.maximum(remaining[used], 0.0) / load[used]
    block = arc_block[used]
    delta = np.full(level.size, np.inf)
    np.minimum.at(delta, block, share)
    each = delta[block]
    saturated = used[share <= each * (1.0 + rtol)]
    remaining[used] -= each * load[used]
    remaining[saturated] = 0.0
    level += np.where(np.isfinite(delta), delta, 0.0)
    return saturated, delta
