"""The manager's job routing: planning on a snapshot, committing, rebalancing, and
keeping the controller's job routes in step with the store.

Called by :class:`~sdnmpi.manager.service.ManagerService` when a started job's ranks
are all known (:meth:`JobRouting.route`), when a routed job ends
(:meth:`JobRouting.ended`) and when the manager starts or the controller comes back
(:meth:`JobRouting.reconcile`).  The callers hold the adapter's lock; planning never
does:

1. *Snapshot*, under the lock: the routed jobs (:class:`~sdnmpi.manager.snapshot.
   RoutedJobs`, kept in memory beside the store) and the live topology.
2. *Plan*, in :attr:`JobRouting.unlocked`: :attr:`JobRouting.planner` computes the
   job's routes against the snapshot's load.
3. *Commit*, under the lock again: the job is read again (finished meanwhile:
   nothing is installed; re-patterned: planned again); if a job routed meanwhile
   took links the plan uses, the plan is stale and computed again, at most
   :data:`REPLANS` more times, after which the last plan is installed with a note.
   Host pairs another job took meanwhile keep that job's routes.

Rebalancing (:mod:`sdnmpi.manager.rebalance`) after an arrival or an end is work
nobody waits for: :attr:`JobRouting.background` runs it (at once by default, on the
server's planner thread there), planned the same way and committed move by move
where the moved job did not change.  Routing never raises to the caller: a failure
leaves the job on default routes with ``detail`` saying why, logged once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sdnmpi.core.topology import Topology
from sdnmpi.errors import SdnMpiError
from sdnmpi.manager import planning, rebalance, rulebudget
from sdnmpi.manager.model import (
    MAX_JOB_ID,
    Install,
    Job,
    JobState,
    ResyncPendingError,
    RoutePair,
    is_scheduler_job,
)
from sdnmpi.manager.planning import Planner, PlanRequest
from sdnmpi.manager.snapshot import Link, RoutedJobs, Snapshot, switch_links
from sdnmpi.manager.store import Store

if TYPE_CHECKING:
    from sdnmpi.manager.service import ControllerApi

log = logging.getLogger(__name__)

#: A plan found stale at commit (or a job changed while planned) is computed again
#: this many times at most.
REPLANS = 2
#: Seconds waited (lock released) before planning again a job whose install the
#: controller took back because a switch reconnected (:class:`ResyncPendingError`): the
#: switch is resynced meanwhile.  7.5 s in all, within the 10 s a job start waits.
RESYNC_WAITS_S = (0.5, 1.0, 2.0, 4.0)

Routes = tuple[RoutePair, ...]
Pair = tuple[str, str]


@dataclass(frozen=True)
class Reconciled:
    """What :meth:`ManagerService.reconcile` changed (``routed``: started jobs whose
    routing it started; their outcome is the job's state)."""

    reinstalled: tuple[int, ...] = ()
    routed: tuple[int, ...] = ()
    removed: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Plan:
    """A job's routes as computed on ``snap``: the pairs it keeps, their links, and
    the pairs other jobs held then (they keep those jobs' routes)."""

    routes: Routes
    links: frozenset[Link]
    taken: Mapping[Pair, int]
    snap: Snapshot
    note: str = ""  # the rule budget's: rules on the fullest switch, pairs left out


@dataclass(frozen=True)
class _Wait:
    """An attempt whose install the controller took back for a reconnecting switch:
    ``job`` (still STARTING) is planned again after a wait; ``why`` is the reply."""

    job: Job
    why: str


def _now(task: Callable[[], None]) -> None:
    task()


class RoutingEvents(Protocol):
    """What routing reports as it happens (:class:`~sdnmpi.manager.metrics.ManagerMetrics`
    counts it; :class:`NoEvents` by default)."""

    def planned(self, seconds: float) -> None: ...
    def routed_job(self, job: Job) -> None: ...
    def routing_failed(self) -> None: ...
    def finished(self) -> None: ...


class NoEvents:
    """:class:`RoutingEvents` that records nothing."""

    def planned(self, seconds: float) -> None:
        pass

    def routed_job(self, job: Job) -> None:
        pass

    def routing_failed(self) -> None:
        pass

    def finished(self) -> None:
        pass


class JobRouting:
    """Jobs' routes over a store and a controller; see the module docstring."""

    def __init__(
        self, store: Store, controller: ControllerApi, clock: Callable[[], float], limit: int
    ) -> None:
        self.store = store
        self.controller = controller
        self.clock = clock
        #: Running jobs an arrival or an end may re-plan (:mod:`sdnmpi.manager.rebalance`).
        self.rebalance = limit
        #: Computes a job's routes (:func:`planning.plan_job`).
        self.planner: Planner = planning.plan_job
        #: A context in which the adapter's lock is released (nothing by default).
        self.unlocked: Callable[[], contextlib.AbstractContextManager[object]] = (
            contextlib.nullcontext
        )
        #: Runs work no caller waits for, holding the adapter's lock as a call does
        #: (at once by default; the server passes its planner thread).
        self.background: Callable[[Callable[[], None]], None] = _now
        #: Seconds rebalancing waits, lock released, while calls' plans are computed
        #: (0 by default; the server gives calls' planning the processor first).
        self.yield_s = 0.0
        #: How the waits of :data:`RESYNC_WAITS_S` are slept (tests pass their own).
        self.sleep: Callable[[float], None] = time.sleep
        #: Jobs whose routes a call is computing (another call does not start again),
        #: and those whose planner runs right now.
        self._planning: set[int] = set()
        self._computing: set[int] = set()
        #: Routed jobs that ended and whose rebalancing pass has not started yet: a
        #: pass takes all of them at once (ends that queued up while rebalancing ran
        #: cost one pass, not one each).
        self._ended: list[Job] = []
        self._book: RoutedJobs | None = None
        #: Job rules allowed per switch, all jobs together (:mod:`~sdnmpi.manager.
        #: rulebudget`; ``None``: no budget, every pair's route is sent).
        self.rule_budget: int | None = rulebudget.DEFAULT_BUDGET
        #: The controller's default router (the routes a pair without a rule takes).
        self.default_router = "dmodk"
        #: Where planning times, installs and failures are reported (metrics).
        self.events: RoutingEvents = NoEvents()

    # -- the routed jobs ----------------------------------------------------------------
    @property
    def book(self) -> RoutedJobs:
        """The routed jobs (read from the store at first use, then kept in step)."""
        if self._book is None:
            self._book = RoutedJobs(self.store.list_jobs())
        return self._book

    def save(self, job: Job, links: frozenset[Link] | None = None) -> None:
        """Save a job to the store and note it among the routed jobs."""
        self.store.save_job(job)
        self.book.note(job, links)

    # -- a job's routes -----------------------------------------------------------------
    def route_if_ready(self, job: Job) -> Job:
        """Route a started job once all its ranks are known (``job`` has its processes)."""
        if job.state is JobState.STARTING and job.all_registered():
            return self.route(job)
        return job

    def route(self, job: Job) -> Job:
        """Plan (lock released), commit and install the job's routes; any failure
        leaves it on DEFAULT.  A job already being routed by another call is returned
        as it is (STARTING: GetJob and WaitRoutes see the outcome)."""
        if job.job_id in self._planning:
            return job
        self._planning.add(job.job_id)
        try:
            t0, replans, waits = self.clock(), 0, 0
            while True:
                may_wait = waits < len(RESYNC_WAITS_S)
                done = self._attempt(job, t0, last=replans == REPLANS, may_wait=may_wait)
                if isinstance(done, Job):
                    return done
                if isinstance(done, _Wait):
                    log.info("job %d: %s: planned again in %.1f s", job.job_id, done.why,
                             RESYNC_WAITS_S[waits])  # fmt: skip
                    with self.unlocked():
                        self.sleep(RESYNC_WAITS_S[waits])
                    job, waits = done.job, waits + 1
                    continue
                job, why = done
                replans += 1
                if replans > REPLANS:
                    return self._give_up(job, why)
        finally:
            self._planning.discard(job.job_id)

    def _attempt(
        self, job: Job, t0: float, last: bool, may_wait: bool = False
    ) -> Job | tuple[Job, str] | _Wait:
        """Plan once and commit: the job as it ends up, (the job, why) to plan it
        again, or, if ``may_wait``, a :class:`_Wait` when the controller took the
        install back for a switch that reconnects (the job still STARTING, nothing
        of it installed)."""
        snap = self.book.snapshot()
        self._computing.add(job.job_id)
        try:
            topo = self.controller.topology()
            with self.unlocked():
                started = self.clock()
                plan = self._plan(job, topo, snap)
                self.events.planned(self.clock() - started)
        except Exception as exc:
            self._computing.discard(job.job_id)
            now = self._changed(job)
            if now is None:
                return self._after_change(job)
            if isinstance(exc, SdnMpiError):
                return self._fail(now, f"routing failed: {exc}")
            return self._fail(now, f"routing failed (internal error): {exc!r}", exc)
        self._computing.discard(job.job_id)
        now = self._changed(job)
        if now is None:
            return self._after_change(job)
        stale = self.book.stale(snap, plan.links, ignore=(job.job_id,))
        if stale and not last:
            log.info("job %d: job(s) %s routed meanwhile use its links: planned again",
                     job.job_id, stale)  # fmt: skip
            return now, f"job(s) {stale} routed meanwhile use its links"
        note = ""
        if stale:
            note = (f"planned against the load before job(s) {stale} were routed "
                    f"({REPLANS + 1} tries)")  # fmt: skip
        return self._commit(now, plan, t0, note, may_wait)

    def _plan(self, job: Job, topo: Topology, snap: Snapshot) -> _Plan:
        """The job's routes on ``snap`` (run with the lock released)."""
        routed = snap.routed(but=job.job_id)
        for evicted in _evictable(job, routed):  # they give way when this one commits
            del routed[evicted]
        others = tuple(j.routes for j in routed.values())
        routes = self.planner(PlanRequest(topo, job, others))
        mine, taken = _unshared(routes, routed)
        note = ""
        if self.rule_budget is not None and mine:
            view = rulebudget.fabric_rules(topo, self.default_router)
            held = {j: other.routes for j, other in routed.items()}
            fit = rulebudget.within_budget(view, mine, held, self.rule_budget, job.job_id)
            mine, note = fit.kept, fit.note()
        return _Plan(mine, switch_links(mine), taken, snap, note)

    def _commit(
        self, job: Job, plan: _Plan, t0: float, note: str, may_wait: bool = False
    ) -> Job | _Wait:
        """Install the plan (lock held): pairs taken since the snapshot are left out.
        With ``may_wait``, an install taken back for a reconnecting switch gives a
        :class:`_Wait` (nothing saved: the job stays STARTING)."""
        try:
            self._evict_user_jobs(job)
        except SdnMpiError as exc:
            return self._fail(job, f"routing failed: {exc}")
        routes, taken = _unshared(plan.routes, self.book.since(plan.snap, but=job.job_id))
        links = plan.links if len(routes) == len(plan.routes) else None
        shared = _shared_note({**plan.taken, **taken})
        try:
            if not routes:
                why = plan.note or "the pattern sends nothing between hosts"
                job = self._default(job, "; ".join(filter(None, (shared, why))))
            else:
                result = self.controller.install(job.job_id, planning.pairs_of(routes))
                install = dataclasses.replace(result, install_s=self.clock() - t0)
                detail = "; ".join(filter(None, (shared, note, plan.note)))
                job = dataclasses.replace(
                    job, state=JobState.ROUTED, routes=routes, install=install, detail=detail
                )
        except ResyncPendingError as exc:
            if may_wait:  # the controller took it all back already
                return _Wait(job, str(exc))
            job = self._default(job, f"routing failed: {exc}")
            self.events.routing_failed()
        except SdnMpiError as exc:
            job = self._default(job, f"routing failed: {exc}")
            self.events.routing_failed()
        self.save(job, links)
        log.info("job %d: %s %s", job.job_id, job.state.name, job.detail)
        if job.state is JobState.ROUTED:
            self.events.routed_job(job)
            again = self.book.removed_since(plan.snap)  # load went away while planned
            self.background(functools.partial(self._rebalance, job.job_id, again))
        return job

    def _fail(self, job: Job, detail: str, crash: Exception | None = None) -> Job:
        """The job on default routes, saved, and why, logged once (with the traceback
        of a crash: a router bug must not fail the job's start)."""
        job = self._default(job, detail)
        self.save(job)
        self.events.routing_failed()
        if crash is None:
            log.warning("job %d: %s", job.job_id, job.detail)
        else:
            log.error("job %d: %s", job.job_id, job.detail, exc_info=crash)
        return job

    def _after_change(self, job: Job) -> Job | tuple[Job, str]:
        """The job changed while planned: to plan again if it was re-patterned (still
        starting), else as it is now; a job finished meanwhile says nothing was
        installed."""
        now = self.store.get_job(job.job_id)
        if now is None:
            return job
        if now.state is JobState.STARTING and now.all_registered():
            return now, "its pattern changed while it was planned"
        if now.state is JobState.FINISHED and job.state is JobState.STARTING:
            detail = "finished before its routes were committed: nothing installed"
            now = dataclasses.replace(now, detail="; ".join(filter(None, (now.detail, detail))))
            self.save(now)
            log.info("job %d: %s", now.job_id, detail)
        return now

    def _give_up(self, job: Job, why: str) -> Job:
        """Planned too many times: DEFAULT if the job still waits for routes."""
        now = self.store.get_job(job.job_id)
        if now is None or now.state is not JobState.STARTING:
            return now or job
        return self._fail(now, f"not routed: {why}, {REPLANS + 1} times; default routes")

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

    def _evict_user_jobs(self, job: Job) -> None:
        """A scheduler job's hosts are its own: user jobs routed between them go to
        default routes (the scheduler's job wins the host pairs)."""
        routed = self.book.jobs()
        for evicted in _evictable(job, routed):
            other = routed[evicted]
            self.controller.remove(other.job_id)
            detail = f"host pairs taken by scheduler job {job.job_id}: default routes"
            self.save(dataclasses.replace(
                other, state=JobState.DEFAULT, routes=(), install=Install(), detail=detail
            ))  # fmt: skip
            log.info("job %d: %s", other.job_id, detail)

    def _default(self, job: Job, detail: str) -> Job:
        """The job on default routes; whatever the controller may hold for it is removed."""
        try:
            self.controller.remove(job.job_id)
        except SdnMpiError as exc:
            detail += f"; removing partial routes failed ({exc})"
        return dataclasses.replace(
            job, state=JobState.DEFAULT, routes=(), install=Install(), detail=detail
        )

    # -- rebalancing ----------------------------------------------------------------------
    def ended(self, job: Job) -> None:
        """A routed job ended (``job`` as it was routed): re-plan the jobs that gain."""
        if job.routes:
            self._ended.append(job)
            self.background(functools.partial(self._rebalance, None, False))

    def _rebalance(self, arrived: int | None, again: bool) -> None:
        """Move running jobs for an arrival (``arrived``) or the ends queued so far
        (``None``): planned on a snapshot with the lock released, each move committed
        if the job it moves did not change and no job routed meanwhile uses its new
        links; stale moves start the pass again (at most :data:`REPLANS` more times).
        Never raises: jobs stay where they are."""
        ended: list[Job] = []
        if arrived is None:
            ended, self._ended = self._ended, []
            if not ended:  # an earlier pass took this end with its own
                return
        cause = str(arrived) if arrived is not None else ", ".join(str(j.job_id) for j in ended)
        try:
            self._yield_to_calls()
            for _ in range(REPLANS + 1):
                snap = self.book.snapshot()
                topo = self.controller.topology()
                with self.unlocked():
                    moves = self._moves(arrived, ended, again, snap, topo)
                if not self._commit_moves(moves, snap, cause):
                    return
            log.info("rebalancing for job(s) %s: moves that went stale dropped", cause)
        except Exception:
            log.exception("rebalancing for job(s) %s failed", cause)

    def _yield_to_calls(self) -> None:
        """Wait (lock released) while calls' plans are computed, :attr:`yield_s` at
        most: in one process they share the processor, and a call waits for its own."""
        if self._computing:
            with self.unlocked():
                self._wait_for_calls(time.monotonic() + self.yield_s)

    def _wait_for_calls(self, deadline: float) -> None:
        """Sleep (the lock released by the caller) while calls' plans are computed,
        until ``deadline`` (monotonic seconds) at most."""
        while self._computing and time.monotonic() < deadline:
            time.sleep(0.02)

    def _polite(self, planner: Planner) -> Planner:
        """``planner`` that first waits (the lock released by its caller) while calls'
        plans are computed, :attr:`yield_s` at most over all its runs: rebalancing
        re-plans up to :attr:`rebalance` jobs one by one, and a call that starts
        planning meanwhile would share the processor with all of them."""
        deadline = time.monotonic() + self.yield_s

        def plan(req: PlanRequest) -> Routes:
            self._wait_for_calls(deadline)
            return planner(req)

        return plan

    def _moves(
        self, arrived: int | None, ended: list[Job], again: bool, snap: Snapshot, topo: Topology
    ) -> dict[int, tuple[Routes, frozenset[Link]]]:
        routed = snap.routed()
        planner = self._polite(self.planner)
        if arrived is not None:
            found = rebalance.for_arrival(
                arrived, routed, topo, self.rebalance, planner, again=again
            )
        else:
            found = rebalance.for_end(ended, routed, topo, self.rebalance, planner)
        found = self._moves_within_budget(found, routed, topo)
        return {j: (routes, switch_links(routes)) for j, routes in found.items()}

    def _moves_within_budget(
        self, found: Mapping[int, Routes], routed: Mapping[int, Job], topo: Topology
    ) -> dict[int, Routes]:
        """The moves whose new routes fit the rule budget whole, beside the other jobs'
        routes (a move some of whose pairs would not fit is dropped: the job stays)."""
        if self.rule_budget is None or not found:
            return dict(found)
        view = rulebudget.fabric_rules(topo, self.default_router)
        held = {j: job.routes for j, job in routed.items()}
        out = {}
        for job_id, routes in found.items():
            others = {j: r for j, r in held.items() if j != job_id}
            fit = rulebudget.within_budget(view, routes, others, self.rule_budget, job_id)
            if fit.fallback:
                log.info("job %d: not moved: %s", job_id, fit.note())
                continue
            out[job_id] = routes
            held[job_id] = routes
        return out

    def _commit_moves(
        self,
        moves: Mapping[int, tuple[Routes, frozenset[Link]]],
        snap: Snapshot,
        cause: str,
    ) -> list[int]:
        """Install the moves that still hold; the jobs whose move went stale."""
        stale = []
        for job_id, (routes, links) in moves.items():
            if self.book.changed(job_id, snap) or self.book.stale(snap, links, ignore=moves):
                stale.append(job_id)
                continue
            entry = self.book.get(job_id)
            assert entry is not None
            try:
                self.controller.install(job_id, planning.pairs_of(routes))
            except SdnMpiError as exc:
                log.warning("job %d: not moved for job(s) %s: %s", job_id, cause, exc)
                continue
            self.save(dataclasses.replace(entry.job, routes=routes), links)
            log.info("job %d: %d host pair(s) moved for job(s) %s", job_id, len(routes), cause)
        return stale

    # -- the controller -------------------------------------------------------------------
    def reconcile(self) -> Reconciled:
        """Make the controller's job routes match the store (at start, and periodically).

        A routed job the controller lacks (or holds differently) is reinstalled; a
        started job whose ranks are all known is routed (in :attr:`background`); a
        job id the controller holds that is not routed in the store (finished,
        unknown) is removed.  Ids above the manager's range (the controller's
        measurement jobs) are left alone.
        """
        held = self.controller.jobs()
        done: dict[str, list[int]] = {"reinstalled": [], "routed": [], "removed": [], "failed": []}
        jobs = self.store.list_jobs()
        self.book.sync(jobs)
        for job in jobs:
            if job.state is JobState.ROUTED and held.get(job.job_id) != planning.pairs_of(
                job.routes
            ):
                ok = self._reinstall(job)
                done["reinstalled" if ok else "failed"].append(job.job_id)
            elif job.state is JobState.STARTING and job.all_registered():
                done["routed"].append(job.job_id)
        for job_id in sorted(held):
            if job_id > MAX_JOB_ID:  # not a job id of ours: a measurement (pattern record)
                continue
            now = self.store.get_job(job_id)
            if now is None or now.state is not JobState.ROUTED:
                self.controller.remove(job_id)
                done["removed"].append(job_id)
        for job_id in done["routed"]:
            self.background(functools.partial(self._route_stored, job_id))
        out = Reconciled(**{k: tuple(v) for k, v in done.items()})
        log.info("reconciled with the controller: %s", out)
        return out

    def _route_stored(self, job_id: int) -> None:
        job = self.store.get_job(job_id)
        if job is not None:
            self.route_if_ready(job)

    def _reinstall(self, job: Job) -> bool:
        try:
            self.controller.install(job.job_id, planning.pairs_of(job.routes))
        except SdnMpiError as exc:
            self.save(self._default(job, f"reinstall after restart failed: {exc}"))
            return False
        return True


def _evictable(job: Job, routed: Mapping[int, Job]) -> list[int]:
    """The user jobs of ``routed`` that a scheduler ``job`` evicts: those with a route
    between two of its hosts (none if ``job`` is a user's)."""
    if not is_scheduler_job(job.job_id):
        return []
    hosts = {p.node for p in job.processes}
    return [
        j
        for j, other in routed.items()
        if not is_scheduler_job(j) and any(r.src in hosts and r.dst in hosts for r in other.routes)
    ]


def _unshared(routes: Routes, routed: Mapping[int, Job]) -> tuple[Routes, dict[Pair, int]]:
    """The routes whose host pair none of ``routed`` holds, and the others' holders.

    The controller routes a host pair for one job at a time (jobs sharing nodes):
    such a pair keeps the other job's path, and this job gets the rest."""
    holder = {(r.src, r.dst): j.job_id for j in routed.values() for r in j.routes}
    mine = tuple(r for r in routes if (r.src, r.dst) not in holder)
    taken = {(r.src, r.dst): holder[(r.src, r.dst)] for r in routes if (r.src, r.dst) in holder}
    return mine, taken


def _shared_note(taken: Mapping[Pair, int]) -> str:
    if not taken:
        return ""
    jobs = ", ".join(map(str, sorted(set(taken.values()))))
    return f"{len(taken)} host pair(s) shared with job {jobs} keep that job's routes"
