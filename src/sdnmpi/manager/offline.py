"""The manager's planning without its server or store: for simulations (pure).

A job-stream replay (:mod:`sdnmpi.cluster.replay`) routes each arriving job the
way :class:`~sdnmpi.manager.jobrouting.JobRouting` does, minus the lock, the store
and the controller: :func:`~sdnmpi.manager.planning.plan_job` on the live topology
against the routed jobs' load, then :func:`~sdnmpi.manager.rebalance.for_arrival`
and, when a job ends, :func:`~sdnmpi.manager.rebalance.for_end`.  This module only
builds the :class:`~sdnmpi.manager.model.Job` records those functions take and hands
them the routed jobs; it plans nothing itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sdnmpi.core.topology import Topology
from sdnmpi.manager import planning, rebalance
from sdnmpi.manager.model import Job, JobState, Process, RoutePair
from sdnmpi.manager.planning import PlanRequest

Routes = tuple[RoutePair, ...]


def routed_job(
    job_id: int,
    pattern_json: bytes,
    hosts: Sequence[str],
    router: str,
    routes: Routes = (),
    *,
    name: str = "",
) -> Job:
    """A job as the store would hold it once routed: rank ``r`` on ``hosts[r]``.

    >>> job = routed_job(7, b"{}", ["h1", "h2"], "ours")
    >>> job.state.name, [p.node for p in job.processes]
    ('ROUTED', ['h1', 'h2'])
    """
    procs = tuple(Process(rank, host) for rank, host in enumerate(hosts))
    return Job(
        job_id=job_id,
        name=name or f"job{job_id}",
        uid=0,
        ntasks=len(procs),
        state=JobState.ROUTED,
        router=router,
        created_s=0.0,
        pattern_json=pattern_json,
        routes=routes,
        processes=procs,
    )


def plan_arrival(topo: Topology, job: Job, routed: Mapping[int, Job]) -> Routes:
    """``job``'s routes against the load of ``routed`` (the jobs routed before it)."""
    others = tuple(j.routes for k, j in routed.items() if k != job.job_id and j.routes)
    return planning.plan_job(PlanRequest(topo, job, others))


def rebalance_arrival(
    job_id: int, routed: Mapping[int, Job], topo: Topology, limit: int = rebalance.JOBS
) -> dict[int, Routes]:
    """The moves the manager's background rebalancing makes after job ``job_id``
    (routed, one of ``routed``) arrived."""
    return rebalance.for_arrival(job_id, routed, topo, limit)


def rebalance_end(
    ended: Job, routed: Mapping[int, Job], topo: Topology, limit: int = rebalance.JOBS
) -> dict[int, Routes]:
    """The moves the manager makes after ``ended`` (no longer in ``routed``) ended."""
    return rebalance.for_end([ended], routed, topo, limit)
