"""The report rows of exp_allreduce and exp_unisonflow, from made-up summaries (no root)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import allreduce_rows
import exp_allreduce
import exp_unisonflow

from sdnmpi import catalog
from sdnmpi.sim.calibration import Calibration

MIB = 1 << 20


def _ar_row(setting: str, size: int, default: float, ours: float, pred: float) -> dict[str, Any]:
    return {
        "nprocs": 8,
        "setting": setting,
        "protocol": "openmpi-duplex" if setting == "duplex" else "openmpi",
        "size_bytes": size,
        "measured_s": {"default": default, "push/ours": ours},
        "predicted_s": {"default": pred * 2, "push/ours": pred},
        "speedup": {"push/ours": default / ours},
        "predicted_speedup": {"push/ours": 2.0},
    }


def test_allreduce_rows_take_the_best_size_and_the_1_mib_case() -> None:
    summary = {
        "topology": "allreduce28",
        "link_scale": 0.01,
        "placements": {"8": {"hosts": ["node01"] * 8, "bound_gain": 2.0}},
        "rows": [
            _ar_row("duplex", 256 * 1024, 1.0, 0.8, 0.4),
            _ar_row("duplex", MIB, 4.0, 2.0, 1.5),
            _ar_row("default", MIB, 5.0, 3.2, 3.1),
        ],
    }
    rows = allreduce_rows.rows(summary)
    cases = [r.case for r in rows]
    assert cases == [
        "8 hosts, push/ours vs default routes, default MPI settings, best of 1 sizes: 1024 KiB",
        "8 hosts, push/ours vs default routes, default MPI settings, 1 MiB",
        "8 hosts, push/ours vs default routes, duplex MPI settings, best of 2 sizes: 1024 KiB",
        "8 hosts, push/ours vs default routes, duplex MPI settings, 1 MiB",
    ]
    best = rows[2]
    assert best.measured == pytest.approx(2.0) and best.predicted == 2.0
    assert best.paper == pytest.approx(1 / 0.59) and best.bound == 2.0
    assert best.settings["protocol"] == "openmpi-duplex"
    assert len(best.details["per_size"]) == 2
    assert "one direction at a time" in rows[0].reason
    assert "out of reach" not in best.reason  # the bound (x2.00) allows the paper's x1.69
    assert "below the prediction" not in best.reason  # measured as predicted


def test_allreduce_rows_say_when_the_bound_forbids_the_papers_gain() -> None:
    row = _ar_row("duplex", MIB, 4.0, 2.5, 1.5)
    summary = {
        "topology": "allreduce28",
        "link_scale": 0.01,
        "placements": {"16": {"hosts": ["n"] * 16, "bound_gain": 1.92}},
        "rows": [{**row, "nprocs": 16}],
    }
    (best, _) = allreduce_rows.rows(summary)
    assert best.paper == pytest.approx(1 / 0.44)
    assert "out of reach" in best.reason and "x1.92" in best.reason


def test_allreduce_rows_name_the_single_path_bound_below_the_lp_one() -> None:
    row = _ar_row("duplex", MIB, 4.0, 3.4, 1.5)
    placed = {"hosts": ["n"] * 16, "bound_gain": 1.92, "single_path_gain": 1.47}
    summary = {"topology": "allreduce28", "link_scale": 0.01, "placements": {"16": placed},
               "rows": [{**row, "nprocs": 16}]}  # fmt: skip
    (best, _) = allreduce_rows.rows(summary)
    assert best.bound == 1.92
    assert (
        "LP bound allows x1.92 over D-mod-K for this placement, one path per rank pair x1.47"
        in best.reason
    )
    assert "paper's x2.27 is out of reach by routing here" in best.reason


def test_the_placement_search_maximizes_what_one_path_per_pair_allows() -> None:
    """At 16 hosts the LP bound chose a placement where it allowed x1.92 but one path per
    rank pair x1.47 (the 2026-11-26 runs); the single-path search finds more."""
    from sdnmpi import catalog
    from sdnmpi.core.routing.model import Fabric

    topo = catalog.load_topology(exp_allreduce.TOPOLOGY)
    pat = catalog.load_pattern("allreduce:nprocs=16,bytes=1048576,library=openmpi")
    lp_chosen = (
        "node22",
        "node05",
        "node21",
        "node02",
        "node08",
        "node13",
        "node03",
        "node09",
        "node06",
        "node01",
        "node14",
        "node20",
        "node19",
        "node10",
        "node26",
        "node25",
    )
    old = exp_allreduce.gains(Fabric(topo), pat, lp_chosen)  # fmt: skip
    assert old.bound_gain == pytest.approx(1.92, abs=0.01)
    assert old.single_path_gain == pytest.approx(1.47, abs=0.01)
    new = exp_allreduce.placement(topo, 16, MIB)
    assert new.single_path_gain > old.single_path_gain + 0.3
    assert new.bound_gain >= new.single_path_gain - 1e-9


def test_rederived_allreduce_rows_predict_again_in_ranks_mode(tmp_path: Path) -> None:
    # a saved run whose predictions are stale: --rederive keeps the measurements and
    # predicts each case again (placement, protocol and calibration of the run)
    hosts = ["node01", "node08", "node11", "node12", "node19", "node20", "node25", "node26"]
    cal = Calibration(link_scale=0.01, goodput=0.956)
    summary = {
        "topology": "allreduce28",
        "link_scale": 0.01,
        "calibration": cal.to_dict(),
        "placements": {"8": {"hosts": hosts, "bound_gain": 2.0, "single_path_gain": 2.0}},
        "rows": [_ar_row("default", MIB, 5.0, 3.2, 99.0)],
    }
    (tmp_path / "allreduce.json").write_text(json.dumps(summary))
    (row,) = [r for r in exp_allreduce.rows_from_saved(tmp_path) if "best" in r.case]
    topo = catalog.load_topology("allreduce28")
    proto = cal.protocol("openmpi")
    want = {w: exp_allreduce.predict(topo, hosts, MIB, r, proto, cal)
            for w, r in (("default", "dmodk"), ("push/ours", "ours"))}  # fmt: skip
    assert row.measured == pytest.approx(5.0 / 3.2)
    assert row.predicted == pytest.approx(want["default"] / want["push/ours"])
    assert row.details["per_size"][0]["predicted_s"] == pytest.approx(want)
    assert exp_allreduce.PREDICT_MODE == "ranks"


def test_unisonflow_rows(tmp_path: Path) -> None:
    phases = {
        "bcast": {"on_intended": 0.99, "on_spine1": 0.99, "spine_bytes": {"spine1": 99}},
        "reduce": {"on_intended": 0.98, "on_spine1": 0.02, "spine_bytes": {"spine2": 98}},
    }
    ecmp = {
        "bcast": {"on_intended": 0.5, "on_spine1": 0.5, "spine_bytes": {"spine1": 50}},
        "reduce": {"on_intended": 0.7, "on_spine1": 0.3, "spine_bytes": {"spine1": 30}},
    }
    summary = {
        "size_bytes": MIB,
        "link_scale": 0.05,
        "ranks": ["a"],
        "runs": {"tagged": {"phases": phases}, "ecmp": {"phases": ecmp}},
    }
    rows = exp_unisonflow.rows(summary)
    assert [r.figure for r in rows] == [
        "Figs. 9-10 (Bcast, proposed)",
        "Figs. 9-10 (Reduce, proposed)",
        "Figs. 7-8 (ECMP)",
        "Figs. 7-8 (ECMP)",
    ]
    assert [r.measured for r in rows] == pytest.approx([99.0, 98.0, 50.0, 30.0])
    assert rows[0].predicted == 100.0 and rows[2].predicted is None
    exp_unisonflow.save(tmp_path, summary)  # what --rederive reads back
    assert exp_unisonflow.rows_from_saved(tmp_path) == rows


def _one_case(row: dict[str, Any]) -> dict[str, Any]:
    """A summary of one 8-host case on allreduce28 whose bound allows x2.00."""
    return {
        "topology": "allreduce28",
        "link_scale": 0.01,
        "placements": {"8": {"hosts": ["n"] * 8, "bound_gain": 2.0}},
        "rows": [row],
    }


def test_a_cpu_bound_allreduce_run_is_not_a_routing_result() -> None:
    busy = {"cpu_bound": 1.0, "machine_busy": 0.99, "switch_wait": 0.29, "tcp_timeouts": 4.0}
    calm = {"cpu_bound": 0.0, "machine_busy": 0.5, "switch_wait": 0.01}
    row = {**_ar_row("duplex", MIB, 4.0, 2.5, 1.5), "cpu": {"default": calm, "push/ours": busy}}
    summary = _one_case(row)
    best, _ = allreduce_rows.rows(summary)
    assert best.status == "cpu-bound" and best.network_limited is False
    assert "push/ours run CPU-bound: machine busy 99 %" in best.reason
    assert "below the prediction" in best.reason  # measured x1.60 against x2.00 predicted
    assert "(default ran slower than predicted, push/ours slower;" in best.reason
    # the gap split into its runs: default as predicted (4.0 s for 3.0), ours 2.5 s for 1.5
    assert "default +33 % against its prediction (switches waited for a core 1 %" in best.reason
    assert (
        "push/ours +67 % against its prediction (switches waited for a core 29 % of the run, "
        "4 TCP retransmission timeouts)" in best.reason
    )
    calm_summary = {**summary, "rows": [{**row, "cpu": {"default": calm, "push/ours": calm}}]}
    assert allreduce_rows.rows(calm_summary)[0].status == "ok"


def test_an_allreduce_run_whose_job_was_never_registered_fails_its_rows() -> None:
    calm = {"cpu_bound": 0.0, "machine_busy": 0.5, "switch_wait": 0.01}
    lost = {**calm, "unregistered": 1.0, "unregistered_runs": 3.0}
    retried = {**calm, "unregistered": 0.0, "unregistered_runs": 1.0}
    row = {**_ar_row("default", MIB, 6.0, 12.9, 5.9), "cpu": {"default": calm, "push/ours": lost}}
    summary = _one_case(row)
    best, _ = allreduce_rows.rows(summary)
    assert best.status == "failed"
    assert best.reason.startswith("the job did not run tagged in 3 runs")
    ok = {**summary, "rows": [{**row, "cpu": {"default": calm, "push/ours": retried}}]}
    again, _ = allreduce_rows.rows(ok)
    assert again.status == "ok" and "1 run(s) before this one did not run tagged" in again.reason


def test_run_case_retrying_runs_again_while_the_job_is_unregistered(monkeypatch) -> None:
    answers = iter([{"unregistered": 1.0}, {"unregistered": 1.0}, {"unregistered": 0.0}])
    calls = []

    def fake_run_case(*args: Any) -> tuple[dict[int, float], dict[str, float]]:
        calls.append(args)
        return {MIB: 1.0}, next(answers)

    monkeypatch.setattr(exp_allreduce, "run_case", fake_run_case)
    monkeypatch.setattr(exp_allreduce, "log", lambda _m: None)
    case = exp_allreduce.Case(8, ("n",) * 8, "default", "push/ours")
    times, figures = exp_allreduce.run_case_retrying(Path("."), None, case, ("1M", "1M"), 1, 0.01)  # type: ignore[arg-type]
    assert len(calls) == 3 and times == {MIB: 1.0}
    assert figures["unregistered"] == 0.0 and figures["unregistered_runs"] == 2.0


def test_a_stalled_size_is_not_the_best_and_the_row_says_so() -> None:
    """8 hosts, default settings, 2026-11-27: the default run of 2 MiB averaged 20.6 s
    (predicted 11.1 s, 4 MiB took 19.7 s): one stalled call, taken as the best speedup,
    would have claimed x3.2.  With each run's slowest call, that size is left out."""
    clean = _ar_row("default", MIB, 5.0, 3.3, 3.1)
    stalled = _ar_row("default", 2 * MIB, 20.6, 6.5, 6.4)
    clean["cpu"] = {"default": {f"step_max_s@{MIB}": 5.4}, "push/ours": {}}
    stalled["cpu"] = {"default": {f"step_max_s@{2 * MIB}": 58.1}, "push/ours": {}}
    best, one_mib = allreduce_rows.rows(_one_case_rows([clean, stalled]))
    assert best.measured == pytest.approx(5.0 / 3.3)  # not 20.6 / 6.5
    assert "2048 KiB, default: one call took 58.1 s against a mean of 20.6 s" in best.case
    assert "stalled" not in one_mib.case
    # every size stalled: the best is taken among them, and its row says so
    (only, _) = allreduce_rows.rows(_one_case_rows([{**stalled, "size_bytes": MIB}]))
    assert only.measured == pytest.approx(20.6 / 6.5)
    assert "1024 KiB stalled: default: one call took" not in only.reason  # no figure for MIB
    alone = {**stalled, "cpu": {"default": {f"step_max_s@{MIB}": 58.1}, "push/ours": {}}}
    (only, _) = allreduce_rows.rows(_one_case_rows([{**alone, "size_bytes": MIB}]))
    assert "1024 KiB stalled: default: one call took 58.1 s" in only.reason
    assert "above the prediction (default ran slower than predicted" in only.reason


def _one_case_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {**_one_case(rows[0]), "rows": rows}


def test_a_run_without_step_figures_stalled_where_a_larger_size_ran_faster() -> None:
    """The run of 2026-11-27 had no step figures: its 2 MiB default run (20.6 s a call)
    was slower than its 4 MiB one (19.7 s), which no Allreduce does without a stall."""
    rows = [
        _ar_row("default", MIB, 5.0, 3.4, 3.1),
        _ar_row("default", 2 * MIB, 20.6, 6.5, 6.4),
        _ar_row("default", 4 * MIB, 19.7, 12.6, 12.0),
    ]
    best, _ = allreduce_rows.rows(_one_case_rows(rows))
    assert best.measured == pytest.approx(19.7 / 12.6)
    assert "2048 KiB, default: 20.6 s a call, more than at 4096 KiB (19.7 s)" in best.case
