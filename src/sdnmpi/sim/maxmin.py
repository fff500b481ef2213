"""Max-min fair bandwidth sharing, solved by progressive filling (water-filling).

A set of flows crosses a set of arcs of finite capacity.  An allocation of rates
is *max-min fair* when no flow's rate can grow without lowering the rate of a
flow that has a smaller or equal rate.  Progressive filling computes it: raise
the rates of all flows together until some arc saturates, freeze the flows that
cross a saturated arc, and go on with the others (Bertsekas and Gallager, *Data
Networks*, 2nd ed., 1992, section 6.5.2).  The result has a well-known
characterization, used by the property tests: every flow crosses a *bottleneck*
arc, an arc that is saturated and on which no other flow has a larger rate.

This is the sharing model of SimGrid's flow-level network models (Casanova,
Legrand and Quinson, SimGrid: a generic framework for large-scale distributed
experiments, UKSim 2008; Velho and Legrand, Accuracy study and improvement of
network simulation in the SimGrid framework, SIMUTools 2009), without their
per-flow weights: every flow here has weight 1.

Vectorization: flows are the rows of a sparse ``flows x arcs`` incidence matrix
(CSR, entry = how much of the flow's rate the arc carries, 1 for a path).  One
filling stage is a few passes over the non-zeros of the still unfrozen rows:
the arc loads ``A^T 1`` (a ``bincount``), the saturated arcs, the flows that
cross one (``A s``, a gather), and the matrix shrinks to the unfrozen rows.
The number of stages is the number of distinct bottleneck levels, at most the
number of arcs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from sdnmpi.errors import RoutingError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: Relative tolerance under which two fair shares are the same level.
RTOL = 1e-9


def incidence_matrix(arcs: npt.NDArray[np.int64], narcs: int) -> Any:
    """The CSR ``flows x arcs`` incidence matrix of a padded path matrix (-1 = no arc).

    >>> m = incidence_matrix(np.array([[0, 2], [1, -1]]), 3)
    >>> m.toarray().tolist()
    [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    """
    arcs = np.asarray(arcs, dtype=np.int64)
    if arcs.ndim != 2:
        raise RoutingError(f"a padded path matrix is 2-D, got shape {arcs.shape}")
    mask = arcs >= 0
    indptr = np.zeros(arcs.shape[0] + 1, dtype=np.int64)
    np.cumsum(mask.sum(axis=1), out=indptr[1:])
    indices = arcs[mask]
    data = np.ones(indices.size, dtype=np.float64)
    return sparse.csr_array((data, indices, indptr), shape=(arcs.shape[0], narcs))


def maxmin_rates(incidence: Any, capacity: FloatArray, *, rtol: float = RTOL) -> FloatArray:
    """Max-min fair rate of every flow (row of ``incidence``) under arc ``capacity``.

    Flows crossing no arc are unconstrained and get ``inf``.  Rates are in the
    unit of ``capacity``.

    >>> one_link = incidence_matrix(np.array([[0], [0], [0], [0]]), 1)
    >>> maxmin_rates(one_link, np.array([8.0])).tolist()
    [2.0, 2.0, 2.0, 2.0]
    """
    inc = sparse.csr_array(incidence)
    nflows = int(inc.shape[0])
    flow = np.repeat(np.arange(nflows, dtype=np.int64), np.diff(inc.indptr))
    return maxmin_entries(flow, inc.indices, inc.data, nflows, capacity, rtol=rtol)


def maxmin_entries(
    flow: IntArray,
    arc: IntArray,
    weight: FloatArray,
    nflows: int,
    capacity: FloatArray,
    *,
    rtol: float = RTOL,
) -> FloatArray:
    """:func:`maxmin_rates` on the non-zero entries ``(flow, arc, weight)`` of the matrix.

    The event loop calls this form directly: it gathers the entries of the
    transmitting flows without building a scipy object per event.  Each stage
    keeps only the entries of the flows that are still unfrozen.
    """
    rate = np.full(nflows, np.inf)
    frozen = np.zeros(nflows, dtype=np.bool_)
    remaining = np.array(capacity, dtype=np.float64)
    level = 0.0
    while flow.size:
        level, saturated = _fill_stage(arc, weight, remaining, level, rtol)
        hit = flow[saturated[arc]]
        frozen[hit] = True
        rate[hit] = level
        keep = ~frozen[flow]
        flow, arc, weight = flow[keep], arc[keep], weight[keep]
    return rate


def _fill_stage(
    arc: IntArray, weight: FloatArray, remaining: FloatArray, level: float, rtol: float
) -> tuple[float, BoolArray]:
    """Raise all unfrozen flows to the next saturation level (updates ``remaining``).

    Returns the new level and which arcs saturate at it.
    """
    load = np.bincount(arc, weights=weight, minlength=remaining.size)
    used = np.flatnonzero(load > 0)
    share = np.maximum(remaining[used], 0.0) / load[used]
    delta = float(share.min())
    saturated = np.zeros(remaining.size, dtype=np.bool_)
    saturated[used[share <= delta * (1.0 + rtol)]] = True
    remaining[used] -= delta * load[used]
    remaining[saturated] = 0.0
    return level + delta, saturated


def row_positions(indptr: IntArray, rows: IntArray) -> tuple[IntArray, IntArray]:
    """Positions of the CSR entries of ``rows`` (in row order), and each row's length.

    >>> row_positions(np.array([0, 2, 3, 5]), np.array([2, 0]))
    (array([3, 4, 0, 1]), array([2, 2]))
    """
    starts = indptr[rows]
    lengths = indptr[rows + 1] - starts
    if not lengths.size:
        return np.zeros(0, dtype=np.int64), lengths
    offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(int(lengths.sum()), dtype=np.int64) + offsets, lengths


def gather_rows(indptr: IntArray, values: IntArray, rows: IntArray) -> IntArray:
    """Concatenate the CSR segments ``values[indptr[r]:indptr[r+1]]`` of ``rows``.

    >>> gather_rows(np.array([0, 2, 3, 5]), np.array([7, 8, 9, 10, 11]), np.array([2, 0]))
    array([10, 11,  7,  8])
    """
    out: IntArray = values[row_positions(indptr, rows)[0]]
    return out


def segment_starts(keys: IntArray) -> IntArray:
    """Where each run of equal values of a sorted array begins.

    >>> segment_starts(np.array([2, 2, 5, 7, 7, 7])).tolist()
    [0, 2, 3]
    """
    if not keys.size:
        return np.zeros(0, dtype=np.int64)
    out: IntArray = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    return out


def arc_rates(incidence: Any, rates: FloatArray, narcs: int) -> FloatArray:
    """Total rate on each arc: ``incidence^T @ rates`` (flows with no arc ignored)."""
    inc = sparse.csr_array(incidence)
    per_entry = np.repeat(rates, np.diff(inc.indptr)) * inc.data
    out: FloatArray = np.bincount(inc.indices, weights=per_entry, minlength=narcs).astype(
        np.float64
    )
    return out
