"""Which part of the interposed library costs Open MPI's small Bcasts (exp_bcast's ab
block: 8-9 % at 4-8 KiB)?

Run as root: ``.venv/bin/python scripts/diag_bcast_small.py [ROUNDS]``.  On an idle
8-host fabric, rounds of 4 and 8 KiB Bcasts, the ways in alternating order:

- ``plain``: the library's Bcast;
- ``preload-static``: libsdnmpi preloaded in bcast mode with a static group (no
  registration with the node agents);
- ``preload-register``: preloaded in register mode only (no bcast mode);
- ``register,bcast``: exp_bcast's replicated way.

Prints each run and the medians in microseconds.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import demo_fabric as harness
import exp_bcast as x

from sdnmpi import catalog
from sdnmpi.emu import agents

LIBRARY = "openmpi"
SIZES = (4096, 8192)
#: The fabric's rate factor: 10 Mbit/s links.
SCALE = 0.01


def variants(name: str, link_bps: float) -> dict[str, list[str]]:
    """Each way's rank environment on links of ``link_bps``."""
    plain = x.way_env(name, LIBRARY, "library", "d", link_bps)
    full = x.way_env(name, LIBRARY, "replicated", "d", link_bps)
    preload = [e for e in full if e.startswith("LD_PRELOAD=")]
    agent = [e for e in full if e.startswith(("SDNMPI_AGENT_SOCKET=", "SDNMPI_JOB="))]
    static = ["SDNMPI_MODE=bcast", "SDNMPI_BCAST_GROUP=239.192.9.9:47000"]
    return {
        "plain": plain,
        "preload-static": plain + preload + static,
        "preload-register": plain + preload + agent + ["SDNMPI_MODE=register"],
        "register,bcast": full,
    }


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    topo = catalog.load_topology(x.TOPOLOGY)
    hosts, _ = x.spread(topo, 8)
    name = f"bd-{os.getpid()}"
    res: dict[str, list[dict[int, float]]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        harness.cluster(Path(tmp), topo, name, "diag", len(topo.switches), SCALE) as ctl,
    ):
        agents.up(name, controller_api=ctl.api_path)
        ways = variants(name, x.link_bps(topo, SCALE))
        for r in range(rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for way in order:
                # a fresh job name per run: the agents register each run's ranks anew
                env = [f"SDNMPI_JOB=d{r}-{way}" if e.startswith("SDNMPI_JOB=") else e
                       for e in ways[way]]  # fmt: skip
                times, _ = x.run_sweep(name, hosts, LIBRARY, way, SIZES, env, 90, 1.0)
                res.setdefault(way, []).append(times)
                print(r, way, {k: round(s * 1e6) for k, s in times.items()}, flush=True)
    for way, runs in res.items():
        print(way, {k: round(statistics.median(t[k] for t in runs) * 1e6) for k in runs[0]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
