"""Probe: one Open MPI ``MPI_Alltoall`` of 4 ranks, measured against the model, with and
without contention (docs/emulator-fidelity.md, "An alltoall without contention").

Run as root: ``.venv/bin/python scripts/probe_alltoall.py [--sizes 16384,65536,262144]
[--link-scale 0.02] [--iters 10] [--calibration FILE]``.

Brings up ``exp_apps``'s fabric (leaf_spine(2, 4, 2), the controller's D-mod-K routes)
and times ``sdnmpi-bench coll --op alltoall`` (bytes per rank pair) on two placements,
with the full-duplex settings (every message eager) and yielding idle ranks:

- ``hpcc``: HPCC's ranks in ``exp_apps`` (h6, h7, h4, h8), where D-mod-K puts 4 flows
  on one link;
- ``spread``: h1, h3, h5, h7, one host per leaf, where no link carries more than a
  host's own 3 flows each way (the case of ``ours``' routes).

Beside each, the model's time (``ranks`` mode, one phase of 12 flows) on
``--calibration`` (default: the report's) at ``--link-scale``: in lockstep and with the
calibration's ``exchange_cv``.  The last line is JSON.
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
from sdnmpi.node.duplex import duplex_env
from sdnmpi.sim.calibration import Calibration

PLACEMENTS = {"hpcc": ("h6", "h7", "h4", "h8"), "spread": ("h1", "h3", "h5", "h7")}
CALIBRATION = harness.ROOT / "docs" / "results" / "reproduce-full" / "calibration-2026-11-28.json"


def model(
    cal: Calibration, fabric: Fabric, hosts: tuple[str, ...], size: int
) -> tuple[float, float, int]:
    """Seconds per alltoall in lockstep and with ``cal.exchange_cv``; the most flows on
    one link."""
    pat = catalog.load_pattern(f"alltoall:nprocs={len(hosts)},bytes={size},library=openmpi")
    demands = Demands.from_pattern(fabric, pat, Placement(hosts))
    routing = route("dmodk", fabric, demands)
    times = [
        dataclasses.replace(cal, exchange_cv=cv)
        .simulate(fabric, demands, routing, "openmpi-duplex", mode="ranks")
        .total_s
        for cv in (0.0, cal.exchange_cv)
    ]
    _platform, flows, _ = cal.prepared(fabric, demands, routing, "openmpi-duplex")
    return times[0], times[1], int(flows.incidence.sum(axis=0).max())


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="16384,65536,262144,1048576")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--link-scale", type=float, default=0.02)
    ap.add_argument("--calibration", type=Path, default=CALIBRATION)
    ap.add_argument("--placements", default="hpcc,spread", help="hpcc, spread or both.")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("probe_alltoall: needs root (emulated fabric)", file=sys.stderr)
        return 2
    wanted = [p for p in args.placements.split(",") if p]
    if not wanted or any(p not in PLACEMENTS for p in wanted):
        print(f"probe_alltoall: placements are {', '.join(PLACEMENTS)}", file=sys.stderr)
        return 2
    cal = dataclasses.replace(Calibration.load(args.calibration), link_scale=args.link_scale)
    harness.build("mpibench")
    topo = leaf_spine(2, 4, 2, host_bps=1e9, uplink_bps=1e9, name="apps-leaf-spine")
    fabric = Fabric(topo)
    env = [f"{k}={v}" for k, v in duplex_env("openmpi").items()]
    env.append("OMPI_MCA_mpi_yield_when_idle=1")
    name = f"pa-{os.getpid()}"
    out = []
    with (
        tempfile.TemporaryDirectory(prefix="sdnmpi-pa-") as tmp,
        harness.cluster(Path(tmp), topo, name, "pa", len(topo.switches), args.link_scale),
    ):
        for label in wanted:
            hosts = PLACEMENTS[label]
            for size in (int(s) for s in args.sizes.split(",")):
                lock_s, varied_s, share = model(cal, fabric, hosts, size)
                bench = [str(harness.BENCH), "coll", "--op", "alltoall", "--size", str(size)]
                bench += ["--iters", str(args.iters), "--warmup", "2", "--json"]
                doc, _ = harness.mpirun_json(name, hosts, bench, env, 900)
                measured_s = float(doc["results"][0]["time_avg_s"])
                row = {"placement": label, "hosts": hosts, "size_bytes": size,
                       "measured_s": measured_s, "model_lockstep_s": lock_s,
                       "model_varied_s": varied_s, "flows_per_link_max": share}  # fmt: skip
                out.append(row)
                print(
                    f"{label} {size >> 10} KiB per pair: measured {measured_s:.4f} s, model "
                    f"{lock_s:.4f} s in lockstep, {varied_s:.4f} s varied "
                    f"({measured_s / lock_s - 1:+.0%}); at most {share} flows on a link",
                    flush=True,
                )
    print(json.dumps({"link_scale": args.link_scale, "source": cal.source, "runs": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
