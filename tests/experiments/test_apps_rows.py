"""exp_apps' pure parts: figures from outputs and traces, placement, predictions, rows (no root)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "apps"))

import appout
import apps_report
import exp_allreduce
import exp_apps

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import route
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.manager.model import RoutePair
from sdnmpi.sim.calibration import Calibration

ROOT = Path(__file__).resolve().parents[2]
TOPO = leaf_spine(2, 4, 2, host_bps=1e9, uplink_bps=1e9)
HOSTS = tuple(h.name for h in TOPO.hosts)


def test_lammps_run_takes_comm_and_kspace_as_communication() -> None:
    text = (ROOT / "scripts/apps/testdata/lammps-lj-20x20x10-4ranks.out").read_text()
    fig = apps_report.lammps_run(appout.parse_lammps(text))
    # Loop time of 5.03739 s; Comm 64.29 %total, no Kspace in the LJ run.
    assert fig["loop_s"] == pytest.approx(5.03739)
    assert fig["comm_share"] == pytest.approx(0.6429)
    assert fig["other_s"] == pytest.approx(5.03739 * (1 - 0.6429))
    assert fig["steps"] == 300


def test_lammps_run_without_a_loop_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="did not finish"):
        apps_report.lammps_run(appout.parse_lammps("LAMMPS (29 Sep 2021)\nERROR: lost atoms\n"))


def _trace(tmp: Path, rank: int, t0: float, calls: list[tuple[float, float]]) -> None:
    header = {"schema": "sdnmpi-trace/1", "rank": rank, "nprocs": 2, "t0_wall": t0}
    events = [{"call": "MPI_Send", "kind": "send", "t_start": a, "t_end": b} for a, b in calls]
    lines = [json.dumps(header)] + [json.dumps(e) for e in events]
    (tmp / f"sdnmpi-trace-{rank}.jsonl").write_text("\n".join(lines) + "\n")


def test_mpi_share_is_time_in_calls_over_the_span_mean_over_ranks(tmp_path: Path) -> None:
    # rank 0: span 0..10 s, in MPI 0-1 and 6-10: 5 of 10 s; rank 1: span 0..4, in MPI 1-4: 3/4.
    _trace(tmp_path, 0, 100.0, [(0.0, 1.0), (6.0, 10.0)])
    _trace(tmp_path, 1, 100.0, [(0.0, 0.0), (1.0, 4.0)])
    assert apps_report.mpi_share(tmp_path) == pytest.approx((0.5 + 0.75) / 2)
    # window 105..110 (wall clock): rank 0 is in MPI 106-110 (4 of 5 s), rank 1 never.
    assert apps_report.mpi_share(tmp_path, (105.0, 110.0)) == pytest.approx((0.8 + 0.0) / 2)


def test_mpi_share_of_an_empty_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no sdnmpi-trace"):
        apps_report.mpi_share(tmp_path)


def test_section_seconds_skips_sections_that_did_not_end() -> None:
    times = {"sections": {"PTRANS": [10.0, 42.5], "MPIFFT": [50.0, None]}}
    assert apps_report.section_seconds(times) == {"PTRANS": 32.5}


def _pairs_pattern() -> Pattern:
    """Ranks 0-3 send 1 MB each to ranks 4-7 (one phase)."""
    cells = [(r, r + 4, 1_000_000) for r in range(4)]
    return Pattern("pairs", 8, (Phase.from_cells("p", cells),))


def test_search_placement_keeps_the_best_gain_and_is_deterministic() -> None:
    pat = _pairs_pattern()
    hosts, gain = apps_report.search_placement(TOPO, pat, trials=40)
    again = apps_report.search_placement(TOPO, pat, trials=40)
    assert (hosts, gain) == again
    assert sorted(hosts) == sorted(HOSTS)  # one rank per host
    # the single-path bound is maximized (the LP bound's gain is returned)
    chosen = exp_allreduce.gains(Fabric(TOPO), pat, hosts)
    block = exp_allreduce.gains(Fabric(TOPO), pat, HOSTS)
    assert chosen.single_path_gain >= block.single_path_gain
    assert chosen.single_path_gain > 1.0  # a contended placement was found
    assert gain == pytest.approx(chosen.bound_gain)


def test_installed_uses_the_managers_paths_and_dmodk_elsewhere() -> None:
    fabric = Fabric(TOPO)
    demands = Demands.from_pattern(fabric, _pairs_pattern(), Placement(HOSTS))
    # rank 0 on h1 (leaf1) sends to rank 4 on h5 (leaf3); the manager sends it via
    # whichever spine D-mod-K does not use.
    dmodk = route("dmodk", fabric, demands)
    assert dmodk.node_path(fabric, 0)[0] == "h1" and dmodk.node_path(fabric, 0)[-1] == "h5"
    other = "spine1" if dmodk.node_path(fabric, 0)[2] == "spine2" else "spine2"
    path = ("h1", "leaf1", other, "leaf3", "h5")
    routing = apps_report.installed(fabric, demands, [RoutePair("h1", "h5", path, 1e6)])
    assert routing.node_path(fabric, 0) == path
    for i in range(1, len(demands)):
        assert routing.node_path(fabric, i) == dmodk.node_path(fabric, i)


def test_predict_on_a_contended_placement() -> None:
    pat = _pairs_pattern()
    hosts, gain = apps_report.search_placement(TOPO, pat, trials=40)
    cal = Calibration.nominal(0.01)
    pred = apps_report.predict(cal, TOPO, pat, hosts, cal.protocol("openmpi-duplex"))
    # 1 MB at 10 Mbit/s is 0.8 s on an uncontended path: ours gets it, D-mod-K is slower.
    assert pred["ours"] == pytest.approx(0.8, rel=0.05)
    assert pred["dmodk"] / pred["ours"] == pytest.approx(gain, rel=0.05)
    assert pred["ecmp_range"][0] <= pred["ecmp"] <= pred["ecmp_range"][1]
    assert pred["bound_gain"]["dmodk"] == pytest.approx(gain)
    empty = Pattern("none", 8, (Phase.from_cells("p", [(0, 1, 0)]),))
    assert apps_report.predict(cal, TOPO, pat, hosts, cal.protocol("openmpi"), empty)["ours"] == 0


def _app(**over: Any) -> dict[str, Any]:
    unit = {
        "measured_s": {"dmodk": [30.0, 26.0], "ours": [20.0], "ecmp": [24.0]},
        "predicted_comm_s": {"dmodk": 25.0, "ours": 15.0, "ecmp": 21.0},
        "other_s": 2.0,
        "bound_gain": {"dmodk": 1.8, "ecmp": 1.5},
        "predicted_ecmp_range_s": [15.0, 32.0],
        "comm_share": {"dmodk": [0.9], "ours": [0.85, 0.87]},
        "cpu": {"dmodk": [{"machine_busy": 0.8, "switch_wait": 0.1, "cpu_bound": 0.0}]},
        "known_gap": "a reason",
        "share_source": "LAMMPS's own breakdown",
    }
    app = {
        "label": "LAMMPS LJ",
        "figure": "LAMMPS in.lj",
        "case": "8 ranks",
        "settings": {"link_scale": 0.01},
        "failed": {},
        "not_run": {},
        "units": {"loop time": unit},
    }
    return {**app, **over}


def test_speedup_rows_measured_predicted_and_bound() -> None:
    rows = apps_report.app_rows(_app())
    dmodk, ecmp = rows[0], rows[1]
    assert dmodk.case == "LAMMPS LJ: ours vs dmodk, 8 ranks"
    assert dmodk.figure == "LAMMPS in.lj (loop time)"
    assert dmodk.measured == pytest.approx(28.0 / 20.0)  # mean of the two D-mod-K runs
    assert dmodk.predicted == pytest.approx((25.0 + 2.0) / (15.0 + 2.0))
    assert dmodk.bound == 1.8 and dmodk.status == "ok" and dmodk.network_limited
    assert "x1.80" in dmodk.reason and "a reason" not in dmodk.reason  # within 15 %
    assert ecmp.measured == pytest.approx(24.0 / 20.0)
    assert ecmp.predicted == pytest.approx(23.0 / 17.0)
    assert "a reason" not in ecmp.reason  # 1.20 vs 1.35: 12.7 % apart
    assert "ECMP predicted over 16 hash draws" not in dmodk.reason
    assert dmodk.details["measured_s"] == {"dmodk": [30.0, 26.0], "ours": [20.0]}


def test_a_gap_beyond_the_tolerance_names_the_known_effect() -> None:
    app = _app()
    app["units"]["loop time"]["predicted_comm_s"]["dmodk"] = 40.0
    (row, *_) = apps_report.app_rows(app)
    assert row.predicted == pytest.approx(42.0 / 17.0)
    assert "a reason" in row.reason and "measured x1.40 vs predicted x2.47" in row.reason
    assert "the switches waited for a core dmodk 10 % of the run" in row.reason


def test_rows_from_saved_give_todays_reason_for_a_sections_gap(tmp_path: Path) -> None:
    fft = _app(label="HPCC", figure="HPCC", case="4 ranks")["units"]["loop time"]
    fft["predicted_comm_s"]["dmodk"] = 40.0  # 1.40 measured against 2.47: over 15 %
    app = _app(label="HPCC", figure="HPCC", case="4 ranks", units={"MPIFFT": fft})
    (tmp_path / "apps.json").write_text(json.dumps({"apps": {"hpcc": app}}))
    (row, *_) = exp_apps.rows_from_saved(tmp_path)
    assert row.figure == "HPCC (MPIFFT)"
    assert "a reason" not in row.reason  # the saved run's reason is replaced
    assert exp_apps.UNIT_GAP[("hpcc", "MPIFFT")] in row.reason
    assert row.measured == pytest.approx(28.0 / 20.0)  # the run's figures are kept


def test_share_rows_per_routing_that_measured_one() -> None:
    shares = [r for r in apps_report.app_rows(_app()) if r.metric == "comm_share_pct"]
    assert [r.case for r in shares] == [
        "LAMMPS LJ: communication share under dmodk, 8 ranks",
        "LAMMPS LJ: communication share under ours, 8 ranks",
    ]
    assert shares[0].measured == pytest.approx(90.0)
    assert shares[0].predicted == pytest.approx(100 * 25 / 27)
    assert shares[1].measured == pytest.approx(86.0)
    assert shares[0].reason == "LAMMPS's own breakdown"


def test_cpu_bound_runs_give_cpu_bound_rows_with_the_evidence() -> None:
    app = _app()
    app["units"]["loop time"]["cpu"]["ours"] = [
        {"machine_busy": 0.99, "switch_wait": 0.35, "cpu_bound": 1.0}
    ]
    rows = apps_report.app_rows(app)
    assert rows[0].status == "cpu-bound" and rows[0].network_limited is False
    assert "machine busy 99 %, switch waited for a core 35 %" in rows[0].reason
    share = [r for r in rows if r.metric == "comm_share_pct"]
    assert share[0].status == "ok" and share[1].status == "cpu-bound"


def test_failed_skipped_and_not_run_routings() -> None:
    app = _app(failed={"ours": "srun failed (1); cleaned up: no job"})
    app["units"]["loop time"]["measured_s"]["ours"] = []
    rows = apps_report.app_rows(app)
    assert [r.status for r in rows[:2]] == ["failed", "failed"]
    assert "ours: srun failed" in rows[0].reason
    rows = apps_report.app_rows(_app(not_run={"ecmp": "quick form"}))
    assert rows[1].status == "skipped" and rows[1].reason == "quick form"
    (skipped,) = apps_report.app_rows({"label": "HPCC", "figure": "HPCC", "skipped": "no hpcc"})
    assert skipped.status == "skipped" and skipped.reason == "no hpcc"
    err = {"label": "HPCC", "figure": "HPCC", "case": "8", "settings": {}, "error": "boom"}
    (failed,) = apps_report.app_rows(err)
    assert failed.status == "failed" and failed.reason == "boom"


def test_a_run_failing_after_good_ones_keeps_their_figure_and_says_so() -> None:
    """LAMMPS, 2026-11-26: the second ECMP run crashed at start (srun exited 143) after
    the first had measured; the ECMP row keeps the first run's figure, named."""
    app = _app(
        failed={"ecmp": "srun exited 143: Force Terminated; cleaned up: no job"},
        retried={"dmodk": ["srun exited 143: boom; cleaned up: no job"]},
    )
    dmodk, ecmp = apps_report.app_rows(app)[:2]
    assert ecmp.status == "ok" and ecmp.measured == pytest.approx(24.0 / 20.0)
    assert "ecmp: a run after the first 1 failed (srun exited 143: Force" in ecmp.reason
    assert "the figure is of those 1" in ecmp.reason
    assert "dmodk: a run failed at start and ran once more (srun exited 143: boom" in dmodk.reason
    assert "failed" not in dmodk.reason.replace("failed at start", "")


def test_rows_of_a_summary_cover_every_application() -> None:
    summary = {"apps": {"lammps": _app(), "hpcc": {"label": "H", "figure": "H", "skipped": "x"}}}
    rows = apps_report.rows(summary)
    assert len(rows) == 2 + 2 + 1
    assert rows[-1].status == "skipped"


def test_an_ours_run_the_manager_did_not_route_is_named() -> None:
    app = _app()
    app["units"]["loop time"]["routes"] = {
        "ours": [{"flow_mods": 40}, {"flow_mods": 0, "state": "JOB_STATE_FINISHED",
                                     "detail": "controller refused"}]
    }  # fmt: skip
    (row, *_) = apps_report.app_rows(app)
    assert "ours run 2 ran on default routes (JOB_STATE_FINISHED: controller refused)" in row.reason
    assert "ours run 1" not in row.reason


def test_failure_lines_of_a_hung_and_a_crashed_job() -> None:
    hung = subprocess.TimeoutExpired(["srun", "lmp"], 600)
    assert exp_apps.failure(hung) == "hung: no end after 600 s, cancelled"
    crash = RuntimeError(
        "srun -J x -N8 lmp -in in.lj failed (143):\nstep 3 killed\nrank 3: exit 3\n"
    )
    assert exp_apps.failure(crash) == "srun exited 143: rank 3: exit 3"
    assert exp_apps.failure(RuntimeError("fabric gone")) == "fabric gone"


def _run(t: float, share: float | None, other: float | None, wait: float = 0.1) -> Any:
    cpu = {"u": {"machine_busy": 0.5, "switch_wait": wait, "cpu_bound": 0.0}}
    return apps_report.Run(
        t + 1, cpu, {"u": t}, {} if share is None else {"u": share},
        {} if other is None else {"u": other},
    )  # fmt: skip


_PRED = {"dmodk": 9.0, "ours": 5.0, "ecmp": 7.0, "ecmp_range": [5.0, 9.0],
         "bound_gain": {"dmodk": 1.8, "ecmp": 1.4}}  # fmt: skip


def test_unit_summary_with_the_applications_own_shares() -> None:
    runs = {"dmodk": [_run(10, 0.9, 1.0), _run(12, 0.9, 1.2)], "ours": [_run(6, 0.8, 1.1)],
            "ecmp": []}  # fmt: skip
    unit = apps_report.unit_summary(runs, _run(7, 0.85, 1.0), "u", _PRED)
    assert unit["measured_s"] == {"dmodk": [10, 12], "ours": [6], "ecmp": []}
    assert unit["other_s"] == pytest.approx(1.1)  # mean over every run's own figure
    assert unit["comm_share"] == {"dmodk": [0.9, 0.9], "ours": [0.8], "ecmp": []}
    assert unit["predicted_comm_s"] == {"dmodk": 9.0, "ours": 5.0, "ecmp": 7.0}
    assert unit["wall_s"]["dmodk"] == [11, 13]


def test_unit_summary_with_only_the_profile_runs_share() -> None:
    runs = {"dmodk": [_run(10, None, None)], "ours": [_run(6, None, None)], "ecmp": []}
    prof = _run(8, 0.75, 2.0, wait=0.3)
    unit = apps_report.unit_summary(runs, prof, "u", _PRED, profile_comm_s=6.0)
    assert unit["other_s"] == 2.0  # the profile run's, no other run has one
    assert unit["comm_share"] == {"profile": [0.75]}
    assert unit["predicted_comm_s"]["profile"] == 6.0
    app = {**_app(), "units": {"PTRANS": unit}}
    (share,) = [r for r in apps_report.app_rows(app) if r.metric == "comm_share_pct"]
    assert share.case == "LAMMPS LJ: communication share in the profile run (D-mod-K, " \
        "block placement), 8 ranks"  # fmt: skip
    assert share.measured == pytest.approx(75.0)
    assert share.predicted == pytest.approx(100 * 6 / 8)
    assert share.details["cpu"] == {"profile": [prof.cpu["u"]]}


def test_ecmp_rows_give_the_range_of_the_hash_draws() -> None:
    (_, ecmp, *_) = apps_report.app_rows(_app())
    # (15 + 2) / (15 + 2) = 1.00 and (32 + 2) / 17 = 2.00
    assert "ECMP predicted over 16 hash draws: x1.00 to x2.00 (the mean shown)" in ecmp.reason


def _fake_job(monkeypatch: pytest.MonkeyPatch, outcomes: list[Any], clock: list[float]) -> None:
    """exp_apps.run_job around stand-ins: srun's outcomes in turn, ``clock`` the
    monotonic times it reads (two per attempt)."""
    import contextlib

    def fake_srun(fabric: str, args: list[str], timeout_s: float) -> tuple[float, str, str]:
        out = outcomes.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out, "", ""

    run = apps_report.Run(12.0, {}, {"loop time": 10.0}, {}, {})
    monkeypatch.setattr(exp_apps, "srun", fake_srun)
    monkeypatch.setattr(exp_apps, "prepare", lambda app, wd: None)
    monkeypatch.setattr(exp_apps, "srun_args", lambda *a: [])
    monkeypatch.setattr(exp_apps, "cleanup", lambda fabric, job, st: "no job left")
    monkeypatch.setattr(exp_apps, "CpuTimeline", lambda fabric: contextlib.nullcontext())
    monkeypatch.setattr(exp_apps, "hpcc_watch", lambda app, wd: contextlib.nullcontext())
    monkeypatch.setattr(exp_apps, "results", lambda app, wd, cpu, trace: run)
    monkeypatch.setattr(exp_apps, "time", types.SimpleNamespace(monotonic=lambda: clock.pop(0)))


def test_a_job_failing_at_start_runs_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    lammps = exp_apps.apps_for(True)["lammps"]
    crash = RuntimeError("srun failed (143):\nForce Terminated")
    _fake_job(monkeypatch, [crash, 80.0], [0.0, 31.0, 40.0])
    run = exp_apps.run_job("f", lammps, ("h1",), Path("/nonexistent"), None, "ecmp")  # type: ignore[arg-type]
    assert run.wall_s == 80.0
    assert run.retried == "srun exited 143: Force Terminated; cleaned up: no job left"


def test_a_job_failing_late_or_twice_is_not_run_again(monkeypatch: pytest.MonkeyPatch) -> None:
    lammps = exp_apps.apps_for(True)["lammps"]
    crash = RuntimeError("srun failed (143):\nForce Terminated")
    _fake_job(monkeypatch, [crash, 80.0], [0.0, 300.0])  # failed after 5 minutes
    with pytest.raises(RuntimeError, match="srun exited 143"):
        exp_apps.run_job("f", lammps, ("h1",), Path("/x"), None, "ecmp")  # type: ignore[arg-type]
    _fake_job(monkeypatch, [crash, crash], [0.0, 10.0, 20.0, 30.0])
    with pytest.raises(RuntimeError, match="srun exited 143"):
        exp_apps.run_job("f", lammps, ("h1",), Path("/x"), None, "ecmp")  # type: ignore[arg-type]
    hung = subprocess.TimeoutExpired("srun", 5.0)
    _fake_job(monkeypatch, [hung, 80.0], [0.0, 5.0])
    with pytest.raises(RuntimeError, match="hung"):
        exp_apps.run_job("f", lammps, ("h1",), Path("/x"), None, "ecmp")  # type: ignore[arg-type]


def test_unit_summary_predicts_each_run_from_its_own_trace() -> None:
    runs = {"dmodk": [_run(10, 0.9, 1.0)], "ours": [_run(6, 0.8, 1.0), _run(8, 0.8, 1.0)],
            "ecmp": [_run(9, 0.9, 1.0)]}  # fmt: skip
    own = {
        "dmodk": [{**_PRED, "dmodk": 8.0}],
        "ours": [{**_PRED, "ours": 5.5}, {**_PRED, "ours": 6.5}],
        "ecmp": [{**_PRED, "ecmp": 7.5, "ecmp_range": [6.0, 8.0]}],
    }
    unit = apps_report.unit_summary(runs, _run(7, 0.85, 1.0), "u", _PRED, 6.0, own)
    # each routing: the mean over its runs' own traffic, not the profile's pattern
    assert unit["predicted_comm_s"] == {"dmodk": 8.0, "ours": 6.0, "ecmp": 7.5, "profile": 6.0}
    assert unit["predicted_profile_pattern_s"] == {"dmodk": 9.0, "ours": 5.0, "ecmp": 7.0}
    assert unit["predicted_own_s"]["ours"] == [5.5, 6.5]
    assert unit["predicted_ecmp_range_s"] == [6.0, 8.0]
    # traced runs give their own shares beside the profile run's
    assert unit["comm_share"]["ours"] == [0.8, 0.8]
    assert unit["comm_share"]["profile"] == [0.85]
    assert unit["share_source"].endswith("(libsdnmpi trace of the run)")


def test_unit_summary_keeps_the_profile_pattern_when_a_routing_has_no_trace() -> None:
    runs = {"dmodk": [_run(10, 0.9, 1.0)], "ours": [_run(6, 0.8, 1.0)], "ecmp": []}
    own = {"dmodk": [{**_PRED, "dmodk": 8.0}], "ours": [{**_PRED, "ours": 5.5}], "ecmp": []}
    unit = apps_report.unit_summary(runs, _run(7, 0.85, 1.0), "u", _PRED, 6.0, own)
    assert unit["predicted_comm_s"]["dmodk"] == 9.0  # mixing sources would skew the ratio
    assert "predicted_own_s" not in unit


def test_summarize_predicts_a_traced_application_from_each_runs_traffic(tmp_path: Path) -> None:
    """b_eff's rings differ from run to run: a run's prediction comes from its own trace,
    routed (ours) as the manager routed the profile's pattern."""
    import logging

    from sdnmpi.report.reproduce_api import Context

    profile = _pairs_pattern()
    # the run's own traffic: twice the bytes, between other ranks than the profile's
    other = Pattern("other", 8, (Phase.from_cells("p", [(r, 7 - r, 2_000_000) for r in range(4)]),))
    app = exp_apps.App("hpcc", "HPCC", "HPCC", "hpcc", "hpcc", 8, 1.0, 1.0, 1, (), traced=True)
    cal = Calibration.nominal(0.01)
    ctx = Context(False, tmp_path, cal, logging.getLogger("t"), None)
    hosts, gain = apps_report.search_placement(TOPO, profile, trials=40)
    rec = exp_apps.Recorder(app)
    for r in apps_report.ROUTINGS:
        run = _run(5, 0.9, 0.5)
        run.parts = {"u": other}
        rec.runs[r].append(run)
    prof = exp_apps.Profile(_run(4, 0.9, 0.5), profile, {"u": profile}, hosts, gain)
    unit = exp_apps.summarize(app, ctx, rec, prof, 0.01, None)["units"]["u"]
    proto = cal.protocol("openmpi-duplex")
    want = apps_report.predict(cal, TOPO, profile, hosts, proto, other)
    from_profile = apps_report.predict(cal, TOPO, profile, hosts, proto, profile)
    for r in apps_report.ROUTINGS:
        assert unit["predicted_comm_s"][r] == pytest.approx(want[r])
        assert unit["predicted_profile_pattern_s"][r] == pytest.approx(from_profile[r])
    assert unit["predicted_comm_s"]["ours"] > 1.5 * from_profile["ours"]  # twice the bytes
