"""Results: JSON-ready dicts, the timeline (sampling, CSV), files, realistic inputs.

The golden file ``golden/sim-two-phases.json`` pins the JSON layout; regenerate
it on purpose with ``SDNMPI_REGEN_GOLDEN=1 .venv/bin/pytest tests/sim/test_report.py``
and review the diff.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

from sdnmpi.catalog import load_pattern, load_topology
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.placement import block
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.core.workloads import build
from sdnmpi.formats.pfprof import recorded_placement
from sdnmpi.sim import FlowSet, Platform, SimResult, simulate, simulate_workload

GOLDEN = Path(__file__).parent / "golden"


def two_phases() -> SimResult:
    # Phase 0 (repeat 2): the "completion order" case, 10/3 s.  Phase 1: one flow
    # of 3 bytes on arc 1 (3 B/s): 1 s.  Total 2 * 10/3 + 1.
    platform = Platform.from_arrays([16.0, 24.0], [0.0, 0.0], ["a->b", "b->c"], name="line")
    flowset = FlowSet.from_paths(
        platform,
        [[0], [0, 1], [1], [1]],
        [1, 4, 6, 3],
        phase=[0, 0, 0, 1],
        phase_repeat=[2, 1],
    )
    return simulate_workload(platform, flowset, timeline=True)


def test_result_dict_is_json_ready_and_matches_golden_file():
    r = two_phases()
    assert r.total_s == pytest.approx(2 * 10 / 3 + 1)
    got = json.loads(json.dumps(r.to_dict(flows=True)))
    path = GOLDEN / "sim-two-phases.json"
    if os.environ.get("SDNMPI_REGEN_GOLDEN"):
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(path.read_text()), "the result layout changed; see the docstring"


def test_max_link_load():
    r = two_phases()
    # arc 1 carries (4 + 6) * 2 + 3 = 23 bytes, arc 0 (1 + 4) * 2 = 10; both saturate.
    assert r.max_link_bytes == (1, 23.0)
    assert r.arc_bytes.tolist() == [10.0, 23.0]
    assert r.max_utilization == (0, 1.0)
    assert r.to_dict()["max_link_load"]["bytes"] == {"arc": 1, "name": "b->c", "bytes": 23.0}


def test_timeline_sampling_follows_repeats():
    line = two_phases().timeline
    assert line is not None
    period = 10 / 3
    # In [0, 1) of every occurrence of phase 0: arc 0 at 16, arc 1 at 24 bit/s;
    # in [1, 3): arc 0 at 12 (B alone, 1.5 B/s).  Phase 1 starts at 2 * 10/3.
    got = line.sample([0.5, period + 0.5, 1.5, period + 1.5, 2 * period + 0.5, 10.0])
    expected = [[16, 24], [16, 24], [12, 24], [12, 24], [0, 24], [0, 0]]
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_timeline_csv_lists_busy_arcs():
    r = two_phases()
    rows = list(csv.DictReader(io.StringIO(r.timeline_csv())))
    assert r.timeline is not None
    assert len(rows) == r.timeline.rate_bps.nnz
    first = rows[0]
    assert (first["arc_name"], float(first["rate_bps"]), float(first["utilization"])) == (
        "a->b",
        16.0,
        1.0,
    )
    assert {int(row["repeat"]) for row in rows} == {1, 2}


def test_files_are_written_only_when_asked(tmp_path):
    r = two_phases()
    r.write_json(tmp_path / "r.json")
    r.write_timeline_csv(tmp_path / "t.csv")
    assert json.loads((tmp_path / "r.json").read_text())["total_s"] == r.total_s
    assert (tmp_path / "t.csv").read_text() == r.timeline_csv()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "t.csv"]


def test_without_timeline_the_csv_is_a_header():
    platform = Platform.from_arrays([8.0])
    r = simulate_workload(platform, FlowSet.from_paths(platform, [[0]], [1]))
    assert r.timeline is None and "timeline" not in r.to_dict()
    assert r.timeline_csv().startswith("segment,start_s,end_s")


def test_cg_trace_on_milk(workloads_dir):
    # The real CG class C trace (128 ranks) on the milk cluster, recorded placement.
    from tests.sim.routes import shortest_routing

    fabric = Fabric(load_topology("milk"))
    pattern = load_pattern(str(workloads_dir / "cg-c-128.tar.gz"))
    demands = Demands.from_pattern(fabric, pattern, recorded_placement(pattern))
    routing = shortest_routing(fabric, demands)
    r = simulate(fabric, demands, routing, timeline=True)
    assert r.arc_bytes == pytest.approx(routing.arc_bytes(demands, fabric))
    assert r.timeline is not None
    assert r.timeline.arc_bits() == pytest.approx(8 * r.arc_bytes, rel=1e-9)
    # No arc can finish its bytes faster than its capacity allows.
    assert r.total_s >= (8 * r.arc_bytes / fabric.capacity_bps).max()
    ranks = simulate(fabric, demands, routing, mode="ranks")
    assert ranks.total_s == pytest.approx(r.total_s, rel=1e-12)


def test_pairwise_alltoall_on_fat_tree():
    # 16 ranks, 15 pairwise steps of 64 KiB: every step's flows have distinct
    # sources and destinations, so each phase takes at least one host link's time.
    from tests.sim.routes import shortest_routing

    fabric = Fabric(fat_tree(4))
    pattern = build("alltoall:nprocs=16,bytes=65536")
    demands = Demands.from_pattern(fabric, pattern, block(fabric.topology, 16))
    routing = shortest_routing(fabric, demands)
    r = simulate(fabric, demands, routing)
    floor = 8 * 65536 / 1e9 + 2e-6
    assert len(r.phases) == 15 and all(p.duration_s >= floor for p in r.phases)
    assert r.total_s == pytest.approx(sum(p.total_s for p in r.phases))
    ranks = simulate(fabric, demands, routing, mode="ranks")
    assert ranks.total_s == pytest.approx(np.max(ranks.flow_finish_s))


def test_no_traffic_names_no_arc():
    platform = Platform.from_arrays([8.0])
    r = simulate_workload(platform, FlowSet.from_paths(platform, [], []))
    assert r.max_link_bytes == (-1, 0.0) and r.max_utilization == (-1, 0.0)
    assert r.to_dict()["max_link_load"]["bytes"] == {"arc": -1, "name": None, "bytes": 0.0}
