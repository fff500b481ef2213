"""scripts/exp_overhead.py --direct, shortened: two hosts on a veth pair, every
configuration runs, tag runs are tagged (and the others not), nothing is left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.emu.support import namespaces, require_root_and_tools

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]


def test_overhead_direct_link_short(tmp_path: Path) -> None:
    require_root_and_tools()
    before = namespaces()
    summary_path = tmp_path / "ovd.json"
    argv = [sys.executable, str(ROOT / "scripts" / "exp_overhead.py"), "--direct", "--quick"]
    argv += ["--repeat", "1", "--iters", "50", "--json", str(summary_path)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    assert summary["tagged_packets"] > 1000  # the script also checks none/profile untagged
    sizes = [row["size_bytes"] for row in summary["latency_us"]]
    assert sizes[0] == 1 and sizes[-1] == 4096
    for row in summary["latency_us"]:
        # Times are one-way microseconds (a unit slip to ms or s would break these);
        # how small they are is the experiment's figure, not this test's: CI is noisy.
        for mode in ("none", "tag", "profile"):
            stats = row[mode]
            assert 0 < stats["min"] <= stats["median"] <= stats["max"] < 1e6, row
        for mode in ("tag", "profile"):
            shift = row[mode]["median"] - row["none"]["median"]
            assert row[mode]["vs_none"] == pytest.approx(shift)
    assert namespaces() == before
