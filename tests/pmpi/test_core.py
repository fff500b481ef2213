"""Unit tests of libsdnmpi's MPI-free core (csrc/pmpi/tests/test_core.c), and the
trace it writes read back by the Python readers (the same vectors on both sides)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sdnmpi.core.collectives import expand
from sdnmpi.formats.pfprof import load_pfprof
from sdnmpi.formats.sdnmpitrace import load_sdnmpi_trace
from sdnmpi.node.duplex import DUPLEX_ENV

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def core_outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    if shutil.which("cc") is None:
        pytest.fail("no C compiler (cc)")
    build = tmp_path_factory.mktemp("pmpi-unit")
    proc = subprocess.run(
        ["make", "-C", str(REPO / "csrc" / "pmpi"), "unit", f"BUILD={build}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path_factory.mktemp("pmpi-unit-out")
    run = subprocess.run(
        [str(build / "pmpi" / "test_core"), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout, out


def test_c_unit_tests_pass(core_outputs):
    stdout, _ = core_outputs
    assert stdout.strip().endswith(", 0 failures")
    checks = int(stdout.split("test_core: ")[1].split(" checks")[0])
    assert checks > 1000


def test_compiled_duplex_table_equals_python(core_outputs):
    """csrc/include/sdnmpi/duplex.h as the compiler sees it (test_core prints it)."""
    stdout, _ = core_outputs
    rows = [ln.split(" ", 2) for ln in stdout.splitlines() if ln.startswith("duplex ")]
    printed = [(lib, *pair.split("=", 1)) for _, lib, pair in rows]
    assert printed == [(lib, n, v) for lib, env in DUPLEX_ENV.items() for n, v in env.items()]


def test_written_trace_reads_back(core_outputs):
    _, out = core_outputs
    p = load_sdnmpi_trace(out)
    assert p.nprocs == 2
    assert p.meta["processor_names"] == ['host"1', 'host"1']
    assert p.meta["job"] == "unit"
    # 3 x 100 B each way, allreduce 16 doubles expanded once, alltoallv counts {1, 2} ints
    allreduce = expand("allreduce", 2, 16, type_bytes=8, library="mpich").total_bytes
    assert p.meta["p2p_bytes"] == 600
    assert p.total_bytes == 600 + allreduce + (2 + 1) * 4
    assert p.dense()[0][1] == 300 + allreduce // 2 + 2 * 4


def test_written_pfprof_reads_back(core_outputs):
    _, out = core_outputs
    pf = load_pfprof(out)
    assert pf.dense().tolist() == [[0, 300], [300, 0]]
    assert pf.meta["tx_message_sizes"] == [[[100, 3]], [[100, 3]]]
    assert pf.meta["rx_message_sizes"] == [[[40, 1]], [[40, 1]]]
    assert "not visible" in pf.meta["description"]
    rx = load_pfprof(out, side="rx")
    assert rx.dense().tolist() == [[0, 40], [40, 0]]
