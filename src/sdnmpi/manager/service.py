"""The interconnect manager's core: jobs and who may do what with them.

Job routing (:mod:`sdnmpi.manager.jobrouting`, with rebalancing in
:mod:`sdnmpi.manager.rebalance`) and the pattern database
(:mod:`sdnmpi.manager.patterns`) are parts of their own, reached through
:attr:`ManagerService.routing` and :attr:`ManagerService.patterns`.

Pure in the house sense: no gRPC, no database, no sockets.  The store
(:class:`~sdnmpi.manager.store.Store`), the controller (:class:`ControllerApi`) and
the clock are passed in; every call takes the :class:`~sdnmpi.manager.model.Caller`
that the adapter authenticated.  Calls are not thread-safe: the adapter
serializes them (one lock, which WaitRoutes also waits on), except that a job's
routes are planned with that lock released (:attr:`ManagerService.unlocked`) on a
snapshot of the routed jobs, and committed when the lock is back unless the job
changed (finished: nothing installed; re-patterned: planned again) or a job routed
meanwhile took the plan's links (planned again); rebalancing after an arrival or an
end runs in :attr:`JobRouting.background` (:mod:`sdnmpi.manager.jobrouting`).

State machine (``JobState`` in ``manager.proto``)::

    CREATED --start--> STARTING --all ranks registered--> ROUTED   (routes installed)
       |                  |                           \\-> DEFAULT  (routing or install failed)
       |                  \\--(no pattern)------------->  DEFAULT  (at start)
       \\---------------- finish (any state) -----------> FINISHED (routes removed)

Every call is idempotent: a repeated create with the same arguments, a second
start, a second finish, a repeated registration of a rank on the same node
change nothing and return the job.  Routing never raises to the caller: a
failure leaves the job on default routes with ``detail`` saying why.

Job ids on the controller's API belong to the manager: :meth:`reconcile`
removes any job the controller holds that the store does not know as routed.

Job identity comes from the scheduler, not from users (docs/manager.md, "Security
model").  Ids 1 .. 2^32-1 are Slurm's job ids: only the scheduler (root, SlurmUser
or a scheduler token) creates them and registers their ranks, so a job's nodes are
the ones Slurm gave it.  srun, which runs as the job's user and reads the user's
pattern file, *offers* the pattern first (:meth:`ManagerService.offer_job`); the
scheduler's CreateJob ``from_offer`` takes the offer of the uid Slurm says owns the
job, never another user's.  A user's own jobs outside Slurm take ids 2^32 ..
2^40-1; where their host pairs meet a scheduler job's, the scheduler job's routes
win.  A job, offer or pattern of another user is reported as not found (or as
taken), never with its owner, nodes or name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from sdnmpi.core.pattern import Pattern
from sdnmpi.core.topology import Topology
from sdnmpi.errors import SdnMpiError
from sdnmpi.manager import patternfile, rebalance
from sdnmpi.manager.jobrouting import JobRouting, Reconciled
from sdnmpi.manager.model import (
    MAX_JOB_ID,
    MAX_OFFERS_PER_UID,
    MAX_SCHEDULER_JOB_ID,
    OFFER_TTL_S,
    RUNNING,
    Caller,
    Install,
    Job,
    JobState,
    Kind,
    ManagerError,
    Offer,
    Process,
    denied,
    invalid,
    is_scheduler_job,
    not_found,
    precondition,
)
from sdnmpi.manager.patterns import PatternService
from sdnmpi.manager.requests import (
    CreateJob,
    check_job_id,
    check_pattern_name,
    check_text,
)
from sdnmpi.manager.store import Store

log = logging.getLogger(__name__)

#: Running jobs a new job's routing may re-plan (:mod:`sdnmpi.manager.rebalance`).
REBALANCE_JOBS = rebalance.JOBS
#: Pattern bytes (canonical JSON) one user's pending offers may hold in the store.
MAX_OFFER_BYTES_PER_UID = 256 * 1024 * 1024
#: Unfinished jobs of one user's own (the scheduler has no quota; stored patterns'
#: quotas: :mod:`sdnmpi.manager.patterns`).  A finished job keeps its row, not its
#: pattern.
MAX_JOBS_PER_UID = 256

#: (src host, dst host) -> node names of the path, as the controller's API takes them.
Pairs = Mapping[tuple[str, str], Sequence[str]]


class ControllerApi(Protocol):
    """The controller as the manager uses it (its JSON-lines API)."""

    def topology(self) -> Topology:
        """The live fabric."""
        ...

    def install(self, job_id: int, pairs: Pairs) -> Install:
        """Install (or replace) a job's routes; confirmed by barriers."""
        ...

    def remove(self, job_id: int) -> None:
        """Remove a job's routes (nothing if it has none)."""
        ...

    def jobs(self) -> dict[int, dict[tuple[str, str], list[str]]]:
        """The job routes the controller holds."""
        ...


class ManagerService:
    """Jobs, processes and routes over a store and a controller, with the pattern
    database beside them (:attr:`patterns`)."""

    def __init__(
        self,
        store: Store,
        controller: ControllerApi,
        clock: Callable[[], float],
        *,
        default_router: str = "ours",
        rebalance: int = REBALANCE_JOBS,
        decoder: Callable[[str, bytes], Pattern] = patternfile.decode,
    ) -> None:
        self.store = store
        self.controller = controller
        #: Computing and installing jobs' routes, and reconciling with the controller.
        self.routing = JobRouting(store, controller, clock, rebalance)
        self.clock = clock
        self.default_router = default_router
        #: Uploaded files' bytes -> pattern: in this process by default; the server
        #: passes :func:`sdnmpi.manager.sandbox.decode` (a child with hard limits).
        self.decoder = decoder
        #: The pattern database (put, get, list, delete).
        self.patterns = PatternService(store, clock, decoder)

    # -- jobs -------------------------------------------------------------------------
    def create_job(self, caller: Caller, req: CreateJob) -> Job:
        """Record a job (idempotent on its id with the same arguments)."""
        req.check()
        if is_scheduler_job(req.job_id) and not caller.is_scheduler:
            raise denied(
                f"job ids 1..{MAX_SCHEDULER_JOB_ID} are the scheduler's (Slurm job ids): srun "
                "offers a job's pattern (OfferJob) and slurmstepd creates the job; a job "
                f"outside Slurm takes an id in {MAX_SCHEDULER_JOB_ID + 1}..{MAX_JOB_ID}"
            )
        if not caller.may_act_for(req.uid):
            raise denied(f"uid {caller.uid} may not create a job for another uid")
        if req.from_offer and not is_scheduler_job(req.job_id):
            raise invalid(f"from_offer is for scheduler job ids 1..{MAX_SCHEDULER_JOB_ID}")
        router = req.router or self.default_router
        fingerprint = req.fingerprint(router)
        old = self.store.get_job(req.job_id)
        if old is not None:
            return self._same_job(caller, old, fingerprint)
        if not caller.is_scheduler and self.store.count_jobs(req.uid) >= MAX_JOBS_PER_UID:
            raise ManagerError(
                Kind.RESOURCE_EXHAUSTED,
                f"uid {req.uid} has {MAX_JOBS_PER_UID} unfinished jobs, the limit per user; "
                "finish some first",
            )
        job = Job(
            job_id=req.job_id,
            name=req.name,
            uid=req.uid,
            ntasks=req.ntasks,
            state=JobState.CREATED,
            router=router,
            created_s=self.clock(),
            source_sha256=fingerprint,
        )
        if req.from_offer:
            job = self._with_offer(job)
        else:
            name, pattern = self._job_pattern(req)
            if pattern is not None:
                _check_fits(pattern, req.ntasks)
                job = dataclasses.replace(
                    job, pattern_name=name, pattern_json=patternfile.canonical(pattern)
                )
            else:
                job = dataclasses.replace(job, pattern_name=name)
        self.store.create_job(job)
        if req.from_offer:
            self.store.delete_offer(job.job_id, job.uid)
        log.info(
            "job %d created (uid %d, %d tasks, pattern %r)",
            job.job_id, job.uid, job.ntasks, job.pattern_name,
        )  # fmt: skip
        return job

    def _with_offer(self, job: Job) -> Job:
        """The job with what its user offered for it (nothing if no offer, or a bad one)."""
        offer = self.store.get_offer(job.job_id, job.uid)
        if offer is None or offer.created_s < self.clock() - OFFER_TTL_S:
            return dataclasses.replace(job, detail="no pattern offered by the job's srun")
        try:
            pattern = patternfile.from_json(offer.pattern_json, f"job {job.job_id} offer")
            _check_fits(pattern, job.ntasks)
        except SdnMpiError as exc:
            return dataclasses.replace(job, detail=f"offered pattern not used: {exc}")
        return dataclasses.replace(
            job,
            name=job.name or offer.name,
            router=offer.router or job.router,
            pattern_name=offer.pattern_name,
            pattern_json=offer.pattern_json,
        )

    def offer_job(self, caller: Caller, req: CreateJob) -> Offer:
        """srun's pattern for a scheduler job that slurmstepd will create (the job's
        user, or the scheduler for it).  Replacing one's own offer is allowed until the
        job exists; each user holds at most :data:`MAX_OFFERS_PER_UID` offers and
        :data:`MAX_OFFER_BYTES_PER_UID` pattern bytes, each kept one day at most."""
        req.check()
        if not is_scheduler_job(req.job_id):
            raise invalid(
                f"offers are for scheduler job ids 1..{MAX_SCHEDULER_JOB_ID}; "
                "create a job of your own with CreateJob"
            )
        if req.from_offer:
            raise invalid("an offer cannot come from an offer")
        if not caller.may_act_for(req.uid):
            raise denied(f"uid {caller.uid} may not offer for another uid")
        now = self.clock()
        self.store.purge_offers(now - OFFER_TTL_S)
        if self.store.get_job(req.job_id, brief=True) is not None:
            raise precondition(
                f"job {req.job_id} already exists: an offer must come before the scheduler "
                "creates the job (SetJobPattern changes a running job's pattern)"
            )
        old = self.store.get_offer(req.job_id, req.uid)
        count, used = self.store.offer_usage(req.uid)
        if old is not None:
            count, used = count - 1, used - len(old.pattern_json)
        if count >= MAX_OFFERS_PER_UID:
            raise ManagerError(
                Kind.RESOURCE_EXHAUSTED,
                f"uid {req.uid} holds {count} pattern offers, the limit is {MAX_OFFERS_PER_UID} "
                "(an offer is taken when its job starts, or withdrawn by FinishJob)",
            )
        name, pattern = self._job_pattern(req)
        if pattern is None:
            raise invalid("an offer needs a pattern (a name or a file)")
        _check_fits(pattern, req.ntasks)
        data = patternfile.canonical(pattern)
        if used + len(data) > MAX_OFFER_BYTES_PER_UID:
            raise ManagerError(
                Kind.RESOURCE_EXHAUSTED,
                f"uid {req.uid}'s pattern offers would hold {used + len(data)} bytes, the "
                f"limit is {MAX_OFFER_BYTES_PER_UID}",
            )
        offer = Offer(
            job_id=req.job_id, uid=req.uid, name=req.name, ntasks=req.ntasks,
            router=req.router, pattern_name=name, pattern_json=data, created_s=now,
        )  # fmt: skip
        self.store.put_offer(offer)
        log.info("job %d: uid %d offered pattern %r", req.job_id, req.uid, name)
        return offer

    def _same_job(self, caller: Caller, old: Job, fingerprint: str) -> Job:
        if not caller.may_act_for(old.uid):
            raise ManagerError(Kind.ALREADY_EXISTS, f"job id {old.job_id} is taken: choose another")
        if old.source_sha256 != fingerprint:
            raise ManagerError(
                Kind.ALREADY_EXISTS,
                f"job {old.job_id} exists with different arguments "
                f"(name {old.name!r}, uid {old.uid}, ntasks {old.ntasks}, "
                f"pattern {old.pattern_name!r}, router {old.router!r})",
            )
        return old

    def _job_pattern(self, req: CreateJob) -> tuple[str, Pattern | None]:
        if req.pattern_file is not None:
            upload = req.pattern_file
            return upload.filename, self.decoder(upload.filename, upload.data)
        if not req.pattern_name:
            return "", None
        stored = self.store.get_pattern(req.pattern_name)
        if stored is not None:
            return stored.name, patternfile.from_json(stored.json, f"pattern {stored.name}")
        return req.pattern_name, patternfile.build_spec(req.pattern_name, req.ntasks)

    def start_job(self, caller: Caller, job_id: int) -> Job:
        """The allocation runs: route once every rank is known (a second start is a no-op)."""
        job = self._owned(caller, job_id)
        if job.state is JobState.FINISHED:
            raise precondition(f"job {job_id} is finished; it cannot start again")
        if job.state is not JobState.CREATED:
            return job
        now = self.clock()
        if not job.pattern_json:
            detail = "; ".join(filter(None, (job.detail, "no pattern: default routes")))
            job = dataclasses.replace(job, state=JobState.DEFAULT, started_s=now, detail=detail)
            self.routing.save(job)
            return job
        job = dataclasses.replace(job, state=JobState.STARTING, started_s=now)
        self.routing.save(job)
        return self.routing.route_if_ready(job)

    def finish_job(self, caller: Caller, job_id: int) -> Job:
        """The job ended: remove exactly its routes (a finished job is left as it is).

        The store says FINISHED before the controller is asked to remove anything:
        a manager killed in between restarts with a finished job whose routes
        :meth:`reconcile` removes (it removes every job the controller holds that
        the store does not know as routed), never one it would route again."""
        found = self.store.get_job(check_job_id(job_id))
        if found is None or not caller.may_act_for(found.uid):
            # srun finishing a step whose job was never created: its offer goes
            withdrawn = is_scheduler_job(job_id) and self.store.delete_offer(job_id, caller.uid)
            raise not_found(f"no job {job_id}" + ("; your offer for it is withdrawn"
                                                  if withdrawn else ""))  # fmt: skip
        job = found
        if job.state is JobState.FINISHED:
            return job
        held = job.state in (JobState.ROUTED, JobState.STARTING)
        was = self.routing.book.get(job_id)
        job = dataclasses.replace(
            job, state=JobState.FINISHED, finished_s=self.clock(), pattern_json=b""
        )
        self.routing.save(job)
        if held:
            try:
                self.controller.remove(job_id)
            except SdnMpiError as exc:
                detail = f"route removal failed ({exc}); retried at the next reconcile"
                log.warning("job %d: %s", job_id, detail)
                job = dataclasses.replace(job, detail=detail)
                self.routing.save(job)
        log.info("job %d finished", job_id)
        self.routing.events.finished()
        if was is not None:
            self.routing.ended(was.job)  # the jobs that shared its links may gain
        return job

    def get_job(self, caller: Caller, job_id: int) -> Job:
        """The job (its owner or the scheduler)."""
        return self._owned(caller, job_id)

    def list_jobs(self, caller: Caller, include_finished: bool = False) -> list[Job]:
        """All jobs for the scheduler; a user's own jobs otherwise."""
        jobs = self.store.list_jobs(include_finished)
        return [j for j in jobs if caller.may_act_for(j.uid)]

    def register_process(
        self, caller: Caller, job_id: int, rank: int, node: str, pid: int = 0
    ) -> Job:
        """Rank ``rank`` runs on host ``node`` (a repeat on the same node is a no-op).

        The job returned lists only this rank's process (GetJob lists them all), so
        each of a large job's registrations costs the same.
        """
        check_text("node", node, empty=False)
        job = self._owned(caller, job_id, brief=True)
        if is_scheduler_job(job_id) and not caller.is_scheduler:
            raise denied(
                f"the ranks of scheduler job {job_id} are registered by the scheduler "
                "(slurmstepd on the nodes Slurm gave the job), not by its user"
            )
        if not 0 <= rank < job.ntasks:
            raise invalid(f"rank {rank} is out of range 0..{job.ntasks - 1} of job {job_id}")
        if job.state is JobState.FINISHED:
            raise precondition(f"job {job_id} is finished; rank {rank} cannot register")
        known = self.store.get_process(job_id, rank)
        if known is not None:
            if known.node == node:
                return _one_process(job, known)
            raise precondition(
                f"rank {rank} of job {job_id} is registered on {known.node!r}, not {node!r}"
            )
        self._check_node(node)
        process = Process(rank, node, pid)
        self.store.add_process(job_id, process)
        if job.state is JobState.STARTING and self._all_registered(job):
            job = self.routing.route(self._job(job_id))
        return _one_process(job, process)

    def _all_registered(self, job: Job) -> bool:
        return self.store.count_processes(job.job_id) == job.ntasks

    def _check_node(self, node: str) -> None:
        try:
            topo = self.controller.topology()
        except SdnMpiError as exc:
            raise ManagerError(Kind.UNAVAILABLE, f"cannot check node {node!r}: {exc}") from None
        if not topo.is_host(node):
            raise invalid(f"node {node!r} is not a host of the live topology")

    def route_status(self, caller: Caller, job_id: int) -> Job:
        """The job, for its route status."""
        return self._owned(caller, job_id)

    def set_job_pattern(self, caller: Caller, job_id: int, name: str) -> Job:
        """Make a stored pattern's routes the job's routes (NetSA's net_set_pattern)."""
        check_pattern_name(name)
        job = self._owned(caller, job_id)
        if job.state is JobState.FINISHED:
            raise precondition(f"job {job_id} is finished")
        stored = self.store.get_pattern(name)
        if stored is None:
            raise not_found(f"no stored pattern {name!r}")
        same = job.pattern_name == name and patternfile.sha256(job.pattern_json) == stored.sha256
        if same and job.state is not JobState.DEFAULT:
            return job
        _check_fits(patternfile.from_json(stored.json, f"pattern {name}"), job.ntasks)
        job = dataclasses.replace(job, pattern_name=name, pattern_json=stored.json, detail="")
        if job.state in (JobState.ROUTED, JobState.DEFAULT):
            job = dataclasses.replace(job, state=JobState.STARTING)
        self.routing.save(job)
        return self.routing.route_if_ready(job)

    @property
    def unlocked(self) -> Callable[[], contextlib.AbstractContextManager[object]]:
        """A context in which the adapter's lock is released: a job's routes are
        computed in it (the server sets :func:`released` of its lock; nothing by
        default, for callers that hold no lock)."""
        return self.routing.unlocked

    @unlocked.setter
    def unlocked(self, value: Callable[[], contextlib.AbstractContextManager[object]]) -> None:
        self.routing.unlocked = value

    def reconcile(self) -> Reconciled:
        """Make the controller's job routes match the store (:meth:`JobRouting.reconcile`)."""
        return self.routing.reconcile()

    # -- helpers ----------------------------------------------------------------------
    def _job(self, job_id: int, *, brief: bool = False) -> Job:
        job = self.store.get_job(check_job_id(job_id), brief=brief)
        if job is None:
            raise not_found(f"no job {job_id}")
        return job

    def _owned(self, caller: Caller, job_id: int, *, brief: bool = False) -> Job:
        job = self._job(job_id, brief=brief)
        if not caller.may_act_for(job.uid):
            raise not_found(f"no job {job_id}")  # the same answer as for no job at all
        return job

    @staticmethod
    def routes_ready(job: Job) -> bool:
        """Whether WaitRoutes can answer: the job's routes are settled (or it ended)."""
        return job.state not in (JobState.CREATED, JobState.STARTING)


def _one_process(job: Job, process: Process) -> Job:
    """RegisterProcess's reply: the job in brief, with the process just registered."""
    return dataclasses.replace(job, processes=(process,), pattern_json=b"")


def _check_fits(pattern: Pattern, ntasks: int) -> None:
    if pattern.hosts is None and pattern.nprocs > ntasks:
        raise invalid(
            f"pattern {pattern.name!r} has {pattern.nprocs} ranks, the job only {ntasks} tasks"
        )


__all__ = ["RUNNING", "ControllerApi", "ManagerService", "Reconciled"]


@contextlib.contextmanager
def released(lock: contextlib.AbstractContextManager[object]) -> Iterator[None]:
    """``lock`` (held by the caller, once) released for the block, then taken again;
    what a server passes as :attr:`ManagerService.unlocked`."""
    lock.__exit__(None, None, None)
    try:
        yield
    finally:
        lock.__enter__()
