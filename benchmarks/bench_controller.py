"""Controller at scale: a real os-ken controller on hundreds of Open vSwitch bridges.

Run (root, Open vSwitch installed) with ``.venv/bin/python benchmarks/bench_controller.py
[--k K | --large]``: ``fat_tree(K)`` (default 8: 80 switches, 128 hosts; ``--large``:
``fat_tree(16)``, 320 switches, 1024 hosts) as bridges of a private OVS instance in its
own network namespace, joined by patch ports (:mod:`sdnmpi.emu.scale`; hosts are the
model's, routed before they are seen, with no device), under ``sdnmpi controller run``
in that namespace.  Measured and printed:

* discovery: seconds from the first switch's connection to every switch and every
  switch link (LLDP, both ways) known, as the controller logs it, and from the start of
  bridge creation;
* default routes: the first sync's flow-mods, seconds from planning to the last barrier
  reply, flow-mods per second barrier-confirmed; every bridge then holds exactly the
  rules the pure planner computes for the model (checked with ``ovs-ofctl``);
* job routes over the API the manager uses (``install_job``, one request per job; the
  reply comes after every barrier): a job on every host with 4 partners per host
  (a 2-D stencil: ``i +- 1``, ``i +- sqrt(n)``) and one with 16 others (the next
  offsets ``i + 2, i + 3, ...`` that are not the stencil's),
  paths by ECMP (seeded): pairs, flow-mods, seconds from request to confirmation,
  flow-mods and pairs per second; then ``remove_job`` of the larger;
* resync: the controller stopped (SIGTERM) and started again with its job store: the
  switches keep their rules, discovery again, then the sync's flow-mods (the
  difference; 0 when nothing changed) and its seconds;
* memory: the controller's RSS (current and peak) after each phase; ovs-vswitchd's and
  ovsdb-server's RSS and CPU seconds.

With ``--reconnect N``, N switches (every ``len/N``-th bridge) drop their connection and
reconnect while the larger job is being installed (``del-controller``, then
``set-controller`` 0.5 s later): the reply must still come; one taken back saying
``retry`` (a switch lost before confirming) is asked again after the manager's waits
(:data:`sdnmpi.manager.jobrouting.RESYNC_WAITS_S`) and the seconds from the first
request to the installed reply are printed (a refusal at the end still fails the run),
and within 180 s every switch must hold the planned rules again (the defaults and the
jobs installed; the reconnected switches resynced).  This is what stalled the
controller before its sends went through an outbox per connection
(docs/controller-scale.md).

Ratios: against the issue-15 targets (10,000 flow-mods per second; a 1024-host job's
routes within 1 s of the request).  The fabric, the controller and the namespace are
removed on exit, also on failure.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from sdnmpi import catalog
from sdnmpi.controller.planner import Planner
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.core.topology import Topology
from sdnmpi.emu.scale import ControllerProcess, ScaleFabric, add_bridges, scale_fabric
from sdnmpi.manager.jobrouting import RESYNC_WAITS_S
from sdnmpi.manager.planning import pair_routes, pairs_of
from sdnmpi.testing.waits import free_port
from sdnmpi.wire import controller_api

DISCOVERY = re.compile(r"discovery (\w+): (\d+) switches, (\d+) switch links after ([\d.]+) s")
PLANNED = re.compile(r"sync planned in ([\d.]+) s, sent in ([\d.]+) s")
COMPUTED = re.compile(r"default routes computed in ([\d.]+) s")
SYNC = re.compile(r"sync confirmed: (\d+) flow-mods to (\d+) switches in ([\d.]+) s")
TARGET_MODS_PER_S = 10_000
TARGET_JOB_S = 1.0


Pairs = dict[tuple[str, str], list[str]]


def job_pairs(model: Topology, offsets: list[int], seed: int = 1) -> Pairs:
    """Host ``i`` to host ``i + d`` for each offset ``d`` (mod the host count), routed
    by ECMP, as the manager sends them (node names by host pair)."""
    fabric = Fabric(model)
    hosts = np.array([fabric.host_index(h.name) for h in model.hosts], dtype=np.int64)
    src = np.concatenate([hosts for d in offsets])
    dst = np.concatenate([np.roll(hosts, -d) for d in offsets])
    keep = src != dst
    src, dst = src[keep], dst[keep]
    m = src.size
    minus = np.full(m, -1, dtype=np.int64)
    demands = Demands(
        src, dst, np.full(m, 1 << 20), np.zeros(m, dtype=np.int64), minus, minus, ("job",),
        np.array([1]),
    )  # fmt: skip
    routing = route("ecmp", fabric, demands, seed=seed)
    return pairs_of(pair_routes(fabric, demands, routing))


def expected_counts(model: Topology) -> dict[int, int]:
    """Rules per switch the pure planner wants once the model is discovered."""
    planner = Planner(model)
    for s in model.switches:
        planner.switch_up(s.dpid, [], sync=False)
    for ln in model.links:
        if model.is_host(ln.src) or model.is_host(ln.dst):
            continue
        a = (model.switch(ln.src).dpid, ln.src_port)
        b = (model.switch(ln.dst).dpid, ln.dst_port)
        planner.link_up(a, b, sync=False)
        planner.link_up(b, a, sync=False)
    return {s.dpid: len(planner.desired(s.dpid)) for s in model.switches}


def check_rules(fab: ScaleFabric, want: dict[int, int]) -> tuple[int, int]:
    """(bridges holding exactly the planner's rule count, total rules held)."""
    good = total = 0
    for b in fab.bridges:
        n = fab.flow_count(b.bridge)
        total += n
        good += n == want[b.dpid]
    return good, total


def mib(stats: dict[str, float]) -> str:
    return f"RSS {stats.get('rss_mib', 0):.0f} MiB (peak {stats.get('peak_rss_mib', 0):.0f})"


def storm_bridges(fab: ScaleFabric, count: int) -> list[str]:
    """The ``count`` bridges :func:`reconnect_later` reconnects (every ``len/count``-th)."""
    names = [b.bridge for b in fab.bridges]
    return names[:: max(1, len(names) // count)][:count]


def explain_divergence(
    fab: ScaleFabric,
    ctl: ControllerProcess,
    client: controller_api.Client,
    want: dict[int, int],
    stormed: list[str],
) -> None:
    """Print what differs when the rules did not converge: the bridges whose rule count
    is not the defaults plus the controller's job rules, and the controller's view; the
    controller writes its threads' stacks to its log (SIGUSR1: keep it with --logs)."""
    if ctl.proc is not None:
        os.kill(ctl.proc.pid, signal.SIGUSR1)
    jobs = client.send({"op": "rules"}).get("rules", {})
    topo = client.send({"op": "topology"}).get("topology", {})
    names = {sw["name"] for sw in topo.get("switches", [])}
    links = sum(ln["src"] in names and ln["dst"] in names for ln in topo.get("links", []))
    print(f"controller's view: {len(names)} switches, {links} switch links")
    off = []
    for b in fab.bridges:
        n = fab.flow_count(b.bridge)
        planned = want[b.dpid] + int(jobs.get(str(b.dpid), 0))
        if n != planned:
            off.append(f"{b.bridge}{'*' if b.bridge in stormed else ''} {n - planned:+d}")
    print(f"{len(off)} bridges off the plan (* reconnected): {', '.join(off[:40])}")


def reconnect_later(fab: ScaleFabric, ctl: ControllerProcess, count: int) -> threading.Thread:
    """A thread that makes ``count`` bridges drop their controller connection and
    reconnect (0.1 s after it starts, back 0.5 s later); join it."""
    bridges = storm_bridges(fab, count)

    def run() -> None:
        time.sleep(0.1)
        fab.vsctl(*[a for b in bridges for a in ("--", "del-controller", b)][1:])
        time.sleep(0.5)
        fab.vsctl(*[a for b in bridges for a in ("--", "set-controller", b, ctl.target)][1:])
        print(f"{len(bridges)} switches dropped their connection and reconnected")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _ask_again(
    client: controller_api.Client, reply: dict[str, Any], job_id: int, pairs: Pairs, t: float
) -> dict[str, Any]:
    """What the manager does with an install taken back saying ``retry``: ask again
    after its waits; the last reply (``t``: when the first request was sent)."""
    tries = 1
    for wait in RESYNC_WAITS_S:
        if reply["ok"] or reply.get("retry") is not True:
            break
        print(f"job {job_id} taken back {time.monotonic() - t:.2f} s after the request "
              f"({reply['error']}): asked again in {wait} s")  # fmt: skip
        time.sleep(wait)
        reply = client.send({"op": "install_job", "job_id": job_id,
                             "pairs": controller_api.encode_pairs(pairs)})  # fmt: skip
        tries += 1
    if tries > 1:
        state = "installed" if reply["ok"] else "still refused"
        print(f"job {job_id} {state} {time.monotonic() - t:.2f} s after the first request "
              f"({tries} tries)")  # fmt: skip
    return reply


def jobs_and_restart(
    fab: ScaleFabric,
    ctl: ControllerProcess,
    jobs: list[tuple[str, Pairs]],
    want: dict[int, int],
    reconnect: int = 0,
) -> bool:
    """Install the jobs over the API (``reconnect`` switches reconnecting during the
    last one), restart the controller, remove the last job."""
    ok = True
    installed: dict[int, int] = {}  # job id -> its flow-mods (one rule each)
    nhosts, nsw = len(fab.model.hosts), len(fab.bridges)
    client = controller_api.Client(ctl.api_path, timeout_s=300)
    for job_id, (name, pairs) in enumerate(jobs, 1):
        cpu = ctl.stats().get("cpu_s", 0.0), fab.daemon_stats()["ovs-vswitchd"]["cpu_s"]
        storm = reconnect_later(fab, ctl, reconnect) if reconnect and job_id == len(jobs) else None
        syncs = len(SYNC.findall(ctl.log()))
        t = time.monotonic()
        reply = client.send({"op": "install_job", "job_id": job_id,
                             "pairs": controller_api.encode_pairs(pairs)})  # fmt: skip
        wall = time.monotonic() - t
        if storm is not None:
            storm.join()
            reply = _ask_again(client, reply, job_id, pairs, t)
            wall = time.monotonic() - t
            # converged: every switch holds the defaults and the jobs installed so far
            # again (the reconnected ones resynced as their links are found again)
            # the controller's job rules, read again each time (an install asked again
            # also resyncs the reconnected switches: its flow-mods are not its rules;
            # links reported gone change the plan until LLDP finds them again)
            deadline, total, expect = time.monotonic() + 180, -1, 0
            while time.monotonic() < deadline and total != expect:
                time.sleep(1.0)
                held = client.send({"op": "rules"}).get("rules", {})
                expect = sum(want.values()) + sum(int(n) for n in held.values())
                total = check_rules(fab, want)[1]
            resynced = SYNC.findall(ctl.log())[syncs:]
            print(
                f"after the reconnections: {total}/{expect} rules held "
                f"{time.monotonic() - t:.1f} s after the request; {len(resynced)} syncs "
                f"confirmed meanwhile, flow-mods {[int(m[0]) for m in resynced]}"
            )
            ok &= total == expect
            if total != expect:
                explain_divergence(fab, ctl, client, want, storm_bridges(fab, reconnect))
        if not reply["ok"]:
            print(f"job {job_id} ({name}) refused after {wall:.3f} s: {reply['error']}")
            ok = False
            continue
        fm = installed[job_id] = int(reply["flow_mods"])
        print(
            f"job {job_id} ({name}, {nhosts} hosts): {len(pairs)} pairs, {fm} flow-mods on "
            f"{reply['switches']} switches, confirmed in {reply['seconds']:.3f} s "
            f"(request to reply {wall:.3f} s): {fm / wall:,.0f} flow-mods/s, "
            f"{len(pairs) / wall:,.0f} paths/s; {wall / TARGET_JOB_S:.2f}x the 1 s target; "
            f"CPU s: controller {ctl.stats().get('cpu_s', 0.0) - cpu[0]:.2f}, ovs-vswitchd "
            f"{fab.daemon_stats()['ovs-vswitchd']['cpu_s'] - cpu[1]:.2f}"
        )
        ok &= bool(reply["ok"])
    print(f"controller after jobs: {mib(ctl.stats())}")
    _, total = check_rules(fab, want)
    print(f"rules held with both jobs: {total} ({total - sum(want.values())} job rules)")
    ctl.stop()
    t = time.monotonic()
    ctl.start()
    found = ctl.wait_log(DISCOVERY, 120 + 2 * nsw)
    sync = ctl.wait_log(SYNC, 600)
    print(
        f"restart: discovery {found[1]} {float(found[4]):.2f} s after the first switch; "
        f"resync {sync[1]} flow-mods in {float(sync[3]):.3f} s; "
        f"{time.monotonic() - t:.1f} s from start to confirmed"
    )
    ok &= found[1] == "complete" and int(sync[1]) == 0
    if len(jobs) not in installed:
        return ok
    t = time.monotonic()
    reply = client.send({"op": "remove_job", "job_id": len(jobs)})
    print(
        f"remove_job {len(jobs)}: {reply['flow_mods']} flow-mods, "
        f"confirmed in {reply['seconds']:.3f} s "
        f"({time.monotonic() - t:.3f} s request to reply)"
    )
    return ok


def run(k: int, workdir: Path, reconnect: int = 0) -> bool:
    model = fat_tree(k)
    nsw, nhosts = len(model.switches), len(model.hosts)
    nlinks = sum(not (model.is_host(ln.src) or model.is_host(ln.dst)) for ln in model.links)
    print(f"== fat_tree({k}): {nsw} switches, {nlinks} switch links, {nhosts} hosts")
    topo_file = workdir / "topology.json"
    catalog.save_topology(model, topo_file)
    t = time.perf_counter()
    want = expected_counts(model)
    print(
        f"pure planner, whole model: {sum(want.values())} rules in {time.perf_counter() - t:.1f} s"
    )
    side = math.isqrt(nhosts)
    near = [1, -1, side, -side]
    taken = {d % nhosts for d in near}
    far = [d for d in range(2, nhosts) if d % nhosts not in taken][:16]
    stencil = job_pairs(model, near)
    dense = job_pairs(model, far, seed=2)
    ok = True
    with scale_fabric(model, f"k{k}", workdir) as fab:
        # hold: the first sync waits for complete discovery (320 switches' LLDP takes
        # longer than the default 20 s)
        ctl = ControllerProcess(fab, free_port(), topo_file, workdir, "--hold", "600")
        try:
            jobs = [("stencil", stencil), ("16-partner", dense)]
            ok &= measure(fab, ctl, want, jobs, reconnect)
        finally:
            ctl.stop()
    print("OK" if ok else "FAILED")
    return ok


def measure(
    fab: ScaleFabric,
    ctl: ControllerProcess,
    want: dict[int, int],
    jobs: list[tuple[str, Pairs]],
    reconnect: int = 0,
) -> bool:
    """Discovery, default routes, the jobs, restart (the controller stopped by the caller)."""
    ok = True
    nsw = len(fab.bridges)
    nlinks = len(fab.patches)
    ctl.start()
    t0 = time.monotonic()
    add_bridges(fab, ctl.target)
    made = time.monotonic() - t0
    found = ctl.wait_log(DISCOVERY, 120 + 2 * nsw)
    wall = time.monotonic() - t0
    print(
        f"bridges and patch links made in {made:.1f} s, then connected; "
        f"discovery {found[1]}: {found[2]}/{nsw} switches, "
        f"{found[3]}/{nlinks} links, {float(found[4]):.2f} s after the first switch "
        f"({wall:.1f} s after bridge creation began)"
    )
    ok &= found[1] == "complete"
    sync = ctl.wait_log(SYNC, 600)
    # the routes are computed with the lock released, then the sync plans the rest
    computed = COMPUTED.search(ctl.log()[: sync.start()])
    ahead = float(computed[1]) if computed is not None else 0.0
    mods, secs = int(sync[1]), float(sync[3]) + ahead
    planned = float(ctl.wait_log(PLANNED, 1)[1]) + ahead
    wire = secs - planned
    print(
        f"default routes: {mods} flow-mods to {sync[2]} switches confirmed in {secs:.2f} s "
        f"(planned in {planned:.2f} s, {ahead:.2f} s of it with the lock released, "
        f"then sent and confirmed in {wire:.2f} s): "
        f"{mods / secs:,.0f} flow-mods/s with planning, {mods / wire:,.0f} without "
        f"({mods / wire / TARGET_MODS_PER_S:.2f}x the 10,000/s target); "
        f"{time.monotonic() - t0:.1f} s after bridge creation began"
    )
    good, total = check_rules(fab, want)
    print(f"rules held: {good}/{nsw} bridges exactly as planned ({total} rules)")
    ok &= good == nsw
    print(f"controller after defaults: {mib(ctl.stats())}")
    ok &= jobs_and_restart(fab, ctl, jobs, want, reconnect)
    print(f"controller at the end: {mib(ctl.stats())}")
    for name, st in fab.daemon_stats().items():
        print(f"{name}: {mib(st)}, {st['cpu_s']:.1f} CPU s")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=8, help="fat_tree(K) (even; default 8)")
    parser.add_argument("--large", action="store_true", help="fat_tree(16): 320 switches")
    parser.add_argument("--logs", type=Path, help="copy the controller's logs here")
    parser.add_argument(
        "--reconnect", type=int, default=0, help="switches reconnecting during the last job"
    )
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("ovs-vswitchd") is None:
        print("bench_controller: skipped (needs root and Open vSwitch)")
        return
    workdir = Path(tempfile.mkdtemp(prefix="sdnmpi-ctlscale-"))
    try:
        ok = run(16 if args.large else args.k, workdir, args.reconnect)
    finally:
        if args.logs is not None:
            args.logs.mkdir(parents=True, exist_ok=True)
            for log in workdir.glob("controller-*.log"):
                shutil.copy(log, args.logs / log.name)
        shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
