"""Which rank is at the other end of an MPI process's TCP connection.

The tag carries the source and destination ranks, so every connection of a
rank must be attributed to the rank at its other end, on the connecting side
and on the accepting side, with several ranks per host.

Two rules, both pure:

1. **Listening ports** (local): at ``MPI_Init`` the ranks exchange where they
   listen (:class:`RankEndpoints`: host address, PID, listening ports).  A
   connection whose remote endpoint is a rank's listening port was opened *to*
   that rank, so the connecting side knows its peer at once.  When only one
   rank of the job lives at the remote address, that rank is the peer even for
   an accepted connection.
2. **Mirror reports** (hub): an accepted connection whose remote port is the
   peer's ephemeral port cannot be told apart locally when several ranks share
   the peer's host.  The agents report every connection (4-tuple and their own
   rank) to the hub (the controller); the other end's report has the mirrored
   4-tuple, and :class:`MirrorResolver` pairs the two.

>>> table = RankEndpoints.build([(0, "10.0.0.1", 100, [1024]), (1, "10.0.0.2", 200, [1024]),
...                             (2, "10.0.0.2", 201, [1025])])
>>> table.by_listen(Endpoint("10.0.0.2", 1025))
2
>>> table.unique_at("10.0.0.1"), table.unique_at("10.0.0.2")
(0, None)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sdnmpi.errors import ConfigError
from sdnmpi.node.procnet import Endpoint

#: A connection as one end sees it: (local endpoint, remote endpoint).
Conn = tuple[Endpoint, Endpoint]


@dataclass(frozen=True)
class RankInfo:
    """Where one rank runs and listens."""

    rank: int
    ip: str
    pid: int
    listen_ports: tuple[int, ...]


@dataclass(frozen=True)
class RankEndpoints:
    """Every rank of a job: the exchange done at ``MPI_Init``."""

    ranks: tuple[RankInfo, ...]
    _listen: dict[Endpoint, int] = field(init=False, repr=False, compare=False)
    _by_ip: dict[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        listen: dict[Endpoint, int] = {}
        by_ip: dict[str, list[int]] = {}
        for i, info in enumerate(self.ranks):
            if info.rank != i:
                raise ConfigError(f"rank table: entry {i} is rank {info.rank}")
            for port in info.listen_ports:
                ep = Endpoint(info.ip, port)
                if ep in listen:
                    raise ConfigError(f"rank table: ranks {listen[ep]} and {i} both listen on {ep}")
                listen[ep] = i
            by_ip.setdefault(info.ip, []).append(i)
        object.__setattr__(self, "_listen", listen)
        object.__setattr__(self, "_by_ip", {ip: tuple(r) for ip, r in by_ip.items()})

    @classmethod
    def build(cls, rows: Iterable[tuple[int, str, int, Sequence[int]]]) -> RankEndpoints:
        """From ``(rank, ip, pid, listening ports)`` rows in rank order."""
        return cls(tuple(RankInfo(r, ip, pid, tuple(ports)) for r, ip, pid, ports in rows))

    def by_listen(self, ep: Endpoint) -> int | None:
        """The rank listening on ``ep``, if any."""
        return self._listen.get(ep)

    def unique_at(self, ip: str) -> int | None:
        """The rank at ``ip`` if it is the only one there."""
        ranks = self._by_ip.get(ip, ())
        return ranks[0] if len(ranks) == 1 else None

    def peer(self, conn: Conn) -> int | None:
        """Rule 1: the rank at the remote end of ``conn``, or ``None`` (ask the hub)."""
        local, remote = conn
        found = self.by_listen(remote)
        if found is not None:
            return found
        if self.by_listen(local) is None:
            return None  # neither end listens: not an MPI data connection we know
        return self.unique_at(remote.ip)


@dataclass
class MirrorResolver:
    """Rule 2, at the hub: pairs each connection report with its mirror.

    ``report(job, rank, conn)`` records that ``rank`` of ``job`` holds ``conn``
    and returns the peer rank once the other end has reported the mirrored
    connection (``None`` until then); ``peer_of`` answers later questions.
    Reports are per job: two jobs never see each other's ranks.
    """

    _held: dict[tuple[str, Conn], int] = field(default_factory=dict)

    def report(self, job: str, rank: int, conn: Conn) -> int | None:
        key = (job, conn)
        known = self._held.get(key)
        if known is not None and known != rank:
            raise ConfigError(f"job {job}: {conn} reported by ranks {known} and {rank}")
        self._held[key] = rank
        return self.peer_of(job, conn)

    def peer_of(self, job: str, conn: Conn) -> int | None:
        local, remote = conn
        return self._held.get((job, (remote, local)))

    def forget(self, job: str, rank: int | None = None) -> int:
        """Drop a job's reports (or one rank's); how many were dropped."""
        gone = [k for k, r in self._held.items() if k[0] == job and rank in (None, r)]
        for k in gone:
            del self._held[k]
        return len(gone)
