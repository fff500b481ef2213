"""NetSA's API on the manager: ``net_set_pattern`` (C, from libsdnmpi.so, and the CLI it
runs) makes a stored pattern's routes the job's; ``pattern record`` stores a profiled
run's traffic matrix."""

from __future__ import annotations

import ctypes
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.manager.client import ManagerClient
from sdnmpi.wire import manager_pb2 as pb
from tests.cliutil import run_cli as run
from tests.manager.test_server import Running, write_pattern
from tests.pmpi.test_reader import header, send, world, write

#: The manager takes a Slurm job id from root only: these tests act as the scheduler.
pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "build" / "openmpi" / "libsdnmpi.so"
CLI = ROOT / ".venv" / "bin" / "sdnmpi"


@pytest.fixture
def routed(sock_dir: Path, controller) -> Iterator[tuple[str, int]]:
    """A manager, patterns p2 and p2b, and job 7 (2 ranks on h1 and h5) routed with p2."""
    r = Running(sock_dir, controller, sock_dir / "netsa.db")
    target = f"unix:{sock_dir / 'root.sock'}"
    with ManagerClient(target) as c:
        for name in ("p2", "p2b"):
            c.put_pattern(name, write_pattern(sock_dir / f"{name}.json", 2), replace=True)
        c.create_job(7, "app", 0, 2, pattern="p2")
        c.start_job(7)
        c.register_process(7, 0, "h1")
        c.register_process(7, 1, "h5")
        assert c.wait_routes(7, 5000).state == pb.JOB_STATE_ROUTED
    yield target, 7
    r.stop()


def test_cli_activate_switches_the_job_to_another_pattern(capsys, routed) -> None:
    target, job = routed
    code, _, err = run(capsys, "pattern", "activate", "p2b", "--job", str(job), "-m", target)
    assert code == 0, err
    with ManagerClient(target) as c:
        assert c.get_job(job).pattern == "p2b"
    code, _, err = run(capsys, "pattern", "activate", "nope", "--job", str(job), "-m", target)
    assert code == 2 and "nope" in err


@pytest.mark.toolchain
def test_c_net_set_pattern_returns_1_then_0(routed, monkeypatch: pytest.MonkeyPatch) -> None:
    if not LIB.exists():
        res = subprocess.run(["make", "-s", "-C", str(ROOT), "pmpi"], capture_output=True,
                             text=True, check=False)  # fmt: skip
        if res.returncode != 0 or not LIB.exists():
            pytest.skip(f"libsdnmpi.so not built (Open MPI dev files?): {res.stderr[-300:]}")
    target, job = routed
    monkeypatch.setenv("SDNMPI_MANAGER", target)
    monkeypatch.setenv("SDNMPI_JOB", str(job))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("SDNMPI_CLI", str(CLI))
    lib = ctypes.CDLL(str(LIB))
    lib.net_set_pattern.argtypes = [ctypes.c_char_p]
    lib.net_set_pattern.restype = ctypes.c_int
    assert lib.net_set_pattern(b"p2b") == 1
    with ManagerClient(target) as c:
        assert c.get_job(job).pattern == "p2b"
        assert c.get_job(job).state == pb.JOB_STATE_ROUTED
    assert lib.net_set_pattern(b"missing") == 0  # not stored
    assert lib.net_set_pattern(b"bad name!") == 0  # refused before any call
    monkeypatch.setenv("SDNMPI_JOB", "8")  # no such job
    assert lib.net_set_pattern(b"p2") == 0
    monkeypatch.setenv("SDNMPI_CLI", "/nonexistent/sdnmpi")
    assert lib.net_set_pattern(b"p2") == 0


def test_record_stores_a_profiled_runs_matrix(capsys, routed, tmp_path: Path) -> None:
    target, _ = routed
    traces = tmp_path / "traces"
    traces.mkdir()
    write(traces, 0, header(0, 2, world(2, 0)), [send(0.1, 1, 4096), send(0.2, 1, 4096)])
    write(traces, 1, header(1, 2, world(2, 1)), [])
    code, _, err = run(capsys, "pattern", "record", "run1", "--trace", str(traces), "-m", target)
    assert code == 0, err
    assert "stored run1: 2 ranks" in err and "8192 bytes" in err
    with ManagerClient(target) as c:
        info = c.get_pattern("run1").info
    assert info.nranks == 2 and info.total_bytes == 8192
    code, _, err = run(capsys, "pattern", "record", "x", "--trace", str(tmp_path), "-m", target)
    assert code == 2 and "not a directory of sdnmpi-trace" in err
    out = tmp_path / "run2.json"
    code, _, err = run(capsys, "pattern", "record", "run2", "--trace", str(traces), "-o", str(out))
    assert code == 0, err
    assert json.loads(out.read_text())["name"] == "run2"  # the name given, not the directory's
