"""The controller API's read-only queries the console reads: ``port_stats`` and
``tagged`` (the handler on the fake fabric), and what the console makes of them."""

from __future__ import annotations

from typing import Any

import pytest

from sdnmpi.console import view
from sdnmpi.controller.api import ApiHandler
from sdnmpi.controller.portstats import PortStats
from sdnmpi.core.generators import leaf_spine
from sdnmpi.formats.native import topology_to_dict
from tests.controller.conftest import Setup, steady, synced_api
from tests.controller.conftest import request_line as line


@pytest.fixture
def setup() -> Setup:
    return steady(leaf_spine(2, 2, 2))


@pytest.fixture
def api(setup: Setup) -> ApiHandler:
    return synced_api(setup)


def reply(api: ApiHandler, **req: Any) -> dict[str, Any]:
    answer = api.handle(line(**req))
    assert not answer.messages  # read-only: nothing for the switches
    return answer.complete(True, 0)


def test_port_stats_are_the_shims_last_rates(api: ApiHandler) -> None:
    assert reply(api, op="port_stats") == {"ok": True, "ports": []}  # no shim: none
    stats = PortStats()
    stats.add(1, 3, rx_bytes=0, tx_bytes=0, now=10.0)
    stats.add(1, 3, rx_bytes=1000, tx_bytes=0, now=10.5)
    stats.add(1, 3, rx_bytes=1000, tx_bytes=500, now=11.0)
    api.port_rates = stats.latest
    port = {"dpid": 1, "port_no": 3, "time_s": 11.0, "rx_bps": 0.0, "tx_bps": 8000.0}
    assert reply(api, op="port_stats") == {"ok": True, "ports": [port]}
    assert not reply(api, op="port_stats", extra=1)["ok"]


def test_tagged_lists_each_primitives_paths(setup: Setup, api: ApiHandler) -> None:
    assert reply(api, op="tagged") == {"ok": True, "tagged": {}}
    coll = {"name": "bcast", "root": 0, "count": 1 << 20, "type_bytes": 1, "comm": None}
    api.handle(line(op="tag_collectives", job="42", collectives=[coll]))
    for rank, host in enumerate(["h1", "h3", "h4"]):
        setup.send(
            api.handle(line(op="tag_join", job="42", rank=rank, nprocs=3, host=host)).messages
        )
    job = reply(api, op="tagged")["tagged"]["42"]
    assert job["slot"] == 1 and job["rank_hosts"] == ["h1", "h3", "h4"]
    assert job["regime"] == "exact" and not job["truncated"]
    flows = job["routes"]["bcast"]
    assert {(f["src"], f["dst"]) for f in flows} >= {(0, 1), (0, 2)}
    switches = {s.name for s in setup.topo.switches}
    for f in flows:
        path = f["path"]
        assert path[0] == job["rank_hosts"][f["src"]] and path[-1] == job["rank_hosts"][f["dst"]]
        assert set(path[1:-1]) <= switches and len(path) >= 3


def test_the_consoles_documents_from_the_replies(setup: Setup, api: ApiHandler) -> None:
    topo = topology_to_dict(setup.topo)
    leaf1 = setup.topo.switch("leaf1")
    up = next(ln for ln in setup.topo.links if {ln.src, ln.dst} == {"leaf1", "spine2"})
    port = up.src_port if up.src == "leaf1" else up.dst_port
    ports = [{"dpid": leaf1.dpid, "port_no": port, "time_s": 100.0, "rx_bps": 0.0,
              "tx_bps": up.capacity_bps / 4}]  # fmt: skip
    doc = view.loads(topo, ports, now=100.5)
    assert doc["age_s"] == 0.5 and doc["sample_time_s"] == 100.0
    by_id = {ln["id"]: ln for ln in doc["links"]}
    assert by_id["leaf1|spine2"] == {
        "id": "leaf1|spine2", "fwd_bps": up.capacity_bps / 4, "rev_bps": 0.0, "util": 0.25
    }  # fmt: skip
    assert sum(ln["util"] for ln in doc["links"]) == 0.25  # no other link carries anything
    pairs = {"7": {"h1>h3": ["h1", "leaf1", "spine2", "leaf2", "h3"]}}
    mjobs = [{"job_id": 7, "name": "cg", "state": "routed", "ntasks": 2, "router": "r",
              "processes": [{"rank": 0, "node": "h1"}, {"rank": 1, "node": "h3"}]}]  # fmt: skip
    f = view.fabric(topo, pairs, {}, mjobs)
    assert f["jobs"] == {"7": {"h1>h3": ["h1|leaf1", "leaf1|spine2", "leaf2|spine2", "h3|leaf2"]}}
    hosts = {h["name"]: h["ranks"] for h in f["hosts"]}
    assert hosts["h1"] == ["7:0"] and hosts["h3"] == ["7:1"] and hosts["h2"] == []
    assert f["table"][0]["job_id"] == 7 and f["table"][0]["state"] == "routed"
    assert {ln["id"] for ln in f["links"]} >= {"leaf1|spine2", "h1|leaf1"}
    # no manager: the table lists the controller's job routes
    assert view.fabric(topo, pairs, {}, None)["table"] == [
        {"job_id": 7, "state": "routed", "pairs": 1}
    ]
