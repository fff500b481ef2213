"""``sdnmpi calibrate --quick`` for real: its own fabric, real Open MPI ranks, a document
the simulator reads, and nothing left behind (fabric, sysctls)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdnmpi.emu.state import load_state
from sdnmpi.sim.calibration import Calibration
from tests.emu.support import require_root_and_tools, sdnmpi

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]
REPO = Path(__file__).resolve().parents[2]


def _sysctl(key: str) -> str:
    return Path("/proc/sys", key.replace(".", "/")).read_text().strip()


def test_quick_calibration(tmp_path: Path) -> None:
    require_root_and_tools()
    if not (REPO / "build" / "openmpi" / "sdnmpi-bench").exists():
        pytest.skip("make mpibench first")
    before = {
        k: _sysctl(k) for k in ("net.core.wmem_default", "net.ipv4.tcp_allowed_congestion_control")
    }
    out = tmp_path / "cal.json"
    state_root = tmp_path / "state"
    res = sdnmpi(
        "calibrate", "--quick", "--out", str(out), "--state-dir", str(state_root), timeout=300
    )
    assert res.returncode == 0, res.stderr
    cal = Calibration.load(out)
    assert cal.link_scale == 0.01
    assert 0.8 < cal.goodput <= 1.0
    assert cal.arc_latency_s is not None and cal.arc_latency_s >= 0
    assert 0 < cal.measurements["latency_2_arcs_s"] < 0.05
    assert cal.eager_limits == {"openmpi": 65536}  # quick: the preset, checked from both sides
    assert len(cal.measurements["runs"]) == 6
    assert "goodput" in res.stdout and str(out) in res.stdout
    # nothing left: no fabric state, the machine-wide settings as they were
    assert not any(state_root.glob("*/state.json"))
    assert {k: _sysctl(k) for k in before} == before
    assert load_state(state_root, "calib") is None
