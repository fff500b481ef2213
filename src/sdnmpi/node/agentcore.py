"""The node agent's decisions, as a pure state machine (the agent adapter does the I/O).

The agent serves the MPI processes of one host.  Each rank registers itself
(its PID comes from the socket's peer credentials, never from the request, so
a rank can only speak for its own process), gets a context slot (the memory it
publishes its current MPI primitive in), and hands over its job's rank table
(:class:`~sdnmpi.node.peers.RankEndpoints`, exchanged at ``MPI_Init``).  The
adapter then scans each registered process's TCP sockets (``/proc``) and feeds
them to :meth:`AgentCore.scan`, which answers which connections to tag
(:class:`AddConn`) or forget (:class:`DelConn`).  A connection is tagged only
when it is the process's own (the scan proves it), its peer rank is known
(locally or from the hub), and the job has a job slot.

Rules enforced here: a job belongs to the uid that registered it first on this
host; a (job, rank) is held by one live process; ranks are within the job size;
context slots are finite (the eBPF map size) and freed on unregistration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sdnmpi.errors import ConfigError
from sdnmpi.node.peers import Conn, RankEndpoints
from sdnmpi.node.procnet import TcpSocket

#: The hub's answer for a connection the rank table cannot attribute: the peer rank or None.
Resolve = Callable[[str, int, Conn], "int | None"]


class AgentError(ConfigError):
    """A request the agent refuses (answered to the rank, which then runs untagged)."""


@dataclass(frozen=True)
class Registration:
    """One registered rank."""

    pid: int
    uid: int
    job: str
    rank: int
    nprocs: int
    ctx_slot: int
    #: Whether the rank tags its packets (tag or push mode): only then are its
    #: connections looked for and put in the tagger's map.
    tag: bool = True


@dataclass(frozen=True)
class AddConn:
    """Tag ``conn`` (as this host sends it) with these fields."""

    conn: Conn
    job_slot: int
    src_rank: int
    dst_rank: int
    ctx_slot: int


@dataclass(frozen=True)
class DelConn:
    """Stop tagging ``conn``."""

    conn: Conn


MapOp = AddConn | DelConn


@dataclass
class _Rank:
    reg: Registration
    table: RankEndpoints | None = None
    tagged: dict[Conn, AddConn] = field(default_factory=dict)


class AgentCore:
    """Registrations, rank tables and tagged connections of one host."""

    def __init__(self, ctx_slots: int) -> None:
        if ctx_slots < 1:
            raise ValueError("ctx_slots must be >= 1")
        self._free = list(range(ctx_slots - 1, -1, -1))  # pop() hands out 0 first
        self._ranks: dict[int, _Rank] = {}
        self._job_uid: dict[str, int] = {}
        self._job_slot: dict[str, int] = {}
        #: Bumped by every change a scan depends on (tables, slots, registrations).
        self.jobs_version = 0

    # -- registration ------------------------------------------------------------------
    def register(
        self, pid: int, uid: int, job: str, rank: int, nprocs: int, tag: bool = True
    ) -> Registration:
        """Register ``pid`` as ``rank`` of ``job`` (``tag``: it tags its packets);
        :class:`AgentError` says why not."""
        if not job or len(job) > 64 or not job.isprintable():
            raise AgentError(f"job {job!r}: want 1..64 printable characters")
        if not 1 <= nprocs <= 4096 or not 0 <= rank < nprocs:
            raise AgentError(f"rank {rank} of {nprocs}: out of range (at most 4096 ranks)")
        if pid in self._ranks:
            raise AgentError(f"process {pid} is already registered")
        owner = self._job_uid.get(job)
        if owner is not None and owner != uid:
            raise AgentError(f"job {job} belongs to uid {owner}, not {uid}")
        for other in self._ranks.values():
            if other.reg.job == job and other.reg.rank == rank:
                raise AgentError(f"rank {rank} of job {job} is process {other.reg.pid}")
            if other.reg.job == job and other.reg.nprocs != nprocs:
                raise AgentError(f"job {job} has {other.reg.nprocs} ranks, not {nprocs}")
        if not self._free:
            raise AgentError("no free context slot on this host")
        reg = Registration(pid, uid, job, rank, nprocs, self._free.pop(), tag)
        self._ranks[pid] = _Rank(reg)
        self.jobs_version += 1
        self._job_uid[job] = uid
        return reg

    def set_ranks(self, pid: int, table: RankEndpoints) -> None:
        """The job's rank table, as ``pid`` got it from ``MPI_Init``'s exchange."""
        entry = self._entry(pid)
        if len(table.ranks) != entry.reg.nprocs:
            raise AgentError(f"rank table has {len(table.ranks)} ranks, job has {entry.reg.nprocs}")
        if table.ranks[entry.reg.rank].pid != pid:
            raise AgentError(f"rank table gives rank {entry.reg.rank} another PID")
        entry.table = table
        self.jobs_version += 1

    def set_job_slot(self, job: str, slot: int | None) -> None:
        """The hub's job slot for ``job`` (``None``: none, the job runs untagged)."""
        self.jobs_version += 1
        if slot is None:
            self._job_slot.pop(job, None)
        elif not 1 <= slot <= 127:
            raise AgentError(f"job slot {slot} out of range 1..127")
        else:
            self._job_slot[job] = slot

    def unregister(self, pid: int) -> tuple[Registration | None, list[MapOp]]:
        """Forget ``pid`` (finalized or dead): its connections stop being tagged."""
        entry = self._ranks.pop(pid, None)
        if entry is None:
            return None, []
        self.jobs_version += 1
        self._free.append(entry.reg.ctx_slot)
        job = entry.reg.job
        if not any(r.reg.job == job for r in self._ranks.values()):
            self._job_uid.pop(job, None)
            self._job_slot.pop(job, None)
        return entry.reg, [DelConn(c) for c in sorted(entry.tagged)]

    # -- queries -----------------------------------------------------------------------
    def registration(self, pid: int) -> Registration | None:
        entry = self._ranks.get(pid)
        return entry.reg if entry is not None else None

    def tagging(self) -> list[Registration]:
        """The registered ranks that tag their packets (the only ones scanned)."""
        return [r for r in self.registrations() if r.tag]

    def registrations(self) -> list[Registration]:
        return sorted((r.reg for r in self._ranks.values()), key=lambda g: (g.job, g.rank))

    def jobs(self) -> set[str]:
        return {r.reg.job for r in self._ranks.values()}

    def tagged(self, pid: int) -> dict[Conn, AddConn]:
        return dict(self._entry(pid).tagged)

    # -- scanning ----------------------------------------------------------------------
    def scan(self, pid: int, sockets: Iterable[TcpSocket], resolve: Resolve) -> list[MapOp]:
        """Map operations that make ``pid``'s tagged connections match its sockets now."""
        entry = self._entry(pid)
        reg, table = entry.reg, entry.table
        slot = self._job_slot.get(reg.job)
        live = {(s.local, s.remote) for s in sockets if s.state == "ESTABLISHED"}
        if slot is None:  # no slot (or revoked): nothing of this job is tagged
            live = set()
        ops: list[MapOp] = []
        for conn in sorted(set(entry.tagged) - live):
            del entry.tagged[conn]
            ops.append(DelConn(conn))
        if table is None or slot is None:
            return ops
        for conn in sorted(live - set(entry.tagged)):
            peer = table.peer(conn)
            if peer is None:
                peer = resolve(reg.job, reg.rank, conn)
            if peer is None or peer == reg.rank:
                continue
            op = AddConn(conn, slot, reg.rank, peer, reg.ctx_slot)
            entry.tagged[conn] = op
            ops.append(op)
        return ops

    def _entry(self, pid: int) -> _Rank:
        entry = self._ranks.get(pid)
        if entry is None:
            raise AgentError(f"process {pid} is not registered")
        return entry
