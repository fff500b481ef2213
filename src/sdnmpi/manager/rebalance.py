"""Rebalancing: moving running jobs for a new one, pure, over one snapshot.

When a new job's routes share links with running jobs, up to ``limit`` of them
(most shared bytes first) are re-planned against all the others; a new plan is
kept when the sum of :func:`~sdnmpi.manager.planning.job_costs` drops.  A job keeps
the host pairs it holds (a pair is routed for one job at a time).  If any moved,
the new job is planned once more against them.  Nothing is re-planned when the new
job and the running ones do not slow each other, nor is a job of more than
:data:`MAX_PAIRS` host pairs.

Everything here is a function of its arguments (the routed jobs as one snapshot,
the topology): the manager's service reads the store once and installs what
comes back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sdnmpi.core.routing import Fabric
from sdnmpi.core.routing.model import FloatArray
from sdnmpi.core.topology import Topology
from sdnmpi.errors import SdnMpiError
from sdnmpi.manager import patternfile, planning
from sdnmpi.manager.model import Job, RoutePair

log = logging.getLogger(__name__)

#: Running jobs a new job's routing may re-plan (those sharing most links with it).
JOBS = 8
#: Jobs with more host pairs than this are never re-planned for another job.  With
#: 4096, 256-rank CG and stencil jobs on fat_tree(16) were, and one arrival held the
#: manager's lock for 360 s (benchmarks/bench_manager.py --large); 32-rank jobs have
#: up to 992 pairs and re-plan in about a second on fat_tree(8).
MAX_PAIRS = 1024

Routes = tuple[RoutePair, ...]


def rebalanced(
    job: Job, routes: Routes, routed: Mapping[int, Job], topo: Topology, limit: int
) -> tuple[Routes, dict[int, Routes]]:
    """The new ``job``'s routes and the running jobs worth moving for it (new routes by
    job id); ``routed``: the other routed jobs, one snapshot."""
    routed = {j: r for j, r in routed.items() if j != job.job_id and r.routes}
    if limit <= 0 or not routed:
        return routes, {}
    fab = Fabric(topo)
    current = {j: r.routes for j, r in routed.items()} | {job.job_id: routes}
    loads = {j: planning.arc_bytes(fab, rs) for j, rs in current.items()}

    def total(some: Mapping[int, FloatArray]) -> float:
        return sum(planning.job_costs(fab, some).values())

    cost = total(loads)
    apart = total({j: loads[j] for j in routed}) + total({job.job_id: loads[job.job_id]})
    if cost <= apart * (1 + 1e-9):  # the new job slows no one, nor is slowed
        return routes, {}
    shared = {
        j: planning.overlap(fab, loads[j], loads[job.job_id])
        for j in routed
        if len(current[j]) <= MAX_PAIRS
    }
    overlapping = [j for j, b in shared.items() if b > 0]
    candidates = sorted(overlapping, key=lambda j: -shared[j])[:limit]
    moved: dict[int, Routes] = {}
    for j in [*candidates, job.job_id]:
        if j == job.job_id and (not moved or len(routes) > MAX_PAIRS):
            break
        trial = replan(routed.get(j, job), current, topo)
        if trial is None:
            continue
        trial_load = planning.arc_bytes(fab, trial)
        trial_cost = total(loads | {j: trial_load})
        if trial_cost < cost * (1 - 1e-9):
            current[j], loads[j], cost = trial, trial_load, trial_cost
            if j != job.job_id:
                moved[j] = trial
    return current[job.job_id], moved


def replan(job: Job, current: Mapping[int, Routes], topo: Topology) -> Routes | None:
    """``job`` planned against every other job in ``current``, on the same host pairs
    as now (``None`` if that fails or the pairs differ)."""
    pairs = {(r.src, r.dst) for r in current[job.job_id]}
    others = [rs for k, rs in current.items() if k != job.job_id]
    try:
        pattern = patternfile.from_json(job.pattern_json, f"job {job.job_id} pattern")
        plan = planning.plan(topo, pattern, job.processes, job.router, others)
    except SdnMpiError as exc:
        log.warning("job %d: re-planning failed: %s", job.job_id, exc)
        return None
    trial = tuple(r for r in plan if (r.src, r.dst) in pairs)
    return trial if {(r.src, r.dst) for r in trial} == pairs else None
