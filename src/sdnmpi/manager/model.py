"""The manager's values: jobs, processes, routes, stored patterns, callers, errors.

Plain frozen dataclasses shared by the service core, the stores and the gRPC
adapter.  :class:`JobState` mirrors ``sdnmpi.manager.v1.JobState`` in
``proto/sdnmpi/wire/manager.proto`` value for value, so the adapter converts by
number.  Errors carry a :class:`Kind` that the gRPC adapter maps to a status
code (the proto's comment lists them); their message names the bad value.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from sdnmpi.errors import SdnMpiError

#: Limits of the API (``manager.proto``).
MAX_JOB_ID = 2**40 - 1
#: Job ids 1 .. 2^32-1 are the scheduler's (Slurm's job ids are 32-bit): only the
#: scheduler creates them.  A user's own jobs outside Slurm take 2^32 .. MAX_JOB_ID.
MAX_SCHEDULER_JOB_ID = 2**32 - 1
#: Pattern offers (srun's, for a scheduler job not yet created) a user may hold, and
#: how long one waits for its job.
MAX_OFFERS_PER_UID = 64
OFFER_TTL_S = 24 * 3600.0
MAX_NTASKS = 65536
MAX_PATTERN_BYTES = 64 * 1024 * 1024
MAX_WAIT_MS = 600_000
MAX_NAME_CHARS = 256


class JobState(enum.IntEnum):
    """A job's life: CREATED -> STARTING -> ROUTED | DEFAULT -> FINISHED."""

    CREATED = 1
    STARTING = 2
    ROUTED = 3
    DEFAULT = 4
    FINISHED = 5


#: States of a job whose allocation runs (its ranks may register).
RUNNING = frozenset({JobState.STARTING, JobState.ROUTED, JobState.DEFAULT})


class Kind(enum.Enum):
    """What went wrong, as the API reports it (a gRPC status code by name)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    UNAVAILABLE = "UNAVAILABLE"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"


class ManagerError(SdnMpiError):
    """A refused request: ``kind`` says which status the caller gets."""

    def __init__(self, kind: Kind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ResyncPendingError(ManagerError):
    """The controller took an install back because a switch it needed lost its
    connection before confirming; the switch is resynced when it returns, so the
    same install may succeed shortly (the controller's reply says ``retry``)."""

    def __init__(self, message: str) -> None:
        super().__init__(Kind.UNAVAILABLE, message)


def invalid(message: str) -> ManagerError:
    """An INVALID_ARGUMENT error."""
    return ManagerError(Kind.INVALID_ARGUMENT, message)


def not_found(message: str) -> ManagerError:
    """A NOT_FOUND error."""
    return ManagerError(Kind.NOT_FOUND, message)


def denied(message: str) -> ManagerError:
    """A PERMISSION_DENIED error."""
    return ManagerError(Kind.PERMISSION_DENIED, message)


def precondition(message: str) -> ManagerError:
    """A FAILED_PRECONDITION error."""
    return ManagerError(Kind.FAILED_PRECONDITION, message)


@dataclass(frozen=True)
class Caller:
    """Who sends a request: a uid from SO_PEERCRED or a token; the scheduler may do anything."""

    uid: int
    is_scheduler: bool = False
    pid: int = 0

    def may_act_for(self, uid: int) -> bool:
        """Whether this caller may create or change what ``uid`` owns."""
        return self.is_scheduler or self.uid == uid


def is_scheduler_job(job_id: int) -> bool:
    """Whether ``job_id`` is in the scheduler's id space (a Slurm job id).

    >>> is_scheduler_job(42), is_scheduler_job(2**32)
    (True, False)
    """
    return job_id <= MAX_SCHEDULER_JOB_ID


@dataclass(frozen=True)
class Offer:
    """What a job's user asks for a scheduler job before the scheduler creates it.

    srun sends it (the user's files are readable there); slurmstepd, on the
    scheduler's side, creates the job and takes the offer of the uid Slurm says
    owns the job.  Another user's offer for the same id is never taken.
    """

    job_id: int
    uid: int
    name: str
    ntasks: int
    router: str
    pattern_name: str
    pattern_json: bytes
    created_s: float


@dataclass(frozen=True)
class Process:
    """Rank ``rank`` of a job runs on host ``node`` (``pid`` for the record)."""

    rank: int
    node: str
    pid: int = 0


@dataclass(frozen=True)
class RoutePair:
    """A job route: the node path of host pair (src, dst) and the bytes the job sends on it."""

    src: str
    dst: str
    path: tuple[str, ...]
    size_bytes: float


@dataclass(frozen=True)
class Install:
    """What the controller reported for a job's routes."""

    flow_mods: int = 0
    switches: int = 0
    install_s: float = 0.0


@dataclass(frozen=True)
class Job:
    """A job as the store keeps it.

    ``pattern_json`` is the canonical sdnmpi JSON of the job's pattern at the
    time it was given (a snapshot: replacing a stored pattern later does not
    change a running job); ``source_sha256`` fingerprints the CreateJob
    arguments so a retry can be told from a different request.  ``routes`` are
    the pairs actually sent to the controller.
    """

    job_id: int
    name: str
    uid: int
    ntasks: int
    state: JobState
    router: str
    created_s: float
    pattern_name: str = ""
    pattern_json: bytes = b""
    source_sha256: str = ""
    started_s: float = 0.0
    finished_s: float = 0.0
    detail: str = ""
    routes: tuple[RoutePair, ...] = ()
    install: Install = field(default_factory=Install)
    processes: tuple[Process, ...] = ()

    @property
    def installed(self) -> bool:
        """Whether the job's routes are on the switches."""
        return self.state is JobState.ROUTED

    def process_map(self) -> dict[int, Process]:
        """Rank -> its process."""
        return {p.rank: p for p in self.processes}

    def all_registered(self) -> bool:
        """Whether every rank 0..ntasks-1 has registered."""
        return len(self.process_map()) == self.ntasks


@dataclass(frozen=True)
class StoredPattern:
    """A named pattern of the database (NetSA's CPD)."""

    name: str
    owner_uid: int
    description: str
    bandwidth_bps: float
    latency_s: float
    json: bytes
    sha256: str
    created_s: float
    nranks: int
    phases: int
    total_bytes: float

    def same_content(self, other: StoredPattern) -> bool:
        """Whether a put of ``other`` would change nothing (owner and time aside)."""
        return (
            self.sha256 == other.sha256
            and self.description == other.description
            and self.bandwidth_bps == other.bandwidth_bps
            and self.latency_s == other.latency_s
        )
