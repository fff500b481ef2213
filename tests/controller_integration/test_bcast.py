"""Switch-replicated broadcast trees (issue 14) on real Open vSwitch under the real os-ken
controller: a tagged job (ranks joined through the API, as the node agents relay them)
opens a tree; every switch of it holds one group of type ALL whose buckets are the
tree's child ports and one rule sending the group's UDP datagrams to it
(``ovs-ofctl dump-groups`` / ``dump-flows``); a real UDP datagram the root sends to the
group reaches each member host exactly once (sockets joined with IP_ADD_MEMBERSHIP) and
no other host, and another host cannot send into the tree; the tree survives a
controller restart without a flow- or group-mod; close and the job's end remove the
groups and rules.

leaf_spine(2, 3, 2): h1 h2 on leaf1, h3 h4 on leaf2, h5 h6 on leaf3.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import runner
from sdnmpi.emu.plan import FabricPlan
from sdnmpi.testing.waits import wait_for
from tests.controller_integration.support import Controller, api, controlled_fabric, our_flows
from tests.emu.support import ofctl, require_root_and_tools

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
JOB = "901"
HOSTS = ["h1", "h2", "h3", "h4", "h5", "h6"]  # rank r on HOSTS[r]
COMM = [0, 1, 3, 4]  # root rank 0 on h1; receivers h2 (same leaf), h4, h5
BCAST_COOKIE = "cookie=0x5d06"
DATAGRAMS = 40

RECEIVER = """
import json, socket, sys, time
group, port, ip, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((group, port))
membership = socket.inet_aton(group) + socket.inet_aton(ip)
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
s.settimeout(0.1)
print("ready", flush=True)
counts, end = {}, time.monotonic() + secs
while time.monotonic() < end:
    try:
        _, (src, _) = s.recvfrom(4096)
    except socket.timeout:
        continue
    counts[src] = counts.get(src, 0) + 1
print(json.dumps(counts), flush=True)
"""
SENDER = """
import socket, sys, time
group, port, ip, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ip))
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
for i in range(n):
    s.sendto(b"%06d" % i + bytes(500), (group, port))
    time.sleep(0.003)
"""


@dataclass
class Fabric:
    plan: FabricPlan
    controller: Controller


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    require_root_and_tools()
    make = ["make", "-s", "-C", str(ROOT), "bpf"]
    res = subprocess.run(make, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr  # the emulator's ECN marker
    workdir = tmp_path_factory.mktemp("bcast")
    with controlled_fabric(workdir, leaf_spine(2, 3, 2), "bc") as (plan, ctl):
        wait_for("flow-mods confirmed", lambda: "all flow-mods confirmed" in ctl.log(), 10)
        yield Fabric(plan, ctl)


def _bridge(plan: FabricPlan, switch: str) -> str:
    return next(b.bridge for b in plan.bridges if b.switch == switch)


def _groups(plan: FabricPlan) -> dict[str, dict[int, list[int]]]:
    """Each switch's groups of type ALL: group id -> bucket output ports."""
    out: dict[str, dict[int, list[int]]] = {}
    for b in plan.bridges:
        text = ofctl(plan, "dump-groups", b.bridge)
        for line in text.splitlines():
            found = re.search(r"group_id=(\d+),type=all", line)
            if found:
                ports = [int(p) for p in re.findall(r"output:(\d+)", line)]
                out.setdefault(b.switch, {})[int(found.group(1))] = ports
    return out


def _bcast_flows(plan: FabricPlan) -> dict[str, list[str]]:
    out = {
        b.switch: [f for f in our_flows(plan, b.bridge) if BCAST_COOKIE in f] for b in plan.bridges
    }
    return {s: f for s, f in out.items() if f}


def _join(ctl: Controller) -> None:
    for rank, host in enumerate(HOSTS):
        req = {"op": "tag_join", "job": JOB, "rank": rank, "nprocs": len(HOSTS), "host": host}
        assert api(ctl, req)["ok"] is True


def _stored_tree(ctl: Controller, group: str) -> dict[str, object]:
    trees = json.loads(ctl.state_path.read_text())["tagged"][JOB]["bcast"]
    return next(t for t in trees if t["group"] == group)


def _expected_groups(tree: dict[str, object]) -> dict[str, list[int]]:
    """Switch -> sorted child ports, from the tree the controller stored."""
    out: dict[str, list[int]] = {}
    for src, port, _dst, _ in tree["arcs"]:  # type: ignore[attr-defined]
        if src != tree["root"]:
            out.setdefault(src, []).append(port)
    return {s: sorted(p) for s, p in out.items()}


def _send_and_receive(
    plan: FabricPlan, group: str, port: int, senders: list[str]
) -> dict[str, dict[str, int]]:
    """Every host listens on the group (joined); each of ``senders`` sends DATAGRAMS; the
    datagrams each host received, by source address."""
    listeners = {}
    try:
        for host in HOSTS:
            argv = [sys.executable, "-c", RECEIVER, group, str(port), plan.host(host).ip, "4"]
            proc = subprocess.Popen(
                runner.host_argv(plan, host, argv), stdout=subprocess.PIPE, text=True
            )
            listeners[host] = proc
        for host, proc in listeners.items():
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", host
        for host in senders:
            argv = [
                sys.executable,
                "-c",
                SENDER,
                group,
                str(port),
                plan.host(host).ip,
                str(DATAGRAMS),
            ]
            subprocess.run(runner.host_argv(plan, host, argv), check=True, timeout=30)
        return {h: json.loads(p.communicate(timeout=30)[0]) for h, p in listeners.items()}
    finally:
        for proc in listeners.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_tree_is_installed_as_groups_and_carries_real_datagrams(fabric: Fabric) -> None:
    plan, ctl = fabric.plan, fabric.controller
    _join(ctl)
    reply = api(ctl, {"op": "tag_bcast_open", "job": JOB, "root": 0, "ranks": COMM})
    assert reply["ok"] is True and reply["cached"] is False, reply
    group, port = str(reply["group"]), int(reply["port"])  # type: ignore[call-overload]
    tree = _stored_tree(ctl, group)
    expected = _expected_groups(tree)
    gid = 0x5D000000 | (
        int(ipaddress.IPv4Address(group)) - int(ipaddress.IPv4Address("239.192.0.0"))
    )
    groups = _groups(plan)
    assert {s: sorted(g[gid]) for s, g in groups.items() if gid in g} == expected
    flows = _bcast_flows(plan)
    assert sorted(flows) == sorted(expected)
    for rules in flows.values():
        assert len(rules) == 1 and "priority=1050" in rules[0] and f"group:{gid}" in rules[0]
        assert f"nw_dst={group}" in rules[0]
    assert f"nw_src={plan.host('h1').ip}" in flows["leaf1"][0]
    print(f"\ntree {group}: groups {expected}")

    got = _send_and_receive(plan, group, port, ["h1", "h3"])  # root, then a non-member
    root_ip, other_ip = plan.host("h1").ip, plan.host("h3").ip
    print(f"received by source: {got}")
    for rank, host in enumerate(HOSTS):
        want = DATAGRAMS if rank in COMM and rank != 0 else 0
        assert got[host].get(root_ip, 0) == want, (host, got[host])
        assert got[host].get(other_ip, 0) == 0, (host, got[host])

    again = api(ctl, {"op": "tag_bcast_open", "job": JOB, "root": 0, "ranks": list(reversed(COMM))})
    assert again == {**reply, "cached": True}
    assert api(ctl, {"op": "tag_bcast_close", "job": JOB, "group": group}) == {"ok": True}
    assert _bcast_flows(plan) == {} and all(gid not in g for g in _groups(plan).values())


def test_a_tree_survives_a_controller_restart_and_goes_with_its_job(fabric: Fabric) -> None:
    plan, ctl = fabric.plan, fabric.controller
    if JOB not in json.loads(ctl.state_path.read_text())["tagged"]:
        _join(ctl)
    reply = api(ctl, {"op": "tag_bcast_open", "job": JOB, "root": 3, "ranks": [0, 2, 3, 5]})
    assert reply["ok"] is True, reply
    group, port = str(reply["group"]), int(reply["port"])  # type: ignore[call-overload]
    before = _groups(plan), _bcast_flows(plan)
    assert before[1]
    assert ctl.stop() == 0
    ctl.start()
    wait_for("rediscovery", lambda: "discovery complete" in ctl.log(), 30)
    wait_for("the switches' reports", lambda: ctl.log().count("sdnmpi groups") >= 5, 10)
    log = ctl.log()
    assert "sending" not in log, log  # every rule and group was already there
    assert (_groups(plan), _bcast_flows(plan)) == before
    got = _send_and_receive(plan, group, port, ["h4"])
    assert {h: c.get(plan.host("h4").ip, 0) for h, c in got.items()} == {
        "h1": DATAGRAMS, "h2": 0, "h3": DATAGRAMS, "h4": 0, "h5": 0, "h6": DATAGRAMS,
    }  # fmt: skip
    for rank in range(len(HOSTS)):
        assert api(ctl, {"op": "tag_leave", "job": JOB, "rank": rank})["ok"] is True
    assert _bcast_flows(plan) == {}
    assert all(not g for g in _groups(plan).values())
    assert JOB not in json.loads(ctl.state_path.read_text())["tagged"]


def test_a_switch_refusing_a_group_fails_the_tree_and_takes_it_back(fabric: Fabric) -> None:
    """leaf2 already holds a group with the id the next tree gets (added behind the
    controller's back): OVS answers the tree's group-mod with OFPGMFC_GROUP_EXISTS, the
    request fails with that reason, and every switch is left without the tree."""
    plan, ctl = fabric.plan, fabric.controller
    _join(ctl)
    leaf2 = _bridge(plan, "leaf2")
    gid = 0x5D000001  # the pool's first address: no tree holds it now
    ofctl(plan, "add-group", leaf2, f"group_id={gid},type=all,bucket=output:1")
    req = {"op": "tag_bcast_open", "job": JOB, "root": 0, "ranks": [0, 2, 4]}
    reply = api(ctl, req)
    print(f"\nrefused: {reply}")
    assert reply["ok"] is False
    assert "OFPGMFC_GROUP_EXISTS" in str(reply["error"]) and "removed again" in str(reply["error"])
    assert _bcast_flows(plan) == {}
    assert all(not g for g in _groups(plan).values())
    assert "bcast" not in json.loads(ctl.state_path.read_text())["tagged"][JOB]
    again = api(ctl, req)  # the id is free now
    assert again["ok"] is True and _bcast_flows(plan)
    for rank in range(len(HOSTS)):
        assert api(ctl, {"op": "tag_leave", "job": JOB, "rank": rank})["ok"] is True
    assert _bcast_flows(plan) == {} and all(not g for g in _groups(plan).values())
