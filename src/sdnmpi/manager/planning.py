"""A job's routes on the live fabric, given the load of the other jobs (pure).

The pattern's ranks are placed where they registered (rank -> node), which
gives host-to-host flows (:meth:`Demands.from_pattern`).  The job's router
routes them on a :class:`LoadedFabric`: the live topology whose arc capacities
are reduced to ``capacity / (1 + n)``, where ``n`` sums, over the other routed
jobs, their *relative* load on that arc (their bytes on it divided by the bytes
on their busiest arc, so 0..1 per job).  A link another job uses at its peak
thus looks half as wide, two such jobs a third, and so on; traffic-aware
routers (``ours``, ``greedy``) steer away from it, oblivious ones ignore it.
Capacities are per arc (link direction), so a job's upstream traffic does not
make the downstream direction look busy.

The controller installs one path per host pair, so the ranks' flows are merged per
host pair and phase before routing, and a pair whose phases got different paths
keeps the path that carries most of its bytes.

Jobs are routed one at a time, so an early job's choice between equal paths can
leave a later one no free path.  :func:`job_costs` scores a set of routed jobs
the same way (each job's busiest arc, its capacity shared with the others'
relative load), so the service can re-plan running jobs that overlap a new one
and keep a move only when the sum over all jobs drops (a rip-up and reroute at
the granularity of jobs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sdnmpi.core.pattern import Pattern
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import Demands, Fabric, Routing, route, validate
from sdnmpi.core.routing.model import FloatArray, IntArray
from sdnmpi.core.topology import Topology
from sdnmpi.errors import RoutingError
from sdnmpi.manager import patternfile
from sdnmpi.manager.model import Job, Process, RoutePair


@dataclass(frozen=True, eq=False)
class LoadedFabric(Fabric):
    """A fabric whose arcs offer ``residual_bps`` instead of their full capacity."""

    residual_bps: FloatArray | None = None

    @cached_property
    def capacity_bps(self) -> FloatArray:
        """Capacity left to a new job on each arc, in bit/s."""
        if self.residual_bps is None:
            return super().capacity_bps
        return self.residual_bps


def arc_bytes(fabric: Fabric, routes: Iterable[RoutePair]) -> FloatArray:
    """Bytes each arc carries under ``routes``.  A hop written ``node:port`` takes
    that port's cable; a plain hop between parallel links shares them evenly.

    Hops the fabric no longer has (a link went down) are skipped.  Only the names
    are read in Python; the arcs are looked up for every hop at once.

    >>> from sdnmpi.core.generators import leaf_spine
    >>> fab = Fabric(leaf_spine(1, 2, 1))
    >>> path = ("h1", "leaf1", "spine1", "leaf2", "h2")
    >>> int(arc_bytes(fab, [RoutePair("h1", "h2", path, 100.0)]).sum())
    400
    """
    routes = list(routes)
    hop_of = _hop_reader(fabric)
    hops = [hop_of(name) for r in routes for name in r.path]
    if len(hops) < 2:
        return np.zeros(fabric.narcs, dtype=np.float64)
    node, port = np.array(hops, dtype=np.int64).reshape(-1, 2).T
    lengths = np.array([len(r.path) for r in routes], dtype=np.int64)
    size = np.repeat(np.array([r.size_bytes for r in routes], dtype=np.float64), lengths)
    inner = np.ones(node.size, dtype=bool)  # hop i -> i + 1 within one route
    inner[np.cumsum(lengths) - 1] = False
    step = np.flatnonzero(inner[:-1] & (node[:-1] >= 0) & (node[1:] >= 0))
    return _spread(fabric, node[step], node[step + 1], port[step], size[step])


def _hop_reader(fabric: Fabric) -> Callable[[str], tuple[int, int]]:
    """Path element -> (node index or -1 if gone, out port or -1): :meth:`Topology.hop`."""
    topo, index = fabric.topology, fabric.index
    seen: dict[str, tuple[int, int]] = {}

    def read(name: str) -> tuple[int, int]:
        found = seen.get(name)
        if found is None:
            node, port = topo.hop(name)
            found = seen[name] = (index.get(node, -1), -1 if port is None else port)
        return found

    return read


def _spread(
    fabric: Fabric, u: IntArray, v: IntArray, port: IntArray, size: FloatArray
) -> FloatArray:
    """Bytes per arc of hops ``u -> v`` carrying ``size`` each: over the arc leaving by
    ``port``, or shared evenly by the parallel arcs where ``port`` is -1."""
    n = fabric.nnodes
    key = fabric.arc_src * n + fabric.arc_dst
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    want = u * n + v
    lo = np.searchsorted(sorted_key, want, "left")
    count = np.searchsorted(sorted_key, want, "right") - lo
    hop = np.repeat(np.arange(want.size), count)
    arc = order[lo[hop] + np.arange(hop.size) - np.repeat(np.cumsum(count) - count, count)]
    src_port = np.array([a.src_port for a in fabric.topology.arcs], dtype=np.int64)
    ok = (port[hop] < 0) | (src_port[arc] == port[hop])
    hop, arc = hop[ok], arc[ok]
    share = np.bincount(hop, minlength=want.size)
    out = np.bincount(arc, weights=size[hop] / share[hop], minlength=fabric.narcs)
    return out.astype(np.float64, copy=False)


def relative_load(load: FloatArray) -> FloatArray:
    """Each arc's bytes over the busiest arc's bytes (all zero for an idle job).

    >>> relative_load(np.array([0.0, 5.0, 10.0])).tolist()
    [0.0, 0.5, 1.0]
    """
    peak = float(load.max(initial=0.0))
    if peak <= 0:
        return np.zeros_like(load)
    out: FloatArray = load / peak
    return out


def background(fabric: Fabric, others: Iterable[Sequence[RoutePair]]) -> FloatArray:
    """``n`` per arc: the sum of the other jobs' relative loads."""
    total = np.zeros(fabric.narcs, dtype=np.float64)
    for routes in others:
        total += relative_load(arc_bytes(fabric, routes))
    return total


def loaded(topology: Topology, others: Iterable[Sequence[RoutePair]]) -> LoadedFabric:
    """The live fabric as a new job sees it: capacities divided by ``1 + n``."""
    plain = Fabric(topology)
    n = background(plain, others)
    residual = plain.capacity_bps / (1.0 + n)
    residual.setflags(write=False)
    return LoadedFabric(topology, residual)


def job_costs(fabric: Fabric, loads: Mapping[int, FloatArray]) -> dict[int, float]:
    """Each job's predicted seconds per pattern on the shared fabric.

    ``loads`` holds each job's :func:`arc_bytes`.  A job's cost is
    ``max_e 8 * bytes_e / (capacity_e / (1 + n_e))`` with ``n_e`` the *other* jobs'
    relative load on arc ``e``: what :func:`plan` minimizes for a new job, here for
    every job at once.

    >>> from sdnmpi.core.generators import leaf_spine
    >>> fab = Fabric(leaf_spine(2, 2, 2))
    >>> def load(src, dst, spine):
    ...     path = (src, "leaf1", spine, "leaf2", dst)
    ...     return arc_bytes(fab, [RoutePair(src, dst, path, 1e9)])
    >>> a, b, c = load("h1", "h3", "spine1"), load("h2", "h4", "spine1"), load("h2", "h4", "spine2")
    >>> shared, apart = job_costs(fab, {1: a, 2: b}), job_costs(fab, {1: a, 2: c})
    >>> round(shared[1] / apart[1], 6), round(shared[2] / apart[2], 6)
    (2.0, 2.0)
    """
    rel = {j: relative_load(b) for j, b in loads.items()}
    total = sum(rel.values(), np.zeros(fabric.narcs, dtype=np.float64))
    cap = fabric.capacity_bps
    return {
        j: float((8.0 * b * (1.0 + total - rel[j]) / cap).max(initial=0.0))
        for j, b in loads.items()
    }


def overlap(fabric: Fabric, load: FloatArray, other: FloatArray) -> float:
    """Bytes of ``load`` on switch-to-switch arcs that ``other`` also uses (0: none)."""
    both = (load > 0) & (other > 0) & ~fabric.is_host_arc
    return float(load[both].sum())


def nearby(fabric: Fabric, load: FloatArray, other: FloatArray) -> float:
    """Bytes of ``load`` on switch-to-switch arcs that start or end at a switch whose
    switch-to-switch arcs ``other`` uses (0: none).  A job near an ended one may gain
    from the links that job freed, even if it avoided them while it ran."""
    inner = ~fabric.is_host_arc
    used = (other > 0) & inner
    nodes = np.zeros(fabric.nnodes, dtype=bool)
    nodes[fabric.arc_src[used]] = True
    nodes[fabric.arc_dst[used]] = True
    near = inner & (load > 0) & (nodes[fabric.arc_src] | nodes[fabric.arc_dst])
    return float(load[near].sum())


def demands_for(fabric: Fabric, pattern: Pattern, processes: Sequence[Process]) -> Demands:
    """Host-to-host flows of ``pattern`` with rank r on ``processes``' node of rank r,
    one per host pair and phase (:meth:`Demands.per_host_pair`): the switches hold one
    path per host pair, so routing each rank pair apart only costs time (under the
    manager's lock)."""
    if pattern.hosts is not None:
        return Demands.from_pattern(fabric, pattern).per_host_pair()
    hosts = tuple(p.node for p in sorted(processes, key=lambda p: p.rank))
    return Demands.from_pattern(fabric, pattern, Placement(hosts)).per_host_pair()


def plan(
    topology: Topology,
    pattern: Pattern,
    processes: Sequence[Process],
    router: str,
    others: Iterable[Sequence[RoutePair]] = (),
) -> tuple[RoutePair, ...]:
    """The job's routes: one path and its bytes per host pair that carries traffic."""
    fabric = loaded(topology, others)
    demands = demands_for(fabric, pattern, processes)
    if not len(demands):
        return ()
    routing = route(router, fabric, demands)
    validate(fabric, demands, routing)
    return pair_routes(fabric, demands, routing)


@dataclass(frozen=True)
class PlanRequest:
    """What planning a job takes: the live topology, the job (its pattern snapshot,
    ranks and router) and the routes of the jobs whose load it is planned against."""

    topology: Topology
    job: Job
    others: tuple[tuple[RoutePair, ...], ...] = ()


#: Computes a job's routes (:func:`plan_job`; tests pass slow or failing ones).
Planner = Callable[[PlanRequest], tuple[RoutePair, ...]]


def plan_job(req: PlanRequest) -> tuple[RoutePair, ...]:
    """:func:`plan` for a job as the store keeps it (its pattern decoded first)."""
    job = req.job
    pattern = patternfile.from_json(job.pattern_json, f"job {job.job_id} pattern")
    return plan(req.topology, pattern, job.processes, job.router, req.others)


def pair_routes(fabric: Fabric, demands: Demands, routing: Routing) -> tuple[RoutePair, ...]:
    """One path per host pair (the path with most of the pair's bytes, the first found
    on a tie), with the pair's bytes, sorted by names; a hop over one of several
    parallel links names its port (``leaf1:3``).  Flows are grouped by their arc rows
    with numpy, so only the chosen paths become names."""
    arcs = routing.arcs
    if not len(demands):
        return ()
    if arcs.shape[1] == 0 or (arcs[:, 0] < 0).any():
        bad = 0 if arcs.shape[1] == 0 else int(np.flatnonzero(arcs[:, 0] < 0)[0])
        raise RoutingError(f"{routing.router}: flow {bad} has no path")
    weight = (demands.size_bytes * demands.phase_repeat[demands.phase]).astype(np.float64)
    _, path_id = np.unique(arcs, axis=0, return_inverse=True)
    keys = np.stack([demands.src, demands.dst, path_id.reshape(-1)], axis=1)
    groups, first, group_of = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    group_bytes = np.bincount(group_of.reshape(-1), weights=weight, minlength=len(groups))
    # per pair (groups are sorted by pair): most bytes, then the first flow's path
    order = np.lexsort((first, -group_bytes, groups[:, 1], groups[:, 0]))
    pair_key = groups[order, :2]
    lead = np.r_[True, np.any(pair_key[1:] != pair_key[:-1], axis=1)]
    chosen = order[lead]
    pair_of_group = np.cumsum(lead) - 1
    pair_bytes = np.bincount(pair_of_group, weights=group_bytes[order], minlength=len(chosen))
    labels = _arc_labels(fabric)
    names = fabric.names
    out = []
    for g, total in zip(chosen.tolist(), pair_bytes.tolist(), strict=True):
        row = arcs[first[g]]
        row = row[row >= 0].tolist()
        path = (*(labels[a] for a in row), names[int(fabric.arc_dst[row[-1]])])
        out.append(RoutePair(path[0], path[-1], path, total))
    out.sort(key=lambda r: (r.src, r.dst))
    return tuple(out)


def _arc_labels(fabric: Fabric) -> list[str]:
    """Each arc's source as a path names it: ``node:out_port`` where parallel links
    join the same two nodes, else ``node`` (:meth:`Topology.path_names`)."""
    ends = np.stack([fabric.arc_src, fabric.arc_dst], axis=1)
    _, inverse, counts = np.unique(ends, axis=0, return_inverse=True, return_counts=True)
    parallel = counts[inverse.reshape(-1)] > 1
    return [
        f"{a.src}:{a.src_port}" if many else a.src
        for a, many in zip(fabric.topology.arcs, parallel.tolist(), strict=True)
    ]


def pairs_of(routes: Iterable[RoutePair]) -> dict[tuple[str, str], list[str]]:
    """The controller's ``pairs`` argument: (src, dst) -> node names."""
    return {(r.src, r.dst): list(r.path) for r in routes}
