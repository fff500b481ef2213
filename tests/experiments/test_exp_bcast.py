"""exp_bcast's pure parts: where the ranks and the competing job go, the sizes a sweep
runs, its timeout, and the rows derived from saved measurements (``--rederive``: this
checkout's predictions, no root, no fabric)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import exp_bcast

from sdnmpi import catalog
from sdnmpi.sim.bcast_prediction import predict_bcasts
from sdnmpi.sim.calibration import Calibration

TOPO = catalog.load_topology(exp_bcast.TOPOLOGY)
CAL = Calibration(link_scale=0.01, goodput=0.9)


def test_ranks_spread_over_the_leaves_root_first() -> None:
    hosts, rest = exp_bcast.spread(TOPO, 8)
    leaves = [TOPO.attachment(h)[0] for h in hosts]
    assert hosts[0] == "node01" and len(set(hosts)) == 8
    assert sorted(leaves.count(leaf) for leaf in set(leaves)) == [2, 2, 2, 2]
    assert leaves == sorted(leaves)  # grouped by leaf, in rank order
    assert set(hosts).isdisjoint(rest) and len(rest) == 20
    hosts20, rest20 = exp_bcast.spread(TOPO, 20)
    assert len(hosts20) == 20 and len(rest20) == 8


def test_competing_streams_leave_every_leaf_for_the_next() -> None:
    _, rest = exp_bcast.spread(TOPO, 8)
    pairs = exp_bcast.competing_pairs(TOPO, rest)
    src_leaves = [TOPO.attachment(s)[0] for s, _ in pairs]
    dst_leaves = [TOPO.attachment(d)[0] for _, d in pairs]
    assert sorted(src_leaves) == sorted(set(src_leaves)) and len(pairs) == 4
    assert all(s != d for s, d in zip(src_leaves, dst_leaves, strict=True))
    assert {h for p in pairs for h in p} <= set(rest)


def test_doubling_sizes_end_at_the_maximum() -> None:
    assert exp_bcast.doubling((4096, 16384)) == [4096, 8192, 16384]
    assert exp_bcast.doubling((3000, 10000)) == [3000, 6000, 10000]
    assert len(exp_bcast.doubling(exp_bcast.SIZES)) == 13


def test_sweep_timeout_covers_the_predicted_time() -> None:
    hosts, _ = exp_bcast.spread(TOPO, 8)
    points = predict_bcasts(TOPO, hosts, [16384, 1 << 20], library="openmpi", calibration=CAL)
    lib = exp_bcast.sweep_timeout(points, "library", 2.0)
    rep = exp_bcast.sweep_timeout(points, "replicated", 2.0)
    assert lib > 2 * points[1].library_s + 2 * points[0].library_s
    assert rep < lib  # the 1 MiB call is replicated, the 16 KiB one is the library's


def _saved(tmp_path: Path) -> dict[str, Any]:
    hosts, _ = exp_bcast.spread(TOPO, 8)
    measured = {"library": {"16384": 0.05, "1048576": 6.1},
                "replicated": {"16384": 0.05, "1048576": 0.9}}  # fmt: skip
    block = {"n": 8, "scenario": "idle", "hosts": list(hosts), "competing": [],
             "measured": {"openmpi": measured}, "stats": {"openmpi": ["sdnmpi: x"]}}  # fmt: skip
    doc = {"topology": exp_bcast.TOPOLOGY, "link_scale": 0.01, "calibration": CAL.to_dict(),
           "blocks": [block]}  # fmt: skip
    (tmp_path / exp_bcast.MEASURED).write_text(json.dumps(doc))
    return doc


def test_rows_from_saved_measurements(tmp_path: Path) -> None:
    summary = exp_bcast.derive(_saved(tmp_path), tmp_path)
    small, large = sorted(summary["rows"], key=lambda r: r["size_bytes"])
    # below the threshold the replicated way is the library's Bcast, and predicted so
    assert small["predicted_s"]["replicated"] == small["predicted_s"]["library"]
    assert small["predicted_gain"] == 1.0 and small["stats"] == []
    # above it: one tree transfer against Open MPI's linear Bcast to 7 ranks
    assert large["algorithm"] == "linear"
    assert large["gain"] == pytest.approx(6.1 / 0.9)
    assert 5 < large["predicted_gain"] < 8
    assert large["stats"] == ["sdnmpi: x"]
    assert set(large["within"]) == {"library", "replicated"}
    assert (tmp_path / "bcast.png").exists()
    # a block saved before the CPU figures: none, and nothing flagged
    assert large["cpu"] == {} and large["cpu_bound"] == {}


def test_rows_flag_a_way_whose_sweep_was_cpu_bound(tmp_path: Path) -> None:
    doc = _saved(tmp_path)
    doc["blocks"][0]["cpu"] = {"openmpi": {
        "library": {"machine_busy": 0.6, "switch_wait": 0.05},
        "replicated": {"machine_busy": 0.99, "switch_wait": 0.4},
    }}  # fmt: skip
    rows = exp_bcast.derive(doc, tmp_path)["rows"]
    assert all(r["cpu_bound"] == {"library": False, "replicated": True} for r in rows)
    assert rows[0]["cpu"]["replicated"]["switch_wait"] == 0.4


def test_bad_command_line_values_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="HOSTS:SCENARIO"):
        exp_bcast._block("8:busy")
    with pytest.raises(SystemExit, match="MIN,MAX"):
        exp_bcast._sizes("16,4")
    for bad in ("20:idle@0", "20:idle@2", "20:idle@fast", "20:idle@nan"):
        with pytest.raises(SystemExit, match="FACTOR"):
            exp_bcast._block(bad)
    saved = tmp_path / "cal.json"
    CAL.save(saved)
    with pytest.raises(SystemExit, match=r"link scale 0\.01, not --link-scale 0\.005"):
        exp_bcast._calibration(saved, 0.005)
    assert exp_bcast._calibration(saved, 0.01).goodput == CAL.goodput


def test_the_replicated_way_may_average_a_quarter_of_the_link_rate() -> None:
    plain = exp_bcast.way_env("f", "openmpi", "library", "j", 5e6)
    assert not any(e.startswith("SDNMPI_") or e.startswith("LD_PRELOAD") for e in plain)
    assert exp_bcast.min_rate(5e6) == 156250  # 5 Mbit/s: 625 kB/s, a quarter
    assert exp_bcast.min_rate(10e6) == 312500
    assert exp_bcast.min_rate(1e3) == 1000  # the library's floor


def test_large_blocks_run_their_links_slower_by_default() -> None:
    assert exp_bcast._block("8:idle") == (8, "idle", 1.0)
    assert exp_bcast._block("20:idle") == (20, "idle", 0.5)
    assert exp_bcast._block("20:competing@1") == (20, "competing", 1.0)
    assert exp_bcast._block("8:ab@0.25") == (8, "ab", 0.25)


def test_a_block_is_predicted_at_its_own_link_scale(tmp_path: Path) -> None:
    doc = _saved(tmp_path)
    full = exp_bcast.derive(doc, tmp_path)["rows"]
    doc["blocks"][0]["link_scale"] = 0.005
    half = exp_bcast.derive(doc, tmp_path)["rows"]
    assert [r["link_mbps"] for r in full] == [10.0, 10.0]
    assert [r["link_mbps"] for r in half] == [5.0, 5.0]
    # 1 MiB: bandwidth-bound, so about twice as long at half the rate
    ratio = half[1]["predicted_s"]["replicated"] / full[1]["predicted_s"]["replicated"]
    assert 1.9 < ratio < 2.05
    assert half[1]["predicted_s"]["library"] > 1.9 * full[1]["predicted_s"]["library"]


def test_ab_block_runs_the_sizes_below_the_threshold_in_alternating_order() -> None:
    assert exp_bcast.ab_sizes(exp_bcast.SIZES) == (4096, 32768)
    assert exp_bcast.ab_sizes((16384, 1 << 20)) == (16384, 32768)
    assert exp_bcast.ab_sizes((4096, 8192)) == (4096, 8192)
    assert exp_bcast.ab_sizes((exp_bcast.THRESHOLD, 1 << 20)) is None
    orders = [exp_bcast.ab_order(r) for r in range(4)]
    assert orders[0] == orders[2] == ("library", "replicated")
    assert orders[1] == orders[3] == ("replicated", "library")


def test_ab_rows_give_medians_their_ratio_and_the_rounds_signs() -> None:
    hosts, _ = exp_bcast.spread(TOPO, 8)
    plain = [100e-6, 120e-6, 110e-6, 300e-6]  # one noisy round
    inter = [105e-6, 115e-6, 121e-6, 90e-6]
    rounds = [
        {"library": {"4096": a, "8192": 2 * a}, "replicated": {"4096": b, "8192": 2 * b}}
        for a, b in zip(plain, inter, strict=True)
    ]
    rows = exp_bcast.ab_rows(TOPO, 8, {"hosts": list(hosts), "ab": {"mpich": rounds}}, CAL)
    assert [(r["library"], r["size_bytes"]) for r in rows] == [("mpich", 4096), ("mpich", 8192)]
    r = rows[0]
    assert r["median_s"]["library"] == pytest.approx(115e-6)
    assert r["median_s"]["replicated"] == pytest.approx(110e-6)
    assert r["ratio"] == pytest.approx(110 / 115)
    assert r["slower_rounds"] == 2 and r["rounds"] == 4
    assert r["plain_spread"] == pytest.approx(3.0)
    assert r["predicted_s"] > 0


def test_rederive_keeps_ab_blocks_apart_from_the_gain_rows(tmp_path: Path) -> None:
    hosts, _ = exp_bcast.spread(TOPO, 8)
    one = {"library": {"4096": 1e-4}, "replicated": {"4096": 1.1e-4}}
    measured = {
        "topology": exp_bcast.TOPOLOGY,
        "link_scale": 0.01,
        "calibration": CAL.to_dict(),
        "blocks": [{"n": 8, "scenario": "ab", "hosts": list(hosts), "competing": [],
                    "ab": {"openmpi": [one, one]}}],
    }  # fmt: skip
    summary = exp_bcast.derive(measured, tmp_path)
    assert summary["rows"] == [] and summary["plot"] is None
    assert summary["ab"][0]["ratio"] == pytest.approx(1.1)
    assert summary["ab"][0]["slower_rounds"] == 2
