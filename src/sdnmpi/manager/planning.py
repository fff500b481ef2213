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

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sdnmpi.core.pattern import Pattern
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import Demands, Fabric, Routing, route, validate
from sdnmpi.core.routing.model import FloatArray
from sdnmpi.core.topology import Arc, Topology
from sdnmpi.errors import RoutingError
from sdnmpi.manager.model import Process, RoutePair


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

    Hops the fabric no longer has (a link went down) are skipped.

    >>> from sdnmpi.core.generators import leaf_spine
    >>> fab = Fabric(leaf_spine(1, 2, 1))
    >>> path = ("h1", "leaf1", "spine1", "leaf2", "h2")
    >>> int(arc_bytes(fab, [RoutePair("h1", "h2", path, 100.0)]).sum())
    400
    """
    out = np.zeros(fabric.narcs, dtype=np.float64)
    topo = fabric.topology
    between = _arcs_between(fabric)
    for r in routes:
        hops = [topo.hop(name) for name in r.path]
        for (u, port), (v, _) in itertools.pairwise(hops):
            arcs = [a for a in between.get((u, v), ()) if port in (None, a.src_port)]
            for a in arcs:
                out[a.index] += r.size_bytes / len(arcs)
    return out


def _arcs_between(fabric: Fabric) -> dict[tuple[str, str], list[Arc]]:
    table: dict[tuple[str, str], list[Arc]] = {}
    for a in fabric.topology.arcs:
        table.setdefault((a.src, a.dst), []).append(a)
    return table


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


def pair_routes(fabric: Fabric, demands: Demands, routing: Routing) -> tuple[RoutePair, ...]:
    """One path per host pair (the path with most of the pair's bytes), with the pair's
    bytes; a hop over one of several parallel links names its port (``leaf1:3``)."""
    weight = demands.size_bytes * demands.phase_repeat[demands.phase]
    topo = fabric.topology
    best: dict[tuple[str, str], dict[tuple[str, ...], float]] = {}
    for i in range(len(demands)):
        arcs = routing.path(i)
        if not arcs:
            raise RoutingError(f"{routing.router}: flow {i} has no path")
        path = tuple(topo.path_names([topo.arcs[a] for a in arcs]))
        by_path = best.setdefault((path[0], path[-1]), {})
        by_path[path] = by_path.get(path, 0.0) + float(weight[i])
    out = []
    for (src, dst), by_path in sorted(best.items()):
        path = max(by_path, key=lambda p: by_path[p])
        out.append(RoutePair(src, dst, path, sum(by_path.values())))
    return tuple(out)


def pairs_of(routes: Iterable[RoutePair]) -> dict[tuple[str, str], list[str]]:
    """The controller's ``pairs`` argument: (src, dst) -> node names."""
    return {(r.src, r.dst): list(r.path) for r in routes}
