"""Replicated transfers among demands: which flows the switches send once, on a tree.

A phase marked as a replicated broadcast (:func:`sdnmpi.core.broadcasts.is_replicated`)
becomes, in :class:`~sdnmpi.core.routing.model.Demands`, one flow from the root rank
to every receiving rank on another host (ranks on the root's host are served on the
host, as any intra-host cell).  :class:`Multicasts` groups those flows: one *group*
per replicated phase, with its root host, its bytes and its flows.

What the group's flows mean for everyone downstream: the root sends the bytes once
and every arc of the tree carries them once, whatever the number of receivers
behind it.  A :class:`~sdnmpi.core.routing.model.Routing` gives each of the group's
flows the tree's path to its receiver (:func:`route_replicated` builds the trees);
the union of those paths is the tree.  :func:`first_use` keeps one entry per (group,
arc), so that link loads (:func:`sdnmpi.core.routing.bound.max_link_busy`) and the
simulator (:mod:`sdnmpi.sim.replicas`) count each tree arc once; the LP bound treats
the group as one multi-receiver demand (:mod:`sdnmpi.core.routing.multicast_bound`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sdnmpi.core.broadcasts import is_replicated
from sdnmpi.core.routing import route, subset
from sdnmpi.core.routing.model import Demands, Fabric, FloatArray, IntArray, Routing
from sdnmpi.core.routing.multicast import ReplicationTree, build_tree
from sdnmpi.core.routing.paths import padded
from sdnmpi.core.routing.paths import routing as make_routing
from sdnmpi.errors import PatternError


@dataclass(frozen=True, eq=False)
class Multicasts:
    """The replicated groups of a :class:`Demands`.

    Group ``g`` is phase ``phase[g]``'s flows ``rows[ptr[g]:ptr[g+1]]``, from host
    ``root[g]`` (rank ``root_rank[g]``, -1 for host-level demands), each of
    ``size_bytes[g]``.  ``group_of[i]`` is flow i's group (-1: a unicast flow).
    """

    phase: IntArray
    root: IntArray
    root_rank: IntArray
    size_bytes: FloatArray
    ptr: IntArray
    rows: IntArray
    group_of: IntArray

    def __len__(self) -> int:
        return int(self.phase.size)

    def flows(self, group: int) -> IntArray:
        """The flows (demand rows) of one group."""
        out: IntArray = self.rows[self.ptr[group] : self.ptr[group + 1]]
        return out

    def receivers(self, demands: Demands, group: int) -> tuple[int, ...]:
        """The receiving hosts of one group, in flow order, each once."""
        return tuple(dict.fromkeys(int(h) for h in demands.dst[self.flows(group)]))

    @property
    def unicast(self) -> IntArray:
        """The flows that belong to no group."""
        return np.flatnonzero(self.group_of < 0).astype(np.int64)

    @classmethod
    def of(cls, demands: Demands) -> Multicasts:
        """The groups of ``demands`` (none when no phase label is marked replicated).

        :class:`PatternError` when a marked phase's flows leave several ranks (or
        hosts) or carry different sizes.
        """
        marked = [p for p, label in enumerate(demands.phase_labels) if is_replicated(label)]
        group_of = np.full(len(demands), -1, dtype=np.int64)
        cols: dict[str, list[float]] = {k: [] for k in ("phase", "root", "rank", "bytes")}
        ptr, rows = [0], []
        for p in marked:
            flows = np.flatnonzero(demands.phase == p)
            if not flows.size:
                continue
            _check_group(demands, p, flows)
            group_of[flows] = len(cols["phase"])
            cols["phase"].append(p)
            cols["root"].append(int(demands.src[flows[0]]))
            cols["rank"].append(int(demands.src_rank[flows[0]]))
            cols["bytes"].append(float(demands.size_bytes[flows[0]]))
            rows += flows.tolist()
            ptr.append(len(rows))
        ints = {k: np.array(v, dtype=np.int64) for k, v in cols.items() if k != "bytes"}
        return cls(
            ints["phase"],
            ints["root"],
            ints["rank"],
            np.array(cols["bytes"], dtype=np.float64),
            np.array(ptr, dtype=np.int64),
            np.array(rows, dtype=np.int64),
            group_of,
        )

    def trees(
        self, fabric: Fabric, demands: Demands, load_bps: FloatArray | None = None
    ) -> list[ReplicationTree]:
        """One tree per group, grown over ``load_bps[phase]`` (a (phases x arcs) table
        of what other flows put on each arc in the group's phase; None: idle)."""
        out = []
        for g in range(len(self)):
            load = None if load_bps is None else load_bps[int(self.phase[g])]
            out.append(build_tree(fabric, int(self.root[g]), self.receivers(demands, g), load))
        return out


def _check_group(demands: Demands, phase: int, flows: IntArray) -> None:
    label = demands.phase_labels[phase]
    for name, col in (("host", demands.src), ("rank", demands.src_rank)):
        if np.unique(col[flows]).size != 1:
            raise PatternError(f"replicated phase {label!r}: its flows leave several {name}s")
    if np.unique(demands.size_bytes[flows]).size != 1:
        raise PatternError(f"replicated phase {label!r}: its flows carry different sizes")


def first_use(demands: Demands, flow: IntArray, arc: IntArray) -> npt.NDArray[np.bool_]:
    """For path entries ``(flow[j], arc[j])``: whether entry j counts toward link loads.

    Every entry of a unicast flow counts; of a group's flows, the first entry on each
    arc only (the tree carries the bytes once).
    """
    groups = Multicasts.of(demands).group_of
    keep = np.ones(flow.size, dtype=np.bool_)
    if not (groups >= 0).any():
        return keep
    g = groups[flow]
    tree = np.flatnonzero(g >= 0)
    key = g[tree] * (int(arc.max(initial=0)) + 1) + arc[tree]
    _, first = np.unique(key, return_index=True)
    keep[tree] = False
    keep[tree[first]] = True
    return keep


def load_entries(demands: Demands, routing: Routing) -> tuple[IntArray, IntArray]:
    """The path entries ``(flow[j], arc[j])`` that count toward link loads (every hop of
    every flow, in row order, minus :func:`first_use`'s repeats), without copies
    when every entry counts (a million flows: 40 MB per array)."""
    mask = routing.arcs >= 0
    arc = routing.arcs[mask]
    flow = np.repeat(np.arange(mask.shape[0]), mask.sum(axis=1))  # np.nonzero's rows
    del mask
    once = first_use(demands, flow, arc)  # a replicated transfer loads its tree's arcs once
    if once.all():
        return flow, arc
    return flow[once], arc[once]


def phase_loads(fabric: Fabric, demands: Demands, routing: Routing, rows: IntArray) -> FloatArray:
    """(phases x arcs) bits each arc carries per phase from the flows ``rows``."""
    arcs = routing.arcs[rows]
    mask = arcs >= 0
    weight = np.broadcast_to(demands.size_bytes[rows][:, None] * 8.0, arcs.shape)[mask]
    phase = np.broadcast_to(demands.phase[rows][:, None], arcs.shape)[mask]
    na = fabric.narcs
    table = np.bincount(phase * na + arcs[mask], weights=weight, minlength=demands.nphases * na)
    out: FloatArray = table.reshape(demands.nphases, na).astype(np.float64)
    return out


def route_replicated(
    name: str,
    fabric: Fabric,
    demands: Demands,
    *,
    seed: int = 0,
    load_bps: Sequence[float] | FloatArray | None = None,
) -> Routing:
    """Route ``demands`` with router ``name``, each replicated group on a tree.

    The router routes the unicast flows alone (a traffic-aware router must not
    see a group's bytes once per receiver); then each group's tree is grown over the
    arcs the router loaded in the group's phase, plus ``load_bps`` (other traffic),
    so a tree takes an idle link where one is as short.  Each of the group's flows
    gets the tree's path to its receiver.  Without groups: the router's routing.
    """
    groups = Multicasts.of(demands)
    if not len(groups):
        return route(name, fabric, demands, seed=seed)
    paths: list[tuple[int, ...]] = [()] * len(demands)
    uni = groups.unicast
    meta: dict[str, object] = {}
    load = np.zeros((demands.nphases, fabric.narcs))
    if uni.size:
        inner = route(name, fabric, subset(demands, uni), seed=seed)
        meta = dict(inner.meta)
        for i, row in zip(uni.tolist(), inner.arcs, strict=True):
            paths[i] = tuple(int(a) for a in row[row >= 0])
        load = phase_loads(fabric, demands, Routing(name, padded(paths)), uni)
    if load_bps is not None:
        load = load + np.asarray(load_bps, dtype=np.float64)[None, :]
    for g, tree in enumerate(groups.trees(fabric, demands, load)):
        for i in groups.flows(g).tolist():
            paths[i] = tree.path_to(fabric, int(demands.dst[i]))
    meta["trees"] = len(groups)
    return make_routing(name, padded(paths), meta)
