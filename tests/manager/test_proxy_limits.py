"""The manager's front door under a flood: connection limits per uid and in all, a
refusal that names the limit (a gRPC status, not a dead socket), and an accept loop
that survives running out of file descriptors."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sdnmpi.errors import ConfigError
from sdnmpi.manager.client import ManagerClient
from sdnmpi.manager.fake import FakeController
from sdnmpi.manager.grpcrefuse import refuse
from sdnmpi.manager.model import Kind, ManagerError
from sdnmpi.manager.peercred import CredentialProxy, Limits, Peer, PeerTable
from sdnmpi.manager.server import ManagerServer
from sdnmpi.manager.service import ManagerService
from sdnmpi.manager.sqlite import SqliteStore

ALICE, BOB = 1000, 1001


def as_uid(uid: int):
    return lambda peer: Peer(peer.pid, uid, uid)


def connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(path))
    return s


def wait_until(check: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return bool(check())


@pytest.fixture
def manager(sock_dir: Path, controller: FakeController) -> Iterator[ManagerServer]:
    store = SqliteStore(sock_dir / "m.db")
    server = ManagerServer(
        ManagerService(store, controller, time.time), sock_dir / "root.sock",
        reconcile_interval_s=0, limits=Limits(connections=6, per_uid=2),
    )  # fmt: skip
    server.start()
    server.add_socket(sock_dir / "alice.sock", as_uid(ALICE))
    server.add_socket(sock_dir / "bob.sock", as_uid(BOB))
    yield server
    server.stop(0.5)
    store.close()


def test_limits_are_checked() -> None:
    with pytest.raises(ConfigError, match="per uid \\(3\\) <= in all \\(2\\)"):
        Limits(connections=2, per_uid=3)
    with pytest.raises(ConfigError):
        Limits(per_uid=0)


def test_a_user_over_the_limit_is_told_so_and_others_still_get_in(manager, sock_dir):
    held = [connect(sock_dir / "alice.sock") for _ in range(2)]
    alice = manager.proxy(sock_dir / "alice.sock")
    assert wait_until(lambda: alice.open_connections() == {ALICE: 2})
    with (
        ManagerClient(str(sock_dir / "alice.sock"), timeout_s=5) as c,
        pytest.raises(ManagerError) as exc,
    ):
        c.list_jobs()
    assert exc.value.kind is Kind.RESOURCE_EXHAUSTED
    assert "uid 1000 has 2 connections open (limit 2 per user)" in str(exc.value)
    assert alice.refused >= 1
    with ManagerClient(str(sock_dir / "bob.sock"), timeout_s=5) as c:
        assert c.list_jobs() == []
    for s in held:
        s.close()
    assert wait_until(lambda: alice.open_connections() == {})
    with ManagerClient(str(sock_dir / "alice.sock"), timeout_s=5) as c:
        assert c.list_jobs() == []


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_root_counts_only_against_the_total(manager, sock_dir):
    root = manager.proxy(sock_dir / "root.sock")
    held = [connect(sock_dir / "root.sock") for _ in range(6)]
    assert wait_until(lambda: root.open_connections() == {0: 6})
    with (
        ManagerClient(str(sock_dir / "root.sock"), timeout_s=5) as c,
        pytest.raises(ManagerError, match="has 6 connections open \\(limit 6\\)"),
    ):
        c.list_jobs()
    for s in held:
        s.close()
    assert wait_until(lambda: root.open_connections() == {})
    with ManagerClient(str(sock_dir / "root.sock"), timeout_s=5) as c:
        assert c.list_jobs() == []


def test_a_refused_client_that_never_speaks_costs_a_bounded_wait(tmp_path: Path):
    a, b = socket.socketpair()
    assert refuse(a, "no", timeout_s=0.2) is False  # gives up: returns, answers nothing
    b.sendall(b"GET / HTTP/1.1\r\n\r\n" + b"x" * 10)
    assert refuse(a, "no", timeout_s=0.2) is False  # not HTTP/2: closed, not answered
    a.close()
    b.close()


def echo_server() -> socket.socket:
    """A loopback TCP server that echoes each connection until its EOF."""
    up = socket.socket()
    up.bind(("127.0.0.1", 0))
    up.listen(64)

    def pump(c: socket.socket) -> None:
        with c:
            while data := c.recv(4096):
                c.sendall(data)

    def serve() -> None:
        while True:
            try:
                c, _ = up.accept()
            except OSError as exc:
                if exc.errno != errno.EMFILE:
                    return
                time.sleep(0.05)  # the proxy's process ran out too: wait for some
                continue
            threading.Thread(target=pump, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return up


def test_flood_of_silent_connections_is_refused_and_closed(tmp_path: Path):
    """A flood beyond the limit: each refused connection is closed within the refusal
    timeout, and the slots are free again once the clients are gone."""
    up = echo_server()
    proxy = CredentialProxy(
        tmp_path / "p.sock", up.getsockname()[1], PeerTable(), rewrite=as_uid(ALICE),
        limits=Limits(connections=4, per_uid=1),
    )  # fmt: skip
    proxy.start()
    try:
        flood = [connect(tmp_path / "p.sock") for _ in range(40)]
        assert wait_until(lambda: proxy.refused == 39)
        for s in flood[1:]:
            s.settimeout(5)
            assert s.recv(100) in (b"", b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # closed
        assert proxy.open_connections() == {ALICE: 1}
        for s in flood:
            s.close()
        assert wait_until(lambda: proxy.open_connections() == {})
    finally:
        proxy.stop()
        up.close()


PROXY_CHILD = textwrap.dedent(
    """
    import resource, socket, sys, time
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    from sdnmpi.manager.peercred import CredentialProxy, Limits, PeerTable
    from tests.manager.test_proxy_limits import echo_server
    up = echo_server()
    p = CredentialProxy(sys.argv[1], up.getsockname()[1], PeerTable(),
                        limits=Limits(connections=1000, per_uid=1000))
    p.start()
    print("ready", flush=True)
    sys.stdin.readline()
    print(p.accept_errors, flush=True)
    p.stop()
    """
)


def test_the_accept_loop_survives_running_out_of_descriptors(tmp_path: Path):
    """The proxy runs with 64 descriptors; a client opens 100 connections (the proxy
    runs out); once they are closed, a new connection is spliced again."""
    sock = tmp_path / "p.sock"

    child = subprocess.Popen(
        [sys.executable, "-c", PROXY_CHILD, str(sock)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env={**os.environ},
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        flood = []
        for _ in range(100):
            try:
                flood.append(connect(sock))
            except OSError:
                break
        time.sleep(1.0)
        for s in flood:
            s.close()
        time.sleep(0.5)

        def echoes() -> bool:
            try:
                s = connect(sock)
                s.settimeout(2)
                s.sendall(b"ping")
                ok = s.recv(4) == b"ping"
                s.close()
                return ok
            except OSError:
                return False

        assert wait_until(echoes, 30)  # a loaded machine once took over 10 s
        child.stdin.write("\n")
        child.stdin.flush()
        errors = int(child.stdout.readline())
        assert errors >= 1  # it did run out, and went on
    finally:
        child.kill()
        child.wait()


def test_the_open_files_limit_is_raised_for_the_connections() -> None:
    """In a child (the limit is the process's): soft 300, hard 2000; 512 connections
    want 1280 descriptors, so the soft limit goes to 1280; with a hard limit of 600 it
    stops there."""
    code = textwrap.dedent(
        """
        import resource, sys
        from sdnmpi.manager.peercred import Limits, raise_nofile
        resource.setrlimit(resource.RLIMIT_NOFILE, (300, int(sys.argv[1])))
        print(raise_nofile(Limits(connections=512, per_uid=32)))
        """
    )
    for hard, want in ((2000, 1280), (600, 600)):
        out = subprocess.run(
            [sys.executable, "-c", code, str(hard)], capture_output=True, text=True, check=True
        )
        assert int(out.stdout) == want
        assert ("open files limited to 600" in out.stderr) == (hard == 600)
