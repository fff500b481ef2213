"""The job-level bound: the least ``max_link_busy`` of one routing for all of a job's phases.

Definition
----------
At job granularity a router gives each host pair one path, used in every phase in
which the pair talks (what the controller installs when a job starts), and is
judged by ``max_link_busy(R) = sum_p repeat_p * max_e u_pe(R)``
(:mod:`sdnmpi.core.routing.bound`).  The job-level LP relaxes the one path of pair
``i`` into a *fractional* split ``x_i`` (a unit flow from its source host to its
destination host, through no other host), the same split in every phase::

    minimize   sum_q W_q * t_q
    subject to sum_i b_iq * 8 / capacity_e * x_i(e) <= t_q    for every phase q, arc e

where ``q`` runs over the pattern's phases with phases equal up to a factor merged
(``W_q = sum repeat_p * factor_p``, as in :class:`~sdnmpi.core.routing.candidates.
PairProblem`), and ``b_iq`` are the pair's bytes in ``q``.  Then::

    lp_max_link_busy (per phase)  <=  job_lp_max_link_busy  <=  max_link_busy(R)

for every routing ``R`` at job granularity: restricted to one phase, the ``x_i``
are a feasible flow of that phase's LP, and a path is a 0/1 split.  Where the
job-level bound exceeds the per-phase one, no single routing for the whole job can
reach the per-phase bound, however it is found; where they are equal, a gap left at
job granularity is integrality (one path per pair: the single-path bound) or the
router's.

Solving it (exact reductions first)
-----------------------------------
1. *Components.*  Phases are joined when a host pair talks in both; a phase joined
   to no other is its own LP, ``t_q = lambda_q`` (the per-phase bound).  Only the
   pairs talking in several phases couple anything.
2. *Certificate.*  Splitting every switch's flow evenly over its shortest next hops
   toward the destination's leaf (:func:`~sdnmpi.core.routing.bound.
   uniform_split_bound`) is one fractional routing that depends on no phase's bytes,
   so it is feasible for the job LP.  Where it reaches ``lambda_q`` in every phase
   of a component, that component's optimum is ``sum W_q lambda_q`` (status
   ``certified``).  It always does on fat-trees, leaf-spines and XGFTs with equal
   capacities per level (the even split meets every tree cut's bound there), so on
   those fabrics the job-level LP equals the per-phase bound: the fractional
   relaxation cannot tell one routing for all phases from one per phase.
3. *Classes.*  Pairs whose byte vectors over the phases are proportional
   (``b_i = g_i * beta_c``, ``beta_c`` the vector divided by its gcd) load the arcs
   only through ``sum_i g_i x_i``, a flow with several sources that decomposes back
   into one flow per pair (flow decomposition, Ahuja, Magnanti and Orlin, *Network
   Flows*, 1993, ch. 3).  So each class needs one commodity per destination (or per
   source, on the reversed graph, when fewer), exactly as the per-phase LP
   aggregates by destination; pairs talking in one phase only form that phase's
   class.  With single-homed hosts the LP runs on the switch graph with one
   commodity per (class, destination leaf), and ``t_q`` is at least the host links'
   fixed utilization.  The rest is solved by HiGHS (Huangfu and Hall, 2018) through
   :func:`scipy.optimize.linprog` (status ``optimal``), unless it has more than
   ``max_vars`` variables (status ``too-large``: the bound is not given).

Replicated transfers (:mod:`sdnmpi.core.routing.replication`) ride on a tree of
their own in one phase; a phase holding them is taken at its per-phase bound and
joined to no other, a relaxation: the bound stays valid.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import connected_components

from sdnmpi.core.routing import bound as lp
from sdnmpi.core.routing import multicast_bound as mb
from sdnmpi.core.routing.candidates import HostPhases, attachment, host_phases, phase_key
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.errors import RoutingError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Largest job LP (variables) solved; larger ones leave the bound unknown.
MAX_VARS = 3_000_000
#: LPs with more variables than this are solved by interior point, not simplex.
_IPM_VARS = 4000
_RTOL = 1e-9


@dataclass(frozen=True)
class JobBound:
    """The job-level LP optimum and how it was found.

    ``lp_max_link_busy_s`` is NaN when an LP was ``too-large``; ``per_phase_s`` is
    the per-phase bound it is compared with.  ``status`` is the weakest of the
    components': ``per-phase`` (no pair talks in two phases), ``certified``,
    ``optimal`` or ``too-large``.  ``coupled`` counts components of several
    phases; ``lp_vars``/``lp_rows`` are the largest LP's, ``solve_s`` the LPs'
    total time (NaN without a clock).
    """

    lp_max_link_busy_s: float
    per_phase_s: float
    status: str
    coupled: int
    lp_solves: int
    lp_vars: int
    lp_rows: int
    solve_s: float

    @property
    def ratio(self) -> float:
        """``lp_max_link_busy_s / per_phase_s`` (1.0: one routing loses nothing)."""
        return self.lp_max_link_busy_s / self.per_phase_s if self.per_phase_s > 0 else 1.0


@dataclass(frozen=True)
class _Merged:
    """Merged phases: their host-level pairs, weights, and per-phase bounds."""

    src: IntArray  # one entry per (merged phase, host pair), by phase
    dst: IntArray
    size: IntArray
    q: IntArray
    weight: FloatArray  # W_q
    lam: FloatArray  # lambda_q, seconds (the representative phase's)

    @property
    def nq(self) -> int:
        return int(self.weight.size)


def job_bound(
    fabric: Fabric,
    demands: Demands,
    phases: Sequence[lp.PhaseBound] | None = None,
    *,
    force_lp: bool = False,
    max_vars: int = MAX_VARS,
    clock: lp.Clock | None = None,
) -> JobBound:
    """The job-level LP bound of ``demands`` (see the module docstring).

    ``phases`` are the per-phase bounds (:func:`~sdnmpi.core.routing.bound.
    phase_bounds`), computed here when not given.  ``force_lp`` solves every
    component's LP, one phase or several, certified or not (for tests).
    """
    if phases is None:
        phases = lp.phase_bounds(fabric, demands, single_path=False)
    per_phase = float(sum(ph.repeat * ph.lp_s for ph in phases))
    multicasts, unicast = mb.phase_multicasts(fabric, demands)
    merged = _merge(host_phases(unicast, fabric.nhosts), demands, phases, set(multicasts))
    fixed = per_phase - float(merged.weight @ merged.lam)  # phases with replicated transfers
    comp, ncomp = _components(merged)
    split = None if force_lp else lp.uniform_split_bound(fabric)
    total, statuses, stats = fixed, [], _Stats()
    for c in range(ncomp):
        qs = np.flatnonzero(comp == c)
        value, status = _component(fabric, merged, qs, split, force_lp, max_vars, clock, stats)
        total += value
        statuses.append(status)
    order = ("per-phase", "certified", "optimal", "too-large")
    status = max(statuses, key=order.index, default="per-phase")
    coupled = int((np.bincount(comp, minlength=ncomp) > 1).sum())
    value = math.nan if status == "too-large" else max(total, per_phase)
    return JobBound(
        value, per_phase, status, coupled, stats.solves, stats.vars, stats.rows, stats.secs
    )


@dataclass
class _Stats:
    solves: int = 0
    vars: int = 0
    rows: int = 0
    secs: float = 0.0


def _merge(
    hp: HostPhases, demands: Demands, phases: Sequence[lp.PhaseBound], skip: set[int]
) -> _Merged:
    """Merge phases equal up to a factor (replicated-transfer phases left out)."""
    index: dict[bytes, int] = {}
    weight: list[float] = []
    lam: list[float] = []
    scales: list[int] = []
    parts: list[tuple[IntArray, IntArray, IntArray, int]] = []
    for p in range(demands.nphases):
        s, t, b = hp.phase(p)
        if p in skip or not s.size:
            continue
        key, scale = phase_key(s, t, b)
        q = index.setdefault(key, len(index))
        if q == len(weight):
            weight.append(0.0)
            lam.append(phases[p].lp_s)
            scales.append(scale)
            parts.append((s, t, b, q))
        weight[q] += float(demands.phase_repeat[p]) * scale / scales[q]
    if not parts:
        zero = np.zeros(0, np.int64)
        return _Merged(zero, zero, zero, zero, np.zeros(0), np.zeros(0))
    return _Merged(
        np.concatenate([x[0] for x in parts]),
        np.concatenate([x[1] for x in parts]),
        np.concatenate([x[2] for x in parts]),
        np.concatenate([np.full(x[0].size, x[3], np.int64) for x in parts]),
        np.array(weight),
        np.array(lam),
    )


def _components(m: _Merged) -> tuple[IntArray, int]:
    """Connected components of the merged phases, joined by pairs talking in both."""
    n = m.nq
    if not n:
        return np.zeros(0, np.int64), 0
    pair = np.unique(m.src * (int(m.dst.max(initial=0)) + 1) + m.dst, return_inverse=True)[1]
    graph = coo_matrix((np.ones(pair.size), (m.q, n + pair)), shape=(n + pair.max() + 1,) * 2)
    _, label = connected_components(graph, directed=False)
    _, out = np.unique(label[:n], return_inverse=True)
    return out.astype(np.int64), int(out.max()) + 1


def _component(
    fabric: Fabric,
    m: _Merged,
    qs: IntArray,
    split: Callable[[IntArray, IntArray, lp.Bytes], float] | None,
    force_lp: bool,
    max_vars: int,
    clock: lp.Clock | None,
    stats: _Stats,
) -> tuple[float, str]:
    """``(sum W_q t_q, status)`` of one component of merged phases."""
    lower = float(m.weight[qs] @ m.lam[qs])
    if qs.size == 1 and not force_lp:
        return lower, "per-phase"
    if split is not None:
        start = np.searchsorted(m.q, np.arange(m.nq + 1))  # entries are by phase
        rows = [slice(int(start[q]), int(start[q + 1])) for q in qs.tolist()]
        upper = [split(m.src[r], m.dst[r], m.size[r]) for r in rows]
        if float(m.weight[qs] @ np.array(upper)) <= lower * (1 + _RTOL):
            return lower, "certified"
    sel = np.isin(m.q, qs)
    local = np.full(m.nq, -1, np.int64)
    local[qs] = np.arange(qs.size)
    sub = _Merged(m.src[sel], m.dst[sel], m.size[sel], local[m.q[sel]], m.weight[qs], m.lam[qs])
    t0 = clock() if clock else math.nan
    value, nvars, nrows = _solve(fabric, sub, max_vars)
    stats.secs += clock() - t0 if clock else math.nan
    stats.vars, stats.rows = max(stats.vars, nvars), max(stats.rows, nrows)
    if math.isnan(value):
        return value, "too-large"
    stats.solves += 1
    return max(value, lower), "optimal"


# -- the LP ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Graph:
    """Where commodities flow: nodes, arcs (weight 8/capacity), transit nodes."""

    n: int
    a_src: IntArray
    a_dst: IntArray
    weight: FloatArray
    transit: BoolArray


@dataclass(frozen=True)
class _Classes:
    """Pairs grouped by proportional byte vectors: pair ``i`` ships ``g[i]`` units from
    ``s[i]`` to ``t[i]`` (graph nodes) in class ``cls[i]``, whose phase ``q`` carries
    ``beta[c, q]`` bytes per unit."""

    s: IntArray
    t: IntArray
    g: FloatArray
    cls: IntArray
    beta: FloatArray  # (classes, phases), each row's largest entry 1


def _solve(fabric: Fabric, m: _Merged, max_vars: int) -> tuple[float, int, int]:
    """``(sum W_q t_q, variables, rows)`` of the job LP of merged phases ``m``."""
    graph, s, t, floor = _graph(fabric, m)
    classes = _classes(m, s, t)
    inter = np.flatnonzero(classes.s != classes.t)  # within one leaf: host links only
    by_class = inter[np.argsort(classes.cls[inter], kind="stable")]
    bounds = np.searchsorted(classes.cls[by_class], np.arange(classes.beta.shape[0] + 1))
    blocks = []
    nvars = 0
    for c in range(classes.beta.shape[0]):
        mine = by_class[bounds[c] : bounds[c + 1]]
        if mine.size:
            block = _commodities(graph, classes.s[mine], classes.t[mine], classes.g[mine])
            blocks.append((c, block))
            nvars += block.arc.size
            if nvars > max_vars:
                return math.nan, nvars, 0
    if not blocks:
        return float(m.weight @ floor), 0, 0
    return _assemble(graph, m, classes, blocks, floor)


def _graph(fabric: Fabric, m: _Merged) -> tuple[_Graph, IntArray, IntArray, FloatArray]:
    """The LP's graph, the pairs' end nodes on it, and each phase's fixed floor (s)."""
    weight = 8.0 / np.asarray(fabric.capacity_bps, dtype=np.float64)
    att = attachment(fabric)
    nh = fabric.nhosts
    if att is None:
        transit = np.arange(fabric.nnodes) >= nh
        g = _Graph(fabric.nnodes, fabric.arc_src, fabric.arc_dst, weight, transit)
        return g, m.src, m.dst, np.zeros(m.nq)
    sw = (fabric.arc_src >= nh) & (fabric.arc_dst >= nh)
    n = fabric.nnodes - nh
    g = _Graph(
        n,
        (fabric.arc_src[sw] - nh).astype(np.int64),
        (fabric.arc_dst[sw] - nh).astype(np.int64),
        weight[sw],
        np.ones(n, bool),
    )
    b = m.size.astype(np.float64)
    up = np.bincount(m.q * nh + m.src, weights=b, minlength=m.nq * nh).reshape(m.nq, nh)
    down = np.bincount(m.q * nh + m.dst, weights=b, minlength=m.nq * nh).reshape(m.nq, nh)
    floor = np.maximum(
        (up * weight[att.up_arc][None, :]).max(axis=1, initial=0.0),
        (down * weight[att.down_arc][None, :]).max(axis=1, initial=0.0),
    )
    return g, att.leaf[m.src] - nh, att.leaf[m.dst] - nh, floor


def _classes(m: _Merged, s: IntArray, t: IntArray) -> _Classes:
    """Group host pairs by their byte vector over the phases, up to a factor (its gcd)."""
    nh = int(max(m.src.max(initial=0), m.dst.max(initial=0))) + 1
    order = np.lexsort((m.q, m.src * nh + m.dst))
    key = (m.src * nh + m.dst)[order]
    start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    q, size = m.q[order], m.size[order]
    gcd = np.gcd.reduceat(size, start)
    count = np.diff(np.r_[start, key.size])
    unit = size // np.repeat(gcd, count)
    # a pair talking in one phase is in that phase's class; the others by their vector
    cls = q[start].copy()
    g = gcd.astype(np.float64) * unit[start]
    rows = [np.eye(m.nq)[k] for k in range(m.nq)]
    index: dict[bytes, int] = {}
    for i in np.flatnonzero(count > 1).tolist():
        a, z = int(start[i]), int(start[i] + count[i])
        c = index.setdefault(q[a:z].tobytes() + b"|" + unit[a:z].tobytes(), len(rows))
        if c == len(rows):
            beta = np.zeros(m.nq)
            beta[q[a:z]] = unit[a:z]
            rows.append(beta / beta.max())
        cls[i] = c
        g[i] = float(gcd[i]) * float(unit[a:z].max())
    first = order[start]
    return _Classes(s[first], t[first], g / g.max(), cls, np.array(rows))


@dataclass(frozen=True)
class _Block:
    """One class's commodities: variables (their arcs), conservation rows and supplies."""

    arc: IntArray  # original arc of each variable
    eq_row: IntArray  # local row ids of the conservation entries
    eq_col: IntArray
    eq_val: FloatArray
    rhs: FloatArray  # per local row


def _commodities(graph: _Graph, s: IntArray, t: IntArray, g: FloatArray) -> _Block:
    """Flow variables of ``s -> t`` (``g`` units) aggregated by destination (or by
    source on the reversed graph, when fewer), no flow through non-transit nodes
    other than a commodity's own ends; as in the per-phase LP."""
    n, a_src, a_dst = graph.n, graph.a_src, graph.a_dst
    if np.unique(t).size > np.unique(s).size:
        a_src, a_dst, s, t = a_dst, a_src, t, s
    terminals, k_of = np.unique(t, return_inverse=True)
    nk = terminals.size
    supply = np.bincount(k_of * n + s, weights=g, minlength=nk * n).reshape(nk, n)
    term = terminals[:, None]
    allowed = a_src[None, :] != term
    allowed &= graph.transit[a_dst][None, :] | (a_dst[None, :] == term)
    allowed &= graph.transit[a_src][None, :] | (supply[:, a_src] > 0)
    k, e = np.nonzero(allowed)
    var = np.arange(k.size)
    rows = np.concatenate([k * n + a_src[e], k * n + a_dst[e]])
    cols = np.concatenate([var, var])
    vals = np.concatenate([np.ones(k.size), -np.ones(k.size)])
    keep = rows % n != terminals[rows // n]
    rows, cols, vals = rows[keep], cols[keep], vals[keep]
    need = np.flatnonzero(supply.reshape(-1) > 0)
    need = need[need % n != terminals[need // n]]
    ids, row_of = np.unique(np.concatenate([rows, need]), return_inverse=True)
    return _Block(
        e.astype(np.int64), row_of[: rows.size], cols, vals, supply.reshape(-1)[ids].copy()
    )


def _assemble(
    graph: _Graph,
    m: _Merged,
    classes: _Classes,
    blocks: list[tuple[int, _Block]],
    floor: FloatArray,
) -> tuple[float, int, int]:
    """Stack the commodity blocks, add ``t_q`` and the capacity rows, solve."""
    wmin = float(graph.weight.min())
    nq = m.nq
    eq_r, eq_c, eq_v, rhs = [], [], [], []
    cap_q, cap_e, cap_col, cap_val = [], [], [], []
    col = row = 0
    for c, blk in blocks:
        eq_r.append(blk.eq_row + row)
        eq_c.append(blk.eq_col + col)
        eq_v.append(blk.eq_val)
        rhs.append(blk.rhs)
        for q in np.flatnonzero(classes.beta[c] > 0).tolist():
            cap_q.append(np.full(blk.arc.size, q, np.int64))
            cap_e.append(blk.arc)
            cap_col.append(np.arange(blk.arc.size) + col)
            cap_val.append(classes.beta[c, q] * graph.weight[blk.arc] / wmin)
        col += blk.arc.size
        row += blk.rhs.size
    nv = col
    a_eq = coo_matrix(
        (np.concatenate(eq_v), (np.concatenate(eq_r), np.concatenate(eq_c))), shape=(row, nv + nq)
    )
    cells, cap_row = np.unique(
        np.concatenate(cap_q) * graph.a_src.size + np.concatenate(cap_e), return_inverse=True
    )
    a_ub = coo_matrix(
        (
            np.r_[np.concatenate(cap_val), -np.ones(cells.size)],
            (
                np.r_[cap_row, np.arange(cells.size)],
                np.r_[np.concatenate(cap_col), nv + cells // graph.a_src.size],
            ),
        ),
        shape=(cells.size, nv + nq),
    )
    scale = float(m.size.max()) * wmin  # seconds per LP unit of t_q (g: bytes / max)
    cost = np.r_[np.zeros(nv), m.weight / m.weight.max()]
    lo = np.r_[np.zeros(nv), floor / scale]
    res = linprog(
        cost,
        A_ub=csr_matrix(a_ub),
        b_ub=np.zeros(cells.size),
        A_eq=csr_matrix(a_eq),
        b_eq=np.concatenate(rhs),
        bounds=np.stack([lo, np.full(nv + nq, np.inf)], axis=1),
        method="highs-ipm" if nv > _IPM_VARS else "highs-ds",
    )
    if res.status != 0:
        raise RoutingError(f"job-level LP ({nv} variables) failed: {res.message}")
    t_q = res.x[nv:] * scale
    return float(m.weight @ np.maximum(t_q, floor)), nv + nq, row + cells.size
