"""The gRPC servicer: protobuf in, the service core, protobuf out.

Each call authenticates the caller (an :class:`Identity`), then runs the core
under one lock (a :class:`threading.Condition`, which WaitRoutes waits on and
every other call notifies).  Core errors become status codes with their
one-line message (``manager.proto`` lists them); a store failure is
UNAVAILABLE.  Nothing else escapes: an unexpected exception is logged and
reported as INTERNAL.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import grpc

from sdnmpi.errors import SdnMpiError, StoreError
from sdnmpi.manager import model
from sdnmpi.manager.model import Caller, Job, Kind, ManagerError, Offer, StoredPattern
from sdnmpi.manager.peercred import PeerTable
from sdnmpi.manager.requests import CreateJob, PatternUpload, PutPattern, check_timeout_ms
from sdnmpi.manager.service import ManagerService
from sdnmpi.wire import manager_pb2 as pb
from sdnmpi.wire import manager_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")

STATUS = {kind: getattr(grpc.StatusCode, kind.value) for kind in Kind}


class Identity(Protocol):
    """Who the peer of a call is; None if unknown."""

    def caller(self, context: grpc.ServicerContext) -> Caller | None:
        """The authenticated caller."""
        ...


class PeerIdentity:
    """Callers of the Unix socket, through the proxy's table (SO_PEERCRED)."""

    def __init__(self, table: PeerTable, scheduler_uids: frozenset[int]) -> None:
        self.table = table
        self.scheduler_uids = scheduler_uids

    def caller(self, context: grpc.ServicerContext) -> Caller | None:
        """The uid the kernel reported for this connection."""
        peer = self.table.lookup(context.peer())
        if peer is None:
            return None
        return Caller(peer.uid, peer.uid in self.scheduler_uids, peer.pid)


class TokenIdentity:
    """Callers of the TLS port: ``authorization: Bearer TOKEN`` -> a uid or the scheduler."""

    def __init__(self, tokens: Mapping[str, Caller]) -> None:
        self.tokens = dict(tokens)

    def caller(self, context: grpc.ServicerContext) -> Caller | None:
        """The caller the token names."""
        meta = dict(context.invocation_metadata())
        header = str(meta.get("authorization", ""))
        if not header.startswith("Bearer "):
            return None
        given = header[len("Bearer ") :].strip().encode()
        for token, caller in self.tokens.items():
            if hmac.compare_digest(token.encode(), given):
                return caller
        return None


#: WaitRoutes calls one user (not the scheduler) may have waiting at once.
MAX_WAITS_PER_USER = 16


class WaitSlots:
    """Bounds the WaitRoutes calls waiting at once: each holds one of the server's
    worker threads, and 300 of them once left none for anyone's GetJob for 22 s.
    ``total`` for everyone (the server keeps the rest of its workers for other
    calls), ``per_user`` for each uid but the scheduler's (slurmstepd waits once per
    node of each starting job)."""

    def __init__(self, total: int, per_user: int = MAX_WAITS_PER_USER) -> None:
        self.total = total
        self.per_user = per_user
        self._lock = threading.Lock()
        self._by_uid: dict[int, int] = {}
        self._all = 0

    def acquire(self, caller: Caller) -> None:
        """Take a slot, or RESOURCE_EXHAUSTED naming the limit."""
        with self._lock:
            mine = self._by_uid.get(caller.uid, 0)
            if self._all >= self.total:
                raise ManagerError(
                    Kind.RESOURCE_EXHAUSTED,
                    f"{self._all} WaitRoutes calls are waiting, the manager's limit "
                    f"(--workers); ask again later or poll GetRouteStatus",
                )
            if not caller.is_scheduler and mine >= self.per_user:
                raise ManagerError(
                    Kind.RESOURCE_EXHAUSTED,
                    f"uid {caller.uid} has {mine} WaitRoutes calls waiting "
                    f"(limit {self.per_user} per user)",
                )
            self._by_uid[caller.uid] = mine + 1
            self._all += 1

    def release(self, caller: Caller) -> None:
        """Give the slot back."""
        with self._lock:
            left = self._by_uid.get(caller.uid, 1) - 1
            if left:
                self._by_uid[caller.uid] = left
            else:
                self._by_uid.pop(caller.uid, None)
            self._all -= 1


class Servicer(pb_grpc.ManagerServicer):
    """Implements ``sdnmpi.manager.v1.Manager`` over a :class:`ManagerService`."""

    def __init__(
        self,
        service: ManagerService,
        identity: Identity,
        cond: threading.Condition,
        monotonic: Callable[[], float] = time.monotonic,
        waits: WaitSlots | None = None,
        refused: Callable[[str], None] = lambda code: None,
    ) -> None:
        self.service = service
        self.identity = identity
        self.cond = cond
        self.monotonic = monotonic
        self.waits = waits or WaitSlots(total=1 << 30)
        #: Told the status code's name of every call that ends in an error (metrics).
        self.refused = refused

    def _run(self, context: grpc.ServicerContext, call: Callable[[Caller], T]) -> T:
        caller = self.identity.caller(context)
        if caller is None:
            self.refused("PERMISSION_DENIED")
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "unknown caller: no credentials")
            raise AssertionError("unreachable")  # context.abort raises
        try:
            with self.cond:
                try:
                    return call(caller)
                finally:
                    self.cond.notify_all()
        except ManagerError as exc:
            self._abort(context, STATUS[exc.kind], str(exc))
        except StoreError as exc:
            log.error("store: %s", exc)
            self._abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
        except SdnMpiError as exc:  # a check below the core's own (pattern, topology)
            self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception as exc:
            log.exception("internal error")
            self._abort(context, grpc.StatusCode.INTERNAL, f"internal error: {exc!r}")
        raise AssertionError("unreachable")  # context.abort raises

    def _abort(self, context: grpc.ServicerContext, code: grpc.StatusCode, why: str) -> None:
        self.refused(code.name)
        context.abort(code, why)

    # -- jobs -------------------------------------------------------------------------
    def CreateJob(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        req = _create_request(request)
        return self._run(context, lambda c: job_pb(self.service.create_job(c, req)))

    def OfferJob(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        req = _create_request(request)
        return self._run(context, lambda c: offer_pb(self.service.offer_job(c, req)))

    def StartJob(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._run(context, lambda c: job_pb(self.service.start_job(c, request.job_id)))

    def FinishJob(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._run(context, lambda c: job_pb(self.service.finish_job(c, request.job_id)))

    def GetJob(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._run(context, lambda c: job_pb(self.service.get_job(c, request.job_id)))

    def ListJobs(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def call(c: Caller) -> Any:
            jobs = self.service.list_jobs(c, request.include_finished)
            return pb.ListJobsResponse(jobs=[job_pb(j) for j in jobs])

        return self._run(context, call)

    def RegisterProcess(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def call(c: Caller) -> Any:
            job = self.service.register_process(
                c, request.job_id, request.rank, request.node, request.pid
            )
            return job_pb(job)

        return self._run(context, call)

    def GetRouteStatus(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._run(context, lambda c: status_pb(self.service.route_status(c, request.job_id)))

    def WaitRoutes(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def call(c: Caller) -> Any:
            timeout_s = check_timeout_ms(request.timeout_ms) / 1000.0
            deadline = self.monotonic() + timeout_s
            job = self.service.route_status(c, request.job_id)
            if ManagerService.routes_ready(job):
                return status_pb(job)
            self.waits.acquire(c)
            try:
                return wait(c, job, deadline)
            finally:
                self.waits.release(c)

        def wait(c: Caller, job: Job, deadline: float) -> Any:
            while not ManagerService.routes_ready(job):
                left = deadline - self.monotonic()
                if left <= 0 or not context.is_active():
                    raise ManagerError(
                        Kind.DEADLINE_EXCEEDED,
                        f"job {job.job_id}: routes not installed within {request.timeout_ms} ms "
                        f"(state {job.state.name}); it keeps its default routes",
                    )
                self.cond.wait(min(left, 1.0))
                job = self.service.route_status(c, request.job_id)
            return status_pb(job)

        return self._run(context, call)

    def SetJobPattern(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._run(
            context,
            lambda c: job_pb(self.service.set_job_pattern(c, request.job_id, request.pattern)),
        )

    # -- patterns ---------------------------------------------------------------------
    def PutPattern(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        req = PutPattern(
            name=request.name,
            file=PatternUpload(request.file.filename, request.file.data),
            description=request.description,
            bandwidth_bps=request.annotation.bandwidth_bps,
            latency_s=request.annotation.latency_s,
            replace=request.replace,
        )
        return self._run(context, lambda c: pattern_info_pb(self.service.patterns.put(c, req)))

    def GetPattern(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def call(c: Caller) -> Any:
            stored = self.service.patterns.get(c, request.name)
            return pb.StoredPattern(info=pattern_info_pb(stored), json=stored.json)

        return self._run(context, call)

    def ListPatterns(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        def call(c: Caller) -> Any:
            found = self.service.patterns.list(c)
            return pb.ListPatternsResponse(patterns=[pattern_info_pb(p) for p in found])

        return self._run(context, call)

    def DeletePattern(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._run(
            context, lambda c: pattern_info_pb(self.service.patterns.delete(c, request.name))
        )


def _create_request(request: Any) -> CreateJob:
    source = request.pattern.WhichOneof("source") if request.HasField("pattern") else None
    upload = None
    if source == "file":
        upload = PatternUpload(request.pattern.file.filename, request.pattern.file.data)
    return CreateJob(
        job_id=request.job_id,
        name=request.name,
        uid=request.uid,
        ntasks=request.ntasks,
        pattern_name=request.pattern.name if source == "name" else "",
        pattern_file=upload,
        router=request.router,
        from_offer=request.from_offer,
    )


def offer_pb(offer: Offer) -> Any:
    """An Offer message."""
    return pb.Offer(
        job_id=offer.job_id, uid=offer.uid, name=offer.name, ntasks=offer.ntasks,
        pattern=offer.pattern_name, router=offer.router, created_unix_s=offer.created_s,
    )  # fmt: skip


def status_pb(job: Job) -> Any:
    """A job's RouteStatus message."""
    return pb.RouteStatus(
        job_id=job.job_id,
        state=pb.JobState.Value(f"JOB_STATE_{job.state.name}"),
        installed=job.installed,
        pairs=len(job.routes) if job.installed else 0,
        flow_mods=job.install.flow_mods,
        switches=job.install.switches,
        install_s=job.install.install_s,
        detail=job.detail,
    )


def job_pb(job: Job) -> Any:
    """A Job message."""
    return pb.Job(
        job_id=job.job_id,
        name=job.name,
        uid=job.uid,
        ntasks=job.ntasks,
        state=pb.JobState.Value(f"JOB_STATE_{job.state.name}"),
        pattern=job.pattern_name,
        router=job.router,
        processes=[pb.Process(rank=p.rank, node=p.node, pid=p.pid) for p in job.processes],
        routes=status_pb(job),
        created_unix_s=job.created_s,
        started_unix_s=job.started_s,
        finished_unix_s=job.finished_s,
    )


def pattern_info_pb(p: StoredPattern) -> Any:
    """A PatternInfo message."""
    return pb.PatternInfo(
        name=p.name,
        description=p.description,
        owner_uid=p.owner_uid,
        nranks=p.nranks,
        phases=p.phases,
        total_bytes=p.total_bytes,
        annotation=pb.PatternAnnotation(bandwidth_bps=p.bandwidth_bps, latency_s=p.latency_s),
        sha256=p.sha256,
        created_unix_s=p.created_s,
    )


#: The largest message: a 64 MiB pattern file plus the request around it.
MAX_MESSAGE_BYTES = model.MAX_PATTERN_BYTES + 1024 * 1024
