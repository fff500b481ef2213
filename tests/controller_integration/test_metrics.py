"""The controller's Prometheus endpoint under a real fabric (leaf_spine(2, 2, 2) in Open
vSwitch): the metrics agree with the switches and move with real events, and a hostile
client of the endpoint leaves both it and the controller answering."""

from __future__ import annotations

import socket
import time

from sdnmpi.controller.metrics import dpid_label
from sdnmpi.testing.waits import wait_for
from tests.controller_integration.conftest import Cluster
from tests.controller_integration.support import api, our_flows
from tests.metrics.support import scrape, total

#: The controller's --stats-interval in these tests (tests/controller_integration/support.py).
STATS_INTERVAL_S = 1.0
PAIRS = {
    "h1>h3": ["h1", "leaf1", "spine2", "leaf2", "h3"],
    "h3>h1": ["h3", "leaf2", "spine2", "leaf1", "h1"],
}


def samples(cluster: Cluster) -> dict:
    return scrape(cluster.controller.metrics_port)


#: What each switch port of leaf_spine(2, 2, 2) is cabled to, as the ``peer`` label says.
PEERS = {"h1", "h2", "h3", "h4", "leaf1:3", "leaf1:4", "leaf2:3", "leaf2:4"}
PEERS |= {"spine1:1", "spine1:2", "spine2:1", "spine2:2"}


def peers(s: dict) -> set[str]:
    """The peers of the ports whose utilization is exported."""
    return {dict(ls)["peer"] for (n, ls), _ in s.items() if n == "sdnmpi_port_utilization_ratio"}


def rules_differ(cluster: Cluster, s: dict) -> list[str]:
    """Switches whose ``sdnmpi_switch_rules`` is not the count ``dump-flows`` shows."""
    return [
        f"{b.switch}: {total(s, 'sdnmpi_switch_rules', dpid=dpid_label(b.dpid))} exported, "
        f"{len(our_flows(cluster.plan, b.bridge))} held"
        for b in cluster.plan.bridges
        if total(s, "sdnmpi_switch_rules", dpid=dpid_label(b.dpid))
        != len(our_flows(cluster.plan, b.bridge))
    ]


def test_metrics_agree_with_the_switches(cluster: Cluster):
    """Once a statistics round after the sync is published (the snapshot lags events by
    up to --stats-interval, 1 s here), the figures are the switches'."""
    plan = cluster.plan
    nsw = len(plan.bridges)

    def agree() -> bool:
        s = samples(cluster)
        whole = total(s, "sdnmpi_controller_switches") == nsw and peers(s) == PEERS
        return whole and not rules_differ(cluster, s)

    wait_for("a snapshot of the whole fabric", agree, 15)
    s = samples(cluster)
    held = sum(len(our_flows(plan, b.bridge)) for b in plan.bridges)
    for b in plan.bridges:
        label = dpid_label(b.dpid)
        assert total(s, "sdnmpi_controller_packet_ins_total", dpid=label, kind="lldp") > 0
    assert total(s, "sdnmpi_controller_flow_mods_total") >= held > 0
    assert total(s, "sdnmpi_controller_sync_plan_seconds_count") >= 1
    assert total(s, "sdnmpi_port_bytes_total") > 0
    assert all(0 <= v <= 1.5 for (n, _), v in s.items() if n == "sdnmpi_port_utilization_ratio")


def fresh(cluster: Cluster) -> dict:
    """A scrape rendered after now (the endpoint serves a rendering again for one
    statistics interval, 1 s here)."""
    time.sleep(STATS_INTERVAL_S + 0.1)
    return samples(cluster)


def test_a_job_install_is_counted(cluster: Cluster):
    ctl = cluster.controller
    before = fresh(cluster)
    reply = api(ctl, {"op": "install_job", "job_id": 42, "pairs": PAIRS})
    assert reply["ok"] is True, reply
    after = fresh(cluster)
    sent = total(after, "sdnmpi_controller_flow_mods_total") - total(
        before, "sdnmpi_controller_flow_mods_total"
    )
    assert sent == reply["flow_mods"] == 4
    name = "sdnmpi_controller_install_seconds_count"
    assert total(after, name, op="install_job") == total(before, name, op="install_job") + 1
    wait_for(
        "the job in the snapshot",
        lambda: total(samples(cluster), "sdnmpi_controller_jobs", kind="routed") == 1,
        5,
    )
    refused = total(after, "sdnmpi_controller_errors_total", kind="api_refused")
    bad = api(ctl, {"op": "install_job", "job_id": 43, "pairs": {"h1>h9": ["h1", "leaf1", "h9"]}})
    assert bad["ok"] is False
    assert api(ctl, {"op": "remove_job", "job_id": 42})["ok"] is True
    last = fresh(cluster)
    assert total(last, "sdnmpi_controller_errors_total", kind="api_refused") == refused + 1
    assert total(last, name, op="remove_job") >= 1


def test_a_hostile_metrics_client_leaves_the_controller_working(cluster: Cluster):
    """Idle connections beyond the limit, slowloris heads and garbage bytes: the
    switches stay connected, an API request is answered, and so is the next scrape."""
    port = cluster.controller.metrics_port
    idle = []
    try:
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            idle.append(s)
        for i in range(200):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as g:
                g.sendall(bytes((i + k) % 256 for k in range(1024)))
        assert api(cluster.controller, {"op": "jobs"})["ok"] is True
    finally:
        for s in idle:
            s.close()
    after = samples(cluster)
    assert total(after, "sdnmpi_controller_switches") == len(cluster.plan.bridges)
    cluster.controller.log()  # raises if the controller exited
