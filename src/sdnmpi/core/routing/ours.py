"""Ours: one path per host pair minimizing the phase-weighted peak link utilization.

Objective (the project's metric, :mod:`sdnmpi.core.routing.bound`)::

    F = sum_p repeat_p * max_e 8 * bytes_e(p) / capacity_e

with one path per (src host, dst host) pair shared by every phase in which the
pair talks, so a pair's path counts in all its phases at once.

Algorithm
---------
1. *Granularity* (:class:`~sdnmpi.core.routing.candidates.PairProblem`).
   Flows are summed per host pair and phase; phases whose host-level matrices
   are equal up to a factor are merged.  When every host has one link, its
   first and last arcs are fixed and a pair chooses among the paths of its
   (src leaf, dst leaf) group: valley-free, shortest on trees; one hop longer
   on irregular fabrics (NetSA's ToR-to-ToR link), taken only when that
   strictly lowers ``F``.  Latency-class flows (NetSA annotation) stay shortest.
2. *Starts*, cheapest first, stopping as soon as one meets the lower bound:
   D-mod-K (candidate ``dst mod n``, Zahavi's D-mod-K on k-ary fat-trees), the
   :mod:`~sdnmpi.core.routing.dmodk` router's own paths when they differ, an
   *edge colouring* (each phase's pairs, hop by hop, equitably coloured over
   the hop's choices, de Werra 1971, with König's alternating paths: routing a
   permutation on a Clos network is an edge colouring), and heaviest-first
   greedy placement (up to :data:`GREEDY_PAIRS` pairs; a bytes-ranked
   round-robin above): pairs by decreasing repeat-weighted bytes, each on the
   path that least raises ``F``, ties by the potential below, then hops (the
   min-max greedy of unsplittable flow, Kleinberg, FOCS 1996).
3. *Rip-up and reroute* (Lawler; Nair's global wiring): for every phase whose
   peak is on a link routing can change, the pairs crossing its busiest links
   are taken heaviest first, removed and put back on their best path.  A move
   is kept when it lowers ``F``, or keeps ``F`` and lowers the potential
   ``Phi = sum_p repeat_p sum_e (u_pe / ref_p)^KAPPA``, a smooth stand-in for
   the peak (the potential functions of Leighton and Rao's and of Plotkin,
   Shmoys and Tardos's congestion algorithms) that breaks ties between several
   peak links one at a time.  When no single move helps, an *ejection chain*
   moves the pair anyway and then the pairs it collides with, keeping the chain
   only if its total helps (Glover's ejection chains; Kempe chains).  Small
   instances search from every start, large ones from the best.
4. *Exact polish.*  Pairs sharing no phase route independently.  A component
   whose phases all peak at their single-path lower bound
   (:func:`~sdnmpi.core.routing.bound.single_path_bound`) is optimal; a small
   remaining one (:data:`~sdnmpi.core.routing.exact.MILP_BINARIES`) is solved
   as a mixed-integer program (one binary per pair and candidate, one peak per
   phase) by HiGHS
   branch-and-bound under a node limit, and its solution kept if better.

Finally, pairs on detours go back to a shortest path wherever that costs
nothing.  Every step only accepts improvements, so ``F(ours) <= F(D-mod-K)``.
Budgets are counts (evaluations, nodes), never a clock: the routing is
deterministic for a given ``seed`` (which orders equal-weight pairs and
samples paths where a group has more than 256).  ``meta`` reports the
objective, the starts, the search effort, the exact polish and
``proven_optimal`` (no single-path routing over the candidates does better).
"""

from __future__ import annotations

import logging

import numpy as np
import numpy.typing as npt

from sdnmpi.core.routing.candidates import PairProblem
from sdnmpi.core.routing.coloring import coloring_start
from sdnmpi.core.routing.exact import PhaseLowerBound, polish
from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.errors import RoutingError

NAME = "ours"
DESCRIPTION = (
    "traffic-aware: D-mod-K, edge-colouring and heaviest-first starts, rip-up-and-reroute "
    "with ejection chains on each phase's busiest links, exact MILP on small parts"
)
CITATION = (
    "Multicommodity flow and congestion: Ahuja, Magnanti and Orlin, Network Flows (1993); "
    "Leighton and Rao, J. ACM 46(6), 1999; Plotkin, Shmoys and Tardos, Math. Oper. Res. "
    "20(2), 1995; Kleinberg, Single-source unsplittable flow, FOCS 1996. Rip-up and "
    "reroute: Lawler, Combinatorial Optimization: Networks and Matroids (1976); Nair, IEEE "
    "TCAD 6(2), 1987. Ejection chains: Glover, Discrete Appl. Math. 65, 1996. Equitable "
    "edge colouring: de Werra, 1971; Kőnig, 1916. MILP: HiGHS (Huangfu and Hall, Math. "
    "Prog. Comp. 10, 2018). D-mod-K: Zahavi, CCIT report 776, Technion, 2010"
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

log = logging.getLogger(__name__)

#: Largest number of movable host pairs placed one by one by the greedy start.
GREEDY_PAIRS = 4096
#: Largest number of host pairs for which the dmodk module's routing is also a start.
DMODK_PAIRS = 200_000
#: Exponent of the potential that breaks ties between peak links.
KAPPA = 6.0
#: Local-search budget: sweeps, and pair evaluations (per start).
MAX_SWEEPS = 60
MAX_EVALS = 60_000
#: ... and on instances too large for the greedy start (one search only).
LARGE_EVALS = 20_000
#: Ejection chains: candidate paths tried for the first pair, chain length, colliding
#: pairs tried per step, and the most pairs of a phase scanned for collisions.
CHAIN_PATHS = 3
CHAIN_DEPTH = 8
CHAIN_PAIRS = 6
CHAIN_SCAN = 50_000
_RTOL = 1e-12


def route(fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing:
    """One path per host pair, minimizing ``sum_p repeat_p * max_link_busy_p``."""
    if not len(demands):
        return Routing(NAME, np.zeros((0, 0), np.int64), {"objective_s": 0.0})
    prob = PairProblem.build(fabric, demands, seed)
    lower = PhaseLowerBound(prob, fabric)
    search, starts = _search(prob, fabric, demands, seed, lower)
    best, ref, counts = search.choice, search.ref, (search.moves, search.evals, search.sweeps)
    del search  # its load tables: polish builds its own
    choice, exact = polish(prob, lower, best)
    if not prob.paths_shortest[choice].all():  # detours only where they help
        final = _Search(prob, choice, ref)
        final.prefer_shortest()
        choice = final.choice
    objective = float(prob.repeat @ prob.loads(choice).max(axis=1))
    meta: dict[str, object] = {
        "objective_s": objective,
        "starts": starts,
        "moves": counts[0],
        "evaluations": counts[1],
        "sweeps": counts[2],
        "exact": exact,
        # every component at its single-path bound or solved to HiGHS's 1e-4 MILP
        # gap: no single-path routing over the candidates does better
        "proven_optimal": exact["at_bound"] + exact["optimal"] == exact["components"],
        "merged_phases": prob.nq,
        "host_pairs": prob.npairs,
        "non_shortest_pairs": int((~prob.paths_shortest[choice]).sum()),
    }
    return Routing(NAME, prob.flow_arcs(choice), meta)


def _search(
    prob: PairProblem, fabric: Fabric, demands: Demands, seed: int, lower: PhaseLowerBound
) -> tuple[_Search, dict[str, dict[str, float]]]:
    """Search from the starts, cheapest and best first; stop at the lower bound."""
    every = np.arange(prob.nq)
    ref = np.ones(prob.nq)  # the potential's scale: each phase's peak under D-mod-K
    done: list[tuple[str, float, _Search]] = []

    def start(name: str, choice: IntArray | None) -> bool:
        if choice is not None and not any(np.array_equal(choice, s.choice) for *_, s in done):
            search = _Search(prob, choice, ref)
            done.append((name, search.objective(), search))
        return any(lower.reached(every, s.m) for *_, s in done)

    def finish() -> tuple[_Search, dict[str, dict[str, float]]]:
        best = min(done, key=lambda d: d[2].objective())[2]
        return best, {n: {"initial_s": init, "final_s": s.objective()} for n, init, s in done}

    if start("dmodk-index", prob.first + prob.pair_dst % prob.nshort):
        return finish()
    ref[:] = np.maximum(done[0][2].m, 1e-300)
    real = _real_dmodk(prob, fabric, demands) if prob.npairs <= DMODK_PAIRS else None
    if start("dmodk", real) or start("colouring", coloring_start(prob, fabric)):
        return finish()
    cheap = sorted(done, key=lambda d: d[1])
    if int((prob.allowed > 1).sum()) <= GREEDY_PAIRS:  # small: search every start
        for *_, search in cheap:
            search.improve()
            if lower.reached(every, search.m):
                return finish()
        if not start("greedy", _greedy(prob, seed, ref)):
            done[-1][2].improve()
        return finish()
    if not start("round-robin", _round_robin(prob, seed)):  # large: the best start only
        chosen = min(done, key=lambda d: d[1])[2]
        chosen.budget = LARGE_EVALS
        chosen.improve()
    return finish()


# -- starts ----------------------------------------------------------------------------


def _real_dmodk(prob: PairProblem, fabric: Fabric, demands: Demands) -> IntArray | None:
    """The dmodk router's paths as candidate rows, if it routes this fabric."""
    try:
        from sdnmpi.core.routing import dmodk

        routing = dmodk.route(fabric, demands)
    except (ImportError, RoutingError):
        return None
    flow = np.zeros(prob.npairs, np.int64)
    flow[prob.flow_pair] = np.arange(prob.flow_pair.size)
    arcs = routing.arcs[flow]
    body = arcs[:, 1:-1] if (prob.fixed[:, 0] >= 0).all() else arcs
    choice = np.full(prob.npairs, -1, np.int64)
    width = prob.cand.shape[1]
    for k in range(int(prob.allowed.max(initial=1))):
        row = np.minimum(prob.first + k, prob.cand.shape[0] - 1)
        cand = prob.cand[row]
        seg = np.full((prob.npairs, width), -1, np.int64)
        n = min(width, body.shape[1])
        seg[:, :n] = body[:, :n]
        seg = np.where(seg == prob.fixed[:, 1:2], -1, seg)
        hit = (choice < 0) & (k < prob.allowed) & (cand == seg).all(axis=1)
        choice[hit] = row[hit]
    if (choice < 0).any():
        return None
    return choice


def _round_robin(prob: PairProblem, seed: int) -> IntArray:
    """Each group's pairs, heaviest first, dealt over its shortest paths."""
    total = np.bincount(
        np.repeat(np.arange(prob.npairs), np.diff(prob.ptr)),
        weights=prob.w * prob.repeat[prob.q],
        minlength=prob.npairs,
    )
    noise = np.random.default_rng(seed).random(prob.npairs)
    order = np.lexsort((noise, -total, prob.first))
    ranked = prob.first[order]
    rank = np.empty(prob.npairs, np.int64)
    rank[order] = np.arange(prob.npairs) - np.searchsorted(ranked, ranked)
    offset = prob.pair_dst % prob.nshort
    out: IntArray = (prob.first + (rank + offset) % prob.nshort).astype(np.int64)
    return out


def _greedy(prob: PairProblem, seed: int, ref: FloatArray) -> IntArray:
    """Heaviest pair first, each on its best path given those already placed."""
    choice = prob.first.copy()
    movable = prob.allowed > 1
    search = _Search(prob, choice, ref, placed=~movable)
    total = np.bincount(
        np.repeat(np.arange(prob.npairs), np.diff(prob.ptr)),
        weights=prob.w * prob.repeat[prob.q],
        minlength=prob.npairs,
    )
    noise = np.random.default_rng(seed).random(prob.npairs)
    order = np.lexsort((noise, -total))
    for i in order[movable[order]].tolist():
        search.place(i)
    return search.choice


# -- the search ------------------------------------------------------------------------


class _Search:
    """Loads of a choice, and moves that lower the objective (rip-up and reroute).

    Each phase keeps its ``T`` largest arcs (``T`` = longest candidate + 1), so
    the peak of a phase without one pair's current path is found among them:
    an evaluation costs the pair's phases times its candidates' arcs, not the
    fabric's size.
    """

    def __init__(
        self,
        prob: PairProblem,
        choice: IntArray,
        ref: FloatArray,
        placed: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        self.p = prob
        self.ref = ref
        self.choice = choice.copy()
        self.placed = np.ones(prob.npairs, bool) if placed is None else placed.copy()
        empty = np.full(prob.npairs, prob.cand.shape[0] - 1)
        self.u = prob.loads(np.where(self.placed, self.choice, empty))  # unplaced: host arcs only
        self.fixed_max = prob.fixed_loads.max(axis=1)
        self.m = self.u.max(axis=1)
        self.ntop = min(prob.cand.shape[1] + 1, prob.narcs)
        # a copy: the view would keep argpartition's whole (phases x arcs) index table
        self.top = np.argpartition(-self.u, self.ntop - 1, axis=1)[:, : self.ntop].copy()
        self.moves = self.evals = self.sweeps = 0
        self.budget = MAX_EVALS

    def objective(self) -> float:
        """``sum_q repeat_q * max_e u_qe`` (seconds)."""
        return float(self.p.repeat @ self.m)

    def _scores(self, i: int) -> tuple[FloatArray, FloatArray, IntArray, int]:
        """Per candidate of pair ``i``: objective and potential (relative to the current
        path when placed, absolute otherwise), hop counts, and the current index (-1)."""
        p = self.p
        a, z = int(p.ptr[i]), int(p.ptr[i + 1])
        qs, w = p.q[a:z], p.w[a:z]
        lo, n = int(p.first[i]), int(p.allowed[i])
        cands = p.cand[lo : lo + n]
        valid = cands >= 0
        safe = np.where(valid, cands, 0)
        delta = w[:, None, None] * p.inv_c[safe][None, :, :]  # (m, n, width)
        old = self.u[qs[:, None, None], safe[None, :, :]]
        cur = -1
        if self.placed[i]:
            cur = int(self.choice[i]) - lo
            mine = cands[cur][valid[cur]]
            shared = (safe[:, :, None] == mine).any(axis=2) & valid
            old = old - delta * shared[None]
            top = self.top[qs]
            taken = (top[:, :, None] == mine).any(axis=2)
            rest = np.where(taken, -np.inf, self.u[qs[:, None], top]).max(axis=1)
            left = self.u[qs[:, None], mine[None, :]] - w[:, None] * p.inv_c[mine][None, :]
            base_m = np.maximum(rest, left.max(axis=1))
        else:
            base_m = self.m[qs]
        new = old + delta
        r = p.repeat[qs]
        peak = np.where(valid[None], new, -np.inf).max(axis=2)
        score = r @ np.maximum(base_m[:, None], peak)
        ref = self.ref[qs][:, None, None]
        gain = r @ np.where(valid[None], (new / ref) ** KAPPA - (old / ref) ** KAPPA, 0.0).sum(2)
        self.evals += 1
        if cur >= 0:
            score, gain = score - score[cur], gain - gain[cur]
        hops: IntArray = valid.sum(axis=1)
        return score, gain, hops, cur

    def _best(self, score: FloatArray, gain: FloatArray, hops: IntArray) -> int:
        """Least objective, then least potential, fewest hops, first."""
        tol = _RTOL * max(self.objective(), 1e-300)
        key = np.where(score <= score.min() + tol, gain, np.inf)
        return int(np.lexsort((np.arange(score.size), hops, key))[0])

    def _better(self, d_obj: float, d_pot: float) -> bool:
        """Whether a change lowers the objective, or keeps it and lowers the potential."""
        tol = _RTOL * max(self.objective(), 1e-300)
        return d_obj < -tol or (d_obj <= tol and d_pot < -_RTOL * float(self.p.repeat.sum()))

    def _apply(self, i: int, row: int) -> None:
        p = self.p
        a, z = int(p.ptr[i]), int(p.ptr[i + 1])
        qs, w = p.q[a:z], p.w[a:z]
        if self.placed[i]:
            old = p.cand[self.choice[i]]
            old = old[old >= 0]
            self.u[np.ix_(qs, old)] -= w[:, None] * p.inv_c[old][None, :]
        new = p.cand[row]
        new = new[new >= 0]
        self.u[np.ix_(qs, new)] += w[:, None] * p.inv_c[new][None, :]
        self.choice[i] = row
        self.placed[i] = True
        rows = self.u[qs]
        self.m[qs] = rows.max(axis=1)
        self.top[qs] = np.argpartition(-rows, self.ntop - 1, axis=1)[:, : self.ntop]

    def prefer_shortest(self) -> None:
        """Put each pair on a detour back on a shortest path that is as good (objective
        not higher), heaviest pairs first: a longer path only where it helps."""
        p = self.p
        detour = np.flatnonzero(~p.paths_shortest[self.choice])
        heavy = np.bincount(np.repeat(np.arange(p.npairs), np.diff(p.ptr)), p.w, p.npairs)
        tol = _RTOL * max(self.objective(), 1e-300)
        for i in detour[np.argsort(-heavy[detour], kind="stable")].tolist():
            score, gain, *_ = self._scores(i)
            short = np.arange(score.size) < p.nshort[i]
            ok = np.flatnonzero(short & (score <= tol))
            if ok.size:
                best = int(ok[np.lexsort((ok, gain[ok], score[ok]))[0]])
                self._apply(i, int(p.first[i]) + best)

    def place(self, i: int) -> None:
        """Put a not-yet-placed pair on its best path (greedy step)."""
        score, gain, hops, _ = self._scores(i)
        self._apply(i, int(self.p.first[i]) + self._best(score, gain, hops))

    def try_move(self, i: int) -> bool:
        """Reroute pair ``i`` if that helps; else try it with one pair it displaces."""
        score, gain, hops, cur = self._scores(i)
        best = self._best(score, gain, hops)
        if best != cur and self._better(float(score[best]), float(gain[best])):
            self._apply(i, int(self.p.first[i]) + best)
            self.moves += 1
            return True
        return self._try_chain(i, score, gain, cur)

    def _try_chain(self, i: int, score: FloatArray, gain: FloatArray, cur: int) -> bool:
        """Ejection chain: move ``i``, then the pair it collides with, and so on.

        Routing a permutation on a Clos is an edge colouring; single moves stall
        on plateaus there, while a chain that keeps displacing the pair a move
        collides with (a Kempe chain, Kempe 1879; the ejection chains of Glover,
        1996) reaches the free arc.  The chain is kept if its total lowers the
        objective (or keeps it and lowers the potential), else undone.
        """
        p = self.p
        lo = int(p.first[i])
        order = [int(b) for b in np.lexsort((gain, score)) if b != cur][:CHAIN_PATHS]
        for b in order:
            trail = [(i, lo + cur)]
            self._apply(i, lo + b)
            d_obj, d_pot = float(score[b]), float(gain[b])
            last = i
            for _ in range(CHAIN_DEPTH):
                moved = {k for k, _ in trail}
                step = self._eject(last, moved)
                if step is None:
                    break
                k, row, dk_obj, dk_pot = step
                trail.append((k, int(self.choice[k])))
                self._apply(k, row)
                d_obj, d_pot, last = d_obj + dk_obj, d_pot + dk_pot, k
                if self._better(d_obj, d_pot):
                    self.moves += len(trail)
                    return True
            for k, row in reversed(trail):
                self._apply(k, row)
        return False

    def _eject(self, last: int, moved: set[int]) -> tuple[int, int, float, float] | None:
        """The first pair colliding with ``last`` that has somewhere else to go."""
        p = self.p
        for k in self._colliding(last):
            if k in moved:
                continue
            sk, gk, hk, ck = self._scores(k)
            bk = self._best(sk, gk, hk)
            if bk != ck:
                return k, int(p.first[k]) + bk, float(sk[bk]), float(gk[bk])
        return None

    def _colliding(self, i: int) -> list[int]:
        """Movable pairs sharing a peak arc with pair ``i`` in one of its phases."""
        p = self.p
        a, z = int(p.ptr[i]), int(p.ptr[i + 1])
        mine = p.cand[self.choice[i]]
        mine = mine[mine >= 0]
        out: list[int] = []
        for q in p.q[a:z].tolist():
            hot = mine[self.u[q, mine] >= self.m[q] * (1 - 1e-9)]
            if not hot.size:
                continue
            lo, hi = int(p.qptr[q]), int(p.qptr[q + 1])
            pairs = p.qpair[lo:hi]
            if pairs.size > CHAIN_SCAN:
                pairs = pairs[:CHAIN_SCAN]
            hit = (p.cand[self.choice[pairs]][:, :, None] == hot).any(axis=(1, 2))
            hit &= (pairs != i) & (p.allowed[pairs] > 1)
            out.extend(pairs[hit][:CHAIN_PAIRS].tolist())
        return out[:CHAIN_PAIRS]

    def improve(self) -> None:
        """Sweeps of rip-up and reroute on the pairs crossing each phase's busiest arcs."""
        p = self.p
        while self.sweeps < MAX_SWEEPS and self.evals < self.budget:
            self.sweeps += 1
            moved = 0
            slack = p.repeat * (self.m - self.fixed_max)
            for q in np.argsort(-slack, kind="stable").tolist():
                if self.m[q] <= self.fixed_max[q] * (1 + 1e-12) or self.evals >= self.budget:
                    continue
                moved += self._sweep_phase(q)
            if not moved:
                break

    def _sweep_phase(self, q: int) -> int:
        p = self.p
        crit = np.r_[self.u[q] >= self.m[q] * (1 - 1e-9), False]  # index -1 (padding): False
        a, z = int(p.qptr[q]), int(p.qptr[q + 1])
        pairs = p.qpair[a:z]  # heaviest first
        pairs = pairs[p.allowed[pairs] > 1]
        on = crit[p.cand[self.choice[pairs]]].any(axis=1)
        moved = 0
        for i in pairs[on].tolist():
            if self.evals >= self.budget:
                break
            moved += self.try_move(i)
        return moved
