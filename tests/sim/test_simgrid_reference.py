"""Reference check: sdnmpi.sim against SimGrid's max-min flow model (CM02).

``simgrid_ref.py`` runs the same cases in SimGrid 3.32 under ``/usr/bin/python3``
(see its docstring for the options and how latency is mapped).  We compare:

* completion times of every flow, relative tolerance ``RTOL``;
* the bytes every flow still has to send at the middle of each of our
  segments (between two events rates are constant, so this checks the rates
  of every flow in every segment), with tolerance ``RTOL`` of the flow's size.

Both sides solve the same max-min problems in double precision; they agree to
a few 1e-16 relative (measured: at most 3e-16 on completion times, 2e-15 of a
flow's size on remaining bytes), so ``RTOL`` leaves room only for rounding.
Latency is the one modelling choice to align: CM02 weights shares by the inverse
of the route latency, so the reference pays latencies as actor sleeps, except
in the "native latency" case whose route latencies are all equal.
"""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sdnmpi.core.generators import fat_tree
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.sim import FlowSet, Platform, simulate
from sdnmpi.sim.engine import Trace, run, run_ranks
from tests.sim.routes import shortest_routing

SYSTEM_PYTHON = "/usr/bin/python3"
REFERENCE = Path(__file__).with_name("simgrid_ref.py")
RTOL = 1e-12
MB = 1_000_000


@dataclass
class Case:
    """One case for both simulators: SimGrid input, and our times and rates."""

    name: str
    links: list[dict[str, float]]
    flows: list[dict[str, Any]]
    finish_s: np.ndarray
    start_s: np.ndarray
    size_bytes: np.ndarray
    samples: list[float] = field(default_factory=list)
    remaining: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def spec(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "links": self.links,
            "flows": self.flows,
            "samples": self.samples,
        }


def with_samples(case: Case, trace: Trace) -> Case:
    """Sample remaining bytes at the middle of every segment of ``trace``."""
    mid = (trace.segment_start_s + trace.segment_end_s) / 2
    seg = np.stack([trace.segment_start_s, trace.segment_end_s], axis=1)
    rates = trace.flow_rate_bps.toarray() / 8
    overlap = np.clip(np.minimum(seg[None, :, 1], mid[:, None]) - seg[None, :, 0], 0, None)
    case.samples = mid.tolist()
    case.remaining = case.size_bytes[None, :] - overlap @ rates
    return case


def links_of(platform: Platform, native_latency: bool = False) -> list[dict[str, float]]:
    lat = platform.latency_s if native_latency else np.zeros(platform.narcs)
    return [
        {"bandwidth": float(c) / 8, "latency": float(x)}
        for c, x in zip(platform.capacity_bps, lat, strict=True)
    ]


def flows_of(flowset: FlowSet, rows: np.ndarray, deps: list[list[int]], delay: bool) -> list:
    inc = flowset.incidence[rows]
    return [
        {
            "route": inc.indices[inc.indptr[i] : inc.indptr[i + 1]].tolist(),
            "size": int(flowset.size_bytes[r]),
            "delay": float(flowset.latency_s[r]) if delay else 0.0,
            "deps": deps[i],
        }
        for i, r in enumerate(rows.tolist())
    ]


def abstract_case(
    name: str,
    capacity_bytes: list[float],
    paths: list[list[int]],
    sizes: list[int],
    latency: list[float] | None = None,
    native_latency: bool = False,
) -> Case:
    """A handful of flows on a few links, one phase."""
    platform = Platform.from_arrays([8 * c for c in capacity_bytes], latency)
    flowset = FlowSet.from_paths(platform, paths, sizes)
    trace = run(platform, flowset.incidence, flowset.size_bits, flowset.latency_s, flow_rates=True)
    rows = np.arange(len(flowset))
    flows = flows_of(flowset, rows, [[] for _ in rows], delay=not native_latency)
    # SimGrid's actor sends at once when the link pays the latency: its start is our release.
    start = trace.release_s if native_latency else trace.start_s
    case = Case(
        name, links_of(platform, native_latency), flows, trace.finish_s, start, flowset.size_bytes
    )
    return with_samples(case, trace)


def fat_tree_inputs(seed: int = 7) -> tuple[Fabric, Demands, Routing]:
    """fat_tree(4), 16 ranks on 16 hosts, three phases, first-found shortest paths.

    The first-found paths pile up on the first aggregation and core switches, so
    the max-min shares settle in several stages.
    """
    fabric = Fabric(fat_tree(4))
    rng = random.Random(seed)
    n = 16

    def size() -> int:
        return rng.randrange(MB // 10, 2 * MB)

    phases = (
        Phase.from_cells("shift", [(i, (i + 4) % n, size()) for i in range(n)]),
        Phase.from_cells("ring", [(i, (i + 1) % n, size()) for i in range(n)]),
        Phase.from_cells(
            "random", [(i, rng.choice([j for j in range(n) if j != i]), size()) for i in range(n)]
        ),
    )
    placement = Placement(tuple(h.name for h in fabric.topology.hosts))
    demands = Demands.from_pattern(fabric, Pattern("mix", n, phases), placement)
    return fabric, demands, shortest_routing(fabric, demands)


def fat_tree_phase_case() -> Case:
    """The first phase alone; route latencies 2, 4 and 6 us, paid as delays."""
    fabric, demands, routing = fat_tree_inputs()
    platform = Platform.from_fabric(fabric)
    flowset = FlowSet.from_demands(platform, demands, routing)
    rows = flowset.phase_rows(0)
    sub = flowset.incidence[rows]
    trace = run(platform, sub, flowset.size_bits[rows], flowset.latency_s[rows], flow_rates=True)
    flows = flows_of(flowset, rows, [[] for _ in rows], delay=True)
    case = Case(
        "fat-tree phase",
        links_of(platform),
        flows,
        trace.finish_s,
        trace.start_s,
        flowset.size_bytes[rows],
    )
    return with_samples(case, trace)


def fat_tree_phases_case() -> Case:
    """All three phases, barrier between phases: each flow waits for the whole previous phase."""
    fabric, demands, routing = fat_tree_inputs()
    result = simulate(fabric, demands, routing, mode="phases")
    platform = Platform.from_fabric(fabric)
    flowset = FlowSet.from_demands(platform, demands, routing)
    rows = np.arange(len(flowset))
    previous = [np.flatnonzero(flowset.phase == p - 1).tolist() for p in flowset.phase.tolist()]
    offset = np.array([result.phases[p].start_s for p in flowset.phase.tolist()])
    return Case(
        "fat-tree phases",
        links_of(platform),
        flows_of(flowset, rows, previous, delay=True),
        result.flow_finish_s + offset,
        result.flow_start_s + offset,
        flowset.size_bytes,
    )


def fat_tree_ranks_case() -> Case:
    """All three phases in ranks mode: each flow waits for its two ranks' previous steps."""
    fabric, demands, routing = fat_tree_inputs()
    platform = Platform.from_fabric(fabric)
    flowset = FlowSet.from_demands(platform, demands, routing)
    steps, trace = run_ranks(platform, flowset, max_flows=10**6, flow_rates=True)
    deps = [steps.deps.prerequisites(i).tolist() for i in range(len(steps))]
    case = Case(
        "fat-tree ranks",
        links_of(platform),
        flows_of(flowset, steps.flow, deps, delay=True),
        trace.finish_s,
        trace.start_s,
        flowset.size_bytes[steps.flow],
    )
    return with_samples(case, trace)


def all_cases() -> list[Case]:
    return [
        # One link shared by 3 flows of different sizes: shares 1/3, then 1/2, then 1.
        abstract_case("one link", [1 * MB], [[0], [0], [0]], [MB, 2 * MB, 3 * MB]),
        # Two links in series (1 and 2 MB/s) with a flow on each: 1/2, 1/2, 3/2.
        abstract_case("series", [MB, 2 * MB], [[0, 1], [0], [1]], [MB, 2 * MB, 3 * MB]),
        # Parking lot on 3 links, the long flow and the short ones of different sizes.
        abstract_case(
            "parking lot", [MB] * 3, [[0, 1, 2], [0], [1], [2]], [3 * MB, MB, 2 * MB, 4 * MB]
        ),
        # Progressive filling in three stages (see test_maxmin), then completions.
        abstract_case(
            "three stages",
            [MB, 3 * MB, 4 * MB],
            [[0], [0, 1], [1], [1, 2], [2]],
            [MB, 2 * MB, 3 * MB, 4 * MB, 5 * MB],
        ),
        # A completion moves another flow's bottleneck (see test_engine).
        abstract_case(
            "completion order", [2 * MB, 3 * MB], [[0], [0, 1], [1]], [MB, 4 * MB, 6 * MB]
        ),
        # Different route latencies: flows start transmitting at different times.
        abstract_case(
            "staggered latency",
            [MB] * 4,
            [[0, 3], [1, 3], [2, 3]],
            [MB, MB, MB],
            latency=[0.0, 0.2, 0.5, 0.1],
        ),
        # Equal route latencies left to SimGrid's own latency handling.
        abstract_case(
            "native latency",
            [MB, MB, 2 * MB],
            [[0, 2], [1, 2], [0, 1]],
            [MB, 2 * MB, 3 * MB],
            latency=[0.1, 0.1, 0.1],
            native_latency=True,
        ),
        fat_tree_phase_case(),
        fat_tree_phases_case(),
        fat_tree_ranks_case(),
    ]


def simgrid_missing() -> str | None:
    """Why ``SYSTEM_PYTHON`` cannot import simgrid, or None when it can."""
    try:
        probe = subprocess.run(
            [SYSTEM_PYTHON, "-c", "import simgrid"], capture_output=True, text=True, check=False
        )
    except OSError as err:
        return str(err)
    lines = probe.stderr.strip().splitlines()
    return (lines[-1] if lines else f"exit {probe.returncode}") if probe.returncode else None


@cache
def reference(cases_json: str) -> dict[str, Any]:
    # Never skipped: CI must run the reference check.
    missing = simgrid_missing()
    if missing is not None:
        pytest.fail(
            f"{SYSTEM_PYTHON} cannot import simgrid ({missing}): run `make test`, "
            "which installs python3-simgrid (listed in scripts/apt-packages.txt)"
        )
    done = subprocess.run(
        [SYSTEM_PYTHON, str(REFERENCE)],
        input=cases_json,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


CASES = all_cases()


@pytest.fixture(scope="module")
def simgrid_results() -> dict[str, dict[str, Any]]:
    out = reference(json.dumps({"cases": [c.spec() for c in CASES]}))
    assert out["simgrid"].startswith("3.")
    return {c["name"]: c for c in out["cases"]}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_completion_times_match_simgrid(case, simgrid_results):
    ref = simgrid_results[case.name]
    assert np.array(ref["finish"]) == pytest.approx(case.finish_s, rel=RTOL)
    assert np.array(ref["start"]) == pytest.approx(case.start_s, rel=RTOL, abs=1e-15)


@pytest.mark.parametrize("case", [c for c in CASES if c.samples], ids=lambda c: c.name)
def test_rates_match_simgrid(case, simgrid_results):
    ref = np.array(simgrid_results[case.name]["remaining"])
    assert ref.shape == case.remaining.shape
    tol = RTOL * case.size_bytes[None, :]
    assert (np.abs(ref - case.remaining) <= tol + 1e-6).all()
