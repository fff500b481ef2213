"""demo_fabric.mpirun_json's verdicts on a run's exit, stdout and stderr, with a stand-in
for ``sdnmpi emu mpirun`` (no root, no fabric)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import demo_fabric

DOC = '{"results": [{"bandwidth_MBps": 1.0}]}'


def _cli(monkeypatch: pytest.MonkeyPatch, stdout: str, stderr: str, status: int) -> None:
    """``sdnmpi emu mpirun`` replaced by a program printing these and exiting so."""
    code = f"import sys; print({stdout!r}); print({stderr!r}, file=sys.stderr); sys.exit({status})"
    monkeypatch.setattr(demo_fabric, "CLI", [sys.executable, "-c", code])


def _run(
    *, allow_untagged: bool = False, results_before_hang: bool = False
) -> tuple[dict[str, Any], str]:
    return demo_fabric.mpirun_json(
        "f", ("h1", "h2"), ["bench"], [], 30,
        allow_untagged=allow_untagged, results_before_hang=results_before_hang,
    )  # fmt: skip


def test_a_good_run_gives_its_json(monkeypatch: pytest.MonkeyPatch) -> None:
    _cli(monkeypatch, DOC, "", 0)
    doc, _ = _run()
    assert doc == {"results": [{"bandwidth_MBps": 1.0}]}


def test_a_hang_after_the_results_keeps_them_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _cli(monkeypatch, DOC, "`ip` still runs after 120 s: stopped", 124)
    with pytest.raises(RuntimeError, match="failed \\(124\\)"):
        _run()
    doc, _ = _run(results_before_hang=True)
    assert doc["stopped_after_results"] is True and doc["results"][0]["bandwidth_MBps"] == 1.0


def test_a_hang_before_the_results_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    _cli(monkeypatch, "", "`ip` still runs after 120 s: stopped", 124)
    with pytest.raises(RuntimeError, match="failed \\(124\\)"):
        _run(results_before_hang=True)
    _cli(monkeypatch, DOC, "MPI_ABORT", 1)  # another failure, even with results
    with pytest.raises(RuntimeError, match="failed \\(1\\)"):
        _run(results_before_hang=True)


def test_an_untagged_job_fails_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    line = "sdnmpi: rank 0: node agent at /x: rank 3 has no job slot; running untagged"
    _cli(monkeypatch, DOC, line, 0)
    with pytest.raises(RuntimeError, match="ran untagged"):
        _run()
    _, stderr = _run(allow_untagged=True)
    assert demo_fabric.UNTAGGED in stderr


def test_emu_down_is_tried_again_until_it_succeeds(monkeypatch, tmp_path):
    """A failed `emu down` (a resource not removed) left the fabric "already up" for the
    next experiment of that name: it is tried again, and each failure says why."""
    counter = tmp_path / "calls"
    code = (
        "import pathlib, sys; p = pathlib.Path(sys.argv[1]); n = int(p.read_text() or 0) + 1 "
        "if p.exists() else 1; p.write_text(str(n)); "
        "print('could not remove everything: veth busy', file=sys.stderr); "
        "sys.exit(0 if n >= 2 else 1)"
    )
    monkeypatch.setattr(demo_fabric, "CLI", [sys.executable, "-c", code, str(counter)])
    monkeypatch.setattr("time.sleep", lambda s: None)
    lines: list[str] = []
    monkeypatch.setattr(demo_fabric, "log", lines.append)
    demo_fabric._down("nsw-1")
    assert counter.read_text() == "2"
    assert any(
        "failed (attempt 1 of 3): could not remove everything: veth busy" in x for x in lines
    )
    assert lines[-1] == "emu down nsw-1: rc=0"
