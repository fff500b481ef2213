"""Both parsers of the replay format against the shared vectors (tests/vectors/replay).

The C parser (csrc/replay/format.c) runs through ``replay_tests vectors``, built
with plain cc by ``make -C csrc/replay unit`` (no MPI needed); it prints what it
makes of each file as one JSON line.  Each good file must give both readers the
expected pattern, each bad one the expected line and exact message.  Patterns
written by the Python writer must read back the same in C.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.errors import FormatError
from sdnmpi.formats import replay

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "tests" / "vectors" / "replay"
DOC: dict[str, Any] = json.loads((VECTORS / "vectors.json").read_text())
GOOD = DOC["good"]
BAD = DOC["bad"]


@pytest.fixture(scope="module")
def replay_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None:
        pytest.fail("no C compiler (cc)")
    build = tmp_path_factory.mktemp("replay-unit")
    proc = subprocess.run(
        ["make", "-C", str(REPO / "csrc" / "replay"), "unit", f"BUILD={build}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return build / "replay" / "replay_tests"


def c_parse(binary: Path, files: list[Path]) -> dict[str, dict[str, Any]]:
    """What the C parser makes of each file, by path."""
    proc = subprocess.run(
        [str(binary), "vectors", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == len(files)
    return {row["file"]: row for row in rows}


def phase_view(ph: Phase) -> dict[str, Any]:
    cells = np.stack([ph.src, ph.dst, ph.size_bytes, ph.messages], axis=1).tolist()
    return {"label": ph.label, "repeat": ph.repeat, "cells": cells}


def check_good(expected: dict[str, Any], p: Pattern) -> None:
    assert (p.nprocs, p.name) == (expected["nprocs"], expected["name"])
    if "phases" in expected:
        assert [phase_view(ph) for ph in p.phases] == expected["phases"]
    else:
        assert len(p.phases) == expected["phase_count"]
        assert p.total_bytes == expected["total_bytes"]


def test_vectors_cover_every_check() -> None:
    messages = " ".join(v["error"] for v in BAD)
    for fragment in (
        "does not end with a newline", "longer than 4096", "not allowed", "empty field",
        "not an sdnmpi-replay file", "unsupported version", "want \"pattern", "want \"phase",
        "want \"SRC", "not a decimal integer", "out of range", "bad percent escape",
        "longer than 1024", "contains NUL", "not valid UTF-8", "is not after",
        "phase total", "want the pattern line", "want phase", "declares", "trailing data",
        "want the header",
    ):  # fmt: skip
        assert fragment in messages, fragment
    assert len({v["file"] for v in BAD + GOOD}) == len(BAD) + len(GOOD)


@pytest.mark.parametrize("vector", GOOD, ids=lambda v: v["file"])
def test_python_reads_good_vectors(vector: dict[str, Any]) -> None:
    check_good(vector, replay.load_replay(VECTORS / vector["file"]))


@pytest.mark.parametrize("vector", BAD, ids=lambda v: v["file"])
def test_python_rejects_bad_vectors(vector: dict[str, Any]) -> None:
    path = VECTORS / vector["file"]
    with pytest.raises(FormatError) as info:
        replay.load_replay(path)
    assert str(info.value) == f"{path}:{vector['line']}: {vector['error']}"


def test_c_unit_checks_pass(replay_tests: Path) -> None:
    proc = subprocess.run(
        [str(replay_tests), "unit"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith(", 0 failures")


def test_c_reads_good_vectors(replay_tests: Path) -> None:
    files = [VECTORS / v["file"] for v in GOOD]
    rows = c_parse(replay_tests, files)
    for vector, path in zip(GOOD, files, strict=True):
        row = rows[str(path)]
        assert row["ok"], row
        assert (row["nprocs"], row["name"]) == (vector["nprocs"], vector["name"])
        got = [
            {"label": ph["label"], "repeat": ph["repeat"], "cells": ph["cells"]}
            for ph in row["phases"]
        ]
        if "phases" in vector:
            assert got == vector["phases"]
        else:
            assert len(got) == vector["phase_count"]
            assert sum(ph["bytes"] * ph["repeat"] for ph in row["phases"]) == vector["total_bytes"]
        # the totals the C side keeps for its report agree with the cells
        for ph in row["phases"]:
            assert ph["ncells"] == len(ph["cells"])
            assert ph["bytes"] == sum(c[2] for c in ph["cells"])
            assert ph["messages"] == sum(c[3] for c in ph["cells"])


def test_c_rejects_bad_vectors(replay_tests: Path) -> None:
    files = [VECTORS / v["file"] for v in BAD]
    rows = c_parse(replay_tests, files)
    for vector, path in zip(BAD, files, strict=True):
        row = rows[str(path)]
        assert not row["ok"], vector["file"]
        assert (row["line"], row["error"]) == (vector["line"], vector["error"]), vector["file"]


def random_pattern(rng: np.random.Generator, index: int) -> Pattern:
    """A pattern with awkward texts and sizes, for the writer -> C parser check."""
    alphabet = ["a", " ", "%", "-", "é", "€", "😀", "\n", "\t", '"', "\\", "~", "\x7f"]
    nprocs = int(rng.integers(1, 9))
    phases = []
    for k in range(int(rng.integers(0, 5))):
        n = int(rng.integers(0, 3 * nprocs))
        label = "".join(rng.choice(alphabet, size=int(rng.integers(0, 12))))
        sizes = rng.integers(0, 2**40, n) >> rng.integers(0, 40, n)
        phases.append(
            Phase.from_arrays(
                f"{label}{k}",
                rng.integers(0, nprocs, n),
                rng.integers(0, nprocs, n),
                sizes,
                rng.integers(1, 2**31 - 1, n) >> rng.integers(0, 31, n),
                repeat=int(rng.integers(1, 2**31 - 1)),
            )
        )
    return Pattern(f"random {index} {''.join(rng.choice(alphabet, 5))}", nprocs, tuple(phases))


def test_c_reads_what_python_writes(replay_tests: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(20240611)
    patterns = [random_pattern(rng, i) for i in range(40)]
    files = []
    for i, p in enumerate(patterns):
        files.append(tmp_path / f"p{i}.replay")
        replay.save_replay(p, files[-1])
    rows = c_parse(replay_tests, files)
    for p, path in zip(patterns, files, strict=True):
        row = rows[str(path)]
        assert row["ok"], row
        expected = replay.replayable(p)
        assert (row["nprocs"], row["name"]) == (expected.nprocs, expected.name)
        got = [
            {"label": ph["label"], "repeat": ph["repeat"], "cells": ph["cells"]}
            for ph in row["phases"]
        ]
        assert got == [phase_view(ph) for ph in expected.phases]
        biggest = max(
            (
                (int(b) // int(m)) + int(b) % int(m)
                for ph in expected.phases
                for b, m in zip(ph.size_bytes, ph.messages, strict=True)
            ),
            default=0,
        )
        assert row["largest_message_bytes"] == biggest
