"""The manager's job routing: computing a job's routes, installing them, and keeping
the controller's job routes in step with the store.

Called by :class:`~sdnmpi.manager.service.ManagerService` when a started job's ranks
are all known (:meth:`JobRouting.route`) and when the manager starts or the
controller comes back (:meth:`JobRouting.reconcile`).  A job's routes are computed
with the adapter's lock released (:attr:`JobRouting.unlocked`): the job is read
again when the lock is back, and the routes are dropped if it changed meanwhile.
Routing never raises to the caller: a failure leaves the job on default routes
with ``detail`` saying why.  Rebalancing is :mod:`sdnmpi.manager.rebalance`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sdnmpi.core.topology import Topology
from sdnmpi.errors import SdnMpiError
from sdnmpi.manager import patternfile, planning, rebalance
from sdnmpi.manager.model import (
    MAX_JOB_ID,
    Install,
    Job,
    JobState,
    RoutePair,
    is_scheduler_job,
    not_found,
)
from sdnmpi.manager.store import Store

if TYPE_CHECKING:
    from sdnmpi.manager.service import ControllerApi

log = logging.getLogger(__name__)

#: Times a job changed while its routes were computed (re-patterned) is routed again
#: with the lock released; then once more holding it.
REPLANS = 2


@dataclass(frozen=True)
class Reconciled:
    """What :meth:`ManagerService.reconcile` changed."""

    reinstalled: tuple[int, ...] = ()
    routed: tuple[int, ...] = ()
    removed: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()


class JobRouting:
    """Jobs' routes over a store and a controller; see the module docstring."""

    def __init__(
        self, store: Store, controller: ControllerApi, clock: Callable[[], float], limit: int
    ) -> None:
        self.store = store
        self.controller = controller
        self.clock = clock
        #: Running jobs a new job's routing may re-plan (:mod:`sdnmpi.manager.rebalance`).
        self.rebalance = limit
        #: A context in which the adapter's lock is released (nothing by default).
        self.unlocked: Callable[[], contextlib.AbstractContextManager[object]] = (
            contextlib.nullcontext
        )
        #: Jobs whose routes a call is computing (another call does not start again).
        self._planning: set[int] = set()

    def _read(self, job_id: int) -> Job:
        job = self.store.get_job(job_id)
        if job is None:
            raise not_found(f"no job {job_id}")
        return job

    def route_if_ready(self, job: Job) -> Job:
        """Route a started job once all its ranks are known (``job`` has its processes)."""
        if job.state is JobState.STARTING and job.all_registered():
            return self.route(job)
        return job

    def route(self, job: Job, *, release: bool = True) -> Job:
        """Compute and install the job's routes; any failure leaves it on DEFAULT.

        With ``release`` the routes are computed outside the adapter's lock
        (:meth:`_plan`); a job already being routed by another call is returned as
        it is (STARTING: GetJob and WaitRoutes see the outcome)."""
        if job.job_id in self._planning:
            return job
        self._planning.add(job.job_id)
        try:
            for _ in range(REPLANS if release else 0):
                routed = self._route_now(job, release=True)
                if routed is not None:
                    return routed
                # changed while its routes were computed: finished, or to route again
                job = self._read(job.job_id)
                if job.state is not JobState.STARTING or not job.all_registered():
                    return job
            routed = self._route_now(job, release=False)  # holding the lock: no change
            assert routed is not None
            return routed
        finally:
            self._planning.discard(job.job_id)

    def _route_now(self, job: Job, release: bool) -> Job | None:
        """One attempt of :meth:`_route`; ``None`` if the job changed meanwhile.

        The routed jobs are read from the store once before planning (their load) and,
        if the lock was released meanwhile, once after (their host pairs, and the
        snapshot rebalancing works on)."""
        t0 = self.clock()
        moved: dict[int, tuple[RoutePair, ...]] = {}
        try:
            routed = self._evict_user_jobs(job, self._routed(job.job_id))
            topo = self.controller.topology()
            planned = self._plan(job, topo, release, [j.routes for j in routed.values()])
            if planned is None:
                return None
            job, plan = planned
            routed = self._routed(job.job_id) if release else routed
            routes, shared = self._unshared(job, plan, routed)
            if not routes:
                why = shared or "the pattern sends nothing between hosts"
                job = self._default(job, why)
            else:
                routes, moved = rebalance.rebalanced(job, routes, routed, topo, self.rebalance)
                result = self.controller.install(job.job_id, planning.pairs_of(routes))
                install = dataclasses.replace(result, install_s=self.clock() - t0)
                job = dataclasses.replace(
                    job, state=JobState.ROUTED, routes=routes, install=install, detail=shared
                )
        except SdnMpiError as exc:
            job = self._default(job, f"routing failed: {exc}")
        except Exception as exc:  # a router bug must not fail the job's start
            log.exception("job %d: routing crashed", job.job_id)
            job = self._default(job, f"routing failed (internal error): {exc!r}")
        self.store.save_job(job)
        log.info("job %d: %s %s", job.job_id, job.state.name, job.detail)
        if job.state is JobState.ROUTED:
            self._move(job.job_id, moved)
        return job

    def _routed(self, but: int) -> dict[int, Job]:
        """The routed jobs other than job ``but``, by id: one read of the store."""
        return {
            j.job_id: j
            for j in self.store.list_jobs()
            if j.state is JobState.ROUTED and j.job_id != but
        }

    def _evict_user_jobs(self, job: Job, routed: dict[int, Job]) -> dict[int, Job]:
        """A scheduler job's hosts are its own: user jobs routed between them go to
        default routes (the scheduler's job wins the host pairs).  The routed jobs
        that remain."""
        if not is_scheduler_job(job.job_id):
            return routed
        hosts = {p.node for p in job.processes}
        for other in list(routed.values()):
            if is_scheduler_job(other.job_id):
                continue
            if any(r.src in hosts and r.dst in hosts for r in other.routes):
                del routed[other.job_id]
                self.controller.remove(other.job_id)
                detail = f"host pairs taken by scheduler job {job.job_id}: default routes"
                self.store.save_job(dataclasses.replace(
                    other, state=JobState.DEFAULT, routes=(), install=Install(), detail=detail
                ))  # fmt: skip
                log.info("job %d: %s", other.job_id, detail)
        return routed

    def _move(self, new_job: int, moved: dict[int, tuple[RoutePair, ...]]) -> None:
        """Install the new routes of running jobs moved for ``new_job``.  The controller
        replaces a job's routes or keeps the old ones on error; the store follows it."""
        for job_id, routes in moved.items():
            job = self.store.get_job(job_id)
            if job is None or job.state is not JobState.ROUTED:
                continue
            try:
                self.controller.install(job_id, planning.pairs_of(routes))
            except SdnMpiError as exc:
                log.warning("job %d: not moved for job %d: %s", job_id, new_job, exc)
                continue
            self.store.save_job(dataclasses.replace(job, routes=routes))
            log.info("job %d: %d host pair(s) moved for job %d", job_id, len(routes), new_job)

    @staticmethod
    def _unshared(
        job: Job, routes: tuple[RoutePair, ...], routed: Mapping[int, Job]
    ) -> tuple[tuple[RoutePair, ...], str]:
        """The routes whose host pair no other routed job holds, and a note on the others.

        The controller routes a host pair for one job at a time (jobs sharing nodes):
        such a pair keeps the other job's path, and this job gets the rest."""
        holder = {(r.src, r.dst): j.job_id for j in routed.values() for r in j.routes}
        mine = tuple(r for r in routes if (r.src, r.dst) not in holder)
        taken = sorted({holder[(r.src, r.dst)] for r in routes if (r.src, r.dst) in holder})
        if not taken:
            return mine, ""
        n = len(routes) - len(mine)
        jobs = ", ".join(map(str, taken))
        return mine, f"{n} host pair(s) shared with job {jobs} keep that job's routes"

    def _plan(
        self, job: Job, topo: Topology, release: bool, others: list[tuple[RoutePair, ...]]
    ) -> tuple[Job, tuple[RoutePair, ...]] | None:
        """The job (read again) and its routes against the routed jobs' load; ``None``
        if, with ``release``, the job changed while the lock was released.

        The pattern is decoded and routed in :attr:`unlocked`; jobs routed meanwhile
        are not in ``others`` (their load is missed, never their host pairs:
        :meth:`_unshared` runs after, under the lock, and rebalancing sees all)."""

        def compute() -> tuple[RoutePair, ...]:
            pattern = patternfile.from_json(job.pattern_json, f"job {job.job_id} pattern")
            return planning.plan(topo, pattern, job.processes, job.router, others)

        if not release:
            return job, compute()
        try:
            with self.unlocked():
                routes = compute()
        except Exception:
            if self._changed(job) is not None:
                raise  # the job is as it was: its routing failed (DEFAULT, _route_now)
            return None
        now = self._changed(job)
        return None if now is None else (now, routes)

    def _changed(self, job: Job) -> Job | None:
        """``job`` as the store has it now, or ``None`` if it is no longer the job that
        was planned (not STARTING, or other ranks, pattern or router)."""
        now = self.store.get_job(job.job_id)
        if (
            now is None
            or now.state is not JobState.STARTING
            or now.processes != job.processes
            or (now.pattern_json, now.router) != (job.pattern_json, job.router)
        ):
            return None
        return now

    def _default(self, job: Job, detail: str) -> Job:
        """The job on default routes; whatever the controller may hold for it is removed."""
        try:
            self.controller.remove(job.job_id)
        except SdnMpiError as exc:
            detail += f"; removing partial routes failed ({exc})"
        return dataclasses.replace(
            job, state=JobState.DEFAULT, routes=(), install=Install(), detail=detail
        )

    def reconcile(self) -> Reconciled:
        """Make the controller's job routes match the store (at start, and periodically).

        A routed job the controller lacks (or holds differently) is reinstalled; a
        started job whose ranks are all known is routed; a job id the controller
        holds that is not routed in the store (finished, unknown) is removed.  Ids
        above the manager's range (the controller's measurement jobs) are left alone.
        """
        held = self.controller.jobs()
        done: dict[str, list[int]] = {"reinstalled": [], "routed": [], "removed": [], "failed": []}
        for job in self.store.list_jobs():
            if job.state is JobState.ROUTED and held.get(job.job_id) != planning.pairs_of(
                job.routes
            ):
                ok = self._reinstall(job)
                done["reinstalled" if ok else "failed"].append(job.job_id)
            elif job.state is JobState.STARTING and job.all_registered():
                routed = self.route(job, release=False)  # the loop's list stays true
                done["routed" if routed.state is JobState.ROUTED else "failed"].append(job.job_id)
        for job_id in sorted(held):
            if job_id > MAX_JOB_ID:  # not a job id of ours: a measurement (pattern record)
                continue
            now = self.store.get_job(job_id)
            if now is None or now.state is not JobState.ROUTED:
                self.controller.remove(job_id)
                done["removed"].append(job_id)
        out = Reconciled(**{k: tuple(v) for k, v in done.items()})
        log.info("reconciled with the controller: %s", out)
        return out

    def _reinstall(self, job: Job) -> bool:
        try:
            self.controller.install(job.job_id, planning.pairs_of(job.routes))
        except SdnMpiError as exc:
            self.store.save_job(self._default(job, f"reinstall after restart failed: {exc}"))
            return False
        return True
