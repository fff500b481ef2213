"""The fabric-wide side of tagging: job slots, where each rank runs, connection mirrors.

The node agents report to the controller (pure state here, the API in the os-ken
shim): a rank joined (job, rank, job size, host), a connection a rank holds
whose peer the agent cannot tell (see :mod:`sdnmpi.node.peers`), a rank left.
The hub gives each job a **job slot** (1..127, the tag's job field) when its
first rank joins and frees it when its last rank leaves; it knows the job's
placement (rank -> host) once every rank has joined, which is what the planner
needs to route the job's tagged packets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sdnmpi.errors import ConfigError
from sdnmpi.node.peers import Conn, MirrorResolver
from sdnmpi.wire.tag import MAX_JOB_SLOT


@dataclass
class ReportedJob:
    """One job as the agents reported it."""

    job: str
    slot: int
    nprocs: int
    hosts: dict[int, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.hosts) == self.nprocs


@dataclass
class TagHub:
    """Job slots, placements and connection mirrors of every tagged job."""

    jobs: dict[str, ReportedJob] = field(default_factory=dict)
    mirrors: MirrorResolver = field(default_factory=MirrorResolver)

    def join(self, job: str, rank: int, nprocs: int, host: str) -> ReportedJob:
        """Rank ``rank`` of ``job`` runs on ``host``; the job (with its slot)."""
        if not 1 <= nprocs <= 4096 or not 0 <= rank < nprocs:
            raise ConfigError(f"job {job}: rank {rank} of {nprocs} is out of range")
        entry = self.jobs.get(job)
        if entry is None:
            entry = ReportedJob(job, self._free_slot(), nprocs)
            self.jobs[job] = entry
        elif entry.nprocs != nprocs:
            raise ConfigError(f"job {job} has {entry.nprocs} ranks, not {nprocs}")
        known = entry.hosts.get(rank)
        if known is not None and known != host:
            raise ConfigError(f"job {job}: rank {rank} already runs on {known}, not {host}")
        entry.hosts[rank] = host
        return entry

    def conn(self, job: str, rank: int, conn: Conn) -> int | None:
        """A connection ``rank`` holds; the peer rank once the other end reported it."""
        entry = self._job(job)
        if rank not in entry.hosts:
            raise ConfigError(f"job {job}: rank {rank} has not joined")
        return self.mirrors.report(job, rank, conn)

    def leave(self, job: str, rank: int) -> ReportedJob | None:
        """Rank ``rank`` left; the job if that was its last rank (its slot is free again)."""
        entry = self._job(job)
        entry.hosts.pop(rank, None)
        self.mirrors.forget(job, rank)
        if entry.hosts:
            return None
        del self.jobs[job]
        return entry

    def _job(self, job: str) -> ReportedJob:
        entry = self.jobs.get(job)
        if entry is None:
            raise ConfigError(f"job {job} is not known to the tag hub")
        return entry

    def _free_slot(self) -> int:
        used = {j.slot for j in self.jobs.values()}
        for slot in range(1, MAX_JOB_SLOT + 1):
            if slot not in used:
                return slot
        raise ConfigError(f"all {MAX_JOB_SLOT} job slots are in use: the job runs untagged")
