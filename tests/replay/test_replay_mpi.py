"""``sdnmpi-replay`` (csrc/replay) with MPICH and Open MPI on localhost.

Built with ``make -C csrc/replay`` into a temporary directory and run with 2 to 4
ranks on shared memory (MPICH over ``UCX_TLS=sm,self``, see tests/mpibench;
Open MPI oversubscribed), each run a second or less.  The program's own counters
(receives counted from their MPI statuses) must show every cell's bytes and
messages sent and received, once per timed occurrence of its phase.  A missing
MPI compiler wrapper is a failure, not a skip: these tests are part of CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sdnmpi.core import workloads
from sdnmpi.core.pattern import Cell, Pattern, Phase
from sdnmpi.formats import replay

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "csrc" / "replay"
FLAVOURS = ("mpich", "openmpi")
WRAPPERS = {"mpich": "mpicc.mpich", "openmpi": "mpicc.openmpi"}
RUN_TIMEOUT_S = 60
PHASE_KEYS = {
    "index", "label", "repeat", "cells", "messages", "bytes", "time_s", "time_avg_s",
    "wait_avg_s", "wait_cv", "messages_sent", "bytes_sent", "messages_received", "bytes_received",
}  # fmt: skip

pytestmark = [pytest.mark.toolchain, pytest.mark.integration]

# 4 ranks: several messages per cell with a remainder (1000 bytes in 3), zero-byte
# messages, messages to self, a phase where one rank is idle, an empty phase.
MIXED = Pattern(
    "mixed %-é",
    4,
    (
        Phase.from_cells(
            "ring, 3 messages",
            [Cell(r, (r + 1) % 4, 1000 + r, 3) for r in range(4)],
            repeat=3,
        ),
        Phase.from_cells(
            "self and zero",
            [Cell(0, 0, 64, 2), Cell(1, 2, 0, 4), Cell(2, 1, 70000, 1), Cell(3, 0, 1, 1)],
            repeat=2,
        ),
        Phase.from_cells("empty", [], repeat=1),
        Phase.from_cells(
            "all to one", [Cell(r, 3, 65536, 2) for r in range(3)] + [Cell(3, 2, 5, 5)]
        ),
    ),
)


@pytest.fixture(scope="session")
def replay_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build both flavours once into a temporary directory."""
    missing = [w for w in WRAPPERS.values() if shutil.which(w) is None]
    if missing:
        pytest.fail(
            f"MPI compiler wrappers not found: {missing} (apt-get install "
            "mpich libmpich-dev openmpi-bin libopenmpi-dev)"
        )
    build = tmp_path_factory.mktemp("replay-build")
    proc = subprocess.run(
        ["make", "-C", str(SRC), f"BUILD={build}", *FLAVOURS],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {f: build / f / "sdnmpi-replay" for f in FLAVOURS}


@pytest.fixture(scope="session")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("replay-files")
    patterns = {
        "mixed": MIXED,
        "cg": workloads.build("cg:nprocs=4,klass=S"),
        "allreduce": workloads.build("allreduce:nprocs=4,bytes=262144"),
        "big": Pattern("big", 2, (Phase.from_cells("3 GiB", [Cell(0, 1, 3 << 30, 1)]),)),
    }
    paths = {}
    for name, p in patterns.items():
        paths[name] = out / f"{name}.replay"
        replay.save_replay(p, paths[name])
    return paths


def launch(flavour: str, nprocs: int, binary: Path, args: list[str]) -> list[str]:
    if flavour == "mpich":
        return ["mpiexec.mpich", "-n", str(nprocs), str(binary), *args]
    return ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-n", str(nprocs),
            str(binary), *args]  # fmt: skip


def launch_env(flavour: str) -> dict[str, str]:
    env = dict(os.environ)
    if flavour == "mpich":
        env["UCX_TLS"] = "sm,self"
    else:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    return env


def run_replay(
    bins: dict[str, Path], flavour: str, nprocs: int, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        launch(flavour, nprocs, bins[flavour], list(args)),
        capture_output=True,
        text=True,
        env=launch_env(flavour),
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def run_json(bins: dict[str, Path], flavour: str, nprocs: int, *args: str) -> dict[str, Any]:
    proc = run_replay(bins, flavour, nprocs, "--json", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"benchmark"')]
    assert len(lines) == 1, f"expected one JSON object (rank 0 only):\n{proc.stdout}"
    doc: dict[str, Any] = json.loads(lines[0])
    return doc


def check_counts(doc: dict[str, Any], pattern: Pattern, iters: int) -> None:
    """Every phase's bytes and messages, sent and received, once per timed occurrence."""
    assert doc["pattern"] == pattern.name
    assert doc["mismatched_messages"] == 0
    assert len(doc["phases"]) == len(pattern.phases)
    for row, ph in zip(doc["phases"], pattern.phases, strict=True):
        assert set(row) == PHASE_KEYS
        assert (row["label"], row["repeat"], row["cells"]) == (ph.label, ph.repeat, len(ph))
        assert (row["bytes"], row["messages"]) == (ph.total_bytes, ph.total_messages)
        times = ph.repeat * iters
        assert row["bytes_sent"] == row["bytes_received"] == ph.total_bytes * times
        assert row["messages_sent"] == row["messages_received"] == ph.total_messages * times
        assert 0 <= row["time_avg_s"] <= row["time_s"] * (1 + 1e-9)
        if ph.total_messages == 0:  # nobody exchanged: no exchange time to vary
            assert row["wait_avg_s"] is None and row["wait_cv"] is None
        else:  # an exchange's own time (no barrier): within the phase's time per rank
            assert 0 < row["wait_avg_s"] <= row["time_s"] * (1 + 1e-9)
            assert 0 <= row["wait_cv"] < 10


def check_document(doc: dict[str, Any], flavour: str, nprocs: int, iters: int) -> None:
    assert doc["benchmark"] == "replay"
    assert doc["nprocs"] == nprocs
    assert doc["mpi_library"].startswith("MPICH" if flavour == "mpich" else "Open MPI")
    assert doc["parameters"]["iters"] == iters
    assert len(doc["passes_s"]) == iters and all(t > 0 for t in doc["passes_s"])
    assert doc["total_s"] == pytest.approx(sum(doc["passes_s"]) / iters)
    assert len(doc["hosts"]) == nprocs and all(doc["hosts"])
    assert doc["memory_bytes"] > 0
    stamps = doc["timestamps"]
    assert stamps["start_utc"] <= stamps["end_utc"]
    assert stamps["start_unix_s"] <= stamps["end_unix_s"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_every_cell_is_sent_and_received(replay_bins, files, flavour):
    doc = run_json(replay_bins, flavour, 4, "--iters", "2", str(files["mixed"]))
    check_document(doc, flavour, 4, 2)
    check_counts(doc, replay.replayable(MIXED), 2)
    assert doc["parameters"] == {
        "file": str(files["mixed"]), "iters": 2, "warmup": 1, "barrier": True, "poll_us": 0,
        "max_memory_bytes": 256 << 20,
    }  # fmt: skip
    # the largest rank: 3 slots of 65536 + 5 messages of 1 byte in "all to one" ...
    assert doc["memory_bytes"] >= 3 * 65536


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("name", ["cg", "allreduce"])
def test_miniapp_and_collective(replay_bins, files, flavour, name):
    doc = run_json(replay_bins, flavour, 4, "--warmup", "0", str(files[name]))
    check_document(doc, flavour, 4, 1)
    check_counts(doc, replay.load_replay(files[name]), 1)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_no_barrier(replay_bins, files, flavour):
    doc = run_json(replay_bins, flavour, 4, "--no-barrier", "--iters", "3", str(files["mixed"]))
    assert doc["parameters"]["barrier"] is False
    check_counts(doc, replay.replayable(MIXED), 3)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_poll(replay_bins, files, flavour):
    doc = run_json(
        replay_bins, flavour, 4, "--poll-us", "50", "--no-barrier", str(files["allreduce"])
    )
    assert doc["parameters"]["poll_us"] == 50
    check_counts(doc, replay.load_replay(files["allreduce"]), 1)
    doc = run_json(replay_bins, flavour, 4, "--poll-us=200", str(files["mixed"]))
    assert doc["parameters"]["barrier"] is True
    check_counts(doc, replay.replayable(MIXED), 1)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_table_output(replay_bins, files, flavour):
    proc = run_replay(replay_bins, flavour, 4, "--warmup", "0", str(files["mixed"]))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.count("# pattern mixed %-é: 4 ranks, 4 phases") == 1
    assert "# hosts: " in out and "# mismatched messages 0" in out
    rows = [ln.split(None, 6) for ln in out.splitlines() if not ln.startswith("#")]
    assert rows[0] == ["phase", "repeat", "cells", "bytes", "time_us", "avg_us", "label"]
    assert [r[6] for r in rows[1:]] == [ph.label for ph in MIXED.phases]


def test_help(replay_bins):
    proc = run_replay(replay_bins, "mpich", 2, "--help")
    assert proc.returncode == 0
    assert proc.stdout.count("usage: sdnmpi-replay") == 1


def bad_cases(files: dict[str, Path]) -> list[tuple[int, list[str], int, str]]:
    """(nprocs, args, exit status, message) of runs that must fail cleanly."""
    bad_vector = REPO / "tests" / "vectors" / "replay" / "bad" / "cells-unsorted.replay"
    return [
        (2, [str(files["mixed"])], 2,
         "the pattern is for 4 ranks, this job has 2 (run it with -n 4)"),
        (2, [str(bad_vector)], 2, f"{bad_vector}:5: cell (1, 0) is not after (1, 2)"),
        (2, ["/nonexistent.replay"], 2, "/nonexistent.replay: cannot read: No such file"),
        (2, [str(files["big"])], 2,
         "a message of 3221225472 bytes (cell 0 -> 1: 3221225472 bytes in 1 messages) "
         "exceeds INT_MAX"),
        (4, ["--max-memory", "64K", str(files["mixed"])], 1, "rank 1 needs"),
        (2, ["--iters", "0", "x"], 2, "--iters: 0 is out of range"),
        (2, [], 2, "missing the pattern file"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(7))
def test_errors_mpich(replay_bins, files, case):
    nprocs, args, status, message = bad_cases(files)[case]
    proc = run_replay(replay_bins, "mpich", nprocs, *args)
    assert proc.returncode == status, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert proc.stderr.count("sdnmpi-replay: error:") == 1  # one rank says it
    assert '{"benchmark"' not in proc.stdout


def test_memory_cap_names_the_rank(replay_bins, files):
    proc = run_replay(replay_bins, "mpich", 4, "--max-memory=64K", str(files["mixed"]))
    assert proc.returncode == 1
    # Ranks 1 and 3 need more than 64 KiB, and the first of them explains: 70000
    # bytes from rank 2 in "self and zero", a send buffer of 65536 / 2 ("all to
    # one"), and 6 concurrent messages (3 in, 3 out in the ring phase), each an
    # MPI_Request and an MPI_Status (4 + 20 bytes in MPICH).
    assert proc.stderr.count("error: rank 1 needs 102912 bytes, above --max-memory 65536") == 1
    assert "receive slots for the largest phase 70000, send buffer 32768, 6 concurrent" in (
        proc.stderr
    )


@pytest.mark.parametrize("case", [0, 3])
def test_errors_openmpi(replay_bins, files, case):
    # Two cases only: Open MPI's mpirun takes about 2 s to wind down a failed job.
    nprocs, args, status, message = bad_cases(files)[case]
    proc = run_replay(replay_bins, "openmpi", nprocs, *args)
    assert proc.returncode == status, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert proc.stderr.count("sdnmpi-replay: error:") == 1
