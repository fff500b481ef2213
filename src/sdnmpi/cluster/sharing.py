"""How fast each running job communicates on the shared fabric (pure).

A job's routed traffic (:func:`job_traffic`) is taken phase by phase: phase ``p``
puts ``b_pe`` bytes on arc ``e`` under the job's routes (one path per host pair, as
the manager installs them).  Its *ideal* time is the sum over phases of the NIC
bound ``max over host arcs of 8 b_pe / c_e`` (a non-blocking fabric with perfect
routing); its time *alone* under its routes is the sum over phases of
``max over all arcs of 8 b_pe / c_e`` (phases one after the other, each as long as
its busiest arc, which is what the flow simulator gives for one job alone within a
few per cent: docs/job-stream.md).

Sharing: a job running at the fraction ``x`` of its alone rate puts ``x * 8 b_e / T``
bit/s on arc ``e`` on average, ``b_e`` its bytes over all phases and ``T`` its alone
time.  The running jobs' fractions are max-min fair under the arcs' capacities, at
most 1 each: progressive filling over jobs (the solver of :mod:`sdnmpi.sim.maxmin`,
one weighted "flow" per job, plus a private arc of capacity 1 that caps it).  Its
*speed* relative to the ideal is ``x * ideal / alone``.

Assumptions, stated: the running jobs communicate at the same time (their
communication overlaps, the pessimistic case for a job-level model); on the shared
fabric a job's phases are averaged (its load is spread over its run, not phase by
phase); a job's flows progress together (the bottleneck model the manager's planning
uses, :func:`~sdnmpi.manager.planning.job_costs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sdnmpi.core.routing import Demands, Fabric
from sdnmpi.core.routing.model import FloatArray
from sdnmpi.errors import RoutingError
from sdnmpi.manager import planning
from sdnmpi.manager.model import RoutePair
from sdnmpi.sim.maxmin import maxmin_entries


@dataclass(frozen=True)
class JobTraffic:
    """A job's bytes per arc over all its phases, its ideal and its alone seconds."""

    load: FloatArray
    ideal_s: float
    alone_s: float


def job_traffic(fabric: Fabric, demands: Demands, routes: Sequence[RoutePair]) -> JobTraffic:
    """``demands`` (one flow per host pair and phase) on the paths of ``routes``, phase
    by phase (see the module docstring).  A pair without a route is an error."""
    path_of = {(r.src, r.dst): r.path for r in routes}
    names = fabric.names
    weight = (demands.size_bytes * demands.phase_repeat[demands.phase]).astype(np.float64)
    total = np.zeros(fabric.narcs, dtype=np.float64)
    ideal = alone = 0.0
    host, cap = fabric.is_host_arc, fabric.capacity_bps
    for p in np.unique(demands.phase).tolist():
        rows = np.flatnonzero(demands.phase == p).tolist()
        pairs = []
        for i in rows:
            src, dst = names[int(demands.src[i])], names[int(demands.dst[i])]
            path = path_of.get((src, dst))
            if path is None:
                raise RoutingError(f"no route for host pair {src} -> {dst}")
            pairs.append(RoutePair(src, dst, path, float(weight[i])))
        load = planning.arc_bytes(fabric, pairs)
        total += load
        busy = 8.0 * load / cap
        alone += float(busy.max(initial=0.0))
        ideal += float(busy[host].max(initial=0.0))
    return JobTraffic(total, ideal, alone)


def speeds(fabric: Fabric, jobs: Mapping[int, JobTraffic]) -> dict[int, float]:
    """Each job's max-min fair communication speed relative to its ideal, in (0, 1]
    (1 for a job with no traffic).

    Two jobs whose traffic crosses one link of capacity ``c``, each wanting ``c`` at
    ideal speed, get half each:

    >>> from sdnmpi.core.generators import leaf_spine
    >>> fab = Fabric(leaf_spine(1, 1, 1))
    >>> load = np.zeros(fab.narcs); load[0] = 1.25e8
    >>> job = JobTraffic(load, 1.0, 1.0)
    >>> speeds(fab, {1: job, 2: job})
    {1: 0.5, 2: 0.5}
    """
    out = dict.fromkeys(jobs, 1.0)
    rows = [(j, t) for j, t in jobs.items() if t.alone_s > 0]
    if not rows:
        return out
    flow, arc, weight = [], [], []
    for i, (_, t) in enumerate(rows):
        used = np.flatnonzero(t.load > 0)
        flow.append(np.full(used.size + 1, i, dtype=np.int64))
        arc.append(np.r_[used, fabric.narcs + i].astype(np.int64))
        weight.append(np.r_[8.0 * t.load[used] / t.alone_s, 1.0])
    capacity = np.r_[fabric.capacity_bps, np.ones(len(rows))]
    rate = maxmin_entries(
        np.concatenate(flow), np.concatenate(arc), np.concatenate(weight), len(rows), capacity
    )
    for (j, t), x in zip(rows, rate.tolist(), strict=True):
        out[j] = min(1.0, x) * t.ideal_s / t.alone_s
    return out


def stretched_s(duration_s: float, comm_share: float, speed: float) -> float:
    """A job's run time at communication ``speed``: compute fixed, communication stretched.

    >>> stretched_s(100.0, 0.5, 0.5)
    150.0
    """
    return duration_s * ((1.0 - comm_share) + comm_share / speed)
