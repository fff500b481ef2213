"""The controller's Prometheus endpoint under a real fabric (leaf_spine(2, 2, 2) in Open
vSwitch): the metrics agree with the switches and move with real events, and a hostile
client of the endpoint leaves both it and the controller answering."""

from __future__ import annotations

import socket

from sdnmpi.controller.metrics import dpid_label
from sdnmpi.testing.waits import wait_for
from tests.controller_integration.conftest import Cluster
from tests.controller_integration.support import api, our_flows
from tests.metrics.support import scrape, total

PAIRS = {
    "h1>h3": ["h1", "leaf1", "spine2", "leaf2", "h3"],
    "h3>h1": ["h3", "leaf2", "spine2", "leaf1", "h1"],
}


def samples(cluster: Cluster) -> dict:
    return scrape(cluster.controller.metrics_port)


def test_metrics_agree_with_the_switches(cluster: Cluster):
    plan = cluster.plan
    nsw = len(plan.bridges)
    wait_for(
        "the first statistics snapshot",
        lambda: (
            total(samples(cluster), "sdnmpi_controller_switches") == nsw
            and total(samples(cluster), "sdnmpi_port_bytes_total") > 0
        ),
        10,
    )
    s = samples(cluster)
    held = 0
    for b in plan.bridges:
        label = dpid_label(b.dpid)
        rules = len(our_flows(plan, b.bridge))
        held += rules
        assert total(s, "sdnmpi_switch_rules", dpid=label) == rules, b.switch
        assert total(s, "sdnmpi_controller_packet_ins_total", dpid=label, kind="lldp") > 0
    assert total(s, "sdnmpi_controller_flow_mods_total") >= held > 0
    assert total(s, "sdnmpi_controller_sync_plan_seconds_count") >= 1
    # every switch port of the model has a peer, and its utilization is exported
    ports = {ls for (n, ls), _ in s.items() if n == "sdnmpi_port_utilization_ratio"}
    peers = {dict(ls)["peer"] for ls in ports}
    assert {"h1", "h2", "h3", "h4"} <= peers and any(":" in p for p in peers)
    assert all(0 <= v <= 1.5 for (n, _), v in s.items() if n == "sdnmpi_port_utilization_ratio")


def test_a_job_install_is_counted(cluster: Cluster):
    ctl = cluster.controller
    before = samples(cluster)
    reply = api(ctl, {"op": "install_job", "job_id": 42, "pairs": PAIRS})
    assert reply["ok"] is True, reply
    after = samples(cluster)
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
    last = samples(cluster)
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
    s = samples(cluster)
    assert total(s, "sdnmpi_controller_switches") == len(cluster.plan.bridges)
    cluster.controller.log()  # raises if the controller exited
