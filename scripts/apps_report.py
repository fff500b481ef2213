"""The pure part of ``exp_apps``: placement, predictions, figures from outputs, report rows.

Nothing here starts a process or touches the fabric: plain values (patterns,
parsed outputs, the run summary of ``exp_apps``) in, plain values out, so the
unit tests (tests/experiments/test_apps_rows.py) can check every number.

The summary of one application (``summary["apps"][key]``) holds, per reported
*unit* (LAMMPS: its timed ``run``; HPCC: a section such as ``PTRANS``), the
measured seconds of every routing (a list, one per repetition), the simulator's
communication seconds of the recorded pattern under every routing, and the
unit's non-communication seconds (``other_s``: compute, measured, the same
under every routing).  A routing's predicted time is its simulated
communication time plus ``other_s``, so a predicted speedup is
``(sim_baseline + other) / (sim_ours + other)``.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import exp_allreduce
from exp_allreduce import Placed

from sdnmpi.core.pattern import Pattern
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import bound as lp
from sdnmpi.core.routing import route
from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.core.topology import Topology
from sdnmpi.manager import planning
from sdnmpi.manager.model import Process, RoutePair
from sdnmpi.report.reproduce_api import Row
from sdnmpi.sim import simulate
from sdnmpi.sim.calibration import Calibration
from sdnmpi.sim.protocol import Protocol

EXPERIMENT = "issue 11 real applications"
#: The routings compared: the manager's job routes (``ours``) and two baselines.
ROUTINGS = ("dmodk", "ours", "ecmp")
BASELINES = ("dmodk", "ecmp")
#: ECMP hashes each run's TCP ports: its prediction is the mean over this many draws.
ECMP_SEEDS = 16
#: How a share row names the run it comes from, other than a routing's.
SHARE_RUN = {"profile": "in the profile run (D-mod-K, block placement)"}
SEARCH_SEED = 2026
SEARCH_TRIALS = 200
TOLERANCE = 0.15


# -- placement and predictions -------------------------------------------------------


def search_placement(
    topo: Topology, pattern: Pattern, trials: int = SEARCH_TRIALS, seed: int = SEARCH_SEED
) -> tuple[tuple[str, ...], float]:
    """The hosts (rank order) where one path per rank pair can gain the most over
    D-mod-K, and the LP bound's gain there.

    As ``exp_allreduce.placement`` (the seed experiments place ranks so that
    D-mod-K contends), for a recorded pattern: a seeded search over random
    placements, one rank per host; the first tried is the block placement.  It
    maximizes the single-path bound (what the routers under test can reach; the LP
    bound splits flows over paths), the LP bound breaking ties.
    """
    fabric = Fabric(topo)
    names = [h.name for h in topo.hosts]
    rng = np.random.default_rng(seed)
    block = tuple(names[: pattern.nprocs])
    best = exp_allreduce.gains(fabric, pattern, block)
    for _ in range(trials):
        hosts = tuple(str(h) for h in rng.choice(names, pattern.nprocs, replace=False))
        placed = exp_allreduce.gains(fabric, pattern, hosts)
        if _better(placed, best):
            best = placed
    return best.hosts, best.bound_gain


def _better(a: Placed, b: Placed, tol: float = 1e-9) -> bool:
    """A higher single-path gain, or the same and a higher LP bound gain."""
    if abs(a.single_path_gain - b.single_path_gain) > tol:
        return a.single_path_gain > b.single_path_gain
    return a.bound_gain > b.bound_gain + tol


def node_arcs(fabric: Fabric, path: Sequence[str]) -> list[int]:
    """Arc indices along a node path (the first parallel arc between two nodes)."""
    index = fabric.index
    out = []
    for a, b in itertools.pairwise(path):
        src, dst = index[a], index[b]
        out.append(next(i for i in fabric.out_arcs[src] if int(fabric.arc_dst[i]) == dst))
    return out


def installed(fabric: Fabric, demands: Demands, routes: Sequence[RoutePair]) -> Routing:
    """The routing a job runs on: the manager's path for each routed host pair, D-mod-K
    (the controller's default routes) for any other pair."""
    default = route("dmodk", fabric, demands)
    pairs, flow_pair, _ = demands.host_pairs()
    by_pair = {(fabric.index[r.src], fabric.index[r.dst]): r.path for r in routes}
    paths: dict[tuple[int, int], Sequence[int]] = {}
    for k, (s, d) in enumerate(pairs):
        key = (int(s), int(d))
        if key in by_pair:
            paths[key] = node_arcs(fabric, by_pair[key])
        else:
            paths[key] = default.path(int(np.flatnonzero(flow_pair == k)[0]))
    return Routing.from_pair_paths("ours (installed)", demands, paths)


def manager_routes(topo: Topology, pattern: Pattern, hosts: Sequence[str]) -> tuple[RoutePair, ...]:
    """The routes the manager installs for the job (``planning.plan``, no other jobs)."""
    procs = [Process(rank, host) for rank, host in enumerate(hosts)]
    return planning.plan(topo, pattern, procs, "ours")


def predict(
    cal: Calibration,
    topo: Topology,
    job: Pattern,
    hosts: Sequence[str],
    protocol: Protocol,
    unit: Pattern | None = None,
) -> dict[str, Any]:
    """Simulated communication seconds of ``unit`` (default: the whole ``job`` pattern)
    under each routing at the calibrated rates, ours routed as the manager does from
    ``job``; and the LP bound's largest possible gain over each baseline."""
    fabric = Fabric(topo)
    place = Placement(tuple(hosts))
    demands = Demands.from_pattern(fabric, job if unit is None else unit, place)
    if not len(demands):
        return {
            "dmodk": 0.0,
            "ours": 0.0,
            "ecmp": 0.0,
            "ecmp_range": [0.0, 0.0],
            "bound_gain": {"dmodk": 1.0, "ecmp": 1.0},
        }
    ours = installed(fabric, demands, manager_routes(topo, job, hosts))
    ecmp = [route("ecmp", fabric, demands, seed=s) for s in range(ECMP_SEEDS)]
    sim = {
        "dmodk": cal.simulate(fabric, demands, route("dmodk", fabric, demands), protocol).total_s,
        "ours": cal.simulate(fabric, demands, ours, protocol).total_s,
    }
    ecmp_s = [cal.simulate(fabric, demands, r, protocol).total_s for r in ecmp]
    t_bound = lp.pattern_bound(fabric, demands).lower_bound_s
    nominal = {
        "dmodk": simulate(fabric, demands, route("dmodk", fabric, demands)).total_s,
        "ecmp": statistics.fmean(simulate(fabric, demands, r).total_s for r in ecmp),
    }
    gain = {b: (t / t_bound if t_bound > 0 else 1.0) for b, t in nominal.items()}
    return {
        **sim,
        "ecmp": statistics.fmean(ecmp_s),
        "ecmp_range": [min(ecmp_s), max(ecmp_s)],
        "bound_gain": gain,
    }


# -- figures from the applications' outputs and the profile -------------------------


def lammps_run(parsed: Mapping[str, Any]) -> dict[str, float]:
    """The timed run of a LAMMPS output (``appout.parse_lammps``): loop seconds, the
    communication part (``Comm`` plus ``Kspace``, LAMMPS's own breakdown) and the rest."""
    runs = parsed.get("runs") or []
    if not runs:
        raise ValueError("LAMMPS output has no 'Loop time' line (the run did not finish)")
    run = runs[-1]
    loop = float(run["loop_time"])
    share = float(run["network_share"])
    return {
        "loop_s": loop,
        "comm_share": share,
        "comm_s": loop * share,
        "other_s": loop * (1 - share),
        "steps": float(run["steps"]),
    }


def mpi_share(trace: Path, window: tuple[float, float] | None = None) -> float:
    """The share of the time ranks spent inside MPI calls, mean over ranks, from a
    libsdnmpi profile trace (``window``: wall-clock seconds, as hpcc_watch records).

    Without a window each rank's span is its first call's start to its last call's end.
    """
    shares = []
    for f in sorted(trace.glob("sdnmpi-trace-*.jsonl")):
        lines = f.read_text().splitlines()
        base = float(json.loads(lines[0])["t0_wall"])
        spans = [
            (base + float(e["t_start"]), base + float(e["t_end"]))
            for e in map(json.loads, filter(None, lines[1:]))
            if "t_end" in e
        ]
        lo, hi = window or (min(s for s, _ in spans), max(e for _, e in spans))
        busy = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in spans)
        shares.append(busy / (hi - lo) if hi > lo else 0.0)
    if not shares:
        raise ValueError(f"{trace}: no sdnmpi-trace-<rank>.jsonl files")
    return statistics.fmean(shares)


def section_seconds(times: Mapping[str, Any]) -> dict[str, float]:
    """Section -> seconds from hpcc_watch's ``{"sections": {X: [begin, end]}}``."""
    out = {}
    for name, (begin, end) in times.get("sections", {}).items():
        if begin is not None and end is not None:
            out[name] = float(end) - float(begin)
    return out


# -- the summary of one application's runs ------------------------------------------


@dataclass
class Run:
    """One job's outcome: wall seconds, CPU figures per unit, the application's figures
    per unit (seconds, communication share, non-communication seconds), the manager's
    record of its routes (runs with a pattern)."""

    wall_s: float
    cpu: dict[str, dict[str, float]]
    units: dict[str, float]
    comm_share: dict[str, float]
    other_s: dict[str, float]
    routes: dict[str, Any] | None = None
    #: Why the job's first attempt failed at start (it then ran once more), or "".
    retried: str = ""
    #: Each unit's pattern from the run's own trace (runs traced in profile mode).
    parts: dict[str, Pattern | None] = field(default_factory=dict)


def unit_summary(
    runs: Mapping[str, Sequence[Run]],
    prof: Run,
    u: str,
    pred: Mapping[str, Any],
    profile_comm_s: float | None = None,
    own: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> dict[str, Any]:
    """One unit's measured and predicted figures (the input of :func:`app_rows`).

    Runs that report their communication share (LAMMPS's breakdown, or a trace of the
    run) give one share row per routing; the profile run's share from its trace is one
    more, predicted with ``profile_comm_s`` (its block placement under D-mod-K).

    ``own``: per routing, :func:`predict` of each run's own traced traffic (ours routed
    from the job's pattern, ``pred``'s); the routing's prediction is then their mean
    (an application whose traffic differs between runs), and ``pred``, from the
    profile's pattern, is kept as ``predicted_profile_pattern_s``.
    """
    others = [x.other_s[u] for rs in runs.values() for x in rs if u in x.other_s]
    other = statistics.fmean(others) if others else prof.other_s.get(u, 0.0)
    shares = {r: [x.comm_share[u] for x in rs if u in x.comm_share] for r, rs in runs.items()}
    predicted = {r: float(pred[r]) for r in ROUTINGS}
    span = list(pred["ecmp_range"])
    cpu = {r: [x.cpu[u] for x in rs] for r, rs in runs.items()}
    source = "LAMMPS's Comm + Kspace share of the loop"
    if profile_comm_s is not None:
        traced = any(shares.values())
        shares = {**(shares if traced else {}), "profile": [prof.comm_share[u]]}
        predicted["profile"] = profile_comm_s
        cpu["profile"] = [prof.cpu[u]]
        source = "time in MPI calls in the section (libsdnmpi trace of the " + (
            "run)" if traced else "profile run)"
        )
    out: dict[str, Any] = {}
    if own is not None and all(own.get(r) for r in ROUTINGS):
        out["predicted_profile_pattern_s"] = {r: predicted[r] for r in ROUTINGS}
        out["predicted_own_s"] = {r: [float(p[r]) for p in own[r]] for r in ROUTINGS}
        predicted.update({r: statistics.fmean(out["predicted_own_s"][r]) for r in ROUTINGS})
        span = [min(p["ecmp_range"][0] for p in own["ecmp"]),
                max(p["ecmp_range"][1] for p in own["ecmp"])]  # fmt: skip
    return {
        "measured_s": {r: [x.units[u] for x in rs] for r, rs in runs.items()},
        "wall_s": {r: [x.wall_s for x in rs] for r, rs in runs.items()},
        "cpu": cpu,
        "routes": {"ours": [x.routes for x in runs.get("ours", [])]},
        "comm_share": shares,
        "other_s": other,
        "predicted_comm_s": predicted,
        "predicted_ecmp_range_s": span,
        "bound_gain": pred["bound_gain"],
        "profile_s": prof.units[u],
        "share_source": source,
        **out,
    }


# -- rows -----------------------------------------------------------------------------


def mean(values: Sequence[float] | None) -> float | None:
    return statistics.fmean(values) if values else None


def predicted_s(unit: Mapping[str, Any], routing: str) -> float:
    """Simulated communication plus the measured non-communication seconds."""
    return float(unit["predicted_comm_s"][routing]) + float(unit["other_s"])


def cpu_evidence(unit: Mapping[str, Any], routings: Sequence[str]) -> list[str]:
    """One line per CPU-bound run of ``routings`` (CpuMonitor's figures)."""
    out = []
    for r in routings:
        for c in unit.get("cpu", {}).get(r, []):
            if c.get("cpu_bound"):
                out.append(
                    f"{r} run CPU-bound: machine busy {100 * c['machine_busy']:.0f} %, switch "
                    f"waited for a core {100 * c['switch_wait']:.0f} % of the run"
                )
    return out


def ecmp_spread(unit: Mapping[str, Any], base: str) -> list[str]:
    """ECMP's predicted speedup is the mean over hash draws; its range, since each run
    hashes its own TCP ports (one run is one draw)."""
    span = unit.get("predicted_ecmp_range_s")
    if base != "ecmp" or not span:
        return []
    ours = predicted_s(unit, "ours")
    lo, hi = ((t + float(unit["other_s"])) / ours for t in span)
    n = ECMP_SEEDS
    return [f"ECMP predicted over {n} hash draws: x{lo:.2f} to x{hi:.2f} (the mean shown)"]


def unrouted(unit: Mapping[str, Any]) -> list[str]:
    """A line for each ours run the manager did not route (it ran on default routes)."""
    runs = unit.get("routes", {}).get("ours", [])
    return [
        f"ours run {i + 1} ran on default routes ({r.get('state')}: {r.get('detail') or '?'})"
        for i, r in enumerate(runs)
        if r is not None and not r.get("flow_mods")
    ]


def switch_waits(unit: Mapping[str, Any], routings: Sequence[str]) -> str:
    """How long the switches waited for a core in each routing's runs (CpuMonitor)."""
    cpu = unit.get("cpu", {})
    parts = []
    for r in routings:
        if cpu.get(r):
            waits = "/".join(f"{100 * c['switch_wait']:.0f}" for c in cpu[r])
            parts.append(f"{r} {waits} %")
    return f"the switches waited for a core {', '.join(parts)} of the run" if parts else ""


def gap_note(measured: float, predicted: float, known: str) -> str:
    """The explanation of a disagreement beyond the tolerance (empty within it)."""
    if measured <= 0 or abs(measured - predicted) / measured <= TOLERANCE:
        return ""
    return f"measured x{measured:.2f} vs predicted x{predicted:.2f}: {known}"


def speedup_row(app: Mapping[str, Any], name: str, unit: Mapping[str, Any], base: str) -> Row:
    """Ours over ``base`` for one unit: measured, predicted, the LP bound's gain."""
    case = f"{app['label']}: ours vs {base}, {app['case']}"
    figure = f"{app['figure']} ({name})"

    def failed_row(why: str) -> Row:
        return Row(EXPERIMENT, figure, case, "speedup", status="failed", reason=why,
                   settings=dict(app["settings"]))  # fmt: skip

    failed = {r: app.get("failed", {}).get(r) for r in (base, "ours")}
    # a routing whose later run failed keeps the figure of the runs before it, said so
    partly = {r: w for r, w in failed.items() if w and unit["measured_s"].get(r)}
    if any(w for r, w in failed.items() if r not in partly):
        return failed_row("; ".join(f"{r}: {w}" for r, w in failed.items() if w))
    t_base, t_ours = mean(unit["measured_s"].get(base)), mean(unit["measured_s"].get("ours"))
    if t_base is None or t_ours is None or t_ours <= 0:
        return failed_row(f"no measurement of {base} or ours")
    measured = t_base / t_ours
    predicted = predicted_s(unit, base) / predicted_s(unit, "ours")
    bound = float(unit["bound_gain"][base])
    cpu = cpu_evidence(unit, (base, "ours"))
    parts = [f"the LP bound allows x{bound:.2f} over {base} for this placement"]
    parts += unrouted(unit) + ecmp_spread(unit, base)
    for r, why in partly.items():
        n = len(unit["measured_s"][r])
        parts.append(f"{r}: a run after the first {n} failed ({why}); the figure is of those {n}")
    for r in (base, "ours"):
        for why in app.get("retried", {}).get(r, []):
            parts.append(f"{r}: a run failed at start and ran once more ({why})")
    known = "; ".join(
        x for x in (unit.get("known_gap", ""), switch_waits(unit, (base, "ours"))) if x
    )
    parts += [p for p in (gap_note(measured, predicted, known),) if p]
    return Row(
        EXPERIMENT,
        figure,
        case,
        "speedup",
        measured=measured,
        predicted=predicted,
        bound=bound,
        settings=dict(app["settings"]),
        status="cpu-bound" if cpu else "ok",
        reason="; ".join(cpu + parts),
        network_limited=not cpu,
        details=unit_details(unit, (base, "ours")),
    )


def unit_details(unit: Mapping[str, Any], routings: Sequence[str]) -> dict[str, Any]:
    """The raw figures behind a row: times per run, predictions, CPU figures."""
    keep = ("measured_s", "predicted_comm_s", "comm_s", "cpu", "wall_s", "routes")
    out: dict[str, Any] = {"other_s": unit["other_s"]}
    for k in keep:
        if k in unit:
            out[k] = {r: unit[k][r] for r in routings if r in unit[k]}
    if "ecmp" in routings:
        out["predicted_ecmp_range_s"] = unit.get("predicted_ecmp_range_s")
    return out


def share_rows(app: Mapping[str, Any], name: str, unit: Mapping[str, Any]) -> list[Row]:
    """How much of the unit is communication, per routing that measured it."""
    rows = []
    for r, shares in unit.get("comm_share", {}).items():
        if not shares:
            continue
        measured = 100 * statistics.fmean(shares)
        sim = float(unit["predicted_comm_s"][r])
        predicted = 100 * sim / (sim + float(unit["other_s"])) if sim > 0 else 0.0
        cpu = cpu_evidence(unit, (r,))
        rows.append(
            Row(
                EXPERIMENT,
                f"{app['figure']} ({name})",
                f"{app['label']}: communication share {SHARE_RUN.get(r, 'under ' + r)}, "
                f"{app['case']}",
                "comm_share_pct",
                measured=measured,
                predicted=predicted,
                settings=dict(app["settings"]),
                status="cpu-bound" if cpu else "ok",
                reason="; ".join([*cpu, unit.get("share_source", "")]).strip("; "),
                network_limited=not cpu,
                details=unit_details(unit, (r,)),
            )
        )
    return rows


def app_rows(app: Mapping[str, Any]) -> list[Row]:
    """Every row of one application: speedups over each baseline, then the shares."""
    if app.get("skipped"):
        return [
            Row(
                EXPERIMENT,
                app["figure"],
                f"{app['label']}",
                "speedup",
                status="skipped",
                reason=app["skipped"],
            )
        ]
    if app.get("error"):
        return [
            Row(
                EXPERIMENT,
                app["figure"],
                f"{app['label']}, {app['case']}",
                "speedup",
                status="failed",
                reason=app["error"],
                settings=dict(app["settings"]),
            )
        ]
    rows: list[Row] = []
    for name, unit in app["units"].items():
        for base in BASELINES:
            if base in app.get("not_run", {}):
                rows.append(
                    Row(
                        EXPERIMENT,
                        f"{app['figure']} ({name})",
                        f"{app['label']}: ours vs {base}, {app['case']}",
                        "speedup",
                        status="skipped",
                        reason=app["not_run"][base],
                    )
                )
            else:
                rows.append(speedup_row(app, name, unit, base))
        rows += share_rows(app, name, unit)
    return rows


def rows(summary: Mapping[str, Any]) -> list[Row]:
    """The report's rows for every application of the summary."""
    return [row for app in summary["apps"].values() for row in app_rows(app)]
