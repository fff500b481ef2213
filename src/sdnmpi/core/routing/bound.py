"""Lower bounds on link congestion, and the link-utilization metric of the project.

Definitions (every router, benchmark and report uses these)
-----------------------------------------------------------
For a routing ``R`` of demands with phases ``p`` (each repeated ``repeat_p``
times), ``bytes_e(p)`` is the sum of the bytes of the phase-``p`` flows whose
path uses arc ``e`` (one direction of a link, ``capacity_e`` bit/s).

* ``max_link_busy_p(R) = max_e 8 * bytes_e(p) / capacity_e``, in seconds: the
  phase's load over capacity with its bytes spread over one second (a unitless
  utilization), which equals the seconds the busiest link needs to carry them.
* ``max_link_busy(R) = sum_p repeat_p * max_link_busy_p(R)``.
* ``lambda_p``: the optimum of the fractional minimum-congestion multicommodity
  flow LP of phase ``p`` (below): the least ``max_link_busy_p`` of any routing,
  even one splitting flows over many paths and changing paths every phase.
* ``lp_max_link_busy = sum_p repeat_p * lambda_p <= max_link_busy(R)`` for all R.
* ``nic_p = max over hosts h of 8 * (bytes h sends or receives in p) /
  (capacity of h's links in that direction) <= lambda_p``.
* ``latency_p``: the largest, over phase ``p``'s flows, of the least latency of
  any path of that flow (sum of ``latency_s`` along it, no host transit).
* ``lower_bound_s = sum_p repeat_p * max(lambda_p, latency_p)``: no routing
  drains the pattern faster, whatever the transport does.
* ``single_path_p >= lambda_p``: a lower bound on ``max_link_busy_p`` of any
  *unsplittable* routing (one path per host pair), from the widest single path
  of each pair and a pigeonhole argument on every tree cut (see
  :func:`phase_bounds`); ``single_path_max_link_busy = sum_p repeat_p *
  single_path_p``.  Where it exceeds ``lambda_p`` no single-path router can reach
  ``lambda_p``: the gap is integrality, not the router.

The LP (per phase)
------------------
Minimize ``lambda`` subject to: for every arc ``e``, ``8 * sum_k x_{k,e} /
capacity_e <= lambda``; flow conservation of every commodity ``k`` at every
node; every host pair's bytes shipped; no flow through a host (a host only
sources its own bytes and sinks bytes destined to it).  Commodities are
aggregated by destination (or by source, on the reversed graph, when fewer
distinct sources), the multicommodity flow formulation of Ahuja, Magnanti and
Orlin (*Network Flows*, 1993, ch. 17).  When every host hangs off one switch
its first and last arcs are forced, so the LP runs on the switch graph with one
commodity per destination *leaf* (exact: a path to host ``t`` ends with the
forced arc from ``t``'s leaf) and ``lambda_p`` is the larger of its optimum and
the host links' fixed utilization.  This gives ``leaves x switch-arcs``
variables instead of ``hosts x arcs``.  The matrices are built with
:mod:`scipy.sparse` and solved by HiGHS (Huangfu and Hall, 2018) through
:func:`scipy.optimize.linprog`.  HiGHS's default feasibility tolerance (1e-7)
applies: ``lambda_p`` may exceed the exact optimum by that relative amount.

Replicated transfers (a phase marked as a switch-replicated broadcast,
:mod:`sdnmpi.core.routing.replication`) load each arc of their tree once:
``max_link_busy`` counts one entry per (transfer, arc), and such a phase's
``lambda_p``, NIC and single-path bounds are those of
:mod:`sdnmpi.core.routing.multicast_bound` (the multicast flow relaxation).

Most phases need no LP: splitting every node's flow evenly over its shortest
next hops is a feasible routing whose congestion is an upper bound on
``lambda_p``, and the most bytes crossing a tree cut (the hosts below a switch
with every switch whose hosts are all among them) over the cut's capacity, or
the NIC bound, a lower bound; when the two meet (fat-trees, leaf-spines, XGFTs
with equal capacities per level) they are ``lambda_p`` (status
``certified``), else the LP is solved (``optimal``).  ``force_lp=True``
always solves it.  Phases whose host-level matrices are equal up to a factor
share one solve (``lambda`` is linear in the demands; status ``cached``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse import vstack as sparse_vstack
from scipy.sparse.csgraph import dijkstra, shortest_path

from sdnmpi.core.routing import multicast_bound as mb
from sdnmpi.core.routing.candidates import (
    Attachment,
    attachment,
    host_phases,
    phase_key,
)
from sdnmpi.core.routing.cuts import DENSE_CELLS as _DENSE_CELLS
from sdnmpi.core.routing.cuts import Cuts, tree_cuts, widest
from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.core.routing.paths import memo
from sdnmpi.core.routing.replication import load_entries
from sdnmpi.errors import RoutingError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Clock = Callable[[], float]
Bytes = IntArray | FloatArray

#: LPs with more variables than this are solved by interior point, not simplex.
_IPM_VARS = 4000
#: Leaf pairs times switch arcs above which the even split is computed per call, not
#: from fractions kept per topology (fat_tree(16): 67 million).
_FRACTION_CELLS = 200_000_000


# -- the metric ------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkBusy:
    """``max_link_busy`` of a routing: per phase (seconds), its busiest arc, the total."""

    per_phase_s: FloatArray
    busiest_arc: IntArray
    repeat: IntArray
    total_s: float


def max_link_busy(fabric: Fabric, demands: Demands, routing: Routing) -> LinkBusy:
    """``max_e 8*bytes_e(p)/capacity_e`` per phase and its repeat-weighted sum.

    >>> from sdnmpi.core.generators import leaf_spine
    >>> f = Fabric(leaf_spine(1, 2, 1, host_bps=8.0, uplink_bps=4.0))
    >>> d = Demands.all_pairs(f, size_bytes=2)
    >>> r = Routing.from_paths("x", [[0, 4, 7, 3], [2, 6, 5, 1]])
    >>> max_link_busy(f, d, r).total_s  # 2 bytes = 16 bits over a 4 bit/s uplink
    4.0
    """
    nph, na = demands.nphases, fabric.narcs
    flow, arc = load_entries(demands, routing)
    key = demands.phase[flow]  # a copy: in place from here (a million flows: 40 MB each)
    key *= na
    key += arc
    weight = demands.size_bytes[flow].astype(np.float64)
    del flow, arc
    inv_c = 8.0 / fabric.capacity_bps
    per_phase = np.zeros(nph)
    busiest = np.full(nph, -1, np.int64)
    if nph * na <= _DENSE_CELLS:
        table = np.bincount(key, weights=weight, minlength=nph * na).reshape(nph, na) * inv_c
        busiest = np.argmax(table, axis=1).astype(np.int64) if na else busiest
        per_phase = table[np.arange(nph), busiest] if na else per_phase
    elif key.size:
        cells, inverse = np.unique(key, return_inverse=True)
        util = np.bincount(inverse, weights=weight) * inv_c[cells % na]
        order = np.lexsort((-util, cells // na))
        first = order[np.r_[True, np.diff(cells[order] // na) != 0]]
        per_phase[cells[first] // na] = util[first]
        busiest[cells[first] // na] = cells[first] % na
    per_phase[busiest < 0] = 0.0
    repeat = np.asarray(demands.phase_repeat, dtype=np.int64)
    return LinkBusy(per_phase, busiest, repeat, float(per_phase @ repeat))


# -- bounds ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseBound:
    """Bounds of one phase (seconds).

    ``status`` tells how ``lp_s`` was found: ``optimal`` (LP solved, of
    ``lp_vars`` variables and ``lp_rows`` rows, in ``solve_s`` seconds when a
    clock is given), ``certified`` (uniform split meets a cut bound), ``cached``
    (a proportional earlier phase), ``host-links`` (no flow leaves its leaf)
    or ``empty``.
    """

    phase: int
    label: str
    repeat: int
    lp_s: float
    nic_s: float
    latency_s: float
    single_path_s: float
    status: str
    lp_vars: int
    lp_rows: int
    solve_s: float


@dataclass(frozen=True)
class PatternBound:
    """Repeat-weighted sums of the phase bounds (see the module docstring)."""

    phases: tuple[PhaseBound, ...]
    lp_max_link_busy_s: float
    nic_max_link_busy_s: float
    single_path_max_link_busy_s: float
    lower_bound_s: float
    lp_solves: int


def phase_bounds(
    fabric: Fabric,
    demands: Demands,
    *,
    single_path: bool = True,
    force_lp: bool = False,
    clock: Clock | None = None,
) -> list[PhaseBound]:
    """LP, NIC, latency and single-path bounds of every phase.

    ``clock`` (e.g. ``time.perf_counter``) times each LP solve; without it
    ``solve_s`` is NaN.  ``single_path=False`` skips the single-path bound
    (then equal to ``lp_s``).

    The single-path bound of a phase is the largest of ``lambda_p``; ``8 *
    bytes / widest`` for each host pair, where ``widest`` is the largest
    bottleneck capacity of any single path joining the pair; and, for every
    cut ``S`` of the tree (the hosts below a switch together with every switch
    whose hosts are all among them) and each direction, a pigeonhole bound:
    the pairs crossing the cut are jobs, its ``m`` arcs machines, one path puts
    all of a pair's bytes on at least one of them, so among the ``j*m + 1``
    largest jobs ``j + 1`` share an arc.
    """
    ctx = _Context(fabric)
    hp = host_phases(demands, fabric.nhosts)
    latency = ctx.pair_latency(hp.src, hp.dst)
    multicasts, unicast = mb.phase_multicasts(fabric, demands)
    uni = host_phases(unicast, fabric.nhosts) if multicasts else hp
    cache: dict[bytes, tuple[float, float, str, int, int, float]] = {}
    out = []
    for p in range(demands.nphases):
        s, t, b = uni.phase(p)
        a, z = int(hp.start[p]), int(hp.start[p + 1])
        if p in multicasts:  # replicated transfers: each tree arc loaded once
            out.append(_multicast_bound(ctx, demands, p, (s, t, b), multicasts[p], latency[a:z]))
            continue
        key, scale = phase_key(s, t, b)
        status = "cached" if key in cache else ""
        if key not in cache:
            cache[key] = _solve_phase(ctx, s, t, b // scale, single_path, force_lp, clock)
        lam, sp, how, nvars, nrows, secs = cache[key]
        out.append(
            PhaseBound(
                p,
                demands.phase_labels[p],
                int(demands.phase_repeat[p]),
                lam * scale,
                ctx.nic(s, t, b),
                float(latency[a:z].max(initial=0.0)),
                sp * scale,
                status or how,
                nvars,
                nrows,
                math.nan if status else secs,
            )
        )
    return out


def _multicast_bound(
    ctx: _Context,
    demands: Demands,
    p: int,
    unicast: tuple[IntArray, IntArray, IntArray],
    multicasts: list[mb.Multicast],
    latency: FloatArray,
) -> PhaseBound:
    lam, sp, nic, status, nvars = mb.multicast_phase(
        ctx.fabric, *unicast, multicasts, ctx.single_path
    )
    label, repeat = demands.phase_labels[p], int(demands.phase_repeat[p])
    lat = float(latency.max(initial=0.0))
    return PhaseBound(p, label, repeat, lam, nic, lat, sp, status, nvars, 0, math.nan)


def pattern_bound(
    fabric: Fabric,
    demands: Demands,
    *,
    single_path: bool = True,
    force_lp: bool = False,
    clock: Clock | None = None,
) -> PatternBound:
    """The pattern's ``lp_max_link_busy``, ``lower_bound_s`` and the other sums."""
    phases = phase_bounds(fabric, demands, single_path=single_path, force_lp=force_lp, clock=clock)

    def total(values: list[float]) -> float:
        return float(sum(ph.repeat * v for ph, v in zip(phases, values, strict=True)))

    return PatternBound(
        tuple(phases),
        total([ph.lp_s for ph in phases]),
        total([ph.nic_s for ph in phases]),
        total([ph.single_path_s for ph in phases]),
        total([max(ph.lp_s, ph.latency_s) for ph in phases]),
        sum(1 for ph in phases if ph.status not in ("cached", "empty", "host-links")),
    )


def single_path_bound(fabric: Fabric) -> Callable[[IntArray, IntArray, Bytes], float]:
    """``f(src, dst, bytes)``: the widest-path and cut pigeonhole bound of one
    host-level phase (seconds), without the LP (see :func:`phase_bounds`)."""
    return _Context(fabric).single_path


def uniform_split_bound(fabric: Fabric) -> Callable[[IntArray, IntArray, Bytes], float] | None:
    """``f(src, dst, bytes)``: the peak utilization (seconds, host arcs included) of one
    host-level phase when every switch splits its flow evenly over its shortest next
    hops toward the destination's leaf; ``None`` if some host has several links.

    The split depends on the destinations only, never on the bytes, so it is one
    fractional routing for every phase of a job: an upper bound on the job-level LP
    (:mod:`sdnmpi.core.routing.jobbound`), as on each phase's ``lambda``.
    """
    ctx = _Context(fabric)
    att = ctx.att
    if att is None:
        return None

    def split(s: IntArray, t: IntArray, b: Bytes) -> float:
        host = ctx.nic(s, t, np.asarray(b))
        inter = att.leaf[s] != att.leaf[t]
        if not inter.any():
            return host
        nh = fabric.nhosts
        ls, lt = att.leaf[s[inter]] - nh, att.leaf[t[inter]] - nh
        return max(host, ctx.switches.uniform_split(ls, lt, np.asarray(b)[inter]))

    return split


def _solve_phase(
    ctx: _Context,
    s: IntArray,
    t: IntArray,
    b: IntArray,
    single_path: bool,
    force_lp: bool,
    clock: Clock | None,
) -> tuple[float, float, str, int, int, float]:
    t0 = clock() if clock else math.nan
    lam, status, nvars, nrows = ctx.lam(s, t, b, force_lp=force_lp)
    secs = clock() - t0 if clock else math.nan
    sp = max(lam, ctx.single_path(s, t, b)) if single_path else lam
    return lam, sp, status, nvars, nrows, secs


# -- fabric context --------------------------------------------------------------------


class _Context:
    """What the bounds need from a fabric, computed once per call."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.att: Attachment | None = attachment(fabric)
        nh = fabric.nhosts
        self.weight = 8.0 / np.asarray(fabric.capacity_bps, dtype=np.float64)
        src, dst, cap = fabric.arc_src, fabric.arc_dst, fabric.capacity_bps
        self.cap_out = np.bincount(src[src < nh], weights=cap[src < nh], minlength=nh)
        self.cap_in = np.bincount(dst[dst < nh], weights=cap[dst < nh], minlength=nh)
        self._widest: FloatArray | None = None

    def nic(self, s: IntArray, t: IntArray, b: IntArray) -> float:
        """The NIC bound: most bytes through one host's links over their capacity."""
        nh = self.fabric.nhosts
        out = np.bincount(s, weights=b, minlength=nh) * 8.0 / self.cap_out
        inn = np.bincount(t, weights=b, minlength=nh) * 8.0 / self.cap_in
        return float(max(out.max(initial=0.0), inn.max(initial=0.0)))

    def lam(
        self, s: IntArray, t: IntArray, b: IntArray, *, force_lp: bool = False
    ) -> tuple[float, str, int, int]:
        """``lambda`` of one phase: (seconds, status, LP variables, LP rows)."""
        f = self.fabric
        if not s.size:
            return 0.0, "empty", 0, 0
        if self.att is None:
            transit = np.arange(f.nnodes) >= f.nhosts
            return _min_congestion(f.nnodes, f.arc_src, f.arc_dst, self.weight, transit, s, t, b)
        leaf, nh = self.att.leaf, f.nhosts
        host = self.nic(s, t, b)  # single-homed: the NIC bound is the host arcs' utilization
        inter = leaf[s] != leaf[t]
        if not inter.any():
            return host, "host-links", 0, 0
        ls, lt, lb = leaf[s[inter]] - nh, leaf[t[inter]] - nh, b[inter]
        if not force_lp:
            upper = max(host, self.switches.uniform_split(ls, lt, lb))
            lower = max(host, self.cuts.fractional(s, t, b))
            if upper <= lower * (1.0 + 1e-9):
                return upper, "certified", 0, 0
        sw = self.switches
        lam, status, nvars, nrows = _min_congestion(
            sw.n, sw.a_src, sw.a_dst, sw.weight, np.ones(sw.n, bool), ls, lt, lb
        )
        return max(lam, host), status, nvars, nrows

    @cached_property
    def switches(self) -> _SwitchGraph:
        """The switch-only graph (single-homed fabrics)."""
        leaves = None if self.att is None else np.unique(self.att.leaf) - self.fabric.nhosts
        return _SwitchGraph(self.fabric, leaves)

    @cached_property
    def cuts(self) -> Cuts:
        """The tree cuts of the fabric."""
        return tree_cuts(self.fabric, self.att)

    def pair_latency(self, s: IntArray, t: IntArray) -> FloatArray:
        """Least path latency of each (src host, dst host) pair, no host transit."""
        f = self.fabric
        nh, nsw = f.nhosts, f.nnodes - f.nhosts
        if not s.size:
            return np.zeros(0)
        a_src = np.where(f.arc_src < nh, nsw + f.arc_src, f.arc_src - nh)
        a_dst = np.where(f.arc_dst < nh, nsw + nh + f.arc_dst, f.arc_dst - nh)
        # the least latency of parallel arcs; tiny floor so zero-latency arcs stay edges
        lat = np.maximum(np.asarray(f.latency_s, dtype=np.float64), 1e-300)
        n = nsw + 2 * nh
        order = np.lexsort((lat, a_dst, a_src))
        key = a_src[order] * n + a_dst[order]
        first = order[np.r_[True, key[1:] != key[:-1]]]
        graph = csr_matrix((lat[first], (a_src[first], a_dst[first])), shape=(n, n))
        sources, which = np.unique(s, return_inverse=True)
        dist = np.atleast_2d(dijkstra(graph, indices=nsw + sources))
        out: FloatArray = dist[which, nsw + nh + t]
        return out

    def single_path(self, s: IntArray, t: IntArray, b: Bytes) -> float:
        """The widest-path and cut pigeonhole bounds of one phase (seconds)."""
        if not s.size:
            return 0.0
        if self._widest is None:
            self._widest = widest(self.fabric)
        pair = float((8.0 * b / self._widest[s, t]).max())
        return max(pair, self.cuts.bound(s, t, b))


class _SwitchGraph:
    """Switches and the arcs between them, with hop distances toward every switch."""

    def __init__(self, fabric: Fabric, leaves: IntArray | None = None) -> None:
        nh = fabric.nhosts
        self.fabric = fabric
        #: the leaf switches (switch numbering), when hosts are single-homed
        self.leaves = leaves
        self.n = fabric.nnodes - nh
        sw = (fabric.arc_src >= nh) & (fabric.arc_dst >= nh)
        self.a_src = (fabric.arc_src[sw] - nh).astype(np.int64)
        self.a_dst = (fabric.arc_dst[sw] - nh).astype(np.int64)
        self.weight = 8.0 / np.asarray(fabric.capacity_bps, dtype=np.float64)[sw]
        ones = np.ones(self.a_src.size)
        reverse = csr_matrix((ones, (self.a_dst, self.a_src)), shape=(self.n, self.n))
        hops = np.atleast_2d(shortest_path(reverse, unweighted=True))  # hops[target, node]
        self.hops = np.where(np.isfinite(hops), hops, -1).astype(np.int64)

    def uniform_split(self, s: IntArray, t: IntArray, b: IntArray) -> float:
        """Congestion (seconds) when every node splits its flow evenly over shortest next hops.

        A feasible fractional routing, hence an upper bound on ``lambda``; on
        fat-trees and leaf-spines it meets the cut bound (the flow leaving a
        subtree spreads evenly over the subtree's up arcs).

        Between leaves (``s`` and ``t`` all leaf switches, as the bounds call it)
        it is the bytes of each leaf pair times that pair's fractions on the arcs
        (:meth:`_fractions`, once per topology), equal to
        :meth:`uniform_split_direct` up to rounding.
        """
        frac = self._fractions()
        if frac is not None:
            matrix, pos = frac
            ps, pt = pos[s], pos[t]
            if s.size and bool((ps >= 0).all() and (pt >= 0).all()):
                nl = int(pos.max()) + 1
                w = np.bincount(pt * nl + ps, weights=b.astype(np.float64), minlength=nl * nl)
                rows = np.flatnonzero(w)
                load = matrix[rows].T @ w[rows]
                return float((np.asarray(load) * self.weight).max(initial=0.0))
        return self.uniform_split_direct(s, t, b)

    def _fractions(self) -> tuple[csr_matrix, IntArray] | None:
        """The even split's fraction of each leaf pair's flow on each arc: a matrix
        with row ``target * leaves + source`` (leaf positions), and each switch's
        leaf position (-1 for others); ``None`` when too large to keep."""
        leaves = self.leaves
        if leaves is None or leaves.size**2 * self.a_src.size > _FRACTION_CELLS:
            return None
        return memo(self.fabric, "uniform-split-fractions", lambda: self._build_fractions(leaves))

    def _build_fractions(self, leaves: IntArray) -> tuple[csr_matrix, IntArray]:
        n, nl, narcs = self.n, leaves.size, self.a_src.size
        pos = np.full(n, -1, dtype=np.int64)
        pos[leaves] = np.arange(nl)
        blocks = []
        for t in leaves.tolist():
            dist = self.hops[t]
            d_src, d_dst = dist[self.a_src], dist[self.a_dst]
            on = (d_dst >= 0) & (d_dst == d_src - 1)
            deg = np.maximum(np.bincount(self.a_src[on], minlength=n), 1)
            flow = np.zeros((nl, n))
            flow[np.arange(nl), leaves] = 1.0
            frac = np.zeros((nl, narcs))
            for d in range(int(dist.max(initial=0)), 0, -1):
                act = np.flatnonzero(on & (d_src == d))
                if not act.size:
                    continue
                tail = self.a_src[act]
                share = flow[:, tail] / deg[tail]
                frac[:, act] = share
                heads = csr_matrix(
                    (np.ones(act.size), (np.arange(act.size), self.a_dst[act])),
                    shape=(act.size, n),
                )
                flow += np.asarray((heads.T @ share.T).T)
            blocks.append(csr_matrix(frac))
        return sparse_vstack(blocks, format="csr"), pos

    def uniform_split_direct(self, s: IntArray, t: IntArray, b: IntArray) -> float:
        """:meth:`uniform_split` computed from the flows, any ``s`` and ``t``."""
        targets, k_of = np.unique(t, return_inverse=True)
        n, nk = self.n, targets.size
        dist = self.hops[targets]  # (k, node)
        d_src, d_dst = dist[:, self.a_src], dist[:, self.a_dst]
        on = (d_dst >= 0) & (d_dst == d_src - 1)  # (k, arc): arc on a shortest path
        key = np.arange(nk)[:, None] * n + self.a_src[None, :]
        deg = np.bincount(key[on], minlength=nk * n).reshape(nk, n)
        flow = np.bincount(k_of * n + s, weights=b.astype(np.float64), minlength=nk * n)
        flow = flow.reshape(nk, n)
        load = np.zeros(self.a_src.size)
        for d in range(int(dist.max(initial=0)), 0, -1):
            act = on & (d_src == d)
            share = np.where(act, flow[:, self.a_src] / np.maximum(deg[:, self.a_src], 1), 0.0)
            load += share.sum(axis=0)
            flow += np.bincount(
                (key - self.a_src[None, :] + self.a_dst[None, :])[act],
                weights=share[act],
                minlength=nk * n,
            ).reshape(nk, n)
        return float((load * self.weight).max(initial=0.0))


# -- the LP ----------------------------------------------------------------------------


def _min_congestion(
    n: int,
    a_src: IntArray,
    a_dst: IntArray,
    weight: FloatArray,
    transit: BoolArray,
    s: IntArray,
    t: IntArray,
    b: IntArray,
) -> tuple[float, str, int, int]:
    """Fractional min-congestion flow of demands ``s -> t`` (``b`` bytes) on a graph.

    Returns ``(lambda, status, variables, rows)`` where lambda is the least
    ``max_e weight_e * flow_e``.  Commodities are the destinations (or the
    sources on the reversed graph, if fewer).
    """
    if np.unique(t).size > np.unique(s).size:
        a_src, a_dst, s, t = a_dst, a_src, t, s
    terminals, k_of = np.unique(t, return_inverse=True)
    nk = terminals.size
    bmax, wmin = float(b.max()), float(weight.min())
    supply = np.bincount(k_of * n + s, weights=b / bmax, minlength=nk * n).reshape(nk, n)
    term = terminals[:, None]
    allowed = a_src[None, :] != term
    allowed &= transit[a_dst][None, :] | (a_dst[None, :] == term)
    allowed &= transit[a_src][None, :] | (supply[:, a_src] > 0)
    k, e = np.nonzero(allowed)
    nv = k.size
    var = np.arange(nv)
    # conservation rows (k, v), v != terminal: out - in = supply
    rows = np.concatenate([k * n + a_src[e], k * n + a_dst[e]])
    cols = np.concatenate([var, var])
    vals = np.concatenate([np.ones(nv), -np.ones(nv)])
    keep = rows % n != terminals[rows // n]
    rows, cols, vals = rows[keep], cols[keep], vals[keep]
    need = np.flatnonzero(supply.reshape(-1) > 0)
    need = need[need % n != terminals[need // n]]
    row_ids, row_of = np.unique(np.concatenate([rows, need]), return_inverse=True)
    a_eq = coo_matrix((vals, (row_of[: rows.size], cols)), shape=(row_ids.size, nv + 1))
    b_eq = supply.reshape(-1)[row_ids]
    # capacity rows: sum_k x_{k,e} * weight_e / wmin - lambda <= 0
    used, arc_row = np.unique(e, return_inverse=True)
    a_ub = coo_matrix(
        (
            np.concatenate([weight[e] / wmin, -np.ones(used.size)]),
            (np.concatenate([arc_row, np.arange(used.size)]), np.r_[var, np.full(used.size, nv)]),
        ),
        shape=(used.size, nv + 1),
    )
    cost = np.zeros(nv + 1)
    cost[nv] = 1.0
    res = linprog(
        cost,
        A_ub=a_ub.tocsr(),
        b_ub=np.zeros(used.size),
        A_eq=a_eq.tocsr(),
        b_eq=b_eq,
        bounds=(0, None),
        # interior point on large LPs (3-5x faster than simplex on fat-tree k=8
        # phases, which are highly degenerate), dual simplex on small ones
        method="highs-ipm" if nv > _IPM_VARS else "highs-ds",
    )
    if res.status != 0:
        raise RoutingError(f"congestion LP ({nv} variables) failed: {res.message}")
    return float(res.fun) * bmax * wmin, "optimal", nv + 1, row_ids.size + used.size
