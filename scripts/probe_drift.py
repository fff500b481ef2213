"""Probe: Open MPI's Allreduce on routes without contention, against the model in
lockstep and with its exchanges' measured variation (docs/emulator-fidelity.md,
"Collectives run without barriers").

Run as root: ``.venv/bin/python scripts/probe_drift.py [--sizes 131072,1048576,4194304]
[--iters 5]``.

Brings up leaf_spine(4, 2, 4) with the controller's D-mod-K routes: eight ranks on
h1..h8 in order, so Rabenseifner's exchanges (Open MPI's algorithm at these sizes)
cross the spines to distinct destinations or stay on a leaf, and no two flows of a
step share a link (the script checks this in the model).  For each size, with the
full-duplex settings (every message eager), it measures:

1. ``MPI_Allreduce`` itself (``sdnmpi-bench coll``), the slowest rank's mean;
2. the same exchanges replayed with a barrier after each step (``sdnmpi-replay
   --barrier``): each step's time and how much the ranks' exchange times varied in it
   (``wait_cv``);
3. the same replayed without barriers (``--no-barrier``), as the collective runs.

and prints beside them the model's time (``ranks`` mode) on ``--calibration`` (``sdnmpi
calibrate``'s file; without one, the nominal goodput 0.956): in lockstep (its
``exchange_cv`` set to 0), with its ``exchange_cv``, and with this run's own variation
(the steps' ``wait_cv`` weighted by their time).  The last line is JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import demo_fabric as harness

from sdnmpi import catalog
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import route
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.formats.replay import save_replay
from sdnmpi.node.duplex import duplex_env
from sdnmpi.sim.calibration import Calibration

REPLAY = harness.ROOT / "build" / "openmpi" / "sdnmpi-replay"
HOSTS = tuple(f"h{i}" for i in range(1, 9))


def model(
    fabric: Fabric, size: int, cal: Calibration, own_cv: float
) -> tuple[float, float, float, float]:
    """Seconds per Allreduce on ``cal`` in lockstep, with its ``exchange_cv`` and with
    ``own_cv``; and the most flows that share a link in any step (1: no contention)."""
    pat = catalog.load_pattern(f"allreduce:nprocs=8,bytes={size},library=openmpi")
    demands = Demands.from_pattern(fabric, pat, Placement(HOSTS))
    routing = route("dmodk", fabric, demands)
    proto = "openmpi-duplex"
    times = [
        dataclasses.replace(cal, exchange_cv=cv)
        .simulate(fabric, demands, routing, proto, mode="ranks")
        .total_s
        for cv in (0.0, cal.exchange_cv, own_cv)
    ]
    _platform, flows, _ = cal.prepared(fabric, demands, routing, proto)
    share = 0
    for ph in range(flows.nphases):
        rows = flows.phase_rows(ph)
        per_arc = flows.incidence[rows].sum(axis=0)
        share = max(share, int(per_arc.max()))
    return times[0], times[1], times[2], float(share)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="131072,1048576,4194304")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--link-scale", type=float, default=0.01)
    ap.add_argument("--calibration", type=Path, help="sdnmpi calibrate's output.")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("probe_drift: needs root (emulated fabric)", file=sys.stderr)
        return 2
    cal = Calibration.load_or_nominal(args.calibration, args.link_scale)
    if args.calibration is None:
        cal = dataclasses.replace(cal, goodput=0.956)
    harness.build("replay", "mpibench")
    topo = leaf_spine(4, 2, 4, host_bps=1e9, uplink_bps=1e9, name="drift")
    fabric = Fabric(topo)
    env = [f"{k}={v}" for k, v in duplex_env("openmpi").items()]
    env.append("OMPI_MCA_mpi_yield_when_idle=1")
    name = f"pd-{os.getpid()}"
    out = []
    with (
        tempfile.TemporaryDirectory(prefix="sdnmpi-pd-") as tmp,
        harness.cluster(Path(tmp), topo, name, "pd", len(topo.switches), args.link_scale),
    ):
        for size in (int(s) for s in args.sizes.split(",")):
            pat = catalog.load_pattern(f"allreduce:nprocs=8,bytes={size},library=openmpi")
            path = Path(tmp) / f"ar{size}.replay"
            save_replay(pat, path)
            bench = [str(harness.BENCH), "coll", "--op", "allreduce", "--min", str(size)]
            bench += ["--max", str(size), "--iters", str(args.iters), "--warmup", "1", "--json"]
            doc, _ = harness.mpirun_json(name, HOSTS, bench, env, 900)
            coll_s = float(doc["results"][0]["time_max_s"])
            replay = [str(REPLAY), "--iters", str(args.iters), "--json"]
            with_b, _ = harness.mpirun_json(name, HOSTS, [*replay, str(path)], env, 900)
            without, _ = harness.mpirun_json(
                name, HOSTS, [*replay, "--no-barrier", str(path)], env, 900
            )
            steps = with_b["phases"]
            step_cv = [float(p["wait_cv"]) for p in steps]
            weight = sum(float(p["wait_avg_s"]) for p in steps)
            cv = sum(float(p["wait_avg_s"]) * c for p, c in zip(steps, step_cv, strict=True))
            cv = min(cv / weight, 1.0)
            t_lock, t_cal, t_own, share = model(fabric, size, cal, cv)
            row = {
                "size_bytes": size,
                "allreduce_s": coll_s,
                "replay_barrier_s": float(with_b["total_s"]),
                "replay_no_barrier_s": float(without["total_s"]),
                "step_s": [float(p["time_s"]) for p in steps],
                "step_wait_cv": step_cv,
                "own_cv": cv,
                "calibration_cv": cal.exchange_cv,
                "model_lockstep_s": t_lock,
                "model_calibration_s": t_cal,
                "model_own_cv_s": t_own,
                "flows_per_link_max": share,
            }
            out.append(row)
            print(
                f"{size >> 10} KiB: Allreduce {coll_s:.3f} s, replay with barriers "
                f"{row['replay_barrier_s']:.3f} s, without {row['replay_no_barrier_s']:.3f} s; "
                f"steps' exchange times vary by {cv:.3f} "
                f"({', '.join(f'{c:.3f}' for c in step_cv)}); model: lockstep {t_lock:.3f} s, "
                f"with the calibration's variation ({cal.exchange_cv:.3f}) {t_cal:.3f} s, "
                f"with this run's {t_own:.3f} s; at most {share:.0f} flow(s) per link in a step",
                flush=True,
            )
    summary = {"topology": "leaf_spine(4, 2, 4)", "hosts": HOSTS, "source": cal.source}
    print(json.dumps({**summary, "runs": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
