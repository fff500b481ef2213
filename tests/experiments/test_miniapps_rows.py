"""exp_miniapps' pure parts: the job's command line, the sizing of the patterns, the rows
(no root, no fabric)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import exp_miniapps as mini

from sdnmpi import catalog
from sdnmpi.core.routing.model import Fabric
from sdnmpi.sim.calibration import Calibration


def test_the_job_places_eight_ranks_per_node_and_only_ours_names_the_pattern() -> None:
    f = Path("/tmp/x.replay")
    ours = mini.srun_argv("cg:nprocs=128", 128, 8, f, "ours", 2)
    dmodk = mini.srun_argv("cg:nprocs=128", 128, 8, f, "dmodk", 2)
    assert "--comm-pattern=cg:nprocs=128" in ours
    assert not any(a.startswith("--comm-pattern") for a in dmodk)
    assert ours[:4] == ["srun", "-N16", "-n128", "--ntasks-per-node=8"]
    assert ours[-1] == str(f) and "--no-barrier" in ours
    assert ours[ours.index("--iters") + 1] == "2"


def test_both_ways_get_the_same_mpi_settings() -> None:
    env = mini.rank_env()
    assert env["OMPI_MCA_btl_tcp_eager_limit"] == "4194304"
    assert "--poll-us" in mini.srun_argv("x", 4, 2, Path("/f"), "dmodk", 1)


@pytest.mark.parametrize("app", mini.APPS, ids=lambda a: a.name)
def test_each_app_fits_milk_and_runs_tens_of_seconds_at_10_mbit(app: mini.App) -> None:
    """The sizing the module's docstring claims: 10-60 s per pass under D-mod-K at
    10 Mbit/s (predicted), and a job that fits milk's 20 nodes."""
    rpn = mini.RANKS_PER_NODE
    pattern = catalog.load_pattern(app.pattern_spec(rpn))
    assert pattern.nprocs <= 20 * rpn and mini.nodes_for(pattern.nprocs, rpn) <= 20
    topo = catalog.load_topology(mini.TOPOLOGY)
    fabric = Fabric(topo)
    hosts = [topo.hosts[r // rpn].name for r in range(pattern.nprocs)]
    demands = mini.demands_for(fabric, pattern, hosts)
    seconds = mini.predict(fabric, demands, "dmodk", Calibration.nominal(0.01))
    assert 10 <= seconds <= 60, f"{app.spec}: {seconds:.1f} s"


def _result(app: str, dmodk: list[float], ours: list[float], busy: float = 0.5) -> dict[str, Any]:
    cpu = {"machine_busy": busy, "switch_wait": 0.3 if busy > 0.9 else 0.01, "wall_s": 10.0}
    return {
        "app": app,
        "spec": "cg:nprocs=128",
        "nprocs": 128,
        "times_s": {"dmodk": dmodk, "ours": ours},
        "cpu": {
            "dmodk": [{**cpu, "cpu_bound": float(busy > 0.9)}] * len(dmodk),
            "ours": [{**cpu, "cpu_bound": 0.0}] * len(ours),
        },
        "routes": [{"routed": True, "flow_mods": 10}],
        "hosts": ["milk01"] * 128,
        "predicted_s": {"dmodk": 60.0, "ours": 40.0},
        "bound_gain": 1.5,
    }


def _summary(*results: dict[str, Any], rpn: int = 8) -> dict[str, Any]:
    return {"protocol": "openmpi-duplex", "link_scale": 0.01, "ranks_per_node": rpn,
            "results": list(results)}  # fmt: skip


def test_rows_take_the_median_of_the_reps_and_say_what_the_bound_allows() -> None:
    (row,) = mini.rows(_summary(_result("CG", [30.0, 33.0, 90.0], [20.0, 22.0, 21.0])))
    assert row.measured == pytest.approx(33.0 / 21.0)
    assert row.predicted == pytest.approx(1.5)
    assert row.bound == 1.5 and row.status == "ok" and row.network_limited
    assert row.paper == 1.29 and row.figure == "Fig. 4 (CG)"
    assert "LP bound allows x1.50" in row.reason and "out of reach" not in row.reason


def test_a_paper_value_above_the_bound_is_called_out_of_reach() -> None:
    (row,) = mini.rows(_summary(_result("SpMV", [30.0], [25.0])))
    assert "paper's x2.56 is out of reach" in row.reason


def test_cpu_bound_and_failed_runs_are_not_routing_results() -> None:
    busy = _result("Butterfly", [30.0], [20.0], busy=0.99)
    failed = {"app": "FT", "spec": "ft:nprocs=128", "error": "srun failed (1): boom\nmore"}
    row_busy, row_failed = mini.rows(_summary(busy, failed))
    assert row_busy.status == "cpu-bound" and not row_busy.network_limited
    assert "CPU-bound: machine busy 99 %" in row_busy.reason
    assert row_failed.status == "failed" and row_failed.measured is None
    assert row_failed.reason == "srun failed (1): boom"


def test_rows_name_the_single_path_bound_and_ours_in_the_model() -> None:
    res = {**_result("SpMV", [30.0], [25.0]), "single_path_gain": 1.192, "ours_gain": 1.186}
    (row,) = mini.rows(_summary(res))
    assert "LP bound allows x1.50 over D-mod-K for this placement, one path per rank pair " \
        "x1.19 (ours x1.19, nominal rates)" in row.reason  # fmt: skip


def test_rows_from_saved_add_the_single_path_bound(tmp_path: Path) -> None:
    """A summary saved before the single-path bound was recorded gets it from its pattern
    and hosts: ours reaches it for CG on 16 milk hosts, 2 ranks each."""
    hosts = [f"milk{i:02d}" for i in range(1, 17) for _ in range(2)]
    res = {**_result("CG", [30.0], [25.0]), "spec": "cg:nprocs=32,klass=A,niter=1",
           "hosts": hosts, "nprocs": 32}  # fmt: skip
    (tmp_path / "miniapps.json").write_text(json.dumps(_summary(res)))
    (row,) = mini.rows_from_saved(tmp_path)
    got = re.search(r"one path per rank pair x([\d.]+) \(ours x([\d.]+)", row.reason)
    assert got is not None, row.reason
    single, ours = float(got[1]), float(got[2])
    assert 1.0 < ours <= single + 0.005


def test_tcp_timeouts_are_named_per_run() -> None:
    res = _result("SpMV", [34.0, 38.0], [33.0, 41.0])
    res["cpu"] = {
        w: [{**c, "tcp_timeouts": float(t)} for c, t in zip(res["cpu"][w], ts, strict=True)]
        for w, ts in (("dmodk", (0, 3)), ("ours", (1, 7)))
    }
    (row,) = mini.rows(_summary(res))
    assert "TCP retransmission timeouts per run (the model has no loss): dmodk [0, 3], " \
        "ours [1, 7]" in row.reason  # fmt: skip
    (quiet,) = mini.rows(_summary(_result("SpMV", [34.0], [33.0])))
    assert "TCP" not in quiet.reason


def test_fewer_ranks_than_the_seed_say_why() -> None:
    (row,) = mini.rows(_summary(_result("CG", [30.0], [20.0]), rpn=2))
    assert "128 ranks (2 per node), not the seed's 160" in row.reason
    assert mini.APPS[0].pattern_spec(2) == "cg:nprocs=32,klass=B,niter=1"
    assert mini.APPS[5].pattern_spec(8) == "spmv:nprocs=160,iterations=10"


def test_a_failed_run_is_retried_once_and_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def flaky(
        name: str, argv: list[str], timeout_s: float
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        calls.append(name)
        if len(calls) == 1:
            raise RuntimeError("srun failed (143): connect() failed\nmore")
        return {"total_s": 1.0}, {"cpu_bound": 0.0}

    monkeypatch.setattr(mini, "run_job", flaky)
    monkeypatch.setattr(mini, "cancel_all", lambda name: None)
    retries: list[str] = []
    doc, _ = mini.run_retrying("f", [], 10.0, retries)
    assert doc == {"total_s": 1.0} and retries == ["srun failed (143): connect() failed"]
    monkeypatch.setattr(mini, "run_job", lambda *a: (_ for _ in ()).throw(RuntimeError("x")))
    retries = []
    with pytest.raises(RuntimeError):  # every attempt failed: the app's row fails
        mini.run_retrying("f", [], 10.0, retries)
    assert retries == ["x"] * (mini.ATTEMPTS - 1)
