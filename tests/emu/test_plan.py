"""The emulated fabric's plan, state file, MPI lines and CLI errors: no root needed."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sdnmpi import catalog
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.topology import Topology
from sdnmpi.emu import fabriclock, runner
from sdnmpi.emu import mpi as emu_mpi
from sdnmpi.emu import plan as plan_module
from sdnmpi.emu.naming import IFNAMSIZ, fabric_network, is_loop_free
from sdnmpi.emu.plan import OVS_WMEM_DEFAULT, FabricPlan, Resource, make_plan
from sdnmpi.emu.queues import FRAME_BYTES, switch_mark_bytes, tcp_rto_min_s
from sdnmpi.emu.state import FabricState, load_state, save_state, state_from_dict
from sdnmpi.errors import ConfigError, FormatError
from tests.cliutil import run_cli as _cli

TOPOLOGIES = ["unisonflow", "allreduce28", "netsa", "milk"]


def _topos() -> list[Topology]:
    return [catalog.load_topology(n) for n in TOPOLOGIES] + [fat_tree(4), leaf_spine(1, 2, 2)]


@pytest.mark.parametrize("topo", _topos(), ids=lambda t: t.name)
def test_root_names_fit_ifnamsiz_and_are_unique(topo: Topology):
    plan = make_plan(topo, "a-rather-long-name_24chr")
    names = plan.root_links()
    assert all(len(n) <= IFNAMSIZ for n in names)
    assert len(set(names)) == len(names)
    assert all(n.startswith(plan.tag) for n in names)
    assert len({h.netns for h in plan.hosts}) == len(topo.hosts)
    for h in plan.hosts:
        assert len({i.iface for i in h.ifaces}) == len(h.ifaces)
        assert all(len(i.iface) <= IFNAMSIZ for i in h.ifaces)


def test_two_fabrics_share_no_name():
    topo = leaf_spine(2, 4, 2)
    a, b = make_plan(topo, "one"), make_plan(topo, "two")
    assert not set(a.root_links()) & set(b.root_links())
    assert not {h.netns for h in a.hosts} & {h.netns for h in b.hosts}
    assert a.state_dir != b.state_dir


def test_names_are_deterministic():
    topo = catalog.load_topology("unisonflow")
    assert make_plan(topo, "x") == make_plan(topo, "x")


@pytest.mark.parametrize("topo", _topos(), ids=lambda t: t.name)
def test_ports_and_dpids_follow_the_model(topo: Topology):
    plan = make_plan(topo, "p")
    assert [b.dpid for b in plan.bridges] == [s.dpid for s in topo.switches]
    assert all(len(b.dpid_hex) == 16 for b in plan.bridges)
    requested = {
        (s.argv[4], s.argv[5]): next(
            int(a.split("=")[1]) for a in s.argv if a.startswith("ofport_request=")
        )
        for s in plan.steps
        if s.argv[:1] == ("ovs-vsctl",) and "add-port" in s.argv
    }
    bridge_of = {b.switch: b.bridge for b in plan.bridges}
    expected = {}
    for ln in plan.links:
        for end in (ln.a, ln.b):
            if end.netns is None:
                expected[bridge_of[end.node], end.dev] = end.port_no
    assert requested == expected
    model_ports = sorted(
        (n, p)
        for ln in topo.links
        for n, p in ((ln.src, ln.src_port), (ln.dst, ln.dst_port))
        if not topo.is_host(n)
    )
    switch_of = {b.bridge: b.switch for b in plan.bridges}
    assert sorted((switch_of[b], p) for (b, _), p in requested.items()) == model_ports


def test_hosts_get_the_model_mac_and_ip():
    topo = leaf_spine(1, 2, 2)
    plan = make_plan(topo, "m")
    assert [(h.name, h.mac, h.ip) for h in plan.hosts] == [
        (h.name, h.mac, h.ip) for h in topo.hosts
    ]
    h1 = plan.host("h1")
    assert h1.netns == "sdnmpi-m-h1"
    assert h1.ifaces[0].iface == "eth0" and h1.ifaces[0].mac == topo.hosts[0].mac
    addr_steps = [s.argv for s in plan.steps if s.argv[3:5] == ("addr", "add")]
    assert ("ip", "-n", "sdnmpi-m-h1", "addr", "add", "10.0.0.1/8", "dev", "eth0") in addr_steps
    tx_off = [s.argv for s in plan.steps if s.argv[-4:-2] == ("-K", "eth0")]
    assert len(tx_off) == 4  # every host interface has tx offload off
    hosts = next(s.text for s in plan.steps if s.path == "/etc/netns/sdnmpi-m-h1/hosts")
    assert hosts is not None and "10.0.0.4\th4" in hosts and "10.0.0.1\th1" in hosts


def test_hosts_without_ip_get_free_addresses():
    milk = catalog.load_topology("milk")
    plan = make_plan(milk, "m")
    ips = [h.ip for h in plan.hosts]
    assert len(set(ips)) == len(ips) == 20
    assert all(ipaddress.ip_address(ip) in plan.network for ip in ips)
    assert plan.network == ipaddress.ip_network("10.0.0.0/8")


def test_network_from_meta_and_outside_addresses():
    topo = leaf_spine(1, 2, 2)
    meta = Topology(topo.name, topo.hosts, topo.switches, topo.links, {"network": "10.0.0.0/24"})
    assert fabric_network(meta) == ipaddress.ip_network("10.0.0.0/24")
    hosts = tuple(replace(h, ip=f"192.168.7.{i + 1}") for i, h in enumerate(topo.hosts))
    other = Topology(topo.name, hosts, topo.switches, topo.links)
    assert fabric_network(other) == ipaddress.ip_network("192.168.7.0/29")


def test_shaping_rates_scale_capacity():
    topo = catalog.load_topology("allreduce28")
    plan = make_plan(topo, "s")
    assert {ln.rate_bps for ln in plan.links} == {50e6}  # 1 Gbit/s x 0.05
    fast = make_plan(topo, "s", link_scale=0.1)
    assert {ln.rate_bps for ln in fast.links} == {100e6}
    classes = [s.argv for s in plan.steps if "class" in s.argv and "htb" in s.argv]
    # one HTB class on each end of each link
    assert len(classes) == 2 * len(topo.links)
    assert all(a[a.index("rate") + 1] == "50000000bit" for a in classes)


def test_lag_members_are_separate_ports():
    topo = catalog.load_topology("unisonflow")
    plan = make_plan(topo, "l")
    lags = [ln for ln in plan.links if ln.lag]
    assert len(lags) == 32  # 4 leaves x 2 spines x 4 members, one veth each


def test_resources_are_created_in_a_safe_order():
    plan = make_plan(leaf_spine(1, 2, 2), "o", controller="tcp:127.0.0.1:6653")
    created = [s.creates for s in plan.steps if s.creates]
    kinds = [r.kind for r in created]
    assert kinds[0] == "dir" and kinds.count("daemon") == 2
    assert Resource("link", "ovs-netdev") in created
    assert all("set-controller" in s.argv for s in plan.steps if "add-br" in s.argv)
    assert all("fail-mode=secure" in s.argv for s in plan.steps if "add-br" in s.argv)
    launcher = [s for s in plan.steps if s.path == str(plan.launcher)]
    assert launcher and launcher[0].mode == 0o755


def test_bad_input_is_rejected():
    topo = leaf_spine(1, 2, 2)
    with pytest.raises(ConfigError, match="invalid fabric name"):
        make_plan(topo, "Bad Name")
    with pytest.raises(ConfigError, match="link-scale"):
        make_plan(topo, "x", link_scale=0)
    with pytest.raises(ConfigError, match="invalid controller"):
        make_plan(topo, "x", controller="127.0.0.1:6653")
    with pytest.raises(ConfigError, match="loops"):
        make_plan(catalog.load_topology("allreduce28"), "x", l2_learning=True)
    with pytest.raises(ConfigError, match="no host 'h9'"):
        make_plan(topo, "x").host("h9")


def test_loop_free():
    assert is_loop_free(leaf_spine(1, 4, 2))
    assert not is_loop_free(leaf_spine(2, 2, 2))
    assert not is_loop_free(leaf_spine(1, 2, 2, uplinks_per_pair=2))  # parallel links


def test_state_round_trip(tmp_path: Path):
    topo = catalog.load_topology("milk")
    state = FabricState("rt", tmp_path, topo, 0.1, "tcp:127.0.0.1:6653", False)
    state = state.with_resource(Resource("dir", str(tmp_path / "rt")))
    state = state.with_resource(Resource("netns", "sdnmpi-rt-milk01"))
    state = state.with_resource(Resource("netns", "sdnmpi-rt-milk01"))
    assert len(state.resources) == 2
    save_state(state)
    loaded = load_state(tmp_path, "rt")
    assert loaded == state
    assert loaded is not None and loaded.plan() == state.plan()
    assert load_state(tmp_path, "other") is None


def test_state_rejects_unknown_keys(tmp_path: Path):
    obj = FabricState("u", tmp_path, leaf_spine(1, 2, 2), 0.05, None, False).to_dict()
    with pytest.raises(FormatError, match="unknown keys"):
        state_from_dict({**obj, "extra": 1}, "s.json")
    with pytest.raises(FormatError, match="bad state file"):
        state_from_dict({**obj, "resources": [{"kind": "bomb", "name": "/"}]}, "s.json")


def test_daemon_pid_ignores_foreign_processes(tmp_path: Path):
    pidfile = tmp_path / "x.pid"
    pidfile.write_text(f"{os.getpid()}\n")  # alive, but not started with this pidfile
    assert runner.daemon_pid(pidfile) is None
    runner.stop_daemon(pidfile)  # must not signal us
    assert runner.daemon_pid(tmp_path / "missing.pid") is None


def _plan() -> FabricPlan:
    return make_plan(leaf_spine(1, 2, 2), "mpi")


def test_mpich_launch_line():
    launch = emu_mpi.mpi_launch(_plan(), ["./pp", "8"], nprocs=2, mpi="mpich", hosts=["h1", "h3"])
    argv = list(launch.argv)
    assert argv[:4] == ["ip", "netns", "exec", "sdnmpi-mpi-h1"]
    assert launch.launcher == "mpiexec.mpich"
    assert argv[argv.index("-hosts") + 1] == "h1:1,h3:1"
    assert argv[argv.index("-launcher-exec") + 1] == "/run/sdnmpi/mpi/ssh-launcher"
    assert launch.env["UCX_TLS"] == "tcp,self"
    assert argv[-2:] == ["./pp", "8"]


def test_openmpi_launch_line():
    launch = emu_mpi.mpi_launch(_plan(), ["hostname"], nprocs=4, ppn=2, mpi="openmpi")
    argv = list(launch.argv)
    assert launch.hosts == ("h1", "h2")
    assert argv[argv.index("--host") + 1] == "h1:2,h2:2"
    assert "10.0.0.0/8" in argv and "--allow-run-as-root" in argv
    assert launch.env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"


def test_mpi_bad_requests():
    plan = _plan()
    with pytest.raises(ConfigError, match="no host 'h7'"):
        emu_mpi.mpi_launch(plan, ["x"], nprocs=2, hosts=["h1", "h7"])
    with pytest.raises(ConfigError, match="need 5 hosts"):
        emu_mpi.mpi_launch(plan, ["x"], nprocs=5)
    with pytest.raises(ConfigError, match="unknown MPI"):
        emu_mpi.mpi_launch(plan, ["x"], nprocs=1, mpi="lam")
    with pytest.raises(ConfigError, match="no MPI program"):
        emu_mpi.mpi_launch(plan, [], nprocs=1)


def test_launcher_script_parses_ssh_arguments(tmp_path: Path):
    """The fake ssh drops options, maps host or IP to its namespace, passes the command."""
    plan = _plan()
    script = tmp_path / "ssh"
    step = next(s for s in plan.steps if s.path == str(plan.launcher))
    script.write_text(step.text or "")
    script.chmod(0o755)
    fake_ip = tmp_path / "ip"
    fake_ip.write_text('#!/bin/sh\nprintf "%s|" "$@"\n')
    fake_ip.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}

    def ssh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *args], env=env, capture_output=True, text=True, check=False
        )

    out = ssh("-x", "-o", "StrictHostKeyChecking=no", "h3", "echo", "a b").stdout
    assert out.startswith("netns|exec|sdnmpi-mpi-h3|unshare|--uts|sh|-c|")
    assert out.endswith("|h3|echo|a b|")
    assert ssh("10.0.0.2", "true").stdout.split("|")[2] == "sdnmpi-mpi-h2"
    bad = ssh("h9", "true")
    assert bad.returncode == 255 and "no host 'h9'" in bad.stderr


def test_cli_errors_for_a_fabric_that_is_not_up(capsys, tmp_path: Path):
    state = str(tmp_path)
    code, _, err = _cli(capsys, "emu", "status", "--name", "nope", "--state-dir", state)
    assert code == 2 and "fabric 'nope' is not up" in err
    code, _, err = _cli(capsys, "emu", "exec", "h1", "--name", "nope", "--state-dir", state)
    assert code == 2 and "not up" in err
    code, out, _ = _cli(capsys, "emu", "down", "--name", "nope", "--state-dir", state)
    assert code == 0 and "not up" in out
    code, _, err = _cli(capsys, "emu", "up", "-t", "no-such-preset", "--state-dir", state)
    assert code == 2 and "neither a topology preset" in err
    assert list(tmp_path.iterdir()) == []


def test_cli_unknown_host_in_a_recorded_fabric(capsys, tmp_path: Path):
    save_state(FabricState("rec", tmp_path, leaf_spine(1, 2, 2), 0.05, None, False, True))
    code, _, err = _cli(
        capsys, "emu", "exec", "h9", "--name", "rec", "--state-dir", str(tmp_path), "--", "true"
    )
    assert code == 2 and "no host 'h9'" in err
    code, out, _ = _cli(capsys, "emu", "status", "--name", "rec", "--state-dir", str(tmp_path))
    assert code == 0 and "h4" in out


def test_parse_dump_ports_reads_numbered_ports_only():
    reply = (
        "OFPST_PORT reply (OF1.3) (xid=0x2): 3 ports\n"
        "  port LOCAL: rx pkts=0, bytes=0, drop=0, errs=0, frame=0, over=0, crc=0\n"
        "           tx pkts=0, bytes=0, drop=0, errs=0, coll=0\n"
        "           duration=3.1s\n"
        "  port  1: rx pkts=12, bytes=1500, drop=0, errs=0, frame=0, over=0, crc=0\n"
        "           tx pkts=3, bytes=180, drop=0, errs=0, coll=0\n"
        "           duration=3.1s\n"
        "  port 10: rx pkts=?, bytes=?, drop=?, errs=?, frame=?, over=?, crc=?\n"
        "           tx pkts=?, bytes=?, drop=?, errs=?, coll=?\n"
    )
    assert runner.parse_dump_ports(reply) == {
        1: {"rx_packets": 12, "rx_bytes": 1500, "tx_packets": 3, "tx_bytes": 180}
    }


def test_rank_environment_reaches_both_launchers():
    plan = make_plan(leaf_spine(1, 2, 2))
    env = {"LD_PRELOAD": "/x/libsdnmpi.so", "SDNMPI_MODE": "tag"}
    ompi = emu_mpi.mpi_launch(plan, ["./a"], nprocs=2, mpi="openmpi", rank_env=env).argv
    assert "-x" in ompi and "LD_PRELOAD=/x/libsdnmpi.so" in ompi and "SDNMPI_MODE=tag" in ompi
    mpich = list(emu_mpi.mpi_launch(plan, ["./a"], nprocs=2, mpi="mpich", rank_env=env).argv)
    i = mpich.index("LD_PRELOAD")
    assert mpich[i - 1 : i + 2] == ["-genv", "LD_PRELOAD", "/x/libsdnmpi.so"]
    with pytest.raises(ConfigError, match="not a variable name"):
        emu_mpi.mpi_launch(plan, ["./a"], nprocs=2, rank_env={"1BAD": "x"})


def test_hosts_send_buffers_and_unsent_backlog_scale_with_the_links():
    topo = leaf_spine(1, 2, 2)
    for scale, limit in ((0.05, 209715), (0.01, 65536)):
        argvs = [" ".join(s.argv) for s in make_plan(topo, "b", link_scale=scale).steps if s.argv]
        wmem = [a for a in argvs if a.endswith(f"net.ipv4.tcp_wmem=4096 16384 {limit}")]
        lowat = [a for a in argvs if a.endswith(f"net.ipv4.tcp_notsent_lowat={limit}")]
        assert len(wmem) == len(lowat) == len(topo.hosts)
        assert all(a.startswith("ip netns exec sdnmpi-b-h") for a in wmem + lowat)


def test_hosts_get_the_congestion_control_and_state_keeps_it(tmp_path: Path):
    topo = leaf_spine(1, 2, 2)
    cubic = make_plan(topo, "cc", state_root=tmp_path)
    assert cubic.tcp_congestion == "cubic"
    sets = [
        s.argv for s in cubic.steps if s.argv and "net.ipv4.tcp_congestion_control=cubic" in s.argv
    ]
    assert len(sets) == len(topo.hosts)
    kernel = make_plan(topo, "cc", state_root=tmp_path, tcp_congestion=None)
    assert not any(
        s.argv and "net.ipv4.tcp_congestion_control" in " ".join(s.argv) for s in kernel.steps
    )
    with pytest.raises(ConfigError, match="not an algorithm name"):
        make_plan(topo, "cc", tcp_congestion="cubic; rm -rf /")
    state = FabricState("cc", tmp_path, topo, 0.05, None, False, tcp_congestion="reno")
    save_state(state)
    loaded = load_state(tmp_path, "cc")
    assert loaded is not None and loaded.tcp_congestion == "reno"
    assert loaded.plan().tcp_congestion == "reno"
    old = state.to_dict()
    del old["tcp_congestion"]  # a state file written before the key existed
    assert state_from_dict(old, "old.json").tcp_congestion is None


def test_ecn_queues_set_the_hosts_tcp_and_state_keeps_them(tmp_path: Path, monkeypatch):
    topo = leaf_spine(1, 2, 2)
    monkeypatch.setattr(plan_module, "rto_min_supported", lambda: True)
    ecn = make_plan(topo, "q", state_root=tmp_path, link_scale=0.01)
    assert ecn.queues == "ecn"  # the default
    argvs = [" ".join(s.argv) for s in ecn.steps if s.argv]
    assert len([a for a in argvs if a.endswith("net.ipv4.tcp_ecn=1")]) == len(topo.hosts)
    assert len([a for a in argvs if a.endswith("net.ipv4.tcp_rto_min_us=2000000")]) == len(
        topo.hosts
    )
    ports = ecn.switch_ports()
    switches = {sw.name for sw in topo.switches}
    ends = [(ln, end) for ln in topo.links for end in (ln.src, ln.dst) if end in switches]
    assert len(ports) == len(ends) and set(ports) <= set(ecn.root_links())
    assert sorted(ports.values()) == sorted(ln.capacity_bps * 0.01 for ln, _ in ends)
    drop = make_plan(topo, "q", state_root=tmp_path, queues="droptail")
    assert not any(s.argv and "tcp_ecn" in " ".join(s.argv) for s in drop.steps)
    assert not any(s.argv and "tcp_rto_min" in " ".join(s.argv) for s in drop.steps)
    monkeypatch.setattr(plan_module, "rto_min_supported", lambda: False)  # kernel < 6.11
    old_kernel = make_plan(topo, "q", state_root=tmp_path)
    assert not any(s.argv and "tcp_rto_min" in " ".join(s.argv) for s in old_kernel.steps)
    with pytest.raises(ConfigError, match="--queues 'red'"):
        make_plan(topo, "q", queues="red")
    state = FabricState("q", tmp_path, topo, 0.05, None, False, queues="ecn")
    save_state(state)
    loaded = load_state(tmp_path, "q")
    assert loaded is not None and loaded.plan().queues == "ecn"
    old = state.to_dict()
    del old["queues"]  # a fabric brought up before queues existed had bare FIFOs
    assert state_from_dict(old, "old.json").queues == "droptail"
    old["queues"] = "fq"
    with pytest.raises(FormatError, match="queues"):
        state_from_dict(old, "bad.json")


def test_switch_ports_mark_at_a_quarter_of_the_timer_floor():
    """A switch port's threshold is what it drains in a quarter of the hosts' floor: 0.5 s
    at 10 Mbit/s with 2 s; at real rates more than its 1000-frame FIFO (it never marks)."""
    assert switch_mark_bytes(10e6, 2.0) == 625_000
    assert switch_mark_bytes(20e6, 2.0) == 2 * switch_mark_bytes(10e6, 2.0)
    assert switch_mark_bytes(1e9, 0.2) > 1000 * FRAME_BYTES
    assert switch_mark_bytes(1e3, 0.2) == FRAME_BYTES  # never below one frame
    with pytest.raises(ConfigError):
        switch_mark_bytes(0.0, 2.0)


def test_rto_floor_scales_with_the_links_within_bounds():
    assert tcp_rto_min_s(1.0) == 0.2
    assert tcp_rto_min_s(0.1) == pytest.approx(2.0)
    assert tcp_rto_min_s(0.01) == 2.0
    assert tcp_rto_min_s(0.4) == pytest.approx(0.5)
    with pytest.raises(ConfigError):
        tcp_rto_min_s(0.0)


def test_allowed_congestion_is_added_and_restored(tmp_path: Path, monkeypatch):
    proc = tmp_path / "proc"
    (proc / "net/ipv4").mkdir(parents=True)
    (proc / "net/ipv4/tcp_available_congestion_control").write_text("reno bbr cubic\n")
    allowed = proc / "net/ipv4/tcp_allowed_congestion_control"
    allowed.write_text("reno bbr\n")
    monkeypatch.setattr(runner, "PROC_SYS", proc)
    topo = leaf_spine(1, 2, 2)
    plan = make_plan(topo, "cc", state_root=tmp_path)
    state = FabricState("cc", tmp_path, topo, 0.05, None, False, tcp_congestion="cubic")
    state = runner._allow_congestion(plan, state)
    assert allowed.read_text().split() == ["reno", "bbr", "cubic"]
    res = [r for r in state.resources if r.kind == "sysctl"]
    assert res == [Resource("sysctl", "net.ipv4.tcp_allowed_congestion_control=reno bbr")]
    assert load_state(tmp_path, "cc") == state  # recorded before the change
    assert runner._allow_congestion(plan, state) == state  # already allowed: nothing more
    runner._remove(res[0], state)
    assert allowed.read_text().split() == ["reno", "bbr"]
    with pytest.raises(ConfigError, match="not in this kernel"):
        runner._allow_congestion(replace(plan, tcp_congestion="vegas"), state)


def test_wmem_default_is_raised_and_restored(tmp_path: Path, monkeypatch):
    proc = tmp_path / "proc"
    (proc / "net/core").mkdir(parents=True)
    wmem = proc / "net/core/wmem_default"
    wmem.write_text("212992\n")
    monkeypatch.setattr(runner, "PROC_SYS", proc)
    state = FabricState("w", tmp_path, leaf_spine(1, 2, 2), 0.05, None, False)
    state = runner._raise_wmem_default(state)
    assert int(wmem.read_text()) == OVS_WMEM_DEFAULT
    assert [r.name for r in state.resources] == ["net.core.wmem_default=212992"]
    assert runner._raise_wmem_default(state) == state
    runner._remove(state.resources[0], state)
    assert wmem.read_text().strip() == "212992"
    with pytest.raises(runner.EmuError, match="unknown sysctl"):
        runner._remove(Resource("sysctl", "kernel.panic=1"), state)


def test_fabric_lock_waits_for_the_holder(tmp_path: Path):
    import threading
    import time

    lock = tmp_path / "fabric.lock"
    events: list[str] = []
    held = threading.Event()

    def holder() -> None:
        with fabriclock.fabric_lock(path=lock):
            events.append("first in")
            held.set()
            time.sleep(0.3)
            events.append("first out")

    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    with fabriclock.fabric_lock(events.append, path=lock):
        events.append("second in")
    t.join()
    assert events[0] == "first in" and events[-2:] == ["first out", "second in"]
    assert any(e.startswith("waiting for") for e in events)


def test_fabric_lock_is_reentrant_and_inherited(tmp_path: Path):
    """A holder's own nested hold and its children's holds return at once; an
    unrelated process waits."""
    import sys

    lock = tmp_path / "fabric.lock"
    before = os.environ.get(fabriclock.LOCK_HELD_ENV)  # the module may hold the machine's lock
    child = (
        "import sys; from pathlib import Path; from sdnmpi.emu import fabriclock\n"
        "with fabriclock.fabric_lock(lambda m: print(m), path=Path(sys.argv[1])):\n"
        "    print('child in')\n"
    )
    with fabriclock.fabric_lock(path=lock):
        with fabriclock.fabric_lock(path=lock):  # nested in one thread: no deadlock
            pass
        argv = [sys.executable, "-c", child, str(lock)]
        inherited = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert inherited.stdout.strip() == "child in", inherited.stderr
        env = {k: v for k, v in os.environ.items() if k != fabriclock.LOCK_HELD_ENV}
        with pytest.raises(subprocess.TimeoutExpired):  # not a child of the holder: waits
            subprocess.run(argv, env=env, capture_output=True, timeout=5, check=False)
        # a live ancestor's hold of another lock file does not cover this one
        env[fabriclock.LOCK_HELD_ENV] = f"{os.getpid()}:{tmp_path / 'other.lock'}"
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run(argv, env=env, capture_output=True, timeout=5, check=False)
    assert os.environ.get(fabriclock.LOCK_HELD_ENV) == before


def test_a_busy_datapath_names_the_fabrics_that_hold_it(tmp_path: Path) -> None:
    """`emu up` refused because ovs-netdev exists says which recorded fabric holds it,
    and how to remove one whose daemons a killed run left dead."""
    from sdnmpi.emu.runner import netdev_in_use

    assert "no fabric is recorded" in netdev_in_use(tmp_path)
    pidfiles = {name: tmp_path / name / "ovs" / "ovs-vswitchd.pid" for name in ("live", "stale")}
    for pidfile in pidfiles.values():
        pidfile.parent.mkdir(parents=True)
        (pidfile.parent.parent / "state.json").write_text("{}")
    # a daemon that writes its pidfile once started, as OVS does; the stale pidfile
    # names a process that is not its daemon
    code = "import os, sys, time\n" \
        "open(sys.argv[1].split('=', 1)[1], 'w').write(f'{os.getpid()}\\n')\n" \
        "time.sleep(60)"  # fmt: skip
    daemon = subprocess.Popen([sys.executable, "-c", code, f"--pidfile={pidfiles['live']}"])
    try:
        deadline = time.monotonic() + 30
        while not (pidfiles["live"].exists() and pidfiles["live"].read_text().endswith("\n")):
            assert time.monotonic() < deadline, "the daemon never wrote its pidfile"
            time.sleep(0.01)
        pidfiles["stale"].write_text(f"{os.getpid()}\n")
        why = netdev_in_use(tmp_path)
    finally:
        daemon.kill()
        daemon.wait()
    assert "live (running)" in why
    assert "stale (its switch daemon is gone: `sdnmpi emu down --name stale`)" in why


def test_stale_fabrics_are_those_no_daemon_runs_and_no_up_is_building(tmp_path: Path) -> None:
    """A complete fabric whose switch daemon is gone is stale; an unfinished one only once
    its state has not changed for STALE_BUILD_S (an ``up`` in progress writes it at every
    step, before its daemon starts)."""
    from sdnmpi.emu.stale import STALE_BUILD_S, stale_fabrics

    for name, complete in (("done", True), ("building", False), ("garbled", None)):
        (tmp_path / name / "ovs").mkdir(parents=True)
        state = tmp_path / name / "state.json"
        state.write_text("{not json" if complete is None else json.dumps({"complete": complete}))
        (tmp_path / name / "ovs" / "ovs-vswitchd.pid").write_text(f"{os.getpid()}\n")
    now = time.time()
    assert stale_fabrics(tmp_path, now=now) == ["done", "garbled"]
    assert stale_fabrics(tmp_path, now=now + STALE_BUILD_S + 1) == ["building", "done", "garbled"]
    assert stale_fabrics(tmp_path / "nothing-here") == []
