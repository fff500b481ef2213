"""The os-ken controller on a real emulated fabric with loops: discovery, pingall, restart.

One controller process and one leaf_spine(2, 2, 2) fabric for the module (see
conftest).  Measured figures are printed (run with ``-s``).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdnmpi import catalog
from sdnmpi.controller import layout, measure
from sdnmpi.controller.planner import Planner
from sdnmpi.emu import runner
from sdnmpi.formats.native import topology_from_dict
from sdnmpi.testing.waits import wait_for
from tests.controller_integration.conftest import Cluster, discovery
from tests.controller_integration.support import (
    DEFAULT_COOKIE,
    all_flows,
    api,
    our_flows,
    port_packets,
)
from tests.emu.support import ofctl, port_rx_bytes, sdnmpi, vsctl

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]


def bridge(cluster: Cluster, switch: str) -> str:
    return next(b.bridge for b in cluster.plan.bridges if b.switch == switch)


def ping(cluster: Cluster, src: str, dst: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = runner.host_argv(cluster.plan, src, ["ping", *args, cluster.plan.host(dst).ip])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def expected_default_rules(cluster: Cluster) -> dict[str, list[str]]:
    """What the pure planner installs for the complete model, default-route kind only."""
    planner = Planner(cluster.model)
    model = cluster.model
    for s in model.switches:
        planner.switch_up(s.dpid, sync=False)
    for ln in model.links:
        if model.is_host(ln.src) or model.is_host(ln.dst):
            continue
        a = (model.switch(ln.src).dpid, ln.src_port)
        b = (model.switch(ln.dst).dpid, ln.dst_port)
        planner.link_up(a, b, sync=False)
        planner.link_up(b, a, sync=False)
    planner.sync()
    return {
        s.name: sorted(
            r.render() for r in planner.desired(s.dpid) if layout.kind_of(r.cookie) == "default"
        )
        for s in model.switches
    }


def test_lldp_finds_every_switch_link(cluster: Cluster):
    switches, links, secs = discovery(cluster.controller.log())
    assert (switches, links) == (4, 4)
    print(f"\nLLDP discovery: 4 switches, 4 switch links in {secs:.2f} s after the first switch")


def test_pingall_across_loops_without_storm(cluster: Cluster):
    plan = cluster.plan
    before = sum(port_packets(plan, b.bridge) for b in plan.bridges)
    t0 = time.monotonic()
    failed = []
    for src, dst in itertools.permutations([h.name for h in cluster.model.hosts], 2):
        if ping(cluster, src, dst, "-c", "1", "-W", "2").returncode != 0:
            failed.append((src, dst))
    elapsed = time.monotonic() - t0
    assert failed == []
    time.sleep(1.0)
    after = sum(port_packets(plan, b.bridge) for b in plan.bridges)
    # 12 pings (+ ARP, LLDP every ~1 s per port) cross at most 3 switches: a few hundred
    # packets; a broadcast storm in the loops would be millions.
    print(f"\npingall 12/12 in {elapsed:.1f} s, {after - before} switch-port packets")
    assert after - before < 3000


def test_default_routes_installed_with_their_cookie(cluster: Cluster):
    want = expected_default_rules(cluster)
    got = {
        b.switch: [ln for ln in our_flows(cluster.plan, b.bridge) if DEFAULT_COOKIE in ln]
        for b in cluster.plan.bridges
    }
    assert got == want
    counts = {k: len(v) for k, v in all_flows(cluster.plan).items()}
    print(f"\ndefault-route rules {sum(len(v) for v in got.values())}, sdnmpi rules {counts}")
    assert all(len(v) >= 1 for v in got.values())


def test_port_statistics_written(cluster: Cluster):
    path = cluster.controller.stats_path
    wait_for("port statistics", lambda: path.exists() and '"series"' in path.read_text(), 10)
    wait_for("rates", lambda: len(json.loads(path.read_text())["series"]) > 0, 10)
    data = json.loads(path.read_text())
    assert {c["dpid"] for c in data["counters"]} == {1, 2, 3, 4}


def test_plot_stats_writes_a_png(cluster: Cluster, tmp_path):
    png = tmp_path / "ports.png"
    res = sdnmpi("controller", "plot-stats", str(cluster.controller.stats_path), "-o", str(png))
    assert res.returncode == 0, res.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def job_rules(cluster: Cluster) -> dict[str, list[str]]:
    ck = f"cookie={layout.job_cookie(42):#x}"
    return {k: [ln for ln in v if ck in ln] for k, v in all_flows(cluster.plan).items()}


def test_job_routes_installed_confirmed_and_removed(cluster: Cluster):
    ctl = cluster.controller
    assert stat.S_IMODE(os.stat(ctl.api_path).st_mode) == 0o600
    # D-mod-K sends h1 -> h3 through spine1 (leaf1 port 3); the job takes spine2.
    assert any(
        "dl_dst=02:00:00:00:00:03 actions=output:3" in ln
        for ln in our_flows(cluster.plan, bridge(cluster, "leaf1"))
    )
    pairs = {
        "h1>h3": ["h1", "leaf1", "spine2", "leaf2", "h3"],
        "h3>h1": ["h3", "leaf2", "spine2", "leaf1", "h1"],
    }
    reply = api(ctl, {"op": "install_job", "job_id": 42, "pairs": pairs})
    assert reply["ok"] is True, reply
    assert reply["flow_mods"] == 4
    rules = job_rules(cluster)
    assert {k: len(v) for k, v in rules.items()} == {
        "leaf1": 1,
        "leaf2": 1,
        "spine1": 0,
        "spine2": 2,
    }
    assert "actions=output:4" in rules["leaf1"][0]
    spine2 = bridge(cluster, "spine2")
    before = port_rx_bytes(cluster.plan, spine2)
    assert ping(cluster, "h1", "h3", "-c", "20", "-i", "0.05", "-s", "1000").returncode == 0
    after = port_rx_bytes(cluster.plan, spine2)
    assert after[1] - before[1] >= 20 * 1000  # h1's pings entered spine2 from leaf1
    print(f"\njob 42: {reply['flow_mods']} flow-mods confirmed in {reply['seconds']} s")
    held = api(ctl, {"op": "jobs"})
    assert held == {"ok": True, "jobs": {"42": pairs}}
    live = api(ctl, {"op": "topology"})
    assert live["ok"] is True
    topo = topology_from_dict(live["topology"])
    assert {h.name for h in topo.hosts} == {h.name for h in cluster.model.hosts}
    assert len(topo.links) == len(cluster.model.links)
    bad = api(ctl, {"op": "install_job", "job_id": 43, "pairs": {"h1>h9": ["h1", "leaf1", "h9"]}})
    assert bad["ok"] is False and "h9" in str(bad["error"])
    assert api(ctl, {"op": "bogus"})["ok"] is False
    removed = api(ctl, {"op": "remove_job", "job_id": 42})
    assert removed["ok"] is True, removed
    assert all(v == [] for v in job_rules(cluster).values())
    assert api(ctl, {"op": "remove_job", "job_id": 42})["ok"] is False
    assert api(ctl, {"op": "jobs"}) == {"ok": True, "jobs": {}}


def test_controller_restart_keeps_traffic_and_resyncs(cluster: Cluster):
    ctl = cluster.controller
    before = all_flows(cluster.plan)
    argv = runner.host_argv(
        cluster.plan, "h1", ["ping", "-i", "0.1", "-w", "8", cluster.plan.host("h4").ip]
    )
    pinger = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1.0)
        t0 = time.monotonic()
        assert ctl.stop() == 0
        ctl.start()
        wait_for("rediscovery", lambda: "discovery complete" in ctl.log(), 30)
        resync_s = time.monotonic() - t0
        out, _ = pinger.communicate(timeout=30)
    finally:
        if pinger.poll() is None:
            pinger.kill()
            pinger.wait()
    found = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    assert found is not None, out
    sent, received = int(found.group(1)), int(found.group(2))
    log = ctl.log()
    mods = re.findall(r"sending (\d+) flow-mods", log)
    holds = re.findall(r"holds (\d+) sdnmpi rules", log)
    print(
        f"\nrestart: back in sync {resync_s:.2f} s after SIGTERM, ping {received}/{sent}, "
        f"rules reported by switches {holds}, flow-mods after restart: "
        f"{mods or 0}"
    )
    assert sent >= 50
    assert received == sent
    assert all_flows(cluster.plan) == before
    assert "sending" not in log  # nothing to change: the switches already hold the rules
    assert ping(cluster, "h2", "h3", "-c", "1", "-W", "2").returncode == 0


def _bench() -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT), "mpibench"], check=True, capture_output=True)
    exe = ROOT / "build" / "openmpi" / "sdnmpi-bench"
    if not exe.exists():
        pytest.fail("sdnmpi-bench (Open MPI) not built: apt-get install openmpi-bin libopenmpi-dev")
    return exe


def test_controller_restart_during_mpi_job(cluster: Cluster):
    """Open MPI ranks stream h1 -> h3 on job routes through spine2 while the controller
    restarts: the job completes, its rules stay (restored from --state-file, no flow-mod
    sent) and its bytes crossed spine2, not D-mod-K's spine1."""
    ctl, plan = cluster.controller, cluster.plan
    exe = _bench()
    pairs = {
        "h1>h3": ["h1", "leaf1", "spine2", "leaf2", "h3"],
        "h3>h1": ["h3", "leaf2", "spine2", "leaf1", "h1"],
    }
    assert api(ctl, {"op": "install_job", "job_id": 7, "pairs": pairs})["ok"] is True
    assert json.loads(ctl.state_path.read_text())["jobs"]["7"]["h1>h3"] == pairs["h1>h3"]
    before_flows = all_flows(plan)
    spine2 = bridge(cluster, "spine2")
    before = port_rx_bytes(plan, spine2)
    size = 1 << 20
    mpirun = [
        sys.executable, "-c", "from sdnmpi.cli.main import main; main()",
        "emu", "mpirun", "--name", plan.name, "-n", "2", "--mpi", "openmpi",
        "--hosts", "h1,h3", "--timeout", "90", "--", str(exe), "pairs", "--oneway",
        "--shift", "1", "--size", str(size), "--duration", "8", "--warmup", "1", "--json",
    ]  # fmt: skip
    job = subprocess.Popen(mpirun, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3.0)
        assert job.poll() is None, "the MPI job ended before the restart"
        t0 = time.monotonic()
        assert ctl.stop() == 0
        ctl.start()
        wait_for("rediscovery", lambda: "discovery complete" in ctl.log(), 30)
        resync_s = time.monotonic() - t0
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, out + err
    result = json.loads(next(ln for ln in out.splitlines() if ln.startswith("{")))["results"][0]
    moved = (result["iterations"] + 1) * size
    after = port_rx_bytes(plan, spine2)
    log = ctl.log()
    print(
        f"\nMPI job across a controller restart: {result['iterations']} exchanges of "
        f"{size} B, {result['time_max_s']:.3f} s each; back in sync {resync_s:.2f} s after "
        f"SIGTERM; spine2 carried {after[1] - before[1]} B from leaf1"
    )
    assert "job 7 restored: 2 pairs" in log
    assert "sending" not in log  # the switches already held every rule
    assert all_flows(plan) == before_flows
    assert after[1] - before[1] >= moved
    assert api(ctl, {"op": "remove_job", "job_id": 7})["ok"] is True
    assert json.loads(ctl.state_path.read_text())["jobs"] == {}


def test_switch_restart_is_resynchronized(cluster: Cluster):
    """leaf1 loses its controller connection and its whole flow table (as a rebooted
    switch does), then reconnects: the controller reinstalls every rule it should hold,
    and traffic through it flows again."""
    ctl, plan = cluster.controller, cluster.plan
    leaf1 = bridge(cluster, "leaf1")
    before = all_flows(plan)
    target = vsctl(plan, "get-controller", leaf1)
    vsctl(plan, "del-controller", leaf1)
    ofctl(plan, "del-flows", leaf1)
    assert our_flows(plan, leaf1) == []
    wait_for("leaf1 down", lambda: "switch 0x1 disconnected" in ctl.log(), 10)
    assert ping(cluster, "h1", "h3", "-c", "1", "-W", "1").returncode != 0
    t0 = time.monotonic()
    vsctl(plan, "set-controller", leaf1, target)
    wait_for("leaf1 resynchronized", lambda: all_flows(plan) == before, 30)
    resync_s = time.monotonic() - t0
    print(f"\nleaf1 wiped and reconnected: every rule back {resync_s:.2f} s after reconnecting")
    for dst in ("h2", "h3", "h4"):
        assert ping(cluster, "h1", dst, "-c", "1", "-W", "2").returncode == 0, dst


def test_pattern_recorded_from_switch_counters(cluster: Cluster, tmp_path: Path):
    """NetSA's way: a measurement job counts each host pair's bytes at its first switch
    while pings run, nothing moves, and its rules are gone afterwards."""
    out = tmp_path / "measured.json"
    argv = runner.host_argv(cluster.plan, "h1", ["ping", "-i", "0.05", "-c", "60", "-s", "1000",
                                                 cluster.plan.host("h3").ip])  # fmt: skip
    pinger = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        api = str(cluster.controller.api_path)
        res = sdnmpi("pattern", "record", "pings", "--hosts", "h1,h3,h4", "--duration", "2",
                     "--controller-api", api, "-o", str(out))  # fmt: skip
    finally:
        pinger.wait(timeout=30)
    assert res.returncode == 0, res.stderr
    pattern = catalog.load_pattern(str(out))
    cells = {(c.src, c.dst): int(c.size_bytes) for c in pattern.phases[0].cells()}
    # ranks: 0 = h1, 1 = h3, 2 = h4; at 20 pings/s of 1042-byte frames for 2 s
    assert cells.get((0, 1), 0) >= 20 * 1000, cells
    assert cells.get((1, 0), 0) >= 20 * 1000, cells
    assert all(b < 2000 for k, b in cells.items() if k not in ((0, 1), (1, 0))), cells
    held = [int(ck, 16) for rules in all_flows(cluster.plan).values() for ln in rules
            for ck in re.findall(r"cookie=(0x[0-9a-f]+)", ln)]  # fmt: skip
    assert not [ck for ck in held if layout.kind_of(ck) == "job"
                and layout.job_of(ck) >= measure.FIRST_ID]  # fmt: skip
