"""``sdnmpi manager jobs|job|status`` and ``sdnmpi pattern put|get|list --manager``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.manager.client import ManagerClient
from tests.cliutil import run_cli as run
from tests.manager.test_server import Running, write_pattern


@pytest.fixture
def manager(sock_dir: Path, controller) -> Iterator[str]:
    r = Running(sock_dir, controller, sock_dir / "cli.db")
    yield str(sock_dir / "root.sock")
    r.stop()


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_pattern_put_get_list(capsys, manager: str, sock_dir: Path):
    pat = write_pattern(sock_dir / "ring.json", 4)
    code, out, err = run(
        capsys, "pattern", "put", "ring", str(pat), "-m", manager, "--bandwidth", "1e9"
    )
    assert code == 0, err
    assert "stored ring: 4 ranks, 1 phases" in out
    code, out, _ = run(capsys, "pattern", "list", "--manager", manager, "--json")
    assert code == 0
    [info] = json.loads(out)
    assert info["name"] == "ring" and info["bandwidth_bps"] == 1e9 and info["owner_uid"] == 0
    target = sock_dir / "back.json"
    code, _, _ = run(capsys, "pattern", "get", "ring", "-o", str(target), "-m", manager)
    assert code == 0
    assert json.loads(target.read_text())["nprocs"] == 4
    code, out, _ = run(capsys, "pattern", "get", "ring", "-m", manager)
    assert json.loads(out)["name"] == "pairs"
    code, out, _ = run(capsys, "pattern", "list")  # without --manager: the specs, as before
    assert code == 0 and "pattern specs" in out


def test_pattern_errors_are_one_line(capsys, manager: str, sock_dir: Path):
    bad = sock_dir / "bad.xml"
    bad.write_text("<netsa><oops")
    code, _, err = run(capsys, "pattern", "put", "x", str(bad), "-m", manager)
    assert code == 2 and err.startswith("sdnmpi: error:") and err.count("\n") == 1
    code, _, err = run(capsys, "pattern", "get", "nope", "-m", manager)
    assert code == 2 and "no stored pattern 'nope'" in err
    pat = write_pattern(sock_dir / "a.json")
    run(capsys, "pattern", "put", "a", str(pat), "-m", manager)
    other = write_pattern(sock_dir / "b.json", 4)
    code, _, err = run(capsys, "pattern", "put", "a", str(other), "-m", manager)
    assert code == 2 and "replace" in err
    code, _, err = run(capsys, "pattern", "put", "a", str(other), "-m", manager, "--replace")
    assert code == 0


def test_manager_down_is_a_runtime_error(capsys, sock_dir: Path):
    code, _, err = run(capsys, "manager", "jobs", "-m", str(sock_dir / "none.sock"))
    assert code == 1 and "unavailable" in err and "Traceback" not in err


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_manager_jobs_job_status(capsys, manager: str, sock_dir: Path):
    with ManagerClient(manager) as c:
        c.create_job(5, "demo", 1000, 2, pattern_file=write_pattern(sock_dir / "p.json"))
        c.start_job(5)
        c.register_process(5, 0, "h1")
        c.register_process(5, 1, "h5")
    code, out, _ = run(capsys, "manager", "jobs", "-m", manager, "--json")
    assert code == 0
    [job] = json.loads(out)
    assert job["state"] == "ROUTED" and job["pairs"] == 1 and job["registered"] == 2
    code, out, _ = run(capsys, "manager", "job", "5", "-m", manager, "--json")
    assert json.loads(out)["processes"] == [
        {"rank": 0, "node": "h1", "pid": 0},
        {"rank": 1, "node": "h5", "pid": 0},
    ]
    code, out, _ = run(capsys, "manager", "status", "-m", manager)
    assert code == 0 and "1 routed" in out and "0 stored patterns" in out
    code, out, _ = run(capsys, "manager", "status", "-m", manager, "--json")
    assert code == 0
    assert json.loads(out) == {"schema": "sdnmpi.manager-status/1", "manager": manager,
                               "up": True, "jobs": {"ROUTED": 1}, "patterns": 0}  # fmt: skip
    code, _, err = run(capsys, "manager", "job", "6", "-m", manager)
    assert code == 2 and "no job 6" in err
    from sdnmpi.cli.routes import job_nodes  # `routes path --job 5 -m`: ranks to hosts

    assert job_nodes(manager, 5) == {0: "h1", 1: "h5"}


def test_run_rejects_half_tls_options(capsys, sock_dir: Path):
    code, _, err = run(
        capsys,
        "manager",
        "run",
        "--socket",
        str(sock_dir / "x.sock"),
        "--db",
        ":memory:",
        "--controller-api",
        str(sock_dir / "ctl.sock"),
        "--tcp",
        "127.0.0.1:0",
    )
    assert code == 2 and "--tls-cert" in err


def test_run_fails_cleanly_when_it_cannot_listen(sock_dir: Path):
    """A socket path that is a regular file: one line, exit 2, and the process ends."""
    import subprocess
    import sys

    taken = sock_dir / "taken"
    taken.write_text("not a socket")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sdnmpi.cli.main import main; main()",
            "manager",
            "run",
            "--socket",
            str(taken),
            "--db",
            ":memory:",
            "--controller-api",
            str(sock_dir / "none.sock"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("sdnmpi: error: --socket")
    assert "Traceback" not in proc.stderr
    assert taken.read_text() == "not a socket"
