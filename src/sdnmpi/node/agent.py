"""``sdnmpi agent``: the privileged per-host process between MPI ranks and the tagger.

It loads the eBPF tagger (:class:`~sdnmpi.node.bpf.Tagger`) on the host's fabric
interface and owns its maps; it serves the ranks of this host over a Unix socket
(JSON lines, see ``docs/agent-protocol.md``); it scans each registered rank's TCP
sockets every ``scan_interval_s`` and lets :class:`~sdnmpi.node.agentcore.AgentCore`
decide which connections to tag.  A rank is identified by the socket's peer
credentials (``SO_PEERCRED``), so it can only register its own process; its
connections are accepted only if ``/proc`` shows they are its own.  When a rank's
socket closes (``MPI_Finalize`` or death) the rank is unregistered and its
connections untagged.  ``stop()`` removes everything the agent installed.

The job slot and the peers of ambiguous accepted connections come from a
:class:`TagHubApi`: :class:`LocalTagHub` (the slot the job asked for, mirror reports inside
this process) or :class:`RemoteTagHub` (the controller's tag hub, over its API socket).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sdnmpi.errors import ConfigError, SdnMpiError
from sdnmpi.node import procnet
from sdnmpi.node.agentcore import AddConn, AgentCore, AgentError, MapOp, Registration
from sdnmpi.node.bpf import MAX_CTX_SLOTS, ConnContext, FourTuple, Tagger
from sdnmpi.node.peers import Conn, MirrorResolver, RankEndpoints
from sdnmpi.node.procnet import Endpoint
from sdnmpi.wire import controller_api

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_LINE_BYTES = 1 << 20
#: Longest sleep of an agent's scan loop while no rank is registered (a registration
#: wakes it at once; this only bounds a missed wake-up).
IDLE_WAIT_S = 1.0
#: A reply to a rank, and the file descriptors passed with it (SCM_RIGHTS).
Reply = tuple[dict[str, Any], list[int]]
_SIOCGIFADDR = 0x8915


class TagHubApi(Protocol):
    """The tag hub as the agent asks it: fabric-wide knowledge (job slots, peers)."""

    def joined(self, job: str, rank: int, nprocs: int, requested: int | None) -> int | None:
        """Rank ``rank`` registered here; the job's slot (``None``: run untagged)."""
        ...

    def resolve(self, job: str, rank: int, conn: Conn) -> int | None: ...

    def left(self, job: str, rank: int) -> None: ...

    def push(self, job: str, collective: dict[str, Any]) -> dict[str, Any]:
        """Install one collective call's routes now (push mode); the hub's reply."""
        ...

    def bcast_open(self, job: str, root: int, ranks: list[int]) -> dict[str, Any]:
        """A switch-replicated broadcast tree of ``ranks`` from ``root``: the reply to
        the rank (``group`` and ``port``, or ``error``)."""
        ...

    def bcast_close(self, job: str, group: str) -> dict[str, Any]:
        """Remove the job's tree of ``group``: the reply to the rank."""
        ...


@dataclass
class LocalTagHub:
    """The job slot the job asked for (``SDNMPI_JOB_SLOT``); mirror reports in-process.

    Agents of several emulated hosts may share one LocalTagHub (tests); across real
    hosts the controller's hub serves them (:class:`RemoteTagHub`).
    """

    mirrors: MirrorResolver = field(default_factory=MirrorResolver)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def joined(self, job: str, rank: int, nprocs: int, requested: int | None) -> int | None:
        return requested

    def resolve(self, job: str, rank: int, conn: Conn) -> int | None:
        with self.lock:
            return self.mirrors.report(job, rank, conn)

    def left(self, job: str, rank: int) -> None:
        with self.lock:
            self.mirrors.forget(job, rank)

    def push(self, job: str, collective: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": "push mode needs the controller (agent --controller-api)"}

    def bcast_open(self, job: str, root: int, ranks: list[int]) -> dict[str, Any]:
        return {"ok": False, "error": _NO_CONTROLLER_BCAST}

    def bcast_close(self, job: str, group: str) -> dict[str, Any]:
        return {"ok": False, "error": _NO_CONTROLLER_BCAST}


class RemoteTagHub:
    """The controller's tag hub: ``tag_join`` / ``tag_conn`` / ``tag_leave`` on its API
    socket (docs/controller-api.md), over one kept connection.  Fail-open: when the
    controller is down or slow, the answer is "no slot" / "unknown peer" and the job
    runs untagged on default routes; the reason is logged once."""

    def __init__(self, api_socket: Path, host: str, timeout_s: float = 12.0) -> None:
        self.api_socket, self.host, self.timeout_s = api_socket, host, timeout_s
        self.api = controller_api.Client(api_socket, timeout_s=timeout_s, persistent=True)
        self._warned: set[str] = set()

    def joined(self, job: str, rank: int, nprocs: int, requested: int | None) -> int | None:
        return self._call("tag_join", lambda: self.api.tag_join(job, rank, nprocs, self.host))

    def resolve(self, job: str, rank: int, conn: Conn) -> int | None:
        local, remote = conn
        return self._call("tag_conn", lambda: self.api.tag_conn(
            job, rank, f"{local.ip}:{local.port}", f"{remote.ip}:{remote.port}"
        ))  # fmt: skip

    def left(self, job: str, rank: int) -> None:
        self._call("tag_leave", lambda: self.api.tag_leave(job, rank))

    def push(self, job: str, collective: dict[str, Any]) -> dict[str, Any]:
        cached = self._call("tag_push", lambda: self.api.tag_push(job, collective))
        if cached is None:
            return {"ok": False, "error": "the controller did not install the routes"}
        return {"ok": True, "cached": cached}

    def bcast_open(self, job: str, root: int, ranks: list[int]) -> dict[str, Any]:
        def ask() -> dict[str, Any]:
            got = self.api.tag_bcast_open(job, root, ranks)
            return {"ok": True, "group": got.group, "port": got.port}

        return self._relay("tag_bcast_open", ask)

    def bcast_close(self, job: str, group: str) -> dict[str, Any]:
        def ask() -> dict[str, Any]:
            self.api.tag_bcast_close(job, group)
            return {"ok": True}

        return self._relay("tag_bcast_close", ask)

    def _relay(self, op: str, ask: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``ask()``, or the controller's reason as the rank's one-line error."""
        try:
            return ask()
        except controller_api.ControllerRefusedError as exc:
            return {"ok": False, "error": str(exc.reply.get("error", "refused"))}
        except controller_api.ControllerUnreachableError as exc:
            self._warn("down", f"controller unreachable ({exc})")
            return {"ok": False, "error": f"{op}: the controller is unreachable"}

    def close(self) -> None:
        self.api.close()

    def _call(self, op: str, ask: Callable[[], T]) -> T | None:
        """``ask()``, or None (logged once per kind) when the controller is unreachable
        or refuses."""
        try:
            return ask()
        except controller_api.ControllerUnreachableError as exc:
            self._warn("down", f"controller unreachable ({exc}): untagged")
        except controller_api.ControllerRefusedError as exc:
            self._warn(op, f"controller refused {op}: {exc.reply}")
        return None

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)


@dataclass(frozen=True)
class AgentConfig:
    """Where the agent attaches and listens."""

    iface: str
    socket_path: Path
    bpf_object: Path | None = None
    scan_interval_s: float = 0.01
    full_scan_s: float = 5.0  # a socket passed between processes is seen this late
    max_scan_interval_s: float = 0.1  # a new connection of a quiet rank: tagged this late
    eager_scan_s: float = 5.0  # full rate this long after a rank registers
    ctx_slots: int = MAX_CTX_SLOTS


def iface_ipv4(iface: str) -> str:
    """The IPv4 address of ``iface`` in this network namespace (:class:`ConfigError` if none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", iface[:15].encode()))
        except OSError as exc:
            raise ConfigError(f"interface {iface!r}: no IPv4 address ({exc})") from None
    return socket.inet_ntoa(raw[20:24])


class Agent:
    """One host's agent: tagger, rank socket, scanner (see module docstring)."""

    def __init__(self, cfg: AgentConfig, hub: TagHubApi, tagger: Tagger | None = None) -> None:
        self.cfg = cfg
        self.hub = hub
        self.ip = iface_ipv4(cfg.iface)
        self.core = AgentCore(cfg.ctx_slots)
        self.lock = threading.RLock()
        self._tagger = tagger
        self._owns_tagger = tagger is None
        self._server: socket.socket | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._clients: dict[int, socket.socket] = {}
        self._last_signature: tuple[object, ...] | None = None
        self._wake = threading.Event()

    @property
    def tagger(self) -> Tagger:
        if self._tagger is None:
            raise SdnMpiError("agent not started")
        return self._tagger

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Load and attach the tagger, listen on the socket, start the scanner."""
        path = self.cfg.socket_path
        if path.exists() or path.is_symlink():
            raise ConfigError(f"{path} exists: another agent runs here (or remove it)")
        if self._tagger is None:
            self._tagger = Tagger(self.cfg.bpf_object)
        try:
            if self.tagger.attached_to is None:
                self.tagger.attach(self.cfg.iface)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            os.chmod(path, 0o666)  # any user's ranks; SO_PEERCRED says who they are
            server.listen(64)
        except BaseException:
            self._close_tagger()
            raise
        self._server = server
        self._spawn(self._accept_loop)
        self._spawn(self._scan_loop)
        log.info("agent on %s (%s), socket %s", self.cfg.iface, self.ip, path)

    def stop(self) -> None:
        """Unregister every rank, stop serving, remove the socket and the tagger."""
        self._stop.set()
        self._wake.set()  # out of an idle scan loop's wait
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
            with contextlib.suppress(FileNotFoundError):
                self.cfg.socket_path.unlink()
        with self.lock:
            for client in list(self._clients.values()):
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_RDWR)
            for reg in self.core.registrations():
                self._unregister(reg.pid)
        for t in self._threads:
            t.join(timeout=5)
        self._close_tagger()

    def _close_tagger(self) -> None:
        if self._owns_tagger and self._tagger is not None:
            self._tagger.close()
            self._tagger = None

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self._threads.append(t)

    # -- serving ranks -------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stop.is_set() and self._server is not None:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _ = struct.unpack("3i", creds)
        with self.lock:
            self._clients[pid] = conn
        try:
            with conn, conn.makefile("rb") as lines:
                for line in lines:
                    reply, fds = self.request(pid, uid, line)
                    data = json.dumps(reply).encode() + b"\n"
                    if fds:
                        socket.send_fds(conn, [data], fds)
                    else:
                        conn.sendall(data)
        except OSError as exc:
            log.debug("client %d: %s", pid, exc)
        finally:
            with self.lock:
                self._clients.pop(pid, None)
                if self.core.registration(pid) is not None:
                    self._unregister(pid)

    def request(self, pid: int, uid: int, line: bytes) -> Reply:
        """Answer one request of process ``pid`` (``uid``): (reply, fds to pass)."""
        try:
            if len(line) > MAX_LINE_BYTES:
                raise AgentError(f"request longer than {MAX_LINE_BYTES} bytes")
            req = json.loads(line)
            if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                raise AgentError("want a JSON object with an 'op'")
            with self.lock:
                return self._dispatch(pid, uid, req)
        except (ValueError, SdnMpiError) as exc:
            log.info("process %d: refused: %s", pid, exc)
            return {"ok": False, "error": str(exc)}, []

    def _dispatch(
        self, pid: int, uid: int, req: dict[str, Any]
    ) -> tuple[dict[str, Any], list[int]]:
        op = req["op"]
        if op == "register":
            return self._register(pid, uid, req)
        if op == "ranks":
            _keys(req, {"op", "table"})
            self.core.set_ranks(pid, _rank_table(req["table"]))
            self._wake.set()
            return {"ok": True}, []
        if op == "push":
            _keys(req, {"op", "collective"})
            reg = self.core.registration(pid)
            if reg is None:
                raise AgentError(f"process {pid} is not registered")
            if not isinstance(req["collective"], dict):
                raise AgentError("collective must be an object")
            return self.hub.push(reg.job, req["collective"]), []
        if op in ("bcast_open", "bcast_close"):
            return self._bcast(pid, op, req), []
        if op == "unregister":
            _keys(req, {"op"})
            return {"ok": self._unregister(pid) is not None}, []
        if op == "status":
            return self.status(), []
        raise AgentError(f"unknown op {op!r}")

    def _register(
        self, pid: int, uid: int, req: dict[str, Any]
    ) -> tuple[dict[str, Any], list[int]]:
        _keys(req, {"op", "job", "rank", "nprocs"}, optional={"job_slot", "tag"})
        job, rank, nprocs = req["job"], req["rank"], req["nprocs"]
        if not isinstance(job, str) or not _ints(rank, nprocs):
            raise AgentError("job must be a string, rank and nprocs integers")
        requested = req.get("job_slot")
        if requested is not None and not _ints(requested):
            raise AgentError("job_slot must be an integer")
        tag = req.get("tag", True)
        if not isinstance(tag, bool):
            raise AgentError("tag must be true or false")
        reg = self.core.register(pid, uid, job, rank, nprocs, tag)
        try:
            slot = self.hub.joined(job, rank, nprocs, requested)
            self.core.set_job_slot(job, slot)
            fd = self.tagger.create_context(reg.ctx_slot)
            listen = _listen_ports(pid)
        except BaseException:
            self.core.unregister(pid)
            raise
        if tag:
            self._wake.set()  # MPI connects soon: scan eagerly
        log.info("job %s rank %d registered: pid %d, ctx slot %d", job, rank, pid, reg.ctx_slot)
        reply = {
            "ok": True,
            "ctx_slot": reg.ctx_slot,
            "job_slot": slot,
            "ip": self.ip,
            "listen_ports": listen,
        }
        return reply, [fd]

    def _bcast(self, pid: int, op: str, req: dict[str, Any]) -> dict[str, Any]:
        """A registered rank's ``bcast_open`` / ``bcast_close``, checked, relayed to the
        controller for the rank's own job (docs/agent-protocol.md)."""
        reg = self.core.registration(pid)
        if reg is None:
            raise AgentError(f"process {pid} is not registered: register first")
        if op == "bcast_close":
            _keys(req, {"op", "group"})
            return self.hub.bcast_close(reg.job, _multicast_group(req["group"]))
        _keys(req, {"op", "comm", "root"})
        comm, root = _bcast_comm(req["comm"], reg.nprocs), req["root"]
        if not _ints(root) or root not in comm:
            raise AgentError(f"bcast_open: root {root!r} is not a rank of comm")
        log.info("job %s rank %d: bcast_open root %d, %d ranks", reg.job, reg.rank, root, len(comm))
        return self.hub.bcast_open(reg.job, root, comm)

    def _unregister(self, pid: int) -> Registration | None:
        reg, ops = self.core.unregister(pid)
        if reg is None:
            return None
        self._apply(ops)
        with contextlib.suppress(SdnMpiError):
            self.tagger.remove_context(reg.ctx_slot)
        self.hub.left(reg.job, reg.rank)
        log.info("job %s rank %d unregistered (pid %d)", reg.job, reg.rank, pid)
        return reg

    # -- scanning ------------------------------------------------------------------------
    def _scan_loop(self) -> None:
        """Scan every ``scan_interval_s`` while things change and for ``eager_scan_s``
        after a rank registers, backing off (doubling, up to ``max_scan_interval_s``)
        while nothing changes; with no rank registered, sleep until one registers.

        An idle agent used to scan 100 times a second: 0.6 % of a core each, 8 % of
        the 2-core emulator's CPU with the 28 agents of the Allreduce fabric."""
        interval, eager_until = self.cfg.scan_interval_s, 0.0
        while not self._stop.is_set():
            if not self._wake.is_set() and not self._has_ranks():
                self._wake.wait(IDLE_WAIT_S)  # register (and stop) set it
                continue
            if self._stop.wait(interval):
                return
            now = time.monotonic()
            if self._wake.is_set():  # a rank registered: MPI connects soon after
                self._wake.clear()
                eager_until = now + self.cfg.eager_scan_s
            if self.scan_once() or now < eager_until:
                interval = self.cfg.scan_interval_s
            else:
                interval = min(2 * interval, self.cfg.max_scan_interval_s)

    def _has_ranks(self) -> bool:
        """Whether a registered rank tags (the others' connections are never looked at)."""
        with self.lock:
            return bool(self.core.tagging())

    def scan_once(self) -> bool:
        """One pass over the registered ranks' sockets.

        Cheap when nothing changed: the host's TCP table is read once and, if the
        set of established sockets is the one seen last time and no rank came or
        went, the per-process descriptor scan is skipped."""
        with self.lock:
            # ranks that do not tag (register or bcast mode alone) are not scanned: the
            # scan only finds connections for the tagger
            regs = self.core.tagging()
            signature = self._signature(regs)
            if signature is not None and signature == self._last_signature:
                return False
            self._last_signature = signature
            for reg in regs:
                try:
                    sockets = procnet.process_sockets(reg.pid)
                except (FileNotFoundError, ProcessLookupError):
                    self._unregister(reg.pid)
                    continue
                except (OSError, SdnMpiError) as exc:
                    log.warning("cannot read the sockets of %d: %s", reg.pid, exc)
                    continue
                self._apply(self.core.scan(reg.pid, sockets, self.hub.resolve))
            return True

    def _signature(self, regs: list[Registration]) -> tuple[object, ...] | None:
        """What a scan depends on: the namespace's TCP open/close counters (one small
        file, about 20 us to read, where listing every rank's descriptors cost
        milliseconds), the registered ranks and the agent's state.

        Anything the counters miss (a socket passed between processes) is caught by
        the full scan every ``full_scan_s``."""
        if not regs:
            return None
        try:
            counters = procnet.tcp_counters()
        except (OSError, SdnMpiError):
            return None  # no counters: scan every time
        tick = int(time.monotonic() / self.cfg.full_scan_s)
        return (tuple(r.pid for r in regs), counters, self.core.jobs_version, tick)

    def _apply(self, ops: list[MapOp]) -> None:
        for op in ops:
            local, remote = op.conn
            tup = FourTuple(local.ip, remote.ip, local.port, remote.port)
            if isinstance(op, AddConn):
                ctx = ConnContext(op.job_slot, op.src_rank, op.dst_rank, op.ctx_slot)
                self.tagger.add_connection(tup, ctx)
                log.debug("tag %s as %s", tup, ctx)
            else:
                self.tagger.remove_connection(tup)

    def status(self) -> dict[str, Any]:
        """Registrations, tagged connections and the tagger's counters."""
        return {
            "ok": True,
            "iface": self.cfg.iface,
            "ip": self.ip,
            "ranks": [
                {
                    "job": r.job,
                    "rank": r.rank,
                    "pid": r.pid,
                    "uid": r.uid,
                    "ctx_slot": r.ctx_slot,
                    "tagged": [
                        {"local": f"{c[0].ip}:{c[0].port}", "remote": f"{c[1].ip}:{c[1].port}",
                         "dst_rank": a.dst_rank}
                        for c, a in sorted(self.core.tagged(r.pid).items())
                    ],
                }
                for r in self.core.registrations()
            ],
            "counters": vars(self.tagger.counters()) if self._tagger is not None else {},
        }  # fmt: skip


def _keys(req: dict[str, Any], required: set[str], optional: set[str] | None = None) -> None:
    missing, unknown = required - set(req), set(req) - required - (optional or set())
    if missing or unknown:
        raise AgentError(f"{req.get('op')}: missing {sorted(missing)}, unknown {sorted(unknown)}")


def _ints(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


#: The most ranks a broadcast's communicator may have (a job has at most 4096).
MAX_BCAST_RANKS = 4096
_NO_CONTROLLER_BCAST = "switch-replicated broadcasts need the controller (agent --controller-api)"


def _bcast_comm(comm: Any, nprocs: int) -> list[int]:
    """A communicator's world ranks: a non-empty list of distinct ranks of the job."""
    if not isinstance(comm, list) or not comm:
        raise AgentError("bcast_open: comm must be a non-empty list of world ranks")
    if len(comm) > min(nprocs, MAX_BCAST_RANKS):
        raise AgentError(f"bcast_open: comm has {len(comm)} ranks, the job {nprocs}")
    bad = next((r for r in comm if not _ints(r) or not 0 <= r < nprocs), None)
    if bad is not None or any(not _ints(r) for r in comm):
        raise AgentError(f"bcast_open: comm rank {bad!r} is not a world rank 0..{nprocs - 1}")
    if len(set(comm)) != len(comm):
        raise AgentError("bcast_open: a rank is in comm twice")
    return list(comm)


def _multicast_group(group: Any) -> str:
    """An IPv4 multicast address, as text."""
    try:
        addr = ipaddress.IPv4Address(group) if isinstance(group, str) else None
    except ValueError:
        addr = None
    if addr is None or not addr.is_multicast:
        raise AgentError(f"bcast_close: group {str(group)[:40]!r} is not an IPv4 multicast address")
    return str(addr)


def _rank_table(rows: Any) -> RankEndpoints:
    """``[[rank, ip, pid, [ports...]], ...]`` -> :class:`RankEndpoints` (checked)."""
    if not isinstance(rows, list) or not rows:
        raise AgentError("table must be a non-empty list")
    out = []
    for row in rows:
        ok = isinstance(row, list) and len(row) == 4
        ok = ok and _ints(row[0], row[2]) and isinstance(row[1], str)
        ok = ok and isinstance(row[3], list) and _ints(*row[3])
        if not ok:
            raise AgentError(f"bad rank table row {row!r}: want [rank, ip, pid, [ports]]")
        try:
            Endpoint(row[1], 0)
            socket.inet_aton(row[1])
        except OSError:
            raise AgentError(f"bad address {row[1]!r} in the rank table") from None
        out.append((row[0], row[1], row[2], row[3]))
    return RankEndpoints.build(out)


def _listen_ports(pid: int) -> list[int]:
    """The TCP ports process ``pid`` listens on (what it tells the other ranks)."""
    return sorted({s.local.port for s in procnet.process_sockets(pid) if s.state == "LISTEN"})
