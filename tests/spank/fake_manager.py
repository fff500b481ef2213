"""A minimal Manager servicer that records the plugin's calls (not the real manager).

It serves the proto's contract only as far as the plugin needs it: offers by (job,
uid), jobs it was told about (NOT_FOUND otherwise), a job created from no offer on
default routes, and a WaitRoutes whose behaviour a test chooses.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from sdnmpi.wire import manager_pb2 as pb
from sdnmpi.wire import manager_pb2_grpc as pb_grpc

# WaitRoutes behaviours.
INSTALLED = "installed"  # answer at once: routes installed
TIMEOUT = "timeout"  # wait timeout_ms, answer not installed (what a manager does)
DEFAULT = "default"  # answer at once: the job stays on default routes
HANG = "hang"  # never answer in time (a stuck manager)

MAX_MESSAGE_BYTES = 65 << 20  # a 64 MiB pattern file plus the request around it


@dataclass
class Recorder:
    """Every call the servicer received, in order, as (method, request)."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    authorization: list[str] = field(default_factory=list)  # per call, "" if none
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, method: str, request: Any, context: Any) -> None:
        auth = dict(context.invocation_metadata()).get("authorization", "")
        with self.lock:
            self.calls.append((method, request))
            self.authorization.append(auth)

    def methods(self) -> list[str]:
        with self.lock:
            return [m for m, _ in self.calls]

    def requests(self, method: str) -> list[Any]:
        with self.lock:
            return [r for m, r in self.calls if m == method]


class FakeManager(pb_grpc.ManagerServicer):
    """Records calls; jobs are kept by id; unknown pattern "nope" is NOT_FOUND."""

    def __init__(self, wait: str = INSTALLED) -> None:
        self.rec = Recorder()
        self.wait = wait
        self.jobs: dict[int, pb.Job] = {}
        self.offers: dict[tuple[int, int], Any] = {}
        self.unrouted: set[int] = set()  # created from no offer: default routes
        self.release = threading.Event()  # ends HANG waits at shutdown

    def OfferJob(self, request: Any, context: Any) -> Any:
        self.rec.add("OfferJob", request, context)
        if request.pattern.WhichOneof("source") == "name" and request.pattern.name == "nope":
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown pattern 'nope'")
        self.offers[(request.job_id, request.uid)] = request
        return pb.Offer(job_id=request.job_id, uid=request.uid, ntasks=request.ntasks)

    def CreateJob(self, request: Any, context: Any) -> Any:
        self.rec.add("CreateJob", request, context)
        if request.job_id in self.jobs and request.from_offer:
            return self.jobs[request.job_id]
        if request.from_offer and (request.job_id, request.uid) not in self.offers:
            self.unrouted.add(request.job_id)
        job = pb.Job(
            job_id=request.job_id,
            name=request.name,
            uid=request.uid,
            ntasks=request.ntasks,
            state=pb.JOB_STATE_CREATED,
        )
        self.jobs[request.job_id] = job
        return job

    def _known(self, job_id: int, context: Any) -> Any:
        if job_id not in self.jobs:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown job {job_id}")
        return self.jobs[job_id]

    def StartJob(self, request: Any, context: Any) -> Any:
        self.rec.add("StartJob", request, context)
        job = self._known(request.job_id, context)
        job.state = pb.JOB_STATE_STARTING
        return job

    def RegisterProcess(self, request: Any, context: Any) -> Any:
        self.rec.add("RegisterProcess", request, context)
        job = self._known(request.job_id, context)
        if request.rank >= job.ntasks:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"rank {request.rank} out of range")
        job.processes.add(rank=request.rank, node=request.node, pid=request.pid)
        return job

    def WaitRoutes(self, request: Any, context: Any) -> Any:
        self.rec.add("WaitRoutes", request, context)
        self._known(request.job_id, context)
        status = pb.RouteStatus(job_id=request.job_id)
        if request.job_id in self.unrouted:
            status.state, status.detail = pb.JOB_STATE_DEFAULT, "no pattern offered"
        elif self.wait == INSTALLED:
            status.state, status.installed = pb.JOB_STATE_ROUTED, True
            status.pairs, status.flow_mods, status.switches = 2, 8, 3
        elif self.wait == DEFAULT:
            status.state, status.detail = pb.JOB_STATE_DEFAULT, "no route between h1 and h9"
        elif self.wait == TIMEOUT:
            self.release.wait(request.timeout_ms / 1000)
            status.state = pb.JOB_STATE_STARTING
        else:
            self.release.wait(60)
            status.state = pb.JOB_STATE_STARTING
        return status

    def FinishJob(self, request: Any, context: Any) -> Any:
        self.rec.add("FinishJob", request, context)
        job = self._known(request.job_id, context)
        job.state = pb.JOB_STATE_FINISHED
        return job


@dataclass
class RunningServer:
    """A FakeManager listening on a unix socket."""

    servicer: FakeManager
    server: grpc.Server
    address: str  # "unix:/..."

    def stop(self) -> None:
        self.servicer.release.set()
        self.server.stop(grace=None)


def serve(socket_path: str, wait: str = INSTALLED) -> RunningServer:
    """Start a FakeManager on ``unix:socket_path``."""
    servicer = FakeManager(wait)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
    )
    pb_grpc.add_ManagerServicer_to_server(servicer, server)
    address = f"unix:{socket_path}"
    server.add_insecure_port(address)
    server.start()
    deadline = time.monotonic() + 5
    while not _socket_ready(socket_path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return RunningServer(servicer, server, address)


def serve_tls(key_pem: bytes, cert_pem: bytes, wait: str = INSTALLED) -> RunningServer:
    """Start a FakeManager with TLS on 127.0.0.1 (a free port)."""
    servicer = FakeManager(wait)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_ManagerServicer_to_server(servicer, server)
    creds = grpc.ssl_server_credentials([(key_pem, cert_pem)])
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    return RunningServer(servicer, server, f"127.0.0.1:{port}")


def _socket_ready(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except FileNotFoundError:
        return False
