"""The controller's API, defined once: JSON lines over its Unix socket.

The controller (``sdnmpi controller run --api-socket PATH``) answers one JSON
object per line with one JSON object per line, ``"ok": true`` or ``"ok": false``
with an ``"error"``; docs/controller-api.md describes every request and reply.
This module holds what both sides share: the ops and the keys each takes
(:data:`OPS`, checked by the controller), the ``"src>dst"`` key of a host pair
(:func:`pair_key`, :func:`split_pair_key`), and :class:`Client`, the one client
every caller uses (the manager, the node agents, switch recording, the demo, the
tests).

A :class:`Client` connects per request, or keeps one connection
(``persistent=True``, as a node agent does: every rank's registration goes
through it) and reconnects once when the controller restarted in between.  A
controller that is down, slow or answers garbage raises
:class:`ControllerUnreachableError`; a request it refuses raises
:class:`ControllerRefusedError` with its reason.  Both are :class:`ControllerApiError`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sdnmpi.errors import FormatError, SdnMpiError

#: Job routes (the manager's): a job's paths, one per host pair.
JOB_OPS: Final[dict[str, frozenset[str]]] = {
    "install_job": frozenset({"op", "job_id", "pairs"}),
    "remove_job": frozenset({"op", "job_id"}),
}
#: Read-only queries, answered from the controller's state (no flow-mods).
QUERY_OPS: Final[dict[str, frozenset[str]]] = {
    "topology": frozenset({"op"}),
    "jobs": frozenset({"op"}),
    "rules": frozenset({"op"}),
    "port_stats": frozenset({"op"}),
    "tagged": frozenset({"op"}),
}
#: The node agents' reports of tagged jobs (:mod:`sdnmpi.controller.tagservice`).
TAG_OPS: Final[dict[str, frozenset[str]]] = {
    "tag_join": frozenset({"op", "job", "rank", "nprocs", "host"}),
    "tag_conn": frozenset({"op", "job", "rank", "local", "remote"}),
    "tag_leave": frozenset({"op", "job", "rank"}),
    "tag_collectives": frozenset({"op", "job", "collectives"}),
    "tag_push": frozenset({"op", "job", "collective"}),
    "tag_bcast_open": frozenset({"op", "job", "root", "ranks"}),
    "tag_bcast_close": frozenset({"op", "job", "group"}),
}
#: Tag ops that change what the controller's job store keeps (``tag_conn`` only asks).
PERSISTED_TAG_OPS: Final = (
    "tag_join",
    "tag_leave",
    "tag_collectives",
    "tag_push",
    "tag_bcast_open",
    "tag_bcast_close",
)
#: Measurement jobs: per-pair byte counters (:mod:`sdnmpi.controller.measure`).
MEASURE_OPS: Final[dict[str, frozenset[str]]] = {
    "measure_start": frozenset({"op", "job_id", "hosts"}),
    "measure_read": frozenset({"op", "job_id"}),
    "measure_stop": frozenset({"op", "job_id"}),
}
#: Inspection (``sdnmpi routes``, ``sdnmpi controller status``; docs/INSPECT.md):
#: read-only.  The keys a request may have (``op`` and the first ones are required:
#: ``src`` and ``dst`` of ``route_trace``, ``switch`` of ``route_table``).
INSPECT_OPS: Final[dict[str, frozenset[str]]] = {
    "route_trace": frozenset({"op", "src", "dst", "job", "primitive", "source"}),
    "route_table": frozenset({"op", "switch", "source"}),
    "status": frozenset({"op"}),
}
#: Where a trace reads the tables: the switches (``OFPFlowStatsRequest``) or the
#: controller's intended state.
TRACE_SOURCES: Final = ("switch", "intended")
#: Every op and the keys its request has (all of them, no others; optional ones of
#: :data:`INSPECT_OPS` may be left out).
OPS: Final[dict[str, frozenset[str]]] = {
    **JOB_OPS, **QUERY_OPS, **TAG_OPS, **MEASURE_OPS, **INSPECT_OPS
}  # fmt: skip
#: A reply longer than this is refused (a whole fabric's topology or job table fits).
MAX_REPLY_BYTES: Final = 256 * 1024 * 1024
#: A request line longer than this is refused by the controller, which then closes the
#: connection, and not sent by :class:`Client` (a 16,384-pair job is 1.1 MB; every host
#: pair of 1024 hosts about 70 MB).
MAX_REQUEST_BYTES: Final = 256 * 1024 * 1024

#: (source host, destination host) -> node names of the path, source and destination
#: included, as ``install_job`` takes them and ``jobs`` returns them.
PairPaths = Mapping[tuple[str, str], Sequence[str]]


def pair_key(src: str, dst: str) -> str:
    """The key of a host pair in ``pairs`` and ``bytes`` objects.

    >>> pair_key("h1", "h3")
    'h1>h3'
    """
    if ">" in src or ">" in dst:
        raise FormatError(f"host names may not contain '>': {src!r}, {dst!r}")
    return f"{src}>{dst}"


def split_pair_key(key: object) -> tuple[str, str]:
    """(source, destination) of a ``"src>dst"`` key.

    >>> split_pair_key("h1>h3")
    ('h1', 'h3')
    """
    ends = key.split(">") if isinstance(key, str) else []
    if len(ends) != 2 or not all(ends):
        raise FormatError(f'pair {str(key)[:100]!r}: want "src>dst"')
    return ends[0], ends[1]


def encode_pairs(pairs: PairPaths) -> dict[str, list[str]]:
    """``pairs`` as the API's object: ``{"src>dst": [node, ...]}``."""
    return {pair_key(s, d): [str(n) for n in path] for (s, d), path in pairs.items()}


def decode_pairs(raw: object) -> dict[tuple[str, str], list[str]]:
    """The API's ``{"src>dst": [node, ...]}`` object as pairs; :class:`FormatError` if
    it is anything else.

    >>> decode_pairs({"h1>h3": ["h1", "leaf1", "h3"]})
    {('h1', 'h3'): ['h1', 'leaf1', 'h3']}
    """
    if not isinstance(raw, dict):
        raise FormatError('pairs must be an object {"src>dst": [node, ...]}')
    out: dict[tuple[str, str], list[str]] = {}
    for key, path in raw.items():
        if not isinstance(path, list) or not all(isinstance(n, str) for n in path):
            raise FormatError(f'pair {str(key)[:100]!r}: want "src>dst": [node names]')
        out[split_pair_key(key)] = path
    return out


class ControllerApiError(SdnMpiError):
    """A request to the controller's API failed."""


class ControllerUnreachableError(ControllerApiError):
    """The controller could not be asked: no socket, a timeout, a closed connection or
    a reply that is not one JSON object."""


class ControllerRefusedError(ControllerApiError):
    """The controller answered ``ok: false``; ``reply`` is its answer."""

    def __init__(self, message: str, reply: dict[str, Any]) -> None:
        super().__init__(message)
        self.reply = reply


@dataclass(frozen=True)
class Installed:
    """``install_job``'s reply: flow-mods sent, switches touched, seconds to confirm."""

    job_id: int
    flow_mods: int
    switches: int
    seconds: float


@dataclass(frozen=True)
class BcastGroup:
    """``tag_bcast_open``'s reply: where the root sends (``group``:``port``), and whether
    the tree existed already (``cached``)."""

    group: str
    port: int
    cached: bool


def connect_unix(
    path: Path | str,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> socket.socket:
    """A stream connection to the Unix socket ``path`` (I/O timeout ``timeout_s``).

    A listener whose queue of pending connections is full refuses a Unix-socket
    connect at once (EAGAIN) rather than letting it wait as TCP would: that is a busy
    peer, not a missing one, so the connect is tried again (backing off from 5 ms to
    200 ms) until ``timeout_s`` has passed; any other error is raised at once.
    """
    deadline, pause = clock() + timeout_s, 0.005
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(str(path))
            return sock
        except BlockingIOError:
            sock.close()
            if clock() + pause > deadline:
                raise
        except BaseException:
            sock.close()
            raise
        sleep(pause)
        pause = min(pause * 2, 0.2)


class Client:
    """The controller's API at ``path``; see the module docstring."""

    def __init__(
        self, path: Path | str, *, timeout_s: float = 30.0, persistent: bool = False
    ) -> None:
        self.path = str(path)
        self.timeout_s = timeout_s
        self.persistent = persistent
        #: Seconds from sending the last request to its reply (connecting excluded).
        self.last_seconds = 0.0
        self._conn: tuple[socket.socket, Any] | None = None
        self._lock = threading.Lock()

    # --- requests ---
    def send(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request; the controller's reply, ``ok`` or not.
        :class:`ControllerUnreachableError` when there is none (a kept connection is
        tried again once on a new one)."""
        with self._lock:
            try:
                return self._exchange(request)
            except ControllerUnreachableError:
                if not self.persistent:
                    raise
                self._drop()
                return self._exchange(request)  # the controller restarted in between

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request; its reply if ``ok``, else :class:`ControllerRefusedError`."""
        reply = self.send(request)
        if reply.get("ok") is not True:
            why = str(reply.get("error", "failed"))
            raise ControllerRefusedError(
                f"controller API {self.path}: {request.get('op')}: {why}", reply
            )
        return reply

    def close(self) -> None:
        """Close a kept connection (the next request opens a new one)."""
        with self._lock:
            self._drop()

    # --- job routes and queries ---
    def topology(self) -> dict[str, Any]:
        """The live fabric as ``sdnmpi.core.topology.topology_to_dict`` writes it."""
        topo = self.request({"op": "topology"}).get("topology")
        if not isinstance(topo, dict):
            raise self._unreachable("topology reply has no topology")
        return topo

    def jobs(self) -> dict[int, dict[tuple[str, str], list[str]]]:
        """The job routes the controller holds, by job id."""
        raw = self.request({"op": "jobs"}).get("jobs")
        if not isinstance(raw, dict):
            raise self._unreachable("jobs reply has no jobs object")
        try:
            return {int(job): decode_pairs(pairs) for job, pairs in raw.items()}
        except (ValueError, FormatError) as exc:
            raise self._unreachable(f"bad jobs reply: {exc}") from None

    def rules(self) -> dict[str, Any]:
        """How job routes become rules (``mode``, ``budget``) and the job rules each
        switch holds (``rules``: dpid -> count), as the controller counts them."""
        reply = self.request({"op": "rules"})
        if not isinstance(reply.get("rules"), dict):
            raise self._unreachable("rules reply has no rules object")
        return {k: reply.get(k) for k in ("mode", "budget", "rules")}

    def port_stats(self) -> list[dict[str, Any]]:
        """The last measured rate of every switch port: ``dpid``, ``port_no``,
        ``time_s`` (Unix time of the sample), ``rx_bps``, ``tx_bps``."""
        ports = self.request({"op": "port_stats"}).get("ports")
        if not isinstance(ports, list):
            raise self._unreachable("port_stats reply has no ports list")
        return ports

    def tagged(self) -> dict[str, Any]:
        """The tagged jobs by planner job id: ``slot``, ``regime``, ``rank_hosts`` and
        the path of each flow by primitive (``routes``)."""
        jobs = self.request({"op": "tagged"}).get("tagged")
        if not isinstance(jobs, dict):
            raise self._unreachable("tagged reply has no tagged object")
        return jobs

    def install_job(self, job_id: int, pairs: PairPaths) -> Installed:
        """Install (or replace) a job's routes; returns once the switches confirmed."""
        req = {"op": "install_job", "job_id": job_id, "pairs": encode_pairs(pairs)}
        reply = self.request(req)
        return Installed(
            job_id,
            int(reply.get("flow_mods", 0)),
            int(reply.get("switches", 0)),
            float(reply.get("seconds", 0.0)),
        )

    def remove_job(self, job_id: int) -> None:
        """Remove a job's routes (a job without routes is an error: see :meth:`jobs`)."""
        self.request({"op": "remove_job", "job_id": job_id})

    # --- tagged jobs (node agents) ---
    def tag_join(self, job: str, rank: int, nprocs: int, host: str) -> int | None:
        """Rank ``rank`` of ``job`` registered on ``host``: the job's slot (None: none)."""
        req = {"op": "tag_join", "job": job, "rank": rank, "nprocs": nprocs, "host": host}
        slot = self.request(req).get("job_slot")
        return slot if isinstance(slot, int) else None

    def tag_conn(self, job: str, rank: int, local: str, remote: str) -> int | None:
        """The peer rank of a connection ``local`` -> ``remote`` (``IP:PORT``), if known."""
        req = {"op": "tag_conn", "job": job, "rank": rank, "local": local, "remote": remote}
        peer = self.request(req).get("peer")
        return peer if isinstance(peer, int) else None

    def tag_leave(self, job: str, rank: int) -> None:
        """Rank ``rank`` of ``job`` unregistered."""
        self.request({"op": "tag_leave", "job": job, "rank": rank})

    def tag_collectives(self, job: str, collectives: Iterable[dict[str, Any]]) -> None:
        """The collectives the job will call, for routes per primitive."""
        self.request({"op": "tag_collectives", "job": job, "collectives": list(collectives)})

    def tag_push(self, job: str, collective: dict[str, Any]) -> bool:
        """Install one collective call's routes now (push mode); True if they were
        installed before (cached)."""
        reply = self.request({"op": "tag_push", "job": job, "collective": collective})
        return bool(reply.get("cached"))

    def tag_bcast_open(self, job: str, root: int, ranks: Sequence[int]) -> BcastGroup:
        """The switch-replicated broadcast tree of ``job``'s ``ranks`` (world ranks) from
        ``root``: its group address and UDP port, once every switch confirmed it."""
        req = {"op": "tag_bcast_open", "job": job, "root": root, "ranks": list(ranks)}
        reply = self.request(req)
        group, port = reply.get("group"), reply.get("port")
        if not isinstance(group, str) or isinstance(port, bool) or not isinstance(port, int):
            raise self._unreachable(f"bad tag_bcast_open reply: {reply}")
        return BcastGroup(group, port, bool(reply.get("cached")))

    def tag_bcast_close(self, job: str, group: str) -> None:
        """Remove ``job``'s broadcast tree of ``group``."""
        self.request({"op": "tag_bcast_close", "job": job, "group": group})

    # --- measurement jobs ---
    def measure_start(self, job_id: int, hosts: Sequence[str]) -> dict[str, Any]:
        """Count bytes between every ordered pair of ``hosts``; the reply (``pairs``,
        ``skipped``)."""
        return self.request({"op": "measure_start", "job_id": job_id, "hosts": list(hosts)})

    def measure_read(self, job_id: int) -> dict[tuple[str, str], int]:
        """Bytes counted so far, per host pair."""
        raw = self.request({"op": "measure_read", "job_id": job_id}).get("bytes")
        if not isinstance(raw, dict):
            raise self._unreachable("measure_read reply has no bytes")
        try:
            return {split_pair_key(k): int(v) for k, v in raw.items()}
        except (ValueError, TypeError, FormatError) as exc:
            raise self._unreachable(f"bad bytes reply: {exc}") from None

    def measure_stop(self, job_id: int) -> None:
        """Remove the measurement job's rules."""
        self.request({"op": "measure_stop", "job_id": job_id})

    # --- inspection ---
    def route_trace(
        self,
        src: str | int,
        dst: str | int,
        *,
        job: str | None = None,
        primitive: str | None = None,
        source: str = "switch",
    ) -> dict[str, Any]:
        """The path a packet from ``src`` to ``dst`` takes, hop by hop (docs/INSPECT.md):
        hosts by name, IP or MAC, or ranks of tagged job ``job`` (and with ``primitive``
        the tagged packets of that MPI primitive)."""
        req: dict[str, Any] = {"op": "route_trace", "src": src, "dst": dst, "source": source}
        if job is not None:
            req["job"] = job
        if primitive is not None:
            req["primitive"] = primitive
        return self.request(req)

    def route_table(self, switch: str) -> dict[str, Any]:
        """Switch ``switch``'s table as intended against what it holds, and the diff."""
        return self.request({"op": "route_table", "switch": switch})

    def status(self) -> dict[str, Any]:
        """The controller's state: fabric, jobs, rules per switch, uptime, last sync."""
        return self.request({"op": "status"})

    # --- the connection ---
    def _exchange(self, request: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(request).encode() + b"\n"
        if len(data) > MAX_REQUEST_BYTES + 1:
            raise ControllerApiError(
                f"controller API {self.path}: request of {len(data):,} bytes, more than "
                f"the {MAX_REQUEST_BYTES:,} the controller reads"
            )
        try:
            sock, stream = self._connection()
            t0 = time.monotonic()
            sock.sendall(data)
            line = stream.readline(MAX_REPLY_BYTES + 1)
            self.last_seconds = time.monotonic() - t0
        except OSError as exc:
            self._drop()
            raise self._unreachable(f"{exc.strerror or exc}") from None
        finally:
            if not self.persistent:
                self._drop()
        return self._reply(line)

    def _reply(self, line: bytes) -> dict[str, Any]:
        if not line.endswith(b"\n"):
            self._drop()
            why = "reply too long" if len(line) > MAX_REPLY_BYTES else "connection closed"
            raise self._unreachable(why)
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError) as exc:
            self._drop()
            raise self._unreachable(f"reply is not JSON: {exc}") from None
        if not isinstance(reply, dict):
            self._drop()
            raise self._unreachable("reply is not an object")
        return reply

    @property
    def _name(self) -> str:
        return f"controller API {self.path}"

    def _unreachable(self, why: str) -> ControllerUnreachableError:
        return ControllerUnreachableError(f"{self._name}: {why}")

    def _connection(self) -> tuple[socket.socket, Any]:
        if self._conn is None:
            sock = connect_unix(self.path, self.timeout_s)
            self._conn = (sock, sock.makefile("rb"))
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn[1].close()
            conn[0].close()
