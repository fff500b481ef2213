"""``sdnmpi routes`` and ``sdnmpi controller status`` against a real controller on an
emulated OVS fabric (root): the hop lists equal what OVS itself does with the packet
(``ovs-appctl ofproto/trace`` on each bridge, and the bytes a ping leaves on the ports),
and ``routes table`` sees a rule deleted behind the controller's back with ``ovs-ofctl``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

from sdnmpi.controller import layout
from sdnmpi.emu import runner
from sdnmpi.wire import controller_api
from tests.controller_integration.conftest import Cluster
from tests.controller_integration.support import api
from tests.emu.support import ofctl, port_rx_bytes, sdnmpi

PATH = ["h1", "leaf1", "spine2", "leaf2", "h3"]
JOB = 42


def bridge(cluster: Cluster, switch: str) -> str:
    return next(b.bridge for b in cluster.plan.bridges if b.switch == switch)


def cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return sdnmpi(*args, "--controller-api", str(cluster.controller.api_path), timeout=60)


def cli_json(cluster: Cluster, *args: str) -> dict[str, Any]:
    res = cli(cluster, *args, "--json")
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def ovs_trace(
    cluster: Cluster, switch: str, in_port: int, src: str, dst: str, eth_dst: str | None = None
) -> tuple[int, int]:
    """(cookie, output port) of the rule OVS itself applies on ``switch`` to an IPv4/TCP
    packet src -> dst (to ``eth_dst`` if given: a tag) arriving on ``in_port``
    (``ovs-appctl ofproto/trace``)."""
    h_src, h_dst = cluster.model.host(src), cluster.model.host(dst)
    flow = (f"in_port={in_port},dl_src={h_src.mac},dl_dst={eth_dst or h_dst.mac},"
            f"dl_type=0x0800,nw_src={h_src.ip},nw_dst={h_dst.ip},nw_proto=6")  # fmt: skip
    env = {**os.environ, **cluster.plan.ovs_env()}
    argv = ["ovs-appctl", "ofproto/trace", bridge(cluster, switch), flow]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    cookie = re.search(r"cookie (0x[0-9a-f]+)", out)
    port = re.search(r"output:(\d+)", out)
    assert cookie is not None and port is not None, out
    return int(cookie.group(1), 16), int(port.group(1))


def ping(cluster: Cluster, src: str, dst: str) -> None:
    argv = ["ping", "-c", "20", "-i", "0.05", "-s", "1000", cluster.plan.host(dst).ip]
    res = subprocess.run(runner.host_argv(cluster.plan, src, argv), capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr


def check_against_ovs(
    cluster: Cluster, trace: dict[str, Any], src: str, dst: str, eth_dst: str | None = None
) -> None:
    for hop in trace["hops"]:
        cookie, port = ovs_trace(cluster, hop["switch"], hop["in_port"], src, dst, eth_dst)
        assert (hex(cookie), port) == (hop["cookie"], hop["out_port"]), hop


def test_status(cluster: Cluster) -> None:
    status = cli_json(cluster, "controller", "status")
    assert status["schema"] == "sdnmpi.controller-status/1"
    assert (status["switches"], status["links"], status["hosts"]) == (4, 4, 4)
    assert status["synced"] is True and status["uptime_s"] > 0
    assert status["last_sync_ago_s"] is not None and status["last_sync_ago_s"] >= 0
    assert set(status["rules"]) == {"leaf1", "leaf2", "spine1", "spine2"}
    leaf1 = status["rules"]["leaf1"]
    held = [ln for ln in ofctl(cluster.plan, "dump-flows", bridge(cluster, "leaf1")).splitlines()
            if "cookie=0x5d" in ln]  # fmt: skip
    assert leaf1["rules"] == len(held)
    text = cli(cluster, "controller", "status")
    assert text.returncode == 0 and "4 switches, 4 links, 4 hosts" in text.stdout, text.stdout
    print("\n" + text.stdout)


def test_default_route_hops_are_what_ovs_does(cluster: Cluster) -> None:
    reply = cli_json(cluster, "routes", "path", "h1", "h3")
    assert reply["agrees"] is True and reply["trace"]["end"] == "delivered"
    assert [h["switch"] for h in reply["trace"]["hops"]][::2] == ["leaf1", "leaf2"]
    assert {h["kind"] for h in reply["trace"]["hops"]} <= {"default", "host"}
    check_against_ovs(cluster, reply["trace"], "h1", "h3")
    by_ip = cli_json(cluster, "routes", "path", str(cluster.model.host("h1").ip), "h3")
    assert by_ip["trace"] == reply["trace"]


def test_a_job_route_installed_through_the_api_is_the_jobs_path(cluster: Cluster) -> None:
    pairs = {"h1>h3": PATH, "h3>h1": PATH[::-1]}
    assert api(cluster.controller, {"op": "install_job", "job_id": JOB, "pairs": pairs})["ok"]
    try:
        for src, dst, path in (("h1", "h3", PATH), ("h3", "h1", PATH[::-1])):
            reply = cli_json(cluster, "routes", "path", src, dst)
            hops = reply["trace"]["hops"]
            assert [h["switch"] for h in hops] == path[1:-1]
            assert [(h["kind"], h["job"]) for h in hops[:-1]] == [("job", JOB)] * 2
            assert reply["agrees"] is True and reply["trace"]["reached"] == dst
            check_against_ovs(cluster, reply["trace"], src, dst)
        spine2 = bridge(cluster, "spine2")
        before = port_rx_bytes(cluster.plan, spine2)
        ping(cluster, "h1", "h3")
        after = port_rx_bytes(cluster.plan, spine2)
        in_port = cli_json(cluster, "routes", "path", "h1", "h3")["trace"]["hops"][1]["in_port"]
        assert after[in_port] - before[in_port] >= 20 * 1000  # the pings crossed spine2
        text = cli(cluster, "routes", "path", "h1", "h3")
        assert text.returncode == 0 and "job 42" in text.stdout and "delivered to h3" in text.stdout
        print("\n" + text.stdout)
    finally:
        assert api(cluster.controller, {"op": "remove_job", "job_id": JOB})["ok"]


def test_routes_table_sees_a_rule_deleted_on_the_switch(cluster: Cluster) -> None:
    pairs = {"h1>h3": PATH}
    assert api(cluster.controller, {"op": "install_job", "job_id": JOB, "pairs": pairs})["ok"]
    try:
        clean = cli(cluster, "routes", "table", "leaf1", "--check", "--json")
        assert clean.returncode == 0, clean.stdout + clean.stderr
        table = json.loads(clean.stdout)
        assert table["clean"] is True and table["diff"]["same"] == len(table["intended"]) > 0
        # os-ken's own LLDP rule (cookie 0) is not sdnmpi's: listed, not a difference
        assert all("cookie=0x5d" not in r for r in table["diff"]["foreign"])
        assert len(table["held"]) == len(table["intended"]) + len(table["diff"]["foreign"])
        cookie = f"{layout.job_cookie(JOB):#x}/-1"
        ofctl(cluster.plan, "del-flows", bridge(cluster, "leaf1"), f"cookie={cookie}")
        dirty = cli(cluster, "routes", "table", "leaf1", "--check", "--json")
        assert dirty.returncode == 3, dirty.stdout + dirty.stderr
        diff = json.loads(dirty.stdout)["diff"]
        assert len(diff["missing"]) == 1 and not diff["extra"] and not diff["differing"]
        assert f"cookie={layout.job_cookie(JOB):#x}" in diff["missing"][0]
        # the packet now takes the switch's default route, not the job's
        reply = cli_json(cluster, "routes", "path", "h1", "h3")
        assert reply["agrees"] is False
        assert reply["trace"]["hops"][0]["kind"] == "default"
        print("\n" + cli(cluster, "routes", "path", "h1", "h3").stdout)
        assert [h["switch"] for h in reply["intended"]["hops"]] == PATH[1:-1]
        check_against_ovs(cluster, reply["trace"], "h1", "h3")
        text = cli(cluster, "routes", "table", "leaf1")
        assert "missing on the switch (1):" in text.stdout
        print("\n" + text.stdout)
    finally:
        assert api(cluster.controller, {"op": "remove_job", "job_id": JOB})["ok"]
    after = cli(cluster, "routes", "table", "leaf1", "--check")
    assert after.returncode == 0, after.stdout


def test_a_tagged_primitive_of_a_rank_pair(cluster: Cluster) -> None:
    """A tagged job registered through the API as its node agents would (two ranks, a
    Bcast announced): its ranks' Bcast packets take the tag rules, hop by hop as OVS
    forwards them, and the last switch restores the real MAC."""
    ctl = cluster.controller
    coll = {"name": "bcast", "root": 0, "count": 1 << 20, "type_bytes": 1, "comm": None}
    assert api(ctl, {"op": "tag_collectives", "job": "77", "collectives": [coll]})["ok"]
    for rank, host in enumerate(("h1", "h3")):
        req = {"op": "tag_join", "job": "77", "rank": rank, "nprocs": 2, "host": host}
        assert api(ctl, req)["ok"]
    try:
        reply = cli_json(cluster, "routes", "path", "0", "1", "--job", "77", "-p", "bcast")
        assert (reply["src"], reply["dst"], reply["primitive"]) == ("h1", "h3", "bcast")
        hops = reply["trace"]["hops"]
        assert reply["agrees"] is True and reply["trace"]["reached"] == "h3", reply
        assert [h["kind"] for h in hops] == ["tag"] * len(hops) and len(hops) == 3
        assert "set_field:02:00:00:00:00:03->eth_dst" in hops[-1]["rule"]
        check_against_ovs(cluster, reply["trace"], "h1", "h3", reply["tag"])
        text = cli(cluster, "routes", "path", "0", "1", "--job", "77", "-p", "bcast")
        print("\n" + text.stdout)
    finally:
        for rank in (0, 1):
            assert api(ctl, {"op": "tag_leave", "job": "77", "rank": rank})["ok"]


def test_request_seconds(cluster: Cluster) -> None:
    """How long an inspection takes on this fabric (printed, not asserted: a figure for
    docs/INSPECT.md): a trace reads every switch's table, a table one switch's."""
    client = controller_api.Client(cluster.controller.api_path, timeout_s=20)
    asks = (("route_trace", {"src": "h1", "dst": "h4"}), ("route_table", {"switch": "leaf1"}))
    for op, kw in (*asks, ("status", {})):
        times = []
        for _ in range(20):
            getattr(client, op)(**kw)
            times.append(client.last_seconds)
        times.sort()
        print(
            f"\n{op}: median {times[10] * 1e3:.1f} ms, max {times[-1] * 1e3:.1f} ms (20 requests)"
        )
        assert times[-1] < 20


def test_bad_requests_are_one_line_and_exit_2(cluster: Cluster) -> None:
    for args, why in (
        (("routes", "path", "h1", "h9"), "no host 'h9'"),
        (("routes", "table", "spine7"), "no connected switch 'spine7'"),
        (("routes", "path", "0", "1", "--job", "nope"), "no rank table"),
    ):
        res = cli(cluster, *args)
        assert res.returncode == 2, res.stderr
        assert why in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
