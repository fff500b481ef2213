"""A small typed client of the manager, and NetSA's ``net_set_pattern`` in Python.

``ManagerClient("/run/sdnmpi/manager.sock")`` talks to the local Unix socket
(the manager learns the uid from the kernel); ``ManagerClient("host:port",
tls_ca=..., token=...)`` talks TLS with a bearer token.  Every call has a
deadline; a gRPC error becomes a :class:`~sdnmpi.manager.model.ManagerError`
with the server's one-line message.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc

from sdnmpi.manager.grpcapi import MAX_MESSAGE_BYTES
from sdnmpi.manager.model import Kind, ManagerError
from sdnmpi.wire import manager_pb2 as pb
from sdnmpi.wire import manager_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_SOCKET = "/run/sdnmpi/manager.sock"
_OPTIONS = [
    ("grpc.max_receive_message_length", 4 * MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


def default_target() -> str:
    """``$SDNMPI_MANAGER`` or the default socket path."""
    return os.environ.get("SDNMPI_MANAGER") or DEFAULT_SOCKET


def _is_unix(target: str) -> bool:
    return target.startswith(("/", ".", "unix:")) or ":" not in target


class ManagerClient:
    """The Manager service, one method per RPC."""

    def __init__(
        self,
        target: str | None = None,
        *,
        tls_ca: Path | None = None,
        token: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.target = target or default_target()
        self.timeout_s = timeout_s
        self._metadata: tuple[tuple[str, str], ...] = ()
        if _is_unix(self.target):
            path = self.target.removeprefix("unix:")
            self._channel = grpc.insecure_channel(f"unix:{os.path.abspath(path)}", _OPTIONS)
        else:
            root = tls_ca.read_bytes() if tls_ca is not None else None
            creds = grpc.ssl_channel_credentials(root_certificates=root)
            self._channel = grpc.secure_channel(self.target, creds, _OPTIONS)
            if token:
                self._metadata = (("authorization", f"Bearer {token}"),)
        self._stub = pb_grpc.ManagerStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> ManagerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Callable[..., T], request: Any, timeout_s: float | None = None) -> T:
        try:
            return method(
                request, timeout=timeout_s or self.timeout_s, metadata=self._metadata or None
            )
        except grpc.RpcError as exc:
            raise _error(exc, self.target) from None

    # -- jobs -------------------------------------------------------------------------
    def create_job(
        self,
        job_id: int,
        name: str,
        uid: int,
        ntasks: int,
        *,
        pattern: str | None = None,
        pattern_file: Path | None = None,
        router: str = "",
    ) -> Any:
        """CreateJob; the pattern by name or a file's contents."""
        req = _create_request(job_id, name, uid, ntasks, pattern, pattern_file, router)
        return self._call(self._stub.CreateJob, req)

    def create_job_from_offer(self, job_id: int, name: str, uid: int, ntasks: int) -> Any:
        """CreateJob as the scheduler, with what uid's srun offered for the job."""
        req = pb.CreateJobRequest(job_id=job_id, name=name, uid=uid, ntasks=ntasks,
                                  from_offer=True)  # fmt: skip
        return self._call(self._stub.CreateJob, req)

    def offer_job(
        self,
        job_id: int,
        name: str,
        uid: int,
        ntasks: int,
        pattern: str | None = None,
        pattern_file: Path | None = None,
        router: str = "",
    ) -> Any:
        """OfferJob: srun's pattern for a Slurm job the scheduler will create."""
        req = _create_request(job_id, name, uid, ntasks, pattern, pattern_file, router)
        return self._call(self._stub.OfferJob, req)

    def start_job(self, job_id: int) -> Any:
        """StartJob."""
        return self._call(self._stub.StartJob, pb.JobRef(job_id=job_id))

    def finish_job(self, job_id: int) -> Any:
        """FinishJob."""
        return self._call(self._stub.FinishJob, pb.JobRef(job_id=job_id))

    def get_job(self, job_id: int) -> Any:
        """GetJob."""
        return self._call(self._stub.GetJob, pb.JobRef(job_id=job_id))

    def list_jobs(self, include_finished: bool = False) -> list[Any]:
        """ListJobs."""
        req = pb.ListJobsRequest(include_finished=include_finished)
        return list(self._call(self._stub.ListJobs, req).jobs)

    def register_process(self, job_id: int, rank: int, node: str, pid: int = 0) -> Any:
        """RegisterProcess."""
        req = pb.RegisterProcessRequest(job_id=job_id, rank=rank, node=node, pid=pid)
        return self._call(self._stub.RegisterProcess, req)

    def wait_routes(self, job_id: int, timeout_ms: int) -> Any:
        """WaitRoutes (the call's own deadline is a little longer than ``timeout_ms``)."""
        req = pb.WaitRoutesRequest(job_id=job_id, timeout_ms=timeout_ms)
        return self._call(self._stub.WaitRoutes, req, timeout_ms / 1000.0 + self.timeout_s)

    def route_status(self, job_id: int) -> Any:
        """GetRouteStatus."""
        return self._call(self._stub.GetRouteStatus, pb.JobRef(job_id=job_id))

    def set_job_pattern(self, job_id: int, pattern: str) -> Any:
        """SetJobPattern."""
        req = pb.SetJobPatternRequest(job_id=job_id, pattern=pattern)
        return self._call(self._stub.SetJobPattern, req)

    # -- patterns ---------------------------------------------------------------------
    def put_pattern(
        self,
        name: str,
        path: Path,
        *,
        description: str = "",
        bandwidth_bps: float = 0.0,
        latency_s: float = 0.0,
        replace: bool = False,
    ) -> Any:
        """PutPattern from a file."""
        req = pb.PutPatternRequest(
            name=name,
            file=_file(path),
            description=description,
            annotation=pb.PatternAnnotation(bandwidth_bps=bandwidth_bps, latency_s=latency_s),
            replace=replace,
        )
        return self._call(self._stub.PutPattern, req)

    def get_pattern(self, name: str) -> Any:
        """GetPattern: ``.info`` and ``.json`` (sdnmpi JSON bytes)."""
        return self._call(self._stub.GetPattern, pb.PatternRef(name=name))

    def list_patterns(self) -> list[Any]:
        """ListPatterns."""
        return list(self._call(self._stub.ListPatterns, pb.ListPatternsRequest()).patterns)

    def delete_pattern(self, name: str) -> Any:
        """DeletePattern."""
        return self._call(self._stub.DeletePattern, pb.PatternRef(name=name))


def _file(path: Path) -> Any:
    """A PatternFile message from a local file (``file.xml#ID`` keeps its fragment)."""
    base, _, fragment = str(path).partition("#")
    try:
        data = Path(base).read_bytes()
    except OSError as exc:
        raise ManagerError(Kind.INVALID_ARGUMENT, f"{base}: {exc.strerror}") from None
    name = Path(base).name + (f"#{fragment}" if fragment else "")
    return pb.PatternFile(filename=name, data=data)


def _error(exc: grpc.RpcError, target: str) -> ManagerError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    name = code.name if code is not None else "UNAVAILABLE"
    kind = Kind.__members__.get(name, Kind.UNAVAILABLE)
    if code == grpc.StatusCode.UNAVAILABLE:
        details = f"manager {target} unavailable: {details}"
    return ManagerError(kind, str(details))


def job_from_env() -> int:
    """The calling job's id: ``$SLURM_JOB_ID`` or ``$SDNMPI_JOB``."""
    raw = os.environ.get("SLURM_JOB_ID") or os.environ.get("SDNMPI_JOB") or ""
    if not raw.isdigit():
        raise ManagerError(Kind.INVALID_ARGUMENT, "no job id: set SLURM_JOB_ID or SDNMPI_JOB")
    return int(raw)


def net_set_pattern(pattern_id: str) -> int:
    """NetSA's API: make a stored pattern's routes the calling job's; 1 on success, 0 on error.

    The job comes from ``$SLURM_JOB_ID`` (or ``$SDNMPI_JOB``), the manager from
    ``$SDNMPI_MANAGER`` (default ``/run/sdnmpi/manager.sock``).  Errors are
    logged, never raised: an application keeps running on its current routes.
    """
    try:
        job_id = job_from_env()
        with ManagerClient() as client:
            client.set_job_pattern(job_id, pattern_id)
    except ManagerError as exc:
        log.warning("net_set_pattern(%r): %s", pattern_id, exc)
        return 0
    return 1


def _create_request(
    job_id: int, name: str, uid: int, ntasks: int, pattern: str | None,
    pattern_file: Path | None, router: str,
) -> Any:  # fmt: skip
    source = None
    if pattern_file is not None:
        source = pb.PatternSource(file=_file(pattern_file))
    elif pattern:
        source = pb.PatternSource(name=pattern)
    return pb.CreateJobRequest(
        job_id=job_id, name=name, uid=uid, ntasks=ntasks, pattern=source, router=router
    )
