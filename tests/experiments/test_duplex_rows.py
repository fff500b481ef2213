"""exp_duplex's rows from a saved run (``reproduce.py --only duplex --rederive``): the
protocol and prediction of each case come from this checkout's model and the run's
calibration, whatever the saved summary said (no root, no fabric)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import exp_duplex

from sdnmpi.sim.calibration import Calibration

CAL = Calibration(link_scale=0.01, goodput=0.956, eager_limits={"openmpi": 65472})


def _case(mpi: str, setting: str, size: int, ratio: float | None) -> dict[str, Any]:
    case: dict[str, Any] = {"mpi": mpi, "setting": setting, "size": size,
                            "protocol": "stale", "predicted": 9.9}  # fmt: skip
    if ratio is None:
        case["error"] = "`ip` still runs after 120.0 s: stopped"
    else:
        case |= {"bw_Bps": 1.19e6, "bibw_Bps": 1.19e6 * ratio, "ratio": ratio}
    return case


CASES = [
    _case("openmpi", "default", 1 << 20, 1.01),
    _case("mpich", "default", 1 << 20, 1.36),
    _case("mpich", "duplex", 256 * 1024, None),
]


def _by_case(rows: list[Any]) -> dict[str, Any]:
    return {r.case.split(",")[0] + "," + r.case.split(",")[1]: r for r in rows}


@pytest.mark.parametrize("form", ["list", "summary"])
def test_rederived_rows_use_the_current_model(tmp_path: Path, form: str) -> None:
    out = tmp_path / "exp_duplex"
    out.mkdir()
    if form == "list":  # saved before 2026-11-27: the calibration beside the report
        CAL.save(tmp_path / "calibration.json")
        saved: Any = CASES
    else:
        saved = {"cases": CASES, "link_scale": 0.01, "calibration": CAL.to_dict()}
    (out / "duplex.json").write_text(json.dumps(saved))
    rows = _by_case(exp_duplex.rows_from_saved(out))
    ompi, mpich, failed = rows["openmpi, default settings"], rows["mpich, default settings"], \
        rows["mpich, duplex settings"]  # fmt: skip
    assert ompi.predicted == pytest.approx(1.0) and ompi.settings["protocol"].startswith("openmpi:")
    assert "one direction at a time" in ompi.reason
    # MPICH's default exchange overlaps in part: x1.39, within 15 % of the measured 1.36
    assert mpich.settings["protocol"] == "mpich"
    assert mpich.predicted == pytest.approx(1.39, abs=0.01)
    assert "overlap in part" in mpich.reason and mpich.measured == pytest.approx(1.36)
    assert failed.status == "failed" and failed.measured is None and failed.predicted > 1.5


def test_a_missing_calibration_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "exp_duplex"
    out.mkdir()
    (out / "duplex.json").write_text(json.dumps(CASES))
    with pytest.raises(Exception, match=r"calibration\.json"):
        exp_duplex.rows_from_saved(out)


def _fake_rates(monkeypatch: pytest.MonkeyPatch, rates: list[float | Exception]) -> None:
    """``_rate`` returns (or raises) ``rates`` in turn: bw, bibw, bw, bibw, ..."""
    queue = list(rates)

    def rate(name: str, program: list[str], env: list[str], flavour: str) -> tuple[float, bool]:
        r = queue.pop(0)
        if isinstance(r, Exception):
            raise r
        return r, program[1] == "bibw" and r > 2.1e6  # a fast bibw run "hung" after measuring

    monkeypatch.setattr(exp_duplex, "_rate", rate)


def test_a_case_is_the_median_of_its_pairs_of_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_rates(monkeypatch, [1.18e6, 1.59e6, 1.18e6, 2.2e6, 1.17e6, 1.68e6])
    case = exp_duplex.measure("n", "mpich", "default", 1 << 20, 3, reps=3)
    assert case["ratios"] == pytest.approx([1.59 / 1.18, 2.2 / 1.18, 1.68 / 1.17])
    assert case["ratio"] == pytest.approx(1.68 / 1.17)
    assert case["bw_Bps"] == pytest.approx(1.18e6) and case["bibw_Bps"] == pytest.approx(1.68e6)
    assert case["notes"] == ["a bibw run hung in MPI_Finalize after printing its result "
                             "(stopped after 120 s)"]  # fmt: skip
    case |= {"mpi": "mpich", "setting": "default", "size": 1 << 20, "protocol": "mpich",
             "predicted": 1.39}  # fmt: skip
    (row,) = exp_duplex.rows([case], 0.01)
    assert row.measured == pytest.approx(1.436, abs=0.001)
    assert "median of 3 pairs of runs: x1.35, x1.44, x1.86" in row.reason


def test_a_race_is_the_mean_of_its_pairs_of_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """MPICH's default exchange is a race whose outcome sticks to a run: its case's
    figure is the mean of its pairs, what the model predicts, not one kind's median."""
    _fake_rates(monkeypatch, [1.0e6, 1.18e6, 1.0e6, 1.19e6, 1.0e6, 1.65e6])
    case = exp_duplex.measure("n", "mpich", "default", 1 << 20, 12, reps=3, race=True)
    assert case["ratio"] == pytest.approx((1.18 + 1.19 + 1.65) / 3)
    case |= {"mpi": "mpich", "setting": "default", "size": 1 << 20, "protocol": "mpich",
             "predicted": 1.39, "iters": 12}  # fmt: skip
    (row,) = exp_duplex.rows([case], 0.01)
    assert "mean of 3 pairs of runs (12 timed iterations each): x1.18, x1.19, x1.65" in row.reason


def test_a_failed_pair_is_noted_and_all_failed_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_rates(monkeypatch, [RuntimeError("mpirun: exit 1"), 1.19e6, 2.1e6])
    case = exp_duplex.measure("n", "openmpi", "duplex", 1 << 20, 3, reps=2)
    assert case["ratios"] == pytest.approx([2.1 / 1.19])
    assert case["notes"] == ["a pair of runs failed: mpirun: exit 1"]
    _fake_rates(monkeypatch, [RuntimeError("first"), 1.19e6, RuntimeError("second")])
    with pytest.raises(RuntimeError, match="second"):
        exp_duplex.measure("n", "openmpi", "duplex", 1 << 20, 3, reps=2)
