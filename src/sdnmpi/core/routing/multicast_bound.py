"""The LP lower bound of a phase holding replicated transfers (multicasts).

A replicated transfer of ``B`` bytes from a root host to several receiving hosts
loads each arc of its tree once (:mod:`sdnmpi.core.routing.replication`), so the
unicast LP of :mod:`sdnmpi.core.routing.bound`, which would ship ``B`` to every
receiver separately, overstates what it needs.  Its relaxation here is the
multicast flow LP (Ahlswede, Cai, Li and Yeung, Network information flow, IEEE
Trans. Inf. Theory 46(4), 2000; the directed-cut relaxation of the Steiner tree
packing problem): a variable ``y_e`` (the share of ``B`` the arc carries) and, for
each receiver ``t``, a unit flow ``f_t`` from the root to ``t`` with ``f_t,e <=
y_e``.  Any tree gives ``y = 1`` on its arcs and 0 elsewhere, with ``f_t`` its path
to ``t``, and any mix of trees a convex combination of those: the optimum is no more
than the congestion of any way of replicating (a lower bound).  The phase's unicast
flows join as destination commodities, as in the unicast LP, and the arcs' load
``8 * (sum_k x_k,e + sum_m B_m * y_m,e) / capacity_e`` is bounded by ``lambda``.
Hosts are never transited: only a flow's (or a tree's) own root leaves a host, and
only its destination enters one.

Cheap cases need no LP: with one replicated transfer and nothing else, a tree grown
on the idle fabric whose busiest arc meets the NIC bound (the root's uplinks carry
``B``, each receiver's downlinks ``B``) is optimal (status ``certified``).  Above
:data:`MAX_VARS` variables the bound falls back to that NIC bound (``nic``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from sdnmpi.core.routing import subset
from sdnmpi.core.routing.model import Demands, Fabric, FloatArray, IntArray
from sdnmpi.core.routing.multicast import build_tree
from sdnmpi.core.routing.replication import Multicasts
from sdnmpi.errors import RoutingError

BoolArray = npt.NDArray[np.bool_]
#: Largest LP (variables) solved; above it the NIC bound is used.
MAX_VARS = 400_000


@dataclass(frozen=True)
class Multicast:
    """One replicated transfer of a phase: ``size_bytes`` from host ``root`` to ``receivers``."""

    root: int
    receivers: tuple[int, ...]
    size_bytes: float


def nic_bound(
    fabric: Fabric, s: IntArray, t: IntArray, b: npt.ArrayLike, multicasts: Sequence[Multicast]
) -> float:
    """Most bytes through one host's links over their capacity (seconds), a replicated
    transfer counted once at its root and once at each receiver."""
    nh = fabric.nhosts
    src, dst, cap = fabric.arc_src, fabric.arc_dst, fabric.capacity_bps
    cap_out = np.bincount(src[src < nh], weights=cap[src < nh], minlength=nh)
    cap_in = np.bincount(dst[dst < nh], weights=cap[dst < nh], minlength=nh)
    size = np.asarray(b, dtype=np.float64)
    out = np.bincount(s, weights=size, minlength=nh).astype(np.float64)
    inn = np.bincount(t, weights=size, minlength=nh).astype(np.float64)
    for m in multicasts:
        out[m.root] += m.size_bytes
        inn[list(m.receivers)] += m.size_bytes
    return float(max((8.0 * out / cap_out).max(initial=0.0), (8.0 * inn / cap_in).max()))


def multicast_lambda(
    fabric: Fabric, s: IntArray, t: IntArray, b: IntArray, multicasts: Sequence[Multicast]
) -> tuple[float, str, int]:
    """``lambda`` of a phase with unicast host flows ``s -> t`` (``b`` bytes) and
    ``multicasts``: (seconds, status, LP variables)."""
    nic = nic_bound(fabric, s, t, b, multicasts)
    if not s.size and len(multicasts) == 1:
        m = multicasts[0]
        tree = build_tree(fabric, m.root, m.receivers)
        peak = max(8.0 * m.size_bytes / float(fabric.capacity_bps[a]) for a in tree.arcs)
        if peak <= nic * (1.0 + 1e-9):
            return peak, "certified", 0
    scale = max([float(b.max(initial=0))] + [m.size_bytes for m in multicasts] + [1.0])
    lp = _Problem(fabric, scale)
    for dest in np.unique(t):
        lp.unicast(int(dest), s[t == dest], b[t == dest].astype(np.float64))
    for m in multicasts:
        lp.multicast(m)
    if lp.nvars > MAX_VARS:
        return nic, "nic", 0
    lam = lp.solve()
    return max(lam, nic * (1.0 - 1e-9)), "optimal", lp.nvars + 1


class _Problem:
    """The LP's sparse rows, added commodity by commodity."""

    def __init__(self, fabric: Fabric, scale: float) -> None:
        self.fabric = fabric
        self.scale = scale  # bytes per LP unit of a unicast flow
        self.n = fabric.nnodes
        self.transit: BoolArray = np.arange(self.n) >= fabric.nhosts
        self.weight = 8.0 / np.asarray(fabric.capacity_bps, dtype=np.float64)
        self.nvars = 0
        self.nblocks = 0
        self.eq: list[tuple[IntArray, IntArray, FloatArray]] = []  # (row key, var, coef)
        self.rhs: dict[int, float] = {}
        self.cap: list[tuple[IntArray, IntArray, FloatArray]] = []  # (arc, var, bytes/unit)
        self.ub: list[tuple[IntArray, IntArray, FloatArray]] = []  # f - y <= 0 rows
        self.nub = 0

    def _flow(self, allowed: BoolArray, supply: dict[int, float], sink: int) -> IntArray:
        """Variables on the ``allowed`` arcs with conservation ``out - in = supply`` at
        every node but ``sink``; returns each arc's variable (-1: not allowed)."""
        f = self.fabric
        arcs = np.flatnonzero(allowed)
        var = self.nvars + np.arange(arcs.size)
        self.nvars += arcs.size
        base = self.nblocks * self.n
        self.nblocks += 1
        keys = np.concatenate([base + f.arc_src[arcs], base + f.arc_dst[arcs]])
        coef = np.concatenate([np.ones(arcs.size), -np.ones(arcs.size)])
        keep = keys != base + sink
        self.eq.append((keys[keep], np.concatenate([var, var])[keep], coef[keep]))
        for node, amount in supply.items():
            self.rhs[base + node] = self.rhs.get(base + node, 0.0) + amount
        out = np.full(f.narcs, -1, dtype=np.int64)
        out[arcs] = var
        return out

    def _ends(self, sources: BoolArray, sinks: BoolArray) -> BoolArray:
        f = self.fabric
        src_ok = self.transit[f.arc_src] | sources[f.arc_src]
        dst_ok = self.transit[f.arc_dst] | sinks[f.arc_dst]
        out: BoolArray = src_ok & dst_ok & ~sinks[f.arc_src] & ~sources[f.arc_dst]
        return out

    def unicast(self, dest: int, src: IntArray, size: FloatArray) -> None:
        """The flows into host ``dest`` (bytes, from hosts ``src``)."""
        sources = np.zeros(self.n, dtype=np.bool_)
        sources[src] = True
        sinks = np.zeros(self.n, dtype=np.bool_)
        sinks[dest] = True
        supply: dict[int, float] = {}
        for h, x in zip(src.tolist(), size.tolist(), strict=True):
            supply[h] = supply.get(h, 0.0) + x / self.scale
        var = self._flow(self._ends(sources, sinks), supply, dest)
        arcs = np.flatnonzero(var >= 0)
        self.cap.append((arcs, var[arcs], np.ones(arcs.size)))

    def multicast(self, m: Multicast) -> None:
        """One tree's ``y`` and a unit flow per receiver bounded by it."""
        f = self.fabric
        sources = np.zeros(self.n, dtype=np.bool_)
        sources[m.root] = True
        sinks = np.zeros(self.n, dtype=np.bool_)
        sinks[list(m.receivers)] = True
        tree_arcs = np.flatnonzero(self._ends(sources, sinks))
        y = np.full(f.narcs, -1, dtype=np.int64)
        y[tree_arcs] = self.nvars + np.arange(tree_arcs.size)
        self.nvars += tree_arcs.size
        share = m.size_bytes / self.scale
        self.cap.append((tree_arcs, y[tree_arcs], np.full(tree_arcs.size, share)))
        for r in m.receivers:
            one = np.zeros(self.n, dtype=np.bool_)
            one[r] = True
            fvar = self._flow(self._ends(sources, one), {m.root: 1.0}, r)
            arcs = np.flatnonzero(fvar >= 0)
            rows = self.nub + np.arange(arcs.size)
            self.nub += arcs.size
            self.ub.append((rows, fvar[arcs], np.ones(arcs.size)))
            self.ub.append((rows, y[arcs], -np.ones(arcs.size)))

    def solve(self) -> float:
        """The optimum ``lambda`` in seconds."""
        if self.nvars == 0:
            return 0.0
        nv = self.nvars
        wmin = float(self.weight.min())
        keys = np.concatenate([k for k, _, _ in self.eq])
        wanted = np.array(list(self.rhs), dtype=np.int64)
        row_ids, row_of = np.unique(np.concatenate([keys, wanted]), return_inverse=True)
        a_eq = coo_matrix(
            (
                np.concatenate([c for _, _, c in self.eq]),
                (row_of[: keys.size], np.concatenate([v for _, v, _ in self.eq])),
            ),
            shape=(row_ids.size, nv + 1),
        )
        b_eq = np.zeros(row_ids.size)
        b_eq[row_of[keys.size :]] = [self.rhs[k] for k in self.rhs]
        arc = np.concatenate([a for a, _, _ in self.cap])
        used, arc_row = np.unique(arc, return_inverse=True)
        coef = np.concatenate([c for _, _, c in self.cap]) * self.weight[arc] / wmin
        ub_rows = np.concatenate(
            [arc_row, np.arange(used.size)] + [r + used.size for r, _, _ in self.ub]
        )
        ub_cols = np.concatenate(
            [np.concatenate([v for _, v, _ in self.cap]), np.full(used.size, nv)]
            + [v for _, v, _ in self.ub]
        )
        ub_vals = np.concatenate([coef, -np.ones(used.size)] + [c for _, _, c in self.ub])
        nrows = used.size + self.nub
        a_ub = coo_matrix((ub_vals, (ub_rows, ub_cols)), shape=(nrows, nv + 1))
        cost = np.zeros(nv + 1)
        cost[nv] = 1.0
        res = linprog(
            cost,
            A_ub=a_ub.tocsr(),
            b_ub=np.zeros(nrows),
            A_eq=a_eq.tocsr(),
            b_eq=b_eq,
            bounds=(0, None),
            method="highs",
        )
        if res.status != 0:
            raise RoutingError(f"multicast congestion LP ({nv} variables) failed: {res.message}")
        return float(res.fun) * self.scale * wmin


def phase_multicasts(
    fabric: Fabric, demands: Demands
) -> tuple[dict[int, list[Multicast]], Demands]:
    """The replicated transfers of each phase of ``demands``, and the demands' unicast
    flows alone (the same demands when there is no replicated transfer)."""
    groups = Multicasts.of(demands)
    out: dict[int, list[Multicast]] = {}
    for g in range(len(groups)):
        m = Multicast(
            int(groups.root[g]), groups.receivers(demands, g), float(groups.size_bytes[g])
        )
        out.setdefault(int(groups.phase[g]), []).append(m)
    return out, (subset(demands, groups.unicast) if out else demands)


def multicast_phase(
    fabric: Fabric,
    s: IntArray,
    t: IntArray,
    b: IntArray,
    multicasts: Sequence[Multicast],
    single_path: Callable[[IntArray, IntArray, FloatArray], float],
) -> tuple[float, float, float, str, int]:
    """``(lambda, single path, nic, status, LP variables)`` of a phase with replicated
    transfers.  The single-path bound is the largest of ``lambda``, the unicast flows'
    single-path bound and, for each receiver of each transfer, that of its one path
    from the root alone (a tree reaches each receiver by one path carrying all the
    bytes; the transfer's receivers are not independent jobs of the cut argument)."""
    lam, status, nvars = multicast_lambda(fabric, s, t, b, multicasts)
    sp = max(lam, single_path(s, t, b.astype(np.float64)) if s.size else 0.0)
    one = np.zeros(1, dtype=np.int64)
    for m in multicasts:
        for r in m.receivers:
            pair = single_path(one + m.root, one + r, np.array([m.size_bytes]))
            sp = max(sp, pair)
    return lam, sp, nic_bound(fabric, s, t, b, multicasts), status, nvars
