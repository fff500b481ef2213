"""exp_netsa's pure parts: its fabrics, routes, predictions and rows (no root, no fabric)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import exp_netsa
import netsa_model as model
import netsa_rows

from sdnmpi.controller.routes import route_from_arcs, routes_from_names
from sdnmpi.core.routing import route
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.sim.calibration import Calibration

KIB = 1024


# -- fabrics ---------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 6])
def test_chain_paths_cross_k_switches(k: int) -> None:
    topo = model.chain(6)
    fabric = Fabric(topo)
    demands = Demands.all_pairs(fabric, hosts=["src", f"d{k}"])
    routing = route("minhop", fabric, demands)
    path = routing.node_path(fabric, 0)
    assert path[0] == "src" and path[-1] == f"d{k}"
    assert path[1:-1] == tuple(f"s{i}" for i in range(1, k + 1))


def test_single_switch_and_lacp_fabrics() -> None:
    single = model.single_switch()
    assert {a.dst for a in single.arcs if a.src.startswith("i")} == {"sw1"}
    lacp = model.lacp()
    netsa = model.fabric_of("netsa")
    assert len(lacp.links) == len(netsa.links) - 1  # the ToR-ToR latency link is gone
    lags = [ln.lag for ln in lacp.links if ln.dst == "spine1"]
    assert lags == ["tor1-spine1"] * 4 + ["tor2-spine1"] * 4


def test_lacp_way_uses_one_lag_member_per_host_pair_through_the_spine() -> None:
    fabric = Fabric(model.lacp())
    paths = model.default_paths(fabric, "ecmp")
    names = fabric.names
    cross = [p for (s, d), p in paths.items() if names[s] == "i1" and names[d] in ("i9", "i10")]
    for p in cross:
        nodes = [fabric.topology.arcs[a].dst for a in p]
        assert nodes == ["tor1", "spine1", "tor2", nodes[-1]]


# -- NetSA job routes --------------------------------------------------------------------------


def _allgather_job() -> tuple[Fabric, Any, dict[model.Pair, model.ArcPath]]:
    fabric = Fabric(model.fabric_of("netsa"))
    hosts = model.hosts_of("allgather")
    pattern = model.coll_pattern("allgather", 64 * KIB)
    return fabric, pattern, model.netsa_paths(fabric, model.demands_of(fabric, pattern, hosts))


def test_netsa_spreads_bandwidth_cells_evenly_over_the_uplinks_lacp_does_not() -> None:
    _, pattern, job = _allgather_job()
    hosts = model.hosts_of("allgather")
    loads = {}
    for way in ("netsa", "lacp"):
        topo = model.fabric_of(way)
        run = model.Run(way, topo, pattern, hosts, job if way == "netsa" else {})
        shares = model.lag_shares(model.uplink_bytes(*model.routed(run)), topo)
        loads[way] = max(max(v) for v in shares.values())
    assert loads["netsa"] == pytest.approx(0.25)  # four members, a quarter each
    assert loads["lacp"] > 0.3


def test_job_request_round_trips_through_the_controller_parser() -> None:
    fabric, _, job = _allgather_job()
    request = model.job_request(fabric, job)
    topo = fabric.topology
    assert any(":" in n for path in request.values() for n in path)  # parallel links named
    for key, names in request.items():
        src, dst = key.split(">")
        (parsed,) = routes_from_names(topo, {(src, dst): names})
        path = job[(fabric.names.index(src), fabric.names.index(dst))]
        assert parsed == route_from_arcs(topo, [topo.arcs[a] for a in path])


def test_way_routing_takes_job_paths_for_job_pairs_and_defaults_otherwise() -> None:
    fabric, pattern, job = _allgather_job()
    demands = model.demands_of(fabric, pattern, model.hosts_of("allgather"))
    default = model.default_paths(fabric, "netsa")
    routing = model.way_routing("netsa", fabric, demands, {})
    assert all(
        routing.path(i) == default[(int(demands.src[i]), int(demands.dst[i]))]
        for i in range(len(demands))
    )
    routing = model.way_routing("netsa", fabric, demands, job)
    first = (int(demands.src[0]), int(demands.dst[0]))
    assert routing.path(0) == job[first]


# -- predictions --------------------------------------------------------------------------------


def test_latency_grows_by_the_switch_time_and_a_frame_per_hop() -> None:
    cal = Calibration(base_latency_s=300e-6, arc_latency_s=50e-6)
    one = model.latency_s(512, 1, 1e9, cal)
    six = model.latency_s(512, 6, 1e9, cal)
    # five more links of 50 us, five more stores of a 596-byte frame at 1 Gbit/s
    assert six - one == pytest.approx(5 * 50e-6 + 5 * 596 * 8 / 1e9)
    slow = model.latency_s(512, 6, 1e7, cal) - model.latency_s(512, 1, 1e7, cal)
    assert slow == pytest.approx(5 * 50e-6 + 5 * 596 * 8 / 1e7)


def test_bandwidth_barely_depends_on_hops_for_large_windows() -> None:
    cal = Calibration(base_latency_s=300e-6, arc_latency_s=50e-6)
    rate = {k: 4 * 256 * KIB / model.window_s(256 * KIB, 4, k, 1e7, cal) for k in (1, 6)}
    assert 0.99 < rate[6] / rate[1] < 1.0
    small = {k: 64 * 64 / model.window_s(64, 64, k, 1e7, cal) for k in (1, 6)}
    assert small[6] / small[1] < 0.9  # latency-bound: hops show


def test_plan_programs() -> None:
    assert exp_netsa.window(64) == 64 and exp_netsa.window(2 << 20) == 1
    programs = exp_netsa.latency_programs([1, 512, 8192, 2 << 20])
    assert [p[p.index("--min") + 1 : p.index("--max") + 2] for p in programs] == [
        ["1", "--max", "512"],
        ["8192", "--max", str(2 << 20)],
    ]
    quick = exp_netsa.Plan.make(True)
    assert quick.hops == (1, 6) and quick.kernels == {}
    full = exp_netsa.Plan.make(False)
    assert 512 in full.latency_sizes and set(full.collectives) == {
        "allreduce",
        "allgather",
        "bcast",
    }


# -- rows ---------------------------------------------------------------------------------------


def _coll(single: dict[str, float], way: dict[str, float], **extra: Any) -> dict[str, Any]:
    def run(times: dict[str, float]) -> dict[str, Any]:
        return {"time_s": times, "cpu": {"cpu_bound": False, "evidence": "idle"},
                "uplink_tx_bytes": {"tor1:9 tx": 300, "tor1:10 tx": 100}}  # fmt: skip

    measured = {"single": run(single), "lacp": run(way), "netsa": run(way), **extra}
    sizes = list(single)
    return {
        "kind": "coll",
        "hosts": ["i1"] * 16,
        "program": "sdnmpi-bench coll",
        "measured": measured,
        "predicted": {
            "time_s": {
                "single": dict.fromkeys(sizes, 1.0),
                "lacp": dict.fromkeys(sizes, 1.5),
                "netsa": dict.fromkeys(sizes, 1.1),
            },
            "bound_pct": {s: {"lacp": 0.0, "netsa": 2.0} for s in sizes},
        },
    }


def _summary(**benchmarks: Any) -> dict[str, Any]:
    lat = {"link_scale": 1.0, "repeats": 1,
           "us": {"poll": {"1": {"512": 500.0}, "6": {"512": 900.0}},
                  "sleep": {"1": {"512": 550.0}, "6": {"512": 880.0}}}}  # fmt: skip
    bw = {"link_scale": 0.01, "windows": {"262144": 4},
          "MBps": {"1": {"262144": 1.19}, "6": {"262144": 1.18}}}  # fmt: skip
    pred = {"latency_us": {"1": {"512": 510.0}, "6": {"512": 880.0}},
            "bandwidth_MBps": {"1": {"262144": 1.19}, "6": {"262144": 1.185}}}  # fmt: skip
    return {
        "quick": True,
        "link_scale": 0.01,
        "hops": {"latency": lat, "bandwidth": bw, "predicted": pred},
        "benchmarks": benchmarks,
    }


def _by(rows: list[Any], figure: str, case_start: str = "") -> Any:
    (row,) = [r for r in rows if r.figure == figure and r.case.startswith(case_start)]
    return row


def test_rows_cover_every_registered_figure() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import reproduce

    (entry,) = [e for e in reproduce.REGISTRY if e.module == "exp_netsa"]
    rows = netsa_rows.rows(_summary())
    figures = {r.figure for r in rows}
    assert {f.figure for f in entry.figures} <= figures
    assert all(r.experiment == entry.experiment for r in rows)


def test_hop_rows_compare_six_hops_with_one() -> None:
    rows = netsa_rows.rows(_summary())
    lat = _by(rows, "Fig. 5c (6 hops, 512 B)")
    assert lat.measured == pytest.approx(80.0) and lat.predicted == pytest.approx(72.549, 1e-3)
    assert lat.paper == 49.8 and lat.network_limited is False and lat.settings["link_scale"] == 1.0
    assert "80 us more per further switch" in lat.reason and "550 us at one switch" in lat.reason
    bw = _by(rows, "Fig. 6c (6 hops, 4 KiB and up)")
    assert bw.measured == pytest.approx(1.18 / 1.19) and bw.network_limited is True
    assert "256 KiB" in bw.case


def test_collective_rows_take_the_worst_size() -> None:
    bench = _coll({"1024": 1.0, "65536": 2.0}, {"1024": 1.1, "65536": 3.0})
    rows = netsa_rows.rows(_summary(allgather=bench))
    netsa = _by(rows, "Fig. 10b (Allgather)", "16 ranks, NetSA")
    assert netsa.measured == pytest.approx(50.0) and "64 KiB" in netsa.case
    assert netsa.predicted == pytest.approx(10.0) and netsa.bound == 2.0
    assert netsa.status == "ok" and netsa.paper == 57.0 and netsa.network_limited is True
    assert "rank-dependency mode" in netsa.reason
    assert "tor1>spine1 75/25" in netsa.reason
    lacp = _by(rows, "Fig. 10b (Allgather)", "16 ranks, LACP")
    assert lacp.predicted == pytest.approx(50.0) and lacp.paper == 100.0
    # LACP's published increase is the paper's baseline: shown, not judged
    assert netsa.paper_role == "target" and netsa.meets_paper is True
    assert lacp.paper_role == "baseline" and lacp.meets_paper is None
    assert all(r.paper_role == "baseline" for r in rows if "LACP vs one switch" in r.case)
    skipped = _by(rows, "Fig. 10a (Allreduce)", "16 ranks, NetSA")
    assert skipped.status == "skipped" and "quick form" in skipped.reason


def test_collective_rows_fail_or_go_cpu_bound_with_their_run() -> None:
    bench = _coll({"1024": 1.0}, {"1024": 1.2})
    bench["measured"]["lacp"] = {"error": "mpirun failed"}
    bench["measured"]["netsa"]["cpu"] = {"cpu_bound": True, "evidence": "machine busy 99 %"}
    rows = netsa_rows.rows(_summary(bcast=bench))
    assert _by(rows, "Fig. 10c (Bcast)", "16 ranks, LACP").status == "failed"
    netsa = _by(rows, "Fig. 10c (Bcast)", "16 ranks, NetSA")
    assert netsa.status == "cpu-bound" and "machine busy 99 %" in netsa.reason
    assert netsa.network_limited is False


def test_small_collective_sizes_are_not_network_limited() -> None:
    bench = _coll({"1024": 1.0, "65536": 2.0}, {"1024": 1.5, "65536": 2.2})
    netsa = _by(netsa_rows.rows(_summary(bcast=bench)), "Fig. 10c (Bcast)", "16 ranks, NetSA")
    assert "1 KiB" in netsa.case and netsa.network_limited is False


def test_kernel_rows_and_installs() -> None:
    bench = _coll({"0": 10.0}, {"0": 13.0})
    bench["kind"] = "kernel"
    bench["measured"]["netsa"]["install"] = {"seconds": 0.2, "flow_mods": 40, "pairs": 20}
    other = _coll({"1024": 1.0}, {"1024": 1.0})
    other["measured"]["netsa"]["install"] = {"seconds": 0.4, "flow_mods": 60, "pairs": 30}
    rows = netsa_rows.rows(_summary(ft=bench, bcast=other))
    ft = _by(rows, "Fig. 11 (ft)", "ft, 16 ranks, NetSA")
    assert ft.measured == pytest.approx(30.0) and ft.metric == "time_increase_pct"
    assert ft.case == "ft, 16 ranks, NetSA vs one switch"
    for k in ("bt", "lu"):
        assert _by(rows, f"Fig. 11 ({k})", f"{k}, 16 ranks, LACP").status == "skipped"
    install = _by(rows, "Sec. V-D (rule programming)")
    assert install.measured == pytest.approx(0.3) and "40-60 flow-mods" in install.case
    assert _by(rows, "Fig. 12 (3D cylinder)").status == "skipped"


def test_failed_hop_study_gives_failed_rows() -> None:
    summary = _summary()
    summary["hops"] = {"error": "emu up failed"}
    rows = netsa_rows.rows(summary)
    assert _by(rows, "Fig. 5c (6 hops, 512 B)").status == "failed"
    assert _by(rows, "Fig. 6c (6 hops, 4 KiB and up)").reason == "emu up failed"


def test_rederived_rows_are_those_of_the_saved_summary(tmp_path: Path) -> None:
    import json

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import exp_netsa

    summary = _summary(allgather=_coll({"1024": 1.0}, {"1024": 1.2}))
    (tmp_path / "netsa.json").write_text(json.dumps(summary))
    assert exp_netsa.rows_from_saved(tmp_path) == netsa_rows.rows(summary)
