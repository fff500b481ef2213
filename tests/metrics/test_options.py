"""``--metrics-port`` of the run commands: a port that is not one, or is taken, is one
line and exit 2 before the daemon serves anything."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sdnmpi.testing.waits import free_port

CLI = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, check=False)


def daemons(tmp_path: Path, port: str) -> list[list[str]]:
    return [
        ["controller", "run", "--port", str(free_port()), "--metrics-port", port],
        ["manager", "run", "--socket", str(tmp_path / "m.sock"), "--db", ":memory:",
         "--controller-api", str(tmp_path / "none.sock"), "--metrics-port", port],
    ]  # fmt: skip


@pytest.mark.parametrize("which", [0, 1])
def test_not_a_port(tmp_path: Path, which: int):
    res = run(*daemons(tmp_path, "70000")[which])
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        .splitlines()[-1]
        .endswith("--metrics-port 70000 is not a TCP port (0: no endpoint)")
    )


@pytest.mark.parametrize("which", [0, 1])
def test_a_taken_port(tmp_path: Path, which: int):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run(*daemons(tmp_path, str(port))[which])
    assert res.returncode == 2
    last = res.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("sdnmpi: error: metrics: cannot listen on 127.0.0.1:") and str(port) in last
    )
    assert not (tmp_path / "m.sock").exists()  # the manager took back its socket
