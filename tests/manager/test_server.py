"""The gRPC server on a temporary Unix socket: identity from SO_PEERCRED, status codes,
WaitRoutes, crash recovery on the same SQLite file."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from sdnmpi.manager.client import ManagerClient, net_set_pattern
from sdnmpi.manager.fake import FakeController
from sdnmpi.manager.grpcapi import PeerIdentity
from sdnmpi.manager.model import Caller, Kind, ManagerError
from sdnmpi.manager.peercred import Peer
from sdnmpi.manager.server import ManagerServer
from sdnmpi.manager.service import ManagerService
from sdnmpi.manager.sqlite import SqliteStore
from sdnmpi.wire import manager_pb2 as pb
from sdnmpi.wire import manager_pb2_grpc as pb_grpc
from tests.manager.conftest import pairs_pattern, pattern_bytes

ALICE_UID, BOB_UID = 1000, 1001


def as_uid(uid: int):
    """The proxy's hook: record this uid whatever the kernel reported (tests run as root)."""
    return lambda peer: Peer(peer.pid, uid, uid)


class Running:
    """A manager on ``dir/root.sock`` (the real caller: root, the scheduler) plus
    ``alice.sock`` and ``bob.sock`` that the proxy maps to uids 1000 and 1001."""

    def __init__(
        self, tmp: Path, controller: FakeController, db: Path, busy_timeout_s: float = 5.0
    ) -> None:
        self.tmp = tmp
        self.store = SqliteStore(db, busy_timeout_s=busy_timeout_s)
        self.service = ManagerService(self.store, controller, time.time)
        self.server = ManagerServer(self.service, tmp / "root.sock", reconcile_interval_s=0)
        self.server.start()
        self.server.add_socket(tmp / "alice.sock", as_uid(ALICE_UID))
        self.server.add_socket(tmp / "bob.sock", as_uid(BOB_UID))

    def client(self, who: str = "root") -> ManagerClient:
        return ManagerClient(str(self.tmp / f"{who}.sock"), timeout_s=10)

    def stop(self) -> None:
        self.server.stop(0.5)
        self.store.close()


@pytest.fixture
def running(sock_dir: Path, controller: FakeController) -> Iterator[Running]:
    r = Running(sock_dir, controller, sock_dir / "manager.db")
    yield r
    r.stop()


def write_pattern(path: Path, nprocs: int = 2) -> Path:
    path.write_bytes(pattern_bytes(pairs_pattern(nprocs)))
    return path


def code_of(call) -> Kind:
    with pytest.raises(ManagerError) as exc:
        call()
    return exc.value.kind


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_socket_is_public_and_job_runs_end_to_end(running: Running, controller, sock_dir: Path):
    assert (sock_dir / "root.sock").stat().st_mode & 0o777 == 0o666
    pat = write_pattern(sock_dir / "p.json")
    with running.client() as c:
        job = c.create_job(7, "cg", ALICE_UID, 2, pattern_file=pat)
        assert job.state == pb.JOB_STATE_CREATED and job.pattern == "p.json"
        c.start_job(7)
        c.register_process(7, 0, "h1", 11)
        c.register_process(7, 1, "h5", 12)
        status = c.wait_routes(7, 1000)
        assert status.installed and status.state == pb.JOB_STATE_ROUTED and status.pairs == 1
        assert 7 in controller.held
        assert [p.node for p in c.get_job(7).processes] == ["h1", "h5"]
        assert c.finish_job(7).state == pb.JOB_STATE_FINISHED
        assert c.finish_job(7).state == pb.JOB_STATE_FINISHED  # idempotent
        assert 7 not in controller.held
        assert c.list_jobs() == [] and len(c.list_jobs(include_finished=True)) == 1


def test_uid_comes_from_the_connection(running: Running, sock_dir: Path):
    pat = write_pattern(sock_dir / "p.json")
    own = 2**32 + 8  # a job of one's own (outside Slurm)
    with running.client("alice") as alice, running.client("bob") as bob:
        assert code_of(lambda: alice.create_job(own, "x", BOB_UID, 2)) is Kind.PERMISSION_DENIED
        assert code_of(lambda: alice.create_job(8, "x", ALICE_UID, 2)) is Kind.PERMISSION_DENIED
        job = alice.create_job(own, "x", ALICE_UID, 2, pattern_file=pat)
        assert job.uid == ALICE_UID
        assert alice.create_job(own, "x", ALICE_UID, 2, pattern_file=pat) == job
        assert code_of(lambda: bob.start_job(own)) is Kind.NOT_FOUND
        assert code_of(lambda: bob.finish_job(own)) is Kind.NOT_FOUND
        assert code_of(lambda: bob.get_job(own)) is Kind.NOT_FOUND
        assert code_of(lambda: bob.register_process(own, 0, "h1")) is Kind.NOT_FOUND
        assert bob.list_jobs() == []
        info = alice.put_pattern("mine", pat, description="alice's")
        assert info.owner_uid == ALICE_UID
        assert bob.get_pattern("mine").info.sha256 == info.sha256  # anyone reads
        assert code_of(lambda: bob.delete_pattern("mine")) is Kind.PERMISSION_DENIED
        assert alice.start_job(own).state == pb.JOB_STATE_STARTING
        # a Slurm job: srun (the user) offers, slurmstepd (the scheduler) creates
        assert alice.offer_job(9, "s", ALICE_UID, 2, pattern_file=pat).uid == ALICE_UID
        assert code_of(lambda: bob.offer_job(9, "s", ALICE_UID, 2, pattern_file=pat)) is (
            Kind.PERMISSION_DENIED
        )


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_status_codes_of_bad_requests(running: Running, sock_dir: Path):
    bad = sock_dir / "bad.xml"
    bad.write_bytes(b"<netsa><broken")
    with running.client() as c:
        assert code_of(lambda: c.create_job(0, "x", 1, 2)) is Kind.INVALID_ARGUMENT
        assert code_of(lambda: c.create_job(1, "x", 1, 2, pattern="nosuch")) is Kind.NOT_FOUND
        kind = code_of(lambda: c.create_job(1, "x", 1, 2, pattern_file=bad))
        assert kind is Kind.INVALID_ARGUMENT
        c.create_job(2, "x", 1, 2)
        assert code_of(lambda: c.create_job(2, "y", 1, 2)) is Kind.ALREADY_EXISTS
        assert code_of(lambda: c.register_process(2, 5, "h1")) is Kind.INVALID_ARGUMENT
        assert code_of(lambda: c.register_process(2, 0, "zz")) is Kind.INVALID_ARGUMENT
        assert code_of(lambda: c.finish_job(404)) is Kind.NOT_FOUND
        assert code_of(lambda: c.wait_routes(2, 600_001)) is Kind.INVALID_ARGUMENT
        assert code_of(lambda: c.get_pattern("nope")) is Kind.NOT_FOUND
        assert code_of(lambda: c.put_pattern("bad name!", bad)) is Kind.INVALID_ARGUMENT
    with pytest.raises(ManagerError, match=r"bad\.xml"):
        ManagerClient(str(sock_dir / "root.sock")).put_pattern("x", bad)


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_wait_routes_times_out_then_wakes_on_the_last_rank(running: Running, sock_dir: Path):
    pat = write_pattern(sock_dir / "p.json")
    with running.client() as c:
        c.create_job(9, "w", 0, 2, pattern_file=pat)
        c.start_job(9)
        t0 = time.monotonic()
        assert code_of(lambda: c.wait_routes(9, 200)) is Kind.DEADLINE_EXCEEDED
        assert 0.15 < time.monotonic() - t0 < 10
        c.register_process(9, 0, "h1")
        result: list[object] = []
        waiter = threading.Thread(target=lambda: result.append(c.wait_routes(9, 10_000)))
        waiter.start()
        time.sleep(0.2)
        c.register_process(9, 1, "h5")
        waiter.join(5)
        assert result and result[0].installed  # type: ignore[attr-defined]


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_wait_on_a_default_job_returns_at_once(running: Running):
    with running.client() as c:
        c.create_job(3, "nopattern", 0, 1)
        c.start_job(3)
        status = c.wait_routes(3, 60_000)
        assert status.state == pb.JOB_STATE_DEFAULT and not status.installed
        assert "no pattern" in status.detail


def test_unknown_peer_is_refused(running: Running):
    """A connection straight to the loopback gRPC port has no proxy entry."""
    channel = grpc.insecure_channel(f"127.0.0.1:{running.server.port}")
    stub = pb_grpc.ManagerStub(channel)
    with pytest.raises(grpc.RpcError) as exc:
        stub.ListJobs(pb.ListJobsRequest(), timeout=5)
    assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
    channel.close()


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_patterns_and_net_set_pattern(running: Running, sock_dir: Path, controller, monkeypatch):
    pat = write_pattern(sock_dir / "p.json", 4)
    with running.client() as c:
        c.put_pattern("ring", pat, description="d", bandwidth_bps=1e9, latency_s=2e-6)
        assert [p.name for p in c.list_patterns()] == ["ring"]
        got = c.get_pattern("ring")
        assert got.info.annotation.bandwidth_bps == 1e9 and got.json.startswith(b"{")
        c.create_job(11, "n", 0, 4)
        c.start_job(11)
        for rank, node in enumerate(["h1", "h2", "h5", "h6"]):
            c.register_process(11, rank, node)
    monkeypatch.setenv("SDNMPI_MANAGER", str(sock_dir / "root.sock"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("SDNMPI_JOB", "11")
    assert net_set_pattern("ring") == 1
    assert 11 in controller.held
    assert net_set_pattern("missing") == 0
    monkeypatch.setenv("SDNMPI_JOB", "12")
    assert net_set_pattern("ring") == 0


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_crash_recovery_on_the_same_database(sock_dir: Path, controller: FakeController):
    """The manager dies mid-job (no finish); a new one on the same file finds the job,
    reinstalls routes the controller lost, and removes them exactly at job end."""
    db = sock_dir / "crash.db"
    first = Running(sock_dir, controller, db)
    pat = write_pattern(sock_dir / "p.json")
    with first.client() as c:
        c.create_job(21, "a", 0, 2, pattern_file=pat)
        c.start_job(21)
        c.register_process(21, 0, "h1")
        c.register_process(21, 1, "h5")
        assert c.route_status(21).installed
    first.server.stop(0)  # killed: no finish, nothing cleaned up
    routes = dict(controller.held[21])
    controller.held.clear()  # and the controller lost its jobs too
    controller.held[999] = {("h2", "h6"): ["h2", "leaf1", "spine1", "leaf2", "h6"]}
    second = Running(sock_dir, controller, db)  # reconciles at start
    try:
        assert controller.held == {21: routes}
        with second.client() as c:
            assert c.get_job(21).state == pb.JOB_STATE_ROUTED
            c.finish_job(21)
        assert controller.held == {}
    finally:
        second.stop()
        first.store.close()


def test_sigterm_stops_gracefully(sock_dir: Path):
    script = f"""
import logging, sys
from sdnmpi.core.generators import leaf_spine
from sdnmpi.manager.fake import FakeController
from sdnmpi.manager.memory import MemoryStore
from sdnmpi.manager.server import ManagerServer
from sdnmpi.manager.service import ManagerService
import time
svc = ManagerService(MemoryStore(), FakeController(leaf_spine(2, 2, 2)), time.time)
ManagerServer(svc, {str(sock_dir / "sig.sock")!r}).serve_forever()
print("stopped", flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not (sock_dir / "sig.sock").exists():
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        with ManagerClient(str(sock_dir / "sig.sock")) as c:
            assert c.list_jobs() == []
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "stopped" in out
    assert not (sock_dir / "sig.sock").exists()


@pytest.mark.root  # runs a process as another uid
def test_real_uid_of_another_user(running: Running, sock_dir: Path):
    """A process running as uid 4242 (no hook: the kernel's SO_PEERCRED) is recorded as
    uid 4242 with its own pid, which is what the servicer maps its calls to."""
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no /usr/bin/python3 to run as another uid")
    script = f"""
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect({str(sock_dir / "root.sock")!r})
print("connected", flush=True)
sys.stdin.read()
"""
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-c", script],
        user=4242,
        group=4242,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=sock_dir,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "connected"
        deadline = time.monotonic() + 5
        peers: dict[int, Peer] = {}
        while not peers and time.monotonic() < deadline:
            peers = {k: p for k, p in running.server.table.peers().items() if p.uid == 4242}
            time.sleep(0.02)
        assert list(peers.values()) == [Peer(proc.pid, 4242, 4242)]
        port = next(iter(peers))
        identity = PeerIdentity(running.server.table, frozenset({0}))
        caller = identity.caller(FakeContext(f"ipv4:127.0.0.1:{port}"))
        assert caller == Caller(4242, False, proc.pid)
    finally:
        proc.communicate("", timeout=10)


class FakeContext:
    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


def test_proxy_forgets_closed_connections(running: Running):
    with running.client() as c:
        c.list_jobs()
        assert len(running.server.table) >= 1
    deadline = time.monotonic() + 5
    while len(running.server.table) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(running.server.table) == 0


def test_garbage_on_the_socket_does_not_hurt(running: Running, sock_dir: Path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(sock_dir / "root.sock"))
    s.sendall(b"GET / HTTP/1.0\r\n\r\n" * 10)
    s.close()
    with running.client() as c:
        assert c.list_jobs() == []


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_locked_database_is_unavailable_not_a_hang(sock_dir: Path, controller):
    """Another process holds the write lock: the call fails after the busy timeout
    with a message naming the file, and works again once the lock is gone."""
    import sqlite3

    db = sock_dir / "locked.db"
    r = Running(sock_dir, controller, db, busy_timeout_s=0.3)
    other = sqlite3.connect(db, isolation_level=None)
    try:
        with r.client() as c:
            c.list_jobs()
            other.execute("BEGIN IMMEDIATE")
            t0 = time.monotonic()
            with pytest.raises(ManagerError, match="locked by another process") as exc:
                c.create_job(1, "x", 0, 1)
            assert exc.value.kind is Kind.UNAVAILABLE
            assert time.monotonic() - t0 < 5
            assert c.list_jobs() == []  # readers are not blocked (WAL)
            other.execute("ROLLBACK")
            assert c.create_job(1, "x", 0, 1).job_id == 1
    finally:
        other.close()
        r.stop()


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_a_users_waits_are_bounded_and_others_are_served(running: Running, sock_dir: Path):
    """300 WaitRoutes once held every worker thread: GetJob of another user waited
    22 s.  A user's waits beyond 16 are refused at once; the others are served."""
    from sdnmpi.manager.grpcapi import MAX_WAITS_PER_USER

    pat = write_pattern(sock_dir / "p.json")
    own = 2**32 + 5
    with running.client("alice") as alice, running.client() as root:
        alice.create_job(own, "w", ALICE_UID, 2, pattern_file=pat)
        alice.start_job(own)  # never all ranks registered: waits until their timeout
        results: list[object] = []
        waiters = [
            threading.Thread(
                target=lambda: results.append(code_of(lambda: alice.wait_routes(own, 3000)))
            )
            for _ in range(MAX_WAITS_PER_USER)
        ]
        for w in waiters:
            w.start()
        time.sleep(0.5)  # all waiting (a refusal would already be in results)
        assert results == []
        assert code_of(lambda: alice.wait_routes(own, 3000)) is Kind.RESOURCE_EXHAUSTED
        root.create_job(3, "other", 0, 1)
        assert root.get_job(3).job_id == 3
        assert all(w.is_alive() for w in waiters)  # served while alice's waits go on
        for w in waiters:
            w.join(10)
        assert results == [Kind.DEADLINE_EXCEEDED] * MAX_WAITS_PER_USER


def test_wait_slots_count_per_user_and_in_all():
    from sdnmpi.manager.grpcapi import WaitSlots
    from sdnmpi.manager.model import Caller, ManagerError

    slots = WaitSlots(total=3, per_user=2)
    alice, sched = Caller(ALICE_UID), Caller(0, True)
    slots.acquire(alice)
    slots.acquire(alice)
    with pytest.raises(ManagerError, match="limit 2 per user"):
        slots.acquire(alice)
    slots.acquire(sched)
    with pytest.raises(ManagerError, match="3 WaitRoutes calls are waiting"):
        slots.acquire(sched)
    slots.release(alice)
    slots.acquire(sched)  # the scheduler has no per-user bound
    with pytest.raises(ManagerError):
        slots.acquire(alice)
