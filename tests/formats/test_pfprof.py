"""pfprof traces: the real NPB CG and FT traces, round trips, malformed archives."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.errors import FormatError
from sdnmpi.formats.pfprof import dump_pfprof, load_pfprof, recorded_placement


def raw_ranks(path: Path) -> list[dict]:
    """The rank files as plain JSON, read independently of the loader."""
    with tarfile.open(path) as tar:
        records = [json.load(tar.extractfile(m)) for m in tar if m.isfile()]  # type: ignore[arg-type]
    return sorted(records, key=lambda r: r["rank"])


@pytest.mark.parametrize("name", ["cg-c-128.tar.gz", "ft-c-128.tar.gz"])
def test_real_trace_totals_equal_the_sum_of_its_files(workloads_dir: Path, name: str):
    path = workloads_dir / name
    raw = raw_ranks(path)
    pattern = load_pfprof(path)
    assert pattern.nprocs == len(raw) == 128
    assert pattern.total_bytes == sum(sum(r["tx_bytes"]) for r in raw)
    assert pattern.total_messages == sum(sum(r["tx_messages"]) for r in raw)
    dense = pattern.dense()
    for r in (0, 5, 77, 127):
        assert dense[r].tolist() == raw[r]["tx_bytes"]
    rx = load_pfprof(path, side="rx")
    assert rx.total_bytes == sum(sum(r["rx_bytes"]) for r in raw)
    assert rx.dense()[:, 5].tolist() == raw[5]["rx_bytes"]


def test_cg_trace_figures(workloads_dir: Path):
    p = load_pfprof(workloads_dir / "cg-c-128.tar.gz")
    assert p.total_bytes == 94_852_203_096
    assert len(p.phases) == 1 and p.phases[0].label == "whole run"
    place = recorded_placement(p)
    assert place is not None
    assert place.hosts[:8] == ("milk01",) * 8 and len(set(place.hosts)) == 16
    assert p.meta["tx_message_sizes"][5] == [[0, 4], [4, 4], [8, 3952], [16, 76], [75000, 9880]]


def synthetic() -> Pattern:
    a = Phase.from_cells("a", [(0, 1, 100), (1, 2, 50), (2, 0, 7), (2, 2, 3)])
    b = Phase.from_cells("b", [(0, 1, 1)], repeat=4)
    return Pattern("syn", 3, (a, b), meta={"processor_names": ["x", "x", "y"]})


@pytest.mark.parametrize("target", ["t.tar.gz", "dir"])
def test_dump_then_load_keeps_the_total_matrix(tmp_path: Path, target: str):
    p = synthetic()
    dump_pfprof(p, tmp_path / target)
    q = load_pfprof(tmp_path / target)
    assert np.array_equal(q.dense(), p.dense())
    assert q.total_messages == p.total_messages
    assert q.meta["processor_names"] == ["x", "x", "y"]


def write_tar(path: Path, records: dict[str, object]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, rec in records.items():
            data = rec if isinstance(rec, bytes) else json.dumps(rec).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def rank(r: int, n: int = 2, **changes: object) -> dict:
    rec = {
        "n_procs": n,
        "rank": r,
        "processor_name": "h",
        "tx_bytes": [0] * n,
        "rx_bytes": [0] * n,
        "tx_messages": [0] * n,
        "rx_messages": [0] * n,
    }
    rec.update(changes)
    return rec


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (
            {"oxton-result0.json": rank(0)},
            "rank count mismatch: n_procs=2 but 1 rank files; missing ranks \\[1\\]",
        ),
        (
            {"oxton-result0.json": rank(0), "oxton-result1.json": rank(1, tx_bytes=[-1, 0])},
            "negative tx_bytes\\[0\\]",
        ),
        (
            {"oxton-result0.json": rank(0), "oxton-result1.json": rank(1, rx_bytes=[0])},
            "rx_bytes must have 2 entries",
        ),
        (
            {"oxton-result0.json": rank(0), "oxton-result1.json": rank(1, n=3)},
            "disagree on n_procs",
        ),
        ({"oxton-result0.json": rank(0), "oxton-result1.json": rank(0)}, "rank 0 also in"),
        ({"oxton-result0.json": rank(0), "oxton-result1.json": b"{not json"}, "not valid JSON"),
        ({"oxton-result0.json": {"rank": 0}}, "missing key"),
        ({"oxton-result0.json": rank(1)}, "file name says rank 0, content says 1"),
        ({"readme.txt": b"hello"}, "no rank files"),
    ],
)
def test_malformed_traces_are_rejected(tmp_path: Path, records: dict, message: str):
    path = write_tar(tmp_path / "bad.tar.gz", records)
    with pytest.raises(FormatError, match=message) as err:
        load_pfprof(path)
    assert str(path) in str(err.value)


def test_truncated_tarball_is_rejected(tmp_path: Path, workloads_dir: Path):
    data = (workloads_dir / "cg-c-128.tar.gz").read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="truncated or corrupt"):
        load_pfprof(cut)


def test_not_a_tarball_is_rejected(tmp_path: Path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(FormatError, match="truncated or corrupt"):
        load_pfprof(junk)


def test_host_level_patterns_cannot_be_written_as_traces(tmp_path: Path):
    p = Pattern("h", 2, (Phase.from_cells("x", [(0, 1, 1)]),), ("a", "b"))
    with pytest.raises(FormatError, match="host-level"):
        dump_pfprof(p, tmp_path / "x.tar.gz")
