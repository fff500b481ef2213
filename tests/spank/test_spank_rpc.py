"""The plugin's manager calls (csrc/spank/client.cpp) without Slurm: the driver runs
the functions the hooks run, against a recording test server (fake_manager.py),
a missing socket, a dead socket and a stuck one.

Driver exit status: 0 ok or skipped, 3 fail-open, 1 fail-closed (require=1), 2 bad input.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdnmpi.wire import manager_pb2 as pb
from tests.spank import fake_manager as fm
from tests.spank.conftest import SpankBuild

UID = os.getuid()


@dataclass(frozen=True)
class Run:
    """One driver run: exit status, stdout, stderr lines, wall time."""

    rc: int
    out: str
    lines: list[str]
    elapsed_s: float


def drive(build: SpankBuild, *args: str, timeout_s: float = 60) -> Run:
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(build.driver), *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    elapsed_s = time.monotonic() - t0
    return Run(proc.returncode, proc.stdout.strip(), proc.stderr.splitlines(), elapsed_s)


def start(
    build: SpankBuild, address: str, pattern: str, *extra: str, job: int = 42, ntasks: int = 2
) -> Run:
    """What srun's local_user_init does: OfferJob for job `job`, named "j"."""
    args = [str(job), "j", str(UID), str(ntasks), pattern, f"manager={address}", *extra]
    return drive(build, "offer", *args)


def tasks(
    build: SpankBuild, node: str, spec: str, *extra: str, job: int = 42, ntasks: int = 2
) -> Run:
    """What slurmstepd's task_post_fork does: CreateJob from the offer, StartJob,
    RegisterProcess per RANK:PID of `spec`, WaitRoutes."""
    return drive(build, "tasks", str(job), str(UID), str(ntasks), node, spec, *extra)


def errors(run: Run) -> list[str]:
    return [line for line in run.lines if line.startswith("error: ")]


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for sockets (sun_path holds 107 bytes; pytest's tmp_path is long)."""
    d = Path(tempfile.mkdtemp(prefix="spank-", dir="/tmp"))
    yield d
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


@pytest.fixture
def manager(sock_dir: Path) -> Iterator[fm.RunningServer]:
    srv = fm.serve(str(sock_dir / "m.sock"))
    yield srv
    srv.stop()


def test_offer_sends_job_and_pattern_name(spank_build, manager) -> None:
    run = drive(
        spank_build, "offer", "42", "lulesh", str(UID), "8", "cg:8", f"manager={manager.address}"
    )
    assert (run.rc, run.out) == (0, "ok"), run.lines
    assert errors(run) == []
    rec = manager.servicer.rec
    assert rec.methods() == ["OfferJob"]  # srun, as the user, creates nothing
    (offer,) = rec.requests("OfferJob")
    assert (offer.job_id, offer.name, offer.uid, offer.ntasks) == (42, "lulesh", UID, 8)
    assert offer.pattern.WhichOneof("source") == "name"
    assert offer.pattern.name == "cg:8" and not offer.from_offer


def test_start_sends_a_pattern_file_by_contents(spank_build, manager, tmp_path) -> None:
    data = b'{"format": "sdnmpi-pattern/1"}\n' + bytes(range(256))
    path = tmp_path / "ring.json"
    path.write_bytes(data)
    run = start(spank_build, manager.address, str(path), job=7)
    assert (run.rc, run.out) == (0, "ok"), run.lines
    (create,) = manager.servicer.rec.requests("OfferJob")
    assert create.pattern.WhichOneof("source") == "file"
    assert create.pattern.file.filename == "ring.json"
    assert create.pattern.file.data == data


def test_a_64_mib_pattern_file_goes_through(spank_build, manager, tmp_path) -> None:
    path = tmp_path / "big.json"
    with path.open("wb") as f:
        f.truncate(64 << 20)
    run = start(spank_build, manager.address, str(path), job=8)
    assert (run.rc, run.out) == (0, "ok"), run.lines
    (create,) = manager.servicer.rec.requests("OfferJob")
    assert len(create.pattern.file.data) == 64 << 20


def test_a_pattern_file_over_64_mib_is_refused_before_rpc(spank_build, manager, tmp_path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as f:
        f.truncate((64 << 20) + 1)
    run = start(spank_build, manager.address, str(path), job=9)
    assert run.rc == 2
    (line,) = errors(run)
    assert "67108865 bytes, more than the 64 MiB" in line
    assert line.startswith("error: sdnmpi: --comm-pattern=")
    assert manager.servicer.rec.methods() == []


def test_a_value_neither_file_nor_name_is_refused(spank_build, manager) -> None:
    run = start(spank_build, manager.address, "./no/such.json", job=9)
    assert run.rc == 2
    (line,) = errors(run)
    assert "--comm-pattern='./no/such.json': no such file, and not a pattern name" in line
    assert manager.servicer.rec.methods() == []


def test_without_pattern_nothing_is_sent(spank_build, manager) -> None:
    run = start(spank_build, manager.address, "-", job=5)
    assert (run.rc, run.out, run.lines) == (0, "skipped", [])
    assert manager.servicer.rec.methods() == []


def test_default_pattern_applies_without_the_option(spank_build, manager) -> None:
    run = start(spank_build, manager.address, "-", "default_pattern=ring:2", job=5)
    assert (run.rc, run.out) == (0, "ok"), run.lines
    assert manager.servicer.rec.requests("OfferJob")[0].pattern.name == "ring:2"


def test_tasks_register_every_rank_then_wait(spank_build, manager) -> None:
    assert start(spank_build, manager.address, "cg:8", ntasks=4).rc == 0
    run = tasks(spank_build, "h2", "2:1002,3:1003", f"manager={manager.address}", ntasks=4)
    assert (run.rc, run.out) == (0, "ok"), run.lines
    rec = manager.servicer.rec
    assert rec.methods()[1:] == [
        "CreateJob", "StartJob", "RegisterProcess", "RegisterProcess", "WaitRoutes",
    ]  # fmt: skip
    (create,) = rec.requests("CreateJob")  # the scheduler's side creates, from the offer
    assert (create.job_id, create.uid, create.ntasks, create.from_offer) == (42, UID, 4, True)
    assert create.name == "" and not create.HasField("pattern")
    regs = [(r.job_id, r.rank, r.node, r.pid) for r in rec.requests("RegisterProcess")]
    assert regs == [(42, 2, "h2", 1002), (42, 3, "h2", 1003)]
    (wait,) = rec.requests("WaitRoutes")
    # the route wait is bounded by timeout=10 s, minus what the session has used
    assert 9000 <= wait.timeout_ms <= 10000
    info = [line for line in run.lines if line.startswith("info: sdnmpi: job 42 routes installed")]
    assert len(info) == 1, run.lines
    assert "2 pairs, 8 flow mods on 3 switches" in info[0]


def test_finish_and_finish_of_an_unknown_job(spank_build, manager) -> None:
    assert start(spank_build, manager.address, "cg:8", ntasks=1).rc == 0
    assert tasks(spank_build, "h1", "0:1", f"manager={manager.address}", ntasks=1).rc == 0
    run = drive(spank_build, "finish", "42", f"manager={manager.address}")
    assert (run.rc, run.out) == (0, "ok"), run.lines
    assert manager.servicer.jobs[42].state == pb.JOB_STATE_FINISHED
    unknown = drive(spank_build, "finish", "77", f"manager={manager.address}")
    assert (unknown.rc, unknown.out) == (0, "ok")  # never created: nothing to remove
    assert errors(unknown) == []


def test_a_manager_error_fails_open_with_one_line(spank_build, manager) -> None:
    run = start(spank_build, manager.address, "nope")
    assert (run.rc, run.out) == (3, "fail-open")
    assert errors(run) == [
        f"error: sdnmpi: manager {manager.address} refused OfferJob "
        "(NOT_FOUND: unknown pattern 'nope'); job 42 runs on default routes"
    ]
    assert manager.servicer.rec.methods() == ["OfferJob"]


def test_tasks_of_a_job_never_offered_fail_open(spank_build, manager) -> None:
    run = tasks(spank_build, "h1", "0:1", f"manager={manager.address}", job=43)
    assert (run.rc, run.out) == (3, "fail-open")
    (line,) = errors(run)
    assert "manager did not route job 43 (no pattern offered); job 43 runs on default" in line


def test_require_1_fails_closed(spank_build, manager) -> None:
    run = start(spank_build, manager.address, "nope", "require=1")
    assert (run.rc, run.out) == (1, "fail-closed")
    (line,) = errors(run)
    assert line.endswith("; job 42 fails (require=1)")


def test_no_server_fails_open_at_once(spank_build, sock_dir) -> None:
    address = f"unix:{sock_dir / 'absent.sock'}"
    run = tasks(spank_build, "h1", "0:1", f"manager={address}", "connect_timeout=30")
    assert (run.rc, run.out) == (3, "fail-open")
    assert run.elapsed_s < 10  # not connect_timeout: a missing socket is known at once
    assert errors(run) == [
        f"error: sdnmpi: manager {address} unreachable (connect {sock_dir / 'absent.sock'}: "
        "No such file or directory); job 42 runs on default routes"
    ]


def test_a_dead_socket_fails_open_at_once(spank_build, sock_dir) -> None:
    path = sock_dir / "dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))  # bound, never listening: what a killed manager leaves
    s.close()
    run = start(spank_build, f"unix:{path}", "cg:8", "connect_timeout=30")
    assert (run.rc, run.out) == (3, "fail-open")
    assert run.elapsed_s < 10
    (line,) = errors(run)
    assert "unreachable (connect" in line
    assert "Connection refused); job 42 runs on default routes" in line


def test_a_silent_listener_fails_open_within_connect_timeout(spank_build, sock_dir) -> None:
    path = sock_dir / "silent.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(8)  # accepts into the backlog, never speaks HTTP/2
    try:
        run = tasks(spank_build, "h1", "0:1", f"manager=unix:{path}", "connect_timeout=1",
                    "timeout=1")  # fmt: skip
    finally:
        s.close()
    assert (run.rc, run.out) == (3, "fail-open")
    assert 0.9 <= run.elapsed_s < 10
    (line,) = errors(run)
    assert line == (
        f"error: sdnmpi: manager unix:{path} unreachable (no connection within 1 s); "
        "job 42 runs on default routes"
    )


def test_a_tcp_manager_that_is_down_fails_open(spank_build) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # a free port nobody listens on
    run = drive(spank_build, "finish", "42", f"manager=127.0.0.1:{port}", "connect_timeout=30")
    assert (run.rc, run.out) == (3, "fail-open")
    assert run.elapsed_s < 10  # refused at once
    (line,) = errors(run)
    assert line.startswith(f"error: sdnmpi: manager 127.0.0.1:{port} unreachable (")


@pytest.mark.parametrize(
    ("wait", "expected"),
    [
        (fm.TIMEOUT, "routes of job 42 not installed within 1 s (state STARTING)"),
        (fm.HANG, "routes of job 42 not installed within 1 s (DEADLINE_EXCEEDED"),
        (fm.DEFAULT, "manager did not route job 42 (no route between h1 and h9)"),
    ],
)
def test_routes_not_installed_fail_open_in_bounded_time(
    spank_build, sock_dir, wait, expected
) -> None:
    srv = fm.serve(str(sock_dir / "m.sock"), wait=wait)
    try:
        assert start(spank_build, srv.address, "cg:8", ntasks=1).rc == 0
        run = tasks(spank_build, "h1", "0:1", f"manager={srv.address}", "timeout=1",
                    "connect_timeout=1", ntasks=1)  # fmt: skip
    finally:
        srv.stop()
    assert (run.rc, run.out) == (3, "fail-open")
    assert run.elapsed_s < 1 + 1 + 6  # timeout + connect_timeout, and process start on a busy CI
    (line,) = errors(run)
    assert expected in line
    assert line.endswith("; job 42 runs on default routes")


@pytest.fixture
def tls_files(tmp_path) -> tuple[Path, Path]:
    """A self-signed key and certificate for 127.0.0.1 (openssl), as (key, cert)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not found")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    proc = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return key, cert


def test_tls_manager_gets_the_token(spank_build, tls_files, tmp_path) -> None:
    key, cert = tls_files
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    srv = fm.serve_tls(key.read_bytes(), cert.read_bytes())
    try:
        tls = (f"tls_ca={cert}", f"token_file={token}")
        run = start(spank_build, srv.address, "cg:8", *tls)
        on_node = tasks(spank_build, "h1", "0:1", f"manager={srv.address}", *tls)
    finally:
        srv.stop()
    assert (run.rc, run.out) == (0, "ok"), run.lines
    assert (on_node.rc, on_node.out) == (0, "ok"), on_node.lines
    assert srv.servicer.rec.methods() == [
        "OfferJob", "CreateJob", "StartJob", "RegisterProcess", "WaitRoutes",
    ]  # fmt: skip
    assert srv.servicer.rec.authorization == ["Bearer s3cret-token"] * 5


def test_tls_with_the_wrong_ca_fails_open(spank_build, tls_files, tmp_path) -> None:
    key, cert = tls_files
    other = tmp_path / "other"
    other.mkdir()
    proc = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=other", "-keyout", str(other / "k.pem"),
         "-out", str(other / "ca.pem")],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0
    srv = fm.serve_tls(key.read_bytes(), cert.read_bytes())
    try:
        run = start(
            spank_build, srv.address, "cg:8", f"tls_ca={other / 'ca.pem'}", "connect_timeout=30"
        )
    finally:
        srv.stop()
    assert (run.rc, run.out) == (3, "fail-open")
    assert run.elapsed_s < 10  # the handshake fails at once
    (line,) = errors(run)
    assert line.startswith(f"error: sdnmpi: manager {srv.address} unreachable (connection failed: ")
    assert "certificate verify failed" in line  # gRPC's reason, not on stderr by itself
    assert not [x for x in run.lines if not x.split(": ", 1)[1].startswith("sdnmpi: ")]
    assert srv.servicer.rec.methods() == []


def test_a_missing_ca_file_fails_open(spank_build, tmp_path) -> None:
    run = start(spank_build, "127.0.0.1:9", "cg:8", f"tls_ca={tmp_path}/ca.pem")
    assert (run.rc, run.out) == (3, "fail-open")
    (line,) = errors(run)
    assert f"unreachable (tls_ca '{tmp_path}/ca.pem': No such file or directory)" in line
