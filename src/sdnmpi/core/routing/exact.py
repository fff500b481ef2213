"""Exact polish of :mod:`sdnmpi.core.routing.ours`: optimal parts, and MILPs on small ones.

Host pairs that share no phase route independently; a part already at its
single-path lower bound is optimal, and a small remaining part is solved as a
mixed-integer program by HiGHS (Huangfu and Hall, Math. Prog. Comp. 10, 2018).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sdnmpi.core.routing.bound import single_path_bound
from sdnmpi.core.routing.candidates import PairProblem
from sdnmpi.core.routing.model import Fabric

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Most binaries of one component's MILP, of all MILPs of a routing, and
#: branch-and-bound nodes per MILP.
MILP_BINARIES = 1500
MILP_TOTAL = 6000
MILP_NODES = 100
#: Largest phase (host pairs) whose single-path bound the exact polish computes.
BOUND_PAIRS = 50_000


def polish(
    prob: PairProblem, lower: PhaseLowerBound, choice: IntArray
) -> tuple[IntArray, dict[str, int]]:
    """Solve small independent parts exactly (MILP); keep what beats the search.

    Host pairs that share no merged phase route independently, so the
    objective splits over the connected components of the pair-phase graph.
    A component whose every phase peaks at its single-path lower bound (host
    links, widest path, cut pigeonhole: :func:`~sdnmpi.core.routing.bound.
    single_path_bound`) is optimal already.  Each other one is solved as a
    mixed-integer program (one binary per pair and candidate, one peak per
    phase; HiGHS branch-and-bound with a node limit, so the result is
    deterministic) when it has at most :data:`MILP_BINARIES` binaries.
    """
    stats = {"components": 0, "at_bound": 0, "optimal": 0, "improved": 0, "too_large": 0}
    movable = prob.allowed > 1
    if not movable.any():
        return choice, stats
    pair_comp, phase_comp, ncomp = _components(prob)
    stats["components"] = ncomp
    choice = choice.copy()
    loads = prob.loads(choice)
    budget = MILP_TOTAL
    for c in range(ncomp):
        qs = np.flatnonzero(phase_comp == c)
        pairs = np.flatnonzero((pair_comp == c) & movable)
        peak = loads[qs].max(axis=1)
        if not pairs.size or lower.reached(qs, peak):
            stats["at_bound"] += 1
            continue
        nbin = int(prob.allowed[pairs].sum())
        if nbin > min(MILP_BINARIES, budget):
            stats["too_large"] += 1
            continue
        budget -= nbin
        rows, optimal = _milp(prob, pairs, qs, choice, np.maximum(peak, 1e-300))
        stats["optimal"] += optimal
        if rows is None:
            continue
        trial = choice.copy()
        trial[pairs] = rows
        trial_loads = prob.loads(trial)
        if prob.repeat[qs] @ trial_loads[qs].max(axis=1) < (prob.repeat[qs] @ peak) * (1 - 1e-9):
            choice, loads = trial, trial_loads
            stats["improved"] += 1
    return choice, stats


class PhaseLowerBound:
    """Per merged phase: the host links' load, raised to the single-path bound when
    the phase is small enough (:data:`BOUND_PAIRS`) and the peak is above it."""

    def __init__(self, prob: PairProblem, fabric: Fabric) -> None:
        self.p = prob
        self.fixed = prob.fixed_loads.max(axis=1)
        self.bound = single_path_bound(fabric)
        self.known: dict[int, float] = {}

    def reached(self, qs: IntArray, peak: FloatArray) -> bool:
        """Whether every phase of ``qs`` peaks at its lower bound."""
        pairs = zip(qs.tolist(), peak.tolist(), strict=True)
        return all(m <= self._lower(q, m) * (1 + 1e-9) for q, m in pairs)

    def _lower(self, q: int, peak: float) -> float:
        p = self.p
        a, z = int(p.qptr[q]), int(p.qptr[q + 1])
        if peak <= self.fixed[q] or z - a > BOUND_PAIRS:
            return float(self.fixed[q])
        if q not in self.known:
            pairs = p.qpair[a:z]
            sp = self.bound(p.pair_src[pairs], p.pair_dst[pairs], p.qw[a:z])
            self.known[q] = max(float(self.fixed[q]), sp)
        return self.known[q]


def _components(prob: PairProblem) -> tuple[IntArray, IntArray, int]:
    """Connected components of the graph joining each pair to its merged phases."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = prob.npairs + prob.nq
    entry_pair = np.repeat(np.arange(prob.npairs), np.diff(prob.ptr))
    graph = coo_matrix((np.ones(entry_pair.size), (entry_pair, prob.npairs + prob.q)), (n, n))
    ncomp, label = connected_components(graph, directed=False)
    return label[: prob.npairs], label[prob.npairs :], int(ncomp)


def _milp(
    prob: PairProblem, pairs: IntArray, qs: IntArray, choice: IntArray, peak: FloatArray
) -> tuple[IntArray | None, bool]:
    """Best rows of ``pairs`` for the phases ``qs`` (whose peaks scale the model)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    empty = prob.cand.shape[0] - 1
    count = prob.allowed[pairs]
    var_pair = np.repeat(np.arange(pairs.size), count)
    var_row = (
        prob.first[pairs][var_pair]
        + np.arange(var_pair.size)
        - np.repeat(np.cumsum(count) - count, count)
    )
    nv, nq, na = var_pair.size, qs.size, prob.narcs
    local = np.full(prob.nq, -1, np.int64)
    local[qs] = np.arange(nq)
    base = prob.loads(np.where(np.isin(np.arange(prob.npairs), pairs), empty, choice))[qs]
    base /= peak[:, None]
    # nonzeros: every (variable, phase entry of its pair, arc of its row)
    lo, hi = prob.ptr[pairs][var_pair], prob.ptr[pairs + 1][var_pair]
    var_of_entry = np.repeat(np.arange(nv), hi - lo)
    entry = np.arange(var_of_entry.size) - np.repeat(np.cumsum(hi - lo) - (hi - lo), hi - lo)
    entry += lo[var_of_entry]
    arcs = prob.cand[var_row[var_of_entry]]
    ok = arcs >= 0
    q_loc = np.broadcast_to(local[prob.q[entry]][:, None], arcs.shape)[ok]
    coef = (prob.w[entry][:, None] * prob.inv_c[np.where(ok, arcs, 0)])[ok] / peak[q_loc]
    cells, row = np.unique(q_loc * na + arcs[ok], return_inverse=True)
    var_col = np.broadcast_to(var_of_entry[:, None], arcs.shape)[ok]
    cap = coo_matrix(
        (
            np.r_[coef, -np.ones(cells.size)],
            (np.r_[row, np.arange(cells.size)], np.r_[var_col, nv + cells // na]),
        ),
        shape=(cells.size, nv + nq),
    )
    one = coo_matrix((np.ones(nv), (var_pair, np.arange(nv))), shape=(pairs.size, nv + nq))
    weight = prob.repeat[qs] * peak
    res = milp(
        np.r_[np.zeros(nv), weight / weight.sum()],
        integrality=np.r_[np.ones(nv), np.zeros(nq)],
        bounds=Bounds(np.r_[np.zeros(nv), base.max(axis=1)], np.r_[np.ones(nv), np.ones(nq)]),
        constraints=[
            LinearConstraint(cap.tocsr(), -np.inf, -base.reshape(-1)[cells]),
            LinearConstraint(one.tocsr(), 1, 1),
        ],
        options={"node_limit": MILP_NODES},
    )
    if res.x is None:
        return None, False
    x = res.x[:nv]
    best = np.maximum.reduceat(x, np.cumsum(count) - count)
    hit = np.flatnonzero(x >= best[var_pair] - 0.5)
    _, first = np.unique(var_pair[hit], return_index=True)
    return var_row[hit[first]], bool(res.status == 0)
