"""Unit tests of the scripts/apps helpers on captured outputs (no MPI run needed).

.venv/bin/pytest -q scripts/apps
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).parent
DATA = HERE / "testdata"
sys.path.insert(0, str(HERE))

import appout  # noqa: E402
import apptrace  # noqa: E402
import hpcc_watch  # noqa: E402
import hpccinf  # noqa: E402

# -- LAMMPS -------------------------------------------------------------------


def test_lammps_lj_breakdown() -> None:
    res = appout.parse_lammps((DATA / "lammps-lj-20x20x10-4ranks.out").read_text())
    (run,) = res["runs"]
    assert run["loop_time"] == pytest.approx(5.03739)
    assert (run["procs"], run["steps"], run["atoms"]) == (4, 300, 16000)
    assert run["grid"] == [2, 2, 1]
    assert run["threads"] == 1
    assert set(run["timing"]) == {"Pair", "Neigh", "Comm", "Output", "Modify", "Other"}
    assert run["timing"]["Comm"] == {
        "min": 3.0898,
        "avg": 3.2385,
        "max": 3.3218,
        "varavg": 5.0,
        "total_pct": 64.29,
    }
    assert run["timing"]["Other"]["min"] is None  # blank columns in LAMMPS's table
    assert run["comm_share"] == pytest.approx(0.6429)
    assert run["network_share"] == pytest.approx(0.6429)  # no Kspace
    assert run["stats"]["Nghost"]["ave"] == pytest.approx(5444.0, rel=0.05)
    assert res["total_wall_s"] == 5


def test_lammps_peptide_kspace_counts_as_network() -> None:
    res = appout.parse_lammps((DATA / "lammps-peptide-2x2x1-4ranks.out").read_text())
    (run,) = res["runs"]
    assert (run["steps"], run["atoms"]) == (60, 8016)
    assert run["grid"] == [2, 2, 1]  # the last grid printed (after replicate)
    assert run["timing"]["Kspace"]["total_pct"] == pytest.approx(22.24)
    assert run["comm_share"] == pytest.approx(0.0985)
    assert run["network_share"] == pytest.approx(0.0985 + 0.2224)


def test_lammps_several_runs_and_no_run() -> None:
    one = (DATA / "lammps-lj-20x20x10-4ranks.out").read_text()
    assert len(appout.parse_lammps(one + one)["runs"]) == 2
    assert appout.parse_lammps("LAMMPS (29 Sep 2021)\nERROR: bad input\n")["runs"] == []


# -- HPCC ---------------------------------------------------------------------


def test_hpcc_two_appended_runs() -> None:
    runs = appout.parse_hpcc((DATA / "hpccoutf-2runs-4ranks.txt").read_text())
    assert len(runs) == 2
    first, last = runs
    assert first["complete"]
    assert last["complete"]
    assert last["version"] == "1.5.0"
    assert last["summary"]["CommWorldProcs"] == 4
    assert last["figures"]["PTRANS_GBs"] == pytest.approx(0.700267)
    assert last["figures"]["MPIFFT_Gflops"] == pytest.approx(0.915444)
    assert last["figures"]["MPIFFT_N"] == 65536
    assert first["figures"]["PTRANS_GBs"] == pytest.approx(0.181113)
    names = [s["name"] for s in last["sections"]]
    assert names[0] == "MPIRandomAccess"
    assert names[-2:] == ["HPL", "Summary"]
    assert {"PTRANS", "MPIFFT", "LatencyBandwidth"} <= set(names)
    assert all(s["seconds"] is not None and s["seconds"] >= 0 for s in last["sections"])
    # PTRANS: the extra size 2000 (5 repetitions) then N/2 = 500
    assert [r["N"] for r in last["ptrans"]] == [2000] * 5 + [500] * 5
    assert all(r["check"] == "PASSED" for r in last["ptrans"])
    assert last["mpifft"]["Vector size"] == 65536
    assert set(last["beff_times"]) == {
        "total",
        "cross_ping_pong_latency",
        "cross_ping_pong_bandwidth",
        "ring_latency",
        "ring_bandwidth",
    }
    assert last["beff_times"]["ring_bandwidth"] <= last["beff_times"]["total"]


def test_hpcc_truncated_run_is_incomplete() -> None:
    text = (DATA / "hpccoutf-2runs-4ranks.txt").read_text()
    second = text.index("This is the DARPA", text.index("This is the DARPA") + 1)
    cut = text[: text.index("Begin of HPL section.", second)]
    runs = appout.parse_hpcc(cut)
    assert len(runs) == 2
    assert runs[0]["complete"]
    assert not runs[1]["complete"]


# -- hpccinf.txt --------------------------------------------------------------


def test_hpccinf_render() -> None:
    text = hpccinf.render(1000, 80, 2, 4, [4000])
    lines = text.splitlines()
    assert len(lines) == 36
    assert lines[5].split()[0] == "1000"
    assert lines[7].split()[0] == "80"
    assert (lines[10].split()[0], lines[11].split()[0]) == ("2", "4")
    assert lines[32].split()[0] == "1"
    assert lines[33].split()[0] == "4000"
    assert all(len(line) < 81 for line in lines)
    assert "@" not in text


def test_hpccinf_rejects_ptrans_sizes_hpcc_would_drop() -> None:
    with pytest.raises(ValueError, match=r"0\.4743"):
        hpccinf.render(4000, 80, 2, 4, [1000])


@pytest.mark.parametrize(("n", "pq"), [(4, (2, 2)), (8, (2, 4)), (16, (4, 4)), (12, (3, 4))])
def test_hpccinf_grid(n: int, pq: tuple[int, int]) -> None:
    assert hpccinf.grid(n) == pq


# -- traces -------------------------------------------------------------------


def _trace(directory: Path, rank: int, t0: float, events: list[dict[str, Any]]) -> None:
    header = {
        "schema": "sdnmpi-trace/1",
        "rank": rank,
        "nprocs": 2,
        "host": "h",
        "pid": 1,
        "mpi_library": "Open MPI v4.1.4",
        "job": "",
        "t0_wall": t0,
        "modes": "profile",
        "n_events": len(events),
        "dropped_events": 0,
        "communicators": [{"id": 0, "ranks": [0, 1]}, {"id": 1, "ranks": [rank]}],
    }
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / f"sdnmpi-trace-{rank}.jsonl").open("w") as fh:
        fh.write(json.dumps(header) + "\n")
        for e in events:
            fh.write(json.dumps(e) + "\n")


def _send(t: float, peer: int, nbytes: int) -> dict[str, Any]:
    return {
        "call": "MPI_Send",
        "kind": "send",
        "t_start": t,
        "t_end": t + 0.001,
        "comm": 0,
        "peer": peer,
        "tag": 0,
        "count": nbytes,
        "type_bytes": 1,
        "bytes": nbytes,
    }


def _run(directory: Path, steps: int) -> Path:
    # setup: 1000 B 0->1; then per step 100 B 0->1 and 70000 B 1->0
    _trace(
        directory, 0, 100.0, [_send(0.0, 1, 1000)] + [_send(1.0 + s, 1, 100) for s in range(steps)]
    )
    _trace(directory, 1, 100.5, [_send(0.5 + s, 0, 70000) for s in range(steps)])
    return directory


def test_per_step_cancels_setup(tmp_path: Path) -> None:
    res = apptrace.per_step(_run(tmp_path / "a", 2), 2, _run(tmp_path / "b", 5), 5)
    pairs = {(p["src"], p["dst"]): p["bytes_per_step"] for p in res["pairs"]}
    assert pairs == {(0, 1): pytest.approx(100.0), (1, 0): pytest.approx(70000.0)}
    assert res["bytes_per_step_max_rank"] == pytest.approx(70000.0)
    assert res["setup_bytes_total"] == pytest.approx(1000.0)
    assert res["seconds_per_step_at_link"] == pytest.approx(70000 * 8 / 10e6)
    same_host = apptrace.per_step(tmp_path / "a", 2, tmp_path / "b", 5, ranks_per_host=2)
    assert same_host["host_egress_per_step"] == [0.0]


def test_host_egress_block_placement() -> None:
    d = np.zeros((4, 4))
    d[0, 1] = 5  # same host (0, 1)
    d[0, 2] = 7
    d[3, 0] = 11
    assert list(apptrace.host_egress(d, 2)) == [7.0, 11.0]
    assert list(apptrace.host_egress(d, 1)) == [12.0, 0.0, 0.0, 11.0]


def test_window_and_sizes(tmp_path: Path) -> None:
    trace = _run(tmp_path / "t", 3)  # rank 1 starts 0.5 s after rank 0
    assert apptrace.job_start(trace) == 100.0
    whole = apptrace.summary(trace, None, None)
    assert whole["total_bytes"] == 1000 + 3 * 100 + 3 * 70000
    # [0.9, 2.05): rank 0's sends at 1.0 and 2.0, rank 1's at 1.0 and 2.0 (0.5 + 0.5 offset)
    part = apptrace.summary(trace, 0.9, 2.05)
    assert part["total_bytes"] == 2 * 100 + 2 * 70000
    buckets = {(b["from"], b["to"]): b["messages"] for b in whole["p2p_size_buckets"]}
    assert buckets == {(64, 1024): 4, (65536, 1 << 20): 3}


def test_sections(tmp_path: Path) -> None:
    trace = _run(tmp_path / "t", 3)
    times = tmp_path / "times.json"
    times.write_text(json.dumps({"sections": {"A": [100.0, 101.5], "B": [101.5, 110.0]}}))
    res = {s["section"]: s for s in apptrace.sections(trace, times)["sections"]}
    assert res["A"]["bytes"] == 1000 + 100 + 70000
    assert res["B"]["bytes"] == 2 * 100 + 2 * 70000
    assert res["A"]["seconds"] == pytest.approx(1.5)


# -- hpcc_watch ----------------------------------------------------------------


def _append_at(path: Path, line: str, stamp_ns: int) -> None:
    """Append ``line`` with the file's modification time ``stamp_ns``, in one step
    (a new file with the old content renamed over it), as the watcher must see it."""
    tmp = path.with_suffix(".new")
    tmp.write_bytes(path.read_bytes() + line.encode() + b"\n")
    os.utime(tmp, ns=(stamp_ns, stamp_ns))
    os.replace(tmp, path)


def test_watch_stamps_a_section_with_the_write_not_the_poll(tmp_path: Path) -> None:
    out = tmp_path / "hpccoutf.txt"
    out.write_text("an earlier run's lines\nBegin of OLD section.\n")
    times = tmp_path / "times.json"
    box: dict[str, Any] = {}
    watcher = threading.Thread(
        target=lambda: box.update(hpcc_watch.watch(out, times, timeout=20.0, interval=0.005))
    )
    watcher.start()
    time.sleep(0.1)
    base = 1_700_000_000_000_000_000  # long before now: a poll's own clock cannot match it
    _append_at(out, "Begin of MPIFFT section.", base)
    time.sleep(0.1)
    _append_at(out, "Vector size: 65536", base + 1)
    time.sleep(0.1)
    _append_at(out, "End of MPIFFT section.", base + 660_000_000)
    time.sleep(0.1)
    _append_at(out, "End of HPC Challenge tests.", base + 700_000_000)
    watcher.join(timeout=20.0)
    assert not watcher.is_alive()
    assert box["complete"]
    assert box["sections"] == {"MPIFFT": [base / 1e9, (base + 660_000_000) / 1e9]}
    assert json.loads(times.read_text())["sections"] == box["sections"]
