"""The report's writers: Markdown and JSON against golden files, reading back, plots.

The golden files ``golden/report.md`` and ``golden/report.json`` pin the report's
layout; regenerate them on purpose with
``SDNMPI_REGEN_GOLDEN=1 .venv/bin/pytest tests/reproduce/test_writers.py`` and
review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sdnmpi.errors import FormatError
from sdnmpi.report.reproduce import Row, load_json, write_json
from sdnmpi.report.reproduce_md import write_markdown
from sdnmpi.report.reproduce_plots import slug, write_plots

GOLDEN = Path(__file__).parent / "golden"
AR = "002 SDN_MPI_Allreduce"
NETSA = "003 NetSA"
META = {
    "command": "scripts/reproduce.py --quick",
    "mode": "quick",
    "date": "2026-01-02T03:04:05+00:00",
    "machine": {"hostname": "node1", "cpus": 2, "system": "Linux", "kernel": "6.18.0"},
    "git": {"commit": "0123456789abcdef", "dirty": True},
    "calibration": {
        "source": "measured by sdnmpi calibrate (bench 2026-01-02)",
        "file": "out/reproduce/calibration.json",
        "link_scale": 0.01,
        "goodput": 0.955,
        "arc_latency_s": 4.5e-05,
        "base_latency_s": 0.00012,
        "note": "",
    },
    "cleanup": ["fabric ar-1 was left up; removed with `sdnmpi emu down --name ar-1`"],
}
OPENMPI = {"mpi": "openmpi", "link_scale": 0.01, "topology": "allreduce28"}


def sample_rows() -> list[Row]:
    return [
        Row(AR, "Fig. 9 (8 nodes)", "8 hosts, 1 MiB, push/ours vs default", "speedup",
            paper=1 / (1 - 0.41), paper_text="41 % less time", measured=1.52, predicted=1.61,
            bound=1.9, settings={**OPENMPI, "protocol": "openmpi-duplex"},
            network_limited=True, details={"default_s": 0.81, "push_s": 0.533}),
        Row(AR, "Fig. 11 (16 nodes)", "16 hosts, 1 MiB, push/ours vs default", "speedup",
            paper=1 / (1 - 0.56), paper_text="56 % less time", measured=1.2, predicted=1.9,
            bound=2.1, settings={**OPENMPI, "protocol": "openmpi"}, status="cpu-bound",
            reason="16 ranks | 2 cores: the CPUs, not the links, limit", network_limited=False),
        Row(AR, "Fig. 9 (8 nodes)", "8 hosts, 4 MiB, push/ours vs default", "speedup",
            paper=1 / (1 - 0.41), paper_text="41 % less time", settings=OPENMPI,
            status="failed", reason="RuntimeError: mpirun timed out; the job was killed"),
        Row(NETSA, "Sec. V-D (rule programming)", "net_set_pattern to rules installed",
            "time_s", paper=0.47, paper_text="0.47 s on average", measured=0.212,
            predicted=None, network_limited=None),
        Row(NETSA, "Fig. 5c (6 hops, 512 B)", "osu_latency, 6 hops vs 1",
            "latency_increase_pct", paper=49.8, paper_text="49.8 % over one hop",
            status="skipped", reason="hpcc not installed: apt-get install hpcc"),
        Row(NETSA, "Fig. 10b (Allgather)", "16 ranks, LACP vs one switch",
            "latency_increase_pct", paper=100.0, paper_text="LACP over 100 % over one switch",
            measured=80.9, predicted=70.0, network_limited=True, paper_role="baseline"),
    ]  # fmt: skip


def _golden(name: str, text: str) -> str:
    path = GOLDEN / name
    if os.environ.get("SDNMPI_REGEN_GOLDEN"):
        path.write_text(text)
    return path.read_text()


def test_markdown_matches_golden_file(tmp_path):
    plots = {AR: [tmp_path / "002-sdn-mpi-allreduce.png", tmp_path / "exp_allreduce" / "a.png"]}
    path = write_markdown(sample_rows(), META, plots, tmp_path / "report.md")
    text = path.read_text()
    assert text == _golden("report.md", text), "the report layout changed; see the docstring"


def test_markdown_content(tmp_path):
    text = write_markdown(sample_rows(), META, {}, tmp_path / "r.md").read_text()
    assert (
        "| Fig. 9 (8 nodes) | 8 hosts, 1 MiB, push/ours vs default | x1.69 (41 % less time) "
        "| x1.52 | x1.61 | 5.9 % | x1.90 | ok, below paper: protocol=openmpi-duplex |" in text
    )
    # 58.3 % apart: flagged; the reason's "|" is escaped so the table keeps its columns
    assert "58.3 % (over 15 %)" in text
    assert "16 ranks \\| 2 cores" in text
    assert "failed: RuntimeError: mpirun timed out; the job was killed" in text
    assert "skipped: hpcc not installed: apt-get install hpcc" in text
    assert "| 470.0 ms (0.47 s on average) | 212.0 ms | - | - | - | ok, meets paper |" in text
    assert "Settings of every row: mpi=openmpi, link_scale=0.01, topology=allreduce28" in text
    assert "- 6 rows: 3 ok, 1 cpu-bound, 1 failed, 1 skipped." in text
    assert "the paper's baseline | 80.9 %" in text and "1 of 3 rows with a published value" in text
    assert "- Prediction: 2 of 2 network-limited rows within 15 % of the measurement." in text
    assert "- Paper: 1 of 3 rows with a published value meet it." in text
    assert (
        "- Calibration: measured by sdnmpi calibrate (bench 2026-01-02) "
        "(`out/reproduce/calibration.json`): link scale 0.01, goodput 0.955, "
        "per-arc latency 45 us, base latency 120 us" in text
    )
    assert "- Cleanup: fabric ar-1 was left up" in text
    assert "## 002 SDN_MPI_Allreduce" in text and "## 003 NetSA" in text


def test_json_matches_golden_and_reads_back(tmp_path):
    rows = sample_rows()
    path = write_json(rows, META, tmp_path / "report.json")
    doc = json.loads(path.read_text())
    golden = json.loads(_golden("report.json", path.read_text()))
    assert doc == golden, "the JSON layout changed; see the docstring"
    assert doc["schema"] == "sdnmpi.reproduce/1"
    assert [r["status"] for r in doc["rows"]] == [
        "ok",
        "cpu-bound",
        "failed",
        "ok",
        "skipped",
        "ok",
    ]
    assert doc["rows"][-1]["paper_role"] == "baseline" and doc["rows"][-1]["meets_paper"] is None
    assert doc["rows"][0]["agreement_pct"] == pytest.approx(abs(1.52 - 1.61) / 1.52 * 100)
    assert doc["summary"]["by_status"]["failed"] == 1
    meta, back = load_json(path)
    assert back == rows
    assert meta == META


def test_load_json_rejects_other_files(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "other"}')
    with pytest.raises(FormatError, match=r"not an sdnmpi\.reproduce/1 report"):
        load_json(bad)
    bad.write_text("{")
    with pytest.raises(FormatError, match="not JSON"):
        load_json(bad)
    with pytest.raises(FormatError):
        load_json(tmp_path / "missing.json")


def test_plots_one_png_per_experiment(tmp_path):
    rows = sample_rows()
    plots = write_plots(rows, tmp_path)
    assert set(plots) == {AR, NETSA}
    assert plots[AR] == tmp_path / f"{slug(AR)}.png"
    for png in plots.values():
        assert png.read_bytes()[:4] == b"\x89PNG"
    # an experiment with no value at all (only a failure without paper value) gets no plot
    failed = Row("x", "f", "c", "speedup", status="failed", reason="boom")
    assert write_plots([failed], tmp_path / "none") == {}
