"""exp_overhead's report rows: bandwidth from the fabric, latency from the direct link."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import exp_overhead


def _summary(fabric: str, lat_none: float, lat_tag: float) -> dict[str, Any]:
    def cfgs(none: float, tag: float, better: str) -> dict[str, Any]:
        vs = (tag - none) if better == "lower" else tag / none
        return {
            "none": {"median": none, "min": none, "max": none},
            "tag": {"median": tag, "min": tag, "max": tag, "vs_none": vs},
            "profile": {"median": none, "min": none, "max": none,
                        "vs_none": 0.0 if better == "lower" else 1.0},
        }  # fmt: skip

    return {
        "fabric": fabric,
        "link_scale": 0.05,
        "repeat": 2,
        "tagged_packets": 1234,
        "latency_us": [{"size_bytes": 1, **cfgs(lat_none, lat_tag, "lower")}],
        "bandwidth_MBps": [{"size_bytes": 1 << 20, **cfgs(6.0, 5.94, "higher")}],
    }


def test_latency_rows_come_from_the_direct_link_when_it_ran() -> None:
    fabric = _summary("leaf_spine", 300.0, 330.0)
    direct = _summary("direct veth", 6.0, 6.3)
    bw_tag, lat_tag, _, _ = exp_overhead.rows(fabric, direct)
    assert bw_tag.measured == pytest.approx(0.99)
    assert lat_tag.measured == pytest.approx(5.0)  # 0.3 us over 6 us, not 30 over 300
    assert "direct veth link" in lat_tag.reason and "1234 packets" in lat_tag.reason
    assert lat_tag.settings["topology"] == "direct veth"
    _, lat_only_fabric, _, _ = exp_overhead.rows(fabric)
    assert lat_only_fabric.measured == pytest.approx(10.0)
    assert "see --direct" in lat_only_fabric.reason


def test_a_runs_timeout_grows_with_the_bytes_it_sends() -> None:
    # 1 KiB-4 MiB: 13 sizes, 16-message windows, 3 timed and 3 warm-up each
    assert exp_overhead.run_bytes("bw", ("1K", "4M"), 200, 3) == ((8 << 20) - 1024) * 96
    assert exp_overhead.run_bytes("latency", ("1", "1"), 200, 3) == 800
    full = exp_overhead.run_timeout_s("bw", ("1K", "4M"), 200, exp_overhead.BW_ITERS, 0.05)
    at_line_rate = 8 * exp_overhead.run_bytes("bw", ("1K", "4M"), 200, 3) / 50e6
    # the full form's bandwidth run: 10 + 10 windows once took more than the 300 s it had
    assert full > 300 and full >= 2 * at_line_rate
    assert exp_overhead.run_timeout_s("bw", ("1K", "4M"), 200, 10, 0.05) > full


def test_rederived_rows_are_the_rows_of_the_saved_run(tmp_path: Path) -> None:
    fabric = _summary("leaf_spine", 300.0, 330.0)
    direct = _summary("direct veth", 6.0, 6.3)
    exp_overhead.save(tmp_path, fabric, direct)
    assert exp_overhead.rows_from_saved(tmp_path) == exp_overhead.rows(fabric, direct)
    exp_overhead.save(tmp_path, fabric, None)  # a run without the direct link
    assert exp_overhead.rows_from_saved(tmp_path) == exp_overhead.rows(fabric)
