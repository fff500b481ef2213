"""Rebalancing: moving running jobs when a job arrives or ends, pure, over one snapshot.

When a new job's routes share links with running jobs (:func:`for_arrival`), up
to ``limit`` of them (most shared bytes first) are re-planned against all the
others; a new plan is kept when the sum of :func:`~sdnmpi.manager.planning.job_costs`
drops.  If any moved, the new job is re-planned once more against them.  Nothing
is re-planned when the new job and the running ones do not slow each other.

When a job ends (:func:`for_end`; or several: the ends that queued while the
manager was busy are taken together), the jobs that can gain are those whose traffic
passes the switches it used (:func:`~sdnmpi.manager.planning.nearby`: they may take
the links it freed, even if they avoided them while it ran): up to ``limit`` of them
(most bytes there first) are re-planned against the others, kept on the same
condition.  Nothing else is touched, so the
work grows with the jobs the arrival or the end concerns, not with all jobs.

A job keeps the host pairs it holds (a pair is routed for one job at a time), and
no job of more than :data:`MAX_PAIRS` host pairs is re-planned for another one.

Everything here is a function of its arguments (the routed jobs as one snapshot,
the topology, the planner): the manager computes it with its lock released and
commits what comes back if the jobs it moves did not change meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from sdnmpi.core.routing import Fabric
from sdnmpi.core.routing.model import FloatArray
from sdnmpi.core.topology import Topology
from sdnmpi.errors import SdnMpiError
from sdnmpi.manager import planning
from sdnmpi.manager.model import Job, RoutePair
from sdnmpi.manager.planning import Planner, PlanRequest

log = logging.getLogger(__name__)

#: Running jobs an arrival or an end may re-plan (those sharing most links with it).
JOBS = 8
#: Jobs with more host pairs than this are never re-planned for another job.  When
#: re-planning held the manager's lock, 256-rank CG and stencil jobs on fat_tree(16)
#: at 4096 held it for 360 s for one arrival (benchmarks/bench_manager.py --large);
#: now it runs with the lock released, but still costs a router run per job.
MAX_PAIRS = 1024

Routes = tuple[RoutePair, ...]


def for_arrival(
    job_id: int,
    routed: Mapping[int, Job],
    topo: Topology,
    limit: int,
    planner: Planner = planning.plan_job,
    *,
    again: bool = False,
) -> dict[int, Routes]:
    """New routes of the running jobs worth moving now that job ``job_id`` (one of
    ``routed``, the routed jobs as one snapshot) runs, its own among them if it gains
    after they moved (or, with ``again``, anyway: load went away while it was
    planned)."""
    current = {j: r.routes for j, r in routed.items() if r.routes}
    if limit <= 0 or job_id not in current or (len(current) < 2 and not again):
        return {}
    fab = Fabric(topo)
    loads = {j: planning.arc_bytes(fab, rs) for j, rs in current.items()}
    others = {j: b for j, b in loads.items() if j != job_id}
    apart = _total(fab, others) + _total(fab, {job_id: loads[job_id]})
    if _total(fab, loads) <= apart * (1 + 1e-9) and not again:  # nobody slows anybody
        return {}
    order = _sharing(fab, loads[job_id], others, current, limit)
    moved = _improve(order, current, loads, fab, topo, routed, planner)
    if (moved or again) and len(current[job_id]) <= MAX_PAIRS:
        moved |= _improve([job_id], current, loads, fab, topo, routed, planner)
    return moved


def for_end(
    ended: Sequence[Job],
    routed: Mapping[int, Job],
    topo: Topology,
    limit: int,
    planner: Planner = planning.plan_job,
) -> dict[int, Routes]:
    """New routes of the running jobs worth moving now that the ``ended`` jobs (routed
    until now, not in ``routed``) freed their links: those near them, re-planned."""
    gone_ids = {e.job_id for e in ended}
    current = {j: r.routes for j, r in routed.items() if r.routes and j not in gone_ids}
    freed = [r for e in ended for r in e.routes]
    if limit <= 0 or not current or not freed:
        return {}
    fab = Fabric(topo)
    loads = {j: planning.arc_bytes(fab, rs) for j, rs in current.items()}
    gone = planning.arc_bytes(fab, tuple(freed))
    near = {
        j: planning.nearby(fab, b, gone) for j, b in loads.items() if len(current[j]) <= MAX_PAIRS
    }
    order = sorted((j for j, b in near.items() if b > 0), key=lambda j: -near[j])[:limit]
    return _improve(order, current, loads, fab, topo, routed, planner)


def _total(fab: Fabric, loads: Mapping[int, FloatArray]) -> float:
    return sum(planning.job_costs(fab, loads).values())


def _sharing(
    fab: Fabric,
    load: FloatArray,
    others: Mapping[int, FloatArray],
    current: Mapping[int, Routes],
    limit: int,
) -> list[int]:
    """Up to ``limit`` jobs of ``others`` sharing switch links with ``load``, most
    shared bytes first (none above :data:`MAX_PAIRS` host pairs)."""
    shared = {
        j: planning.overlap(fab, b, load) for j, b in others.items() if len(current[j]) <= MAX_PAIRS
    }
    return sorted((j for j, b in shared.items() if b > 0), key=lambda j: -shared[j])[:limit]


def _improve(
    order: Sequence[int],
    current: dict[int, Routes],
    loads: dict[int, FloatArray],
    fab: Fabric,
    topo: Topology,
    routed: Mapping[int, Job],
    planner: Planner,
) -> dict[int, Routes]:
    """Re-plan the jobs of ``order`` one by one against all the others; keep a plan
    when the sum of job costs drops (``current`` and ``loads`` follow)."""
    cost = _total(fab, loads)
    moved: dict[int, Routes] = {}
    for j in order:
        trial = replan(routed[j], current, topo, planner)
        if trial is None:
            continue
        trial_load = planning.arc_bytes(fab, trial)
        trial_cost = _total(fab, loads | {j: trial_load})
        if trial_cost < cost * (1 - 1e-9):
            current[j], loads[j], cost = trial, trial_load, trial_cost
            moved[j] = trial
    return moved


def replan(
    job: Job,
    current: Mapping[int, Routes],
    topo: Topology,
    planner: Planner = planning.plan_job,
) -> Routes | None:
    """``job`` planned against every other job in ``current``, on the same host pairs
    as now (``None`` if that fails or the pairs differ)."""
    pairs = {(r.src, r.dst) for r in current[job.job_id]}
    others = tuple(rs for k, rs in current.items() if k != job.job_id)
    try:
        plan = planner(PlanRequest(topo, job, others))
    except SdnMpiError as exc:
        log.warning("job %d: re-planning failed: %s", job.job_id, exc)
        return None
    trial = tuple(r for r in plan if (r.src, r.dst) in pairs)
    return trial if {(r.src, r.dst) for r in trial} == pairs else None
