"""scripts/demo_fabric.py end to end in quick mode: speedup > 1, nothing left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.emu.support import require_root_and_tools

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "demo_fabric.py"

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]


def _netns() -> str:
    return subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout


def test_demo_fabric_quick(tmp_path: Path) -> None:
    require_root_and_tools()
    if subprocess.run(["which", "mpirun.openmpi"], capture_output=True, check=False).returncode:
        pytest.fail("mpirun.openmpi missing: apt-get install -y openmpi-bin libopenmpi-dev")
    summary_path = tmp_path / "summary.json"
    argv = [sys.executable, str(SCRIPT), "--quick", "--json", str(summary_path)]
    argv += ["--out", str(tmp_path / "out")]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    summary = json.loads(summary_path.read_text())
    assert json.loads(res.stdout.strip().splitlines()[-1]) == summary
    assert summary["measured_speedup"] > 1.0, summary
    assert summary["predicted_speedup"] > 1.0, summary
    # the MPI bytes crossed the spine ports each routing chose (OVS port counters)
    assert summary["spine_bytes_as_routed"] is True, res.stdout
    assert summary["install_s"] > 0
    assert summary["install_1000_flow_mods"] > 0
    assert "measured speedup:" in res.stdout
    assert "controller stopped" in res.stdout
    assert f"emu down {summary['fabric']}: rc=0" in res.stdout
    assert f"emu down {summary['fabric']}-big: rc=0" in res.stdout
    assert "sdnmpi-" not in _netns()
    assert Path(summary["port_stats"]).exists()
