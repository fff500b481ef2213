"""Who is calling: a Unix-socket front that reads SO_PEERCRED and splices to gRPC.

gRPC Python does not expose the peer credentials of a Unix-socket connection
(``context.peer()`` is just ``unix:``), and the manager must know the caller's
uid.  So the public socket (mode 0666: any local user may connect; identity is
checked, not assumed) is accepted here: for each connection we read
``SO_PEERCRED`` (uid, gid, pid, filled in by the kernel at connect time and not
forgeable), open a TCP connection to the real gRPC server on
``127.0.0.1:<ephemeral>``, record *our* source port of that upstream connection
-> the credentials in a :class:`PeerTable` before any byte is forwarded, and
copy bytes both ways.  The servicer maps ``context.peer()``
(``ipv4:127.0.0.1:PORT``) back through the table; a peer that is not in it
(someone connecting to the loopback port directly) is refused.  The entry is
removed when the connection closes, before the port can be reused.

``rewrite`` is a hook that maps the kernel's credentials to the ones recorded;
tests use it to act as another uid without root.

The proxy is the manager's front door, so no client can shut it: it splices at
most :attr:`Limits.connections` connections at once and
:attr:`Limits.per_uid` per uid (the scheduler's root is held only to the
total), answers one over the limit with a gRPC ``RESOURCE_EXHAUSTED`` that names
the limit (:func:`refuse`) and closes it, and its accept loop never ends but by
:meth:`CredentialProxy.stop`: out of file descriptors (``EMFILE``), it sheds
the waiting connection with a spare descriptor kept for that and backs off.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdnmpi.errors import ConfigError
from sdnmpi.manager.grpcrefuse import refuse

log = logging.getLogger(__name__)

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class Peer:
    """The kernel's credentials of a connected process."""

    pid: int
    uid: int
    gid: int


class PeerTable:
    """Upstream source port -> the peer that the proxied connection belongs to."""

    def __init__(self) -> None:
        self._peers: dict[int, Peer] = {}
        self._lock = threading.Lock()

    def add(self, port: int, peer: Peer) -> None:
        """Record a connection's peer."""
        with self._lock:
            self._peers[port] = peer

    def remove(self, port: int) -> None:
        """Forget a closed connection."""
        with self._lock:
            self._peers.pop(port, None)

    def lookup(self, grpc_peer: str) -> Peer | None:
        """The peer behind a gRPC peer string ``ipv4:127.0.0.1:PORT``, or None.

        >>> t = PeerTable(); t.add(5000, Peer(1, 2, 3))
        >>> t.lookup("ipv4:127.0.0.1:5000"), t.lookup("ipv4:10.0.0.1:5000")
        (Peer(pid=1, uid=2, gid=3), None)
        """
        prefix = "ipv4:127.0.0.1:"
        if not grpc_peer.startswith(prefix) or not grpc_peer[len(prefix) :].isdigit():
            return None
        with self._lock:
            return self._peers.get(int(grpc_peer[len(prefix) :]))

    def peers(self) -> dict[int, Peer]:
        """Upstream port -> peer, of the open connections."""
        with self._lock:
            return dict(self._peers)

    def __len__(self) -> int:
        with self._lock:
            return len(self._peers)


@dataclass(frozen=True)
class Limits:
    """How many connections the proxy splices at once."""

    #: In all (each takes two descriptors and two threads).
    connections: int = 512
    #: Per uid; root (slurmstepd, the scheduler's side on every node) only counts
    #: against :attr:`connections`.
    per_uid: int = 32

    def __post_init__(self) -> None:
        if not 1 <= self.per_uid <= self.connections:
            raise ConfigError(
                f"connection limits: want 1 <= per uid ({self.per_uid}) <= in all "
                f"({self.connections})"
            )


#: Errors of ``accept`` that say the process or machine is out of something, not
#: that the socket is gone: shed the connection, wait, go on.
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: Errors of ``accept`` about the one connection: go on at once.
_TRANSIENT = frozenset({errno.EINTR, errno.EAGAIN, errno.ECONNABORTED, errno.EPROTO})
#: Refusals answered at once (each a short thread); more are just closed.
_MAX_REFUSING = 16


def peer_credentials(conn: socket.socket) -> Peer:
    """SO_PEERCRED of a connected Unix socket."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    pid, uid, gid = _CRED.unpack(raw)
    return Peer(pid, uid, gid)


class _Front:
    """Accept connections and splice each to a loopback upstream port, within
    :class:`Limits` counted per key (a uid, a source address); the subclasses say how
    to listen, whose a connection is and how to refuse one."""

    #: Names the front in log lines.
    what = "proxy"
    #: What the per-key limit is per, in a refusal.
    per = "user"

    def __init__(self, upstream_port: int, limits: Limits | None = None) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.limits = limits or Limits()
        self._servers: list[socket.socket] = []
        self._conns: set[socket.socket] = set()
        self._open: Counter[Hashable] = Counter()  # key -> spliced connections
        self._refusing = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._spare: int | None = None
        self._last_warning: dict[str, float] = {}
        #: Connections refused over a limit, and accept errors survived (for tests).
        self.refused = 0
        self.accept_errors = 0

    # -- the subclasses' parts ------------------------------------------------------------

    def _bind(self) -> list[socket.socket]:
        raise NotImplementedError

    def _identify(self, conn: socket.socket, addr: Any) -> tuple[Hashable, str, bool, Any]:
        """(the key limits count, how the key is named in a refusal, exempt from the
        per-key limit, who it is for :meth:`_spliced`); OSError if the connection
        cannot be identified."""
        raise NotImplementedError

    def _spliced(self, who: Any, up: socket.socket) -> Callable[[], None]:
        """Record an upstream connection before any byte is forwarded; returns what
        forgets it."""
        return lambda: None

    def _answer_refusal(self, conn: socket.socket, why: str) -> None:
        """Tell a refused client why (before it is closed)."""

    # -- accepting ------------------------------------------------------------------------

    def start(self) -> None:
        """Listen and accept in a thread per listening socket."""
        self._servers = self._bind()
        self._spare = _open_spare()
        for server in self._servers:
            threading.Thread(
                target=self._accept_loop, args=(server,), name=f"manager-{self.what}", daemon=True
            ).start()

    def _accept_loop(self, server: socket.socket) -> None:
        backoff = 0.0
        while not self._closed.is_set():
            try:
                conn, addr = server.accept()
            except OSError as exc:
                if self._closed.is_set():
                    return
                self.accept_errors += 1
                if exc.errno in _TRANSIENT:
                    continue
                if exc.errno in _EXHAUSTED:
                    self._shed(server)
                self._warn("accept", f"{self.what}: accept failed: {exc}; going on")
                backoff = min(max(2 * backoff, 0.01), 1.0)
                self._closed.wait(backoff)
                continue
            backoff = 0.0
            self._admit(conn, addr)

    def _shed(self, server: socket.socket) -> None:
        """Out of descriptors: free the spare one, accept the waiting connection and
        close it (its client sees the connection closed, not a hang), take the spare
        back."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            os.close(spare)
        with contextlib.suppress(OSError):
            server.setblocking(False)
            try:
                conn, _ = server.accept()
                conn.close()
            finally:
                server.setblocking(True)
        with self._lock:
            if self._spare is None:
                self._spare = _open_spare()

    def _admit(self, conn: socket.socket, addr: Any) -> None:
        """Splice ``conn`` if the limits allow it, else refuse it; never raises."""
        try:
            key, named, exempt, who = self._identify(conn, addr)
        except OSError as exc:
            self._warn("cred", f"{self.what}: cannot identify a connection: {exc}")
            conn.close()
            return
        with self._lock:
            total = sum(self._open.values())
            if total >= self.limits.connections:
                why = f"the manager has {total} connections open (limit {self.limits.connections})"
            elif not exempt and self._open[key] >= self.limits.per_uid:
                why = (
                    f"{named} has {self._open[key]} connections open "
                    f"(limit {self.limits.per_uid} per {self.per})"
                )
            else:
                why = ""
                self._open[key] += 1
        if why:
            self._refuse(conn, why)
            return
        try:
            threading.Thread(target=self._serve, args=(conn, key, who), daemon=True).start()
        except RuntimeError as exc:  # no thread to be had
            self._warn("thread", f"{self.what}: cannot serve a connection: {exc}")
            self._release(key)
            conn.close()

    def _release(self, key: Hashable) -> None:
        with self._lock:
            self._open[key] -= 1
            if self._open[key] <= 0:
                del self._open[key]

    def _refuse(self, conn: socket.socket, why: str) -> None:
        self.refused += 1
        self._warn("refuse", f"{self.what}: refused a connection: {why}")
        with self._lock:
            answer = self._refusing < _MAX_REFUSING
            self._refusing += answer
        if not answer:
            conn.close()
            return

        def run() -> None:
            try:
                self._answer_refusal(conn, why)
            finally:
                conn.close()
                with self._lock:
                    self._refusing -= 1

        try:
            threading.Thread(target=run, name="manager-refuse", daemon=True).start()
        except RuntimeError:
            conn.close()
            with self._lock:
                self._refusing -= 1

    def _warn(self, key: str, message: str) -> None:
        """Log ``message``, at most once a second per ``key``: a flood is one line a
        second, not one per connection."""
        now = time.monotonic()
        if now - self._last_warning.get(key, -1e9) >= 1.0:
            self._last_warning[key] = now
            log.warning("%s", message)

    def _serve(self, conn: socket.socket, key: Hashable, who: Any) -> None:
        try:
            try:
                up = socket.create_connection(self.upstream, timeout=5.0)
                up.settimeout(None)
            except OSError as exc:
                self._warn("upstream", f"{self.what}: cannot serve a connection: {exc}")
                conn.close()
                return
            forget = self._spliced(who, up)
            with self._lock:
                self._conns.update((conn, up))
            try:
                self._splice(conn, up)
            finally:
                forget()
                with self._lock:
                    self._conns.difference_update((conn, up))
                conn.close()
                up.close()
        finally:
            self._release(key)

    def open_connections(self) -> dict[Hashable, int]:
        """key (uid, source address) -> connections spliced now."""
        with self._lock:
            return dict(self._open)

    def _splice(self, a: socket.socket, b: socket.socket) -> None:
        back = threading.Thread(target=_pump, args=(b, a), daemon=True)
        back.start()
        _pump(a, b)
        back.join()

    def stop(self) -> None:
        """Stop accepting and drop every spliced connection."""
        self._closed.set()
        for server in self._servers:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)  # wakes the accept loop
            server.close()
        with self._lock:
            spare, self._spare = self._spare, None
            conns = list(self._conns)
        if spare is not None:
            with contextlib.suppress(OSError):
                os.close(spare)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)


class CredentialProxy(_Front):
    """Accept on a public Unix socket, splice each connection to the gRPC port; limits
    per uid (root only counts against the total)."""

    def __init__(
        self,
        path: str | Path,
        upstream_port: int,
        table: PeerTable,
        *,
        mode: int = 0o666,
        rewrite: Callable[[Peer], Peer] | None = None,
        limits: Limits | None = None,
    ) -> None:
        super().__init__(upstream_port, limits)
        self.path = Path(path)
        self.table = table
        self.mode = mode
        self.rewrite = rewrite

    def _bind(self) -> list[socket.socket]:
        """Bind the socket (replacing a stale one)."""
        if self.path.exists() and not self.path.is_socket():
            raise ConfigError(f"--socket {self.path} exists and is not a socket")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.unlink(missing_ok=True)
            server.bind(str(self.path))
            os.chmod(self.path, self.mode)
            server.listen(128)
        except OSError as exc:
            server.close()
            raise ConfigError(
                f"--socket {self.path}: cannot listen: {exc.strerror or exc}"
            ) from None
        return [server]

    def _identify(self, conn: socket.socket, addr: Any) -> tuple[Hashable, str, bool, Any]:
        peer = peer_credentials(conn)
        if self.rewrite is not None:
            peer = self.rewrite(peer)
        return peer.uid, f"uid {peer.uid}", peer.uid == 0, peer

    def _spliced(self, who: Any, up: socket.socket) -> Callable[[], None]:
        port = int(up.getsockname()[1])
        self.table.add(port, who)
        return lambda: self.table.remove(port)

    def _answer_refusal(self, conn: socket.socket, why: str) -> None:
        refuse(conn, f"sdnmpi manager: {why}; close some of your connections")

    def stop(self) -> None:
        """Stop accepting, drop every spliced connection, remove the socket file."""
        super().stop()
        if self._servers:
            self.path.unlink(missing_ok=True)


class AddressFront(_Front):
    """The TLS port's front (``--tcp HOST:PORT``): accept TCP, splice each connection
    to the TLS gRPC server on loopback, at most :attr:`Limits.per_uid` connections per
    source address and :attr:`Limits.connections` in all.  A caller's token is inside
    TLS, so before it the address is all there is to count by; a refused connection is
    closed (a TLS client cannot read a plain answer)."""

    what = "tls-front"
    per = "address"

    def __init__(self, address: str, upstream_port: int, limits: Limits | None = None) -> None:
        super().__init__(upstream_port, limits)
        self.address = address
        #: The port listened on (once started; ``--tcp HOST:0`` picks one).
        self.port: int | None = None

    def _bind(self) -> list[socket.socket]:
        host, port = split_address(self.address)
        try:
            infos = socket.getaddrinfo(
                host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except socket.gaierror as exc:
            raise ConfigError(f"--tcp {self.address}: {exc.strerror}") from None
        servers: list[socket.socket] = []
        bound_port = port
        try:
            for family, ip in dict.fromkeys((i[0], i[4][0]) for i in infos):
                server = socket.socket(family, socket.SOCK_STREAM)
                servers.append(server)
                server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                server.bind((ip, bound_port))
                bound_port = int(server.getsockname()[1])  # port 0: the same one for all
                server.listen(128)
        except OSError as exc:
            for server in servers:
                server.close()
            raise ConfigError(
                f"--tcp {self.address}: cannot listen: {exc.strerror or exc}"
            ) from None
        self.port = bound_port
        return servers

    def _identify(self, conn: socket.socket, addr: Any) -> tuple[Hashable, str, bool, Any]:
        source = str(addr[0]) if isinstance(addr, tuple) and addr else "?"
        return source, f"address {source}", False, source


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT``) as (host, port); ConfigError if it is not one.

    >>> split_address("localhost:50051"), split_address("[::1]:0"), split_address(":7")
    (('localhost', 50051), ('::1', 0), ('', 7))
    """
    host, sep, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not (port.isascii() and port.isdigit()) or len(port) > 5 or int(port) > 65535:
        raise ConfigError(f"--tcp {address!r}: want HOST:PORT")
    return host, int(port)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy until EOF or error, then half-close ``dst``."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def raise_nofile(limits: Limits, reserve: int = 256) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` toward what ``limits`` need (two
    descriptors per spliced connection, ``reserve`` for the store, the gRPC server and
    the controller); never above the hard limit, which only root raises.  A hard limit
    too low is logged.  Returns the soft limit now."""
    import resource

    need = 2 * limits.connections + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if soft != resource.RLIM_INFINITY and soft < top:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
            soft = top
    if soft != resource.RLIM_INFINITY and soft < need:
        log.warning(
            "open files limited to %d, %d wanted for %d connections: the proxy will shed "
            "connections when it runs out (raise LimitNOFILE or ulimit -n)",
            soft, need, limits.connections,
        )  # fmt: skip
    return int(soft)


def _open_spare() -> int | None:
    """A descriptor held in reserve for :meth:`_Front._shed`."""
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
