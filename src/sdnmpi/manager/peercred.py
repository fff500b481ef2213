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
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sdnmpi.errors import ConfigError

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


def peer_credentials(conn: socket.socket) -> Peer:
    """SO_PEERCRED of a connected Unix socket."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    pid, uid, gid = _CRED.unpack(raw)
    return Peer(pid, uid, gid)


class CredentialProxy:
    """Accept on a public Unix socket, splice each connection to the gRPC port."""

    def __init__(
        self,
        path: str | Path,
        upstream_port: int,
        table: PeerTable,
        *,
        mode: int = 0o666,
        rewrite: Callable[[Peer], Peer] | None = None,
    ) -> None:
        self.path = Path(path)
        self.upstream = ("127.0.0.1", upstream_port)
        self.table = table
        self.mode = mode
        self.rewrite = rewrite
        self._server: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def start(self) -> None:
        """Bind the socket (replacing a stale one) and accept in a thread."""
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
        self._server = server
        threading.Thread(target=self._accept_loop, name="manager-proxy", daemon=True).start()

    def _accept_loop(self) -> None:
        assert self._server is not None
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            peer = peer_credentials(conn)
            if self.rewrite is not None:
                peer = self.rewrite(peer)
            up = socket.create_connection(self.upstream, timeout=5.0)
            up.settimeout(None)
        except OSError as exc:
            log.warning("proxy: cannot serve a connection: %s", exc)
            conn.close()
            return
        port = int(up.getsockname()[1])
        self.table.add(port, peer)
        with self._lock:
            self._conns.update((conn, up))
        try:
            self._splice(conn, up)
        finally:
            self.table.remove(port)
            with self._lock:
                self._conns.difference_update((conn, up))
            conn.close()
            up.close()

    def _splice(self, a: socket.socket, b: socket.socket) -> None:
        back = threading.Thread(target=_pump, args=(b, a), daemon=True)
        back.start()
        _pump(a, b)
        back.join()

    def stop(self) -> None:
        """Stop accepting, drop every spliced connection, remove the socket file."""
        self._closed.set()
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept loop
            self._server.close()
            self.path.unlink(missing_ok=True)
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)


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
