"""The optional TCP listener: TLS with a self-signed certificate and bearer tokens."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.errors import ConfigError
from sdnmpi.manager.client import ManagerClient
from sdnmpi.manager.memory import MemoryStore
from sdnmpi.manager.model import Kind, ManagerError
from sdnmpi.manager.peercred import Limits, split_address
from sdnmpi.manager.server import ManagerServer, TlsListener, load_tokens
from sdnmpi.manager.service import ManagerService
from sdnmpi.testing.waits import wait_for

SCHED_TOKEN = "s" * 32
ALICE_TOKEN = "a" * 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tls_files(sock_dir: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = sock_dir / "cert.pem", sock_dir / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_server(sock_dir: Path, controller, tls_files) -> Iterator[tuple[str, Path]]:
    with serving(sock_dir, controller, tls_files) as (_, address, cert):
        yield address, cert


@contextlib.contextmanager
def serving(
    sock_dir: Path, controller, tls_files, limits: Limits | None = None
) -> Iterator[tuple[ManagerServer, str, Path]]:
    cert, key = tls_files
    tokens = sock_dir / "tokens"
    tokens.write_text(f"# who may call over TCP\n{SCHED_TOKEN} scheduler\n{ALICE_TOKEN} 1000\n")
    tokens.chmod(0o600)
    address = f"localhost:{free_port()}"
    service = ManagerService(MemoryStore(), controller, time.time)
    server = ManagerServer(
        service,
        sock_dir / "m.sock",
        tls=TlsListener(address, cert, key, tokens),
        reconcile_interval_s=0,
        limits=limits,
    )
    server.start()
    try:
        yield server, address, cert
    finally:
        server.stop(0.5)


def test_the_tls_port_limits_connections_per_address(sock_dir: Path, controller, tls_files):
    """A flood from one address (127.0.0.2) gets no more than its share of the TLS
    port; a caller from another address is still served, and the flood's share comes
    back when it closes."""
    with serving(sock_dir, controller, tls_files, Limits(connections=8, per_uid=2)) as (
        server, address, cert,
    ):  # fmt: skip
        front = server.tls_front
        assert front is not None and front.port is not None
        flood = []
        for _ in range(5):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", front.port))
            s.settimeout(5.0)
            flood.append(s)
        wait_for("3 refusals", lambda: front.refused == 3, 10.0)
        assert front.open_connections() == {"127.0.0.2": 2}
        assert sum(s.recv(1) == b"" for s in flood[2:]) == 3  # refused ones are closed
        with ManagerClient(address, tls_ca=cert, token=ALICE_TOKEN) as alice:
            assert alice.create_job(2**32 + 1, "a", 1000, 1).uid == 1000
        for s in flood:
            s.close()
        wait_for("the flood's connections to close", lambda: front.open_connections() == {}, 10.0)


def test_a_bad_tcp_address_is_a_config_error():
    with pytest.raises(ConfigError, match="want HOST:PORT"):
        split_address("localhost")
    with pytest.raises(ConfigError, match="want HOST:PORT"):
        split_address("localhost:99999")


def test_tokens_name_the_caller(tls_server):
    address, cert = tls_server
    with ManagerClient(address, tls_ca=cert, token=ALICE_TOKEN) as alice:
        assert alice.create_job(2**32 + 1, "a", 1000, 1).uid == 1000
        with pytest.raises(ManagerError) as exc:
            alice.create_job(2**32 + 2, "b", 0, 1)
        assert exc.value.kind is Kind.PERMISSION_DENIED
        with pytest.raises(ManagerError) as exc:  # a Slurm job id: the scheduler's
            alice.create_job(2, "b", 1000, 1)
        assert exc.value.kind is Kind.PERMISSION_DENIED
    with ManagerClient(address, tls_ca=cert, token=SCHED_TOKEN) as sched:
        assert sched.create_job(2, "b", 0, 1).uid == 0
        assert len(sched.list_jobs()) == 2
    for token in ("wrong" * 8, None):
        with ManagerClient(address, tls_ca=cert, token=token) as nobody:
            with pytest.raises(ManagerError) as exc:
                nobody.list_jobs()
            assert exc.value.kind is Kind.PERMISSION_DENIED


def test_token_file_errors(tmp_path: Path):
    bad = tmp_path / "tokens"
    bad.write_text("short 1000\n")
    bad.chmod(0o600)
    with pytest.raises(ConfigError, match="shorter than 16"):
        load_tokens(bad)
    bad.write_text(f"{SCHED_TOKEN} root\n")
    with pytest.raises(ConfigError, match="TOKEN UID"):
        load_tokens(bad)
    with pytest.raises(ConfigError, match="missing"):
        load_tokens(tmp_path / "missing")


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620, 0o602])
def test_a_token_file_others_may_read_or_change_is_refused(tmp_path: Path, mode: int):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ALICE_TOKEN} 1000\n")
    tokens.chmod(mode)
    with pytest.raises(ConfigError, match=f"mode {mode:04o} lets others read or change"):
        load_tokens(tokens)
    tokens.chmod(0o640)  # the owner's group may read it (a Slurm group)
    assert load_tokens(tokens)[ALICE_TOKEN].uid == 1000
    with pytest.raises(ConfigError, match="not a regular file"):
        load_tokens(tmp_path)
