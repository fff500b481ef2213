"""Probe: how fast a full-duplex exchange runs on a leaf-spine fabric, on one leaf and
across a spine (docs/emulator-fidelity.md, "A full-duplex exchange ran slow in some
runs"; docs/mpi-duplex.md, "Socket buffers").

Run as root: ``.venv/bin/python scripts/probe_exchange.py [--spines 4] [--pairs 1,2,4]
[--no-yield] [--reps 2] [--env VAR=VALUE ...] [--sysctl KEY=VALUE ...]``.  ``--env``
overrides a variable of the duplex settings in the ranks (``--env
OMPI_MCA_btl_tcp_sndbuf=0 --env OMPI_MCA_btl_tcp_rcvbuf=0``: the kernel's autotuned
socket buffers); ``--sysctl`` sets a sysctl in every host's namespace after the fabric
is up (``--sysctl "net.ipv4.tcp_wmem=4096 16384 4194304"``).

Brings up leaf_spine(SPINES, 2, 4) with the controller's D-mod-K routes (so pairs never
share a link), then for k = PAIRS rank pairs exchanging 512 KiB each way (four times,
``sdnmpi-replay``, Open MPI with the full-duplex settings) prints the time per exchange
with the pairs on one leaf each (h1-h2, h3-h4, ...) and across a spine (h1-h5, h2-h6,
...), the model's time for one exchange alone on the links (one direction at the
shaped rate times the measured goodput), and the hosts' TCP counters over the run
(segments sent, retransmitted, retransmission timeouts).  The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import demo_fabric as harness

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.emu.tcpstats import TcpLoss
from sdnmpi.formats.replay import save_replay
from sdnmpi.node.duplex import duplex_env

REPLAY = harness.ROOT / "build" / "openmpi" / "sdnmpi-replay"
EXCHANGE_BYTES = 512 * 1024
GOODPUT = 0.956  # sdnmpi calibrate on this machine, 2026-11-26


def hosts_for(k: int, across: bool) -> tuple[str, ...]:
    """k pairs: on one leaf each (h1-h2, h3-h4, h5-h6, h7-h8) or across (h1-h5, ...).

    >>> hosts_for(2, False), hosts_for(2, True)
    (('h1', 'h2', 'h3', 'h4'), ('h1', 'h5', 'h2', 'h6'))
    """
    if across:
        return tuple(h for i in range(k) for h in (f"h{i + 1}", f"h{i + 5}"))
    return tuple(f"h{i + 1}" for i in range(2 * k))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--spines", type=int, default=4)
    ap.add_argument("--pairs", default="1,2,4", help="Pair counts, at most 4.")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--no-yield", action="store_true", help="Ranks busy-poll.")
    ap.add_argument("--link-scale", type=float, default=0.01)
    ap.add_argument("--env", action="append", default=[], help="VAR=VALUE in the ranks.")
    ap.add_argument("--sysctl", action="append", default=[], help="KEY=VALUE in the hosts.")
    args = ap.parse_args()
    bad = [kv for kv in args.env + args.sysctl if kv.partition("=")[0] in ("", kv)]
    if bad:
        print(f"probe_exchange: not NAME=VALUE: {', '.join(bad)}", file=sys.stderr)
        return 2
    overrides = dict(kv.split("=", 1) for kv in args.env)
    if os.geteuid() != 0:
        print("probe_exchange: needs root (emulated fabric)", file=sys.stderr)
        return 2
    harness.build("replay")
    topo = leaf_spine(args.spines, 2, 4, host_bps=1e9, uplink_bps=1e9, name="probe")
    env = [f"{k}={v}" for k, v in {**duplex_env("openmpi"), **overrides}.items()]
    env += [] if args.no_yield else ["OMPI_MCA_mpi_yield_when_idle=1"]
    model_s = EXCHANGE_BYTES * 8 / (1e9 * args.link_scale * GOODPUT)
    name = f"px-{os.getpid()}"
    out = []
    with (
        tempfile.TemporaryDirectory(prefix="sdnmpi-px-") as tmp,
        harness.cluster(Path(tmp), topo, name, "px", len(topo.switches), args.link_scale),
    ):
        for netns in harness.host_namespaces(name):
            for kv in args.sysctl:
                subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-qw", kv], check=True)
        for k in (int(x) for x in args.pairs.split(",")):
            cells = [(r, r ^ 1, EXCHANGE_BYTES) for r in range(2 * k)]
            path = Path(tmp) / f"x{k}.replay"
            save_replay(Pattern(f"x{k}", 2 * k, (Phase.from_cells("x", cells, repeat=4),)), path)
            for across in (False, True):
                for rep in range(args.reps):
                    program = [str(REPLAY), "--iters", "2", str(path), "--json"]
                    hosts = hosts_for(k, across)
                    with TcpLoss(harness.host_namespaces(name, hosts)) as tcp:
                        doc, _ = harness.mpirun_json(name, hosts, program, env, 300)
                    t = float(doc["phases"][0]["time_s"])
                    where = "across" if across else "leaf"
                    out.append({"pairs": k, "where": where, "rep": rep, "time_s": t, **tcp.result})
                    print(f"{k} pair(s) {where}: {t * 1e3:.0f} ms per exchange "
                          f"(model alone {model_s * 1e3:.0f} ms); TCP {tcp.result}",
                          flush=True)  # fmt: skip
    print(json.dumps({"spines": args.spines, "yield": not args.no_yield, "env": overrides,
                      "sysctl": args.sysctl, "runs": out}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
