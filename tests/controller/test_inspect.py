"""Inspection requests (``route_trace``, ``route_table``, ``status``) on the fake fabric.

The hop lists are checked against the fake fabric's own forwarding (an independent
walk of the same tables, ``FakeOFNetwork.trace``); the real-OVS counterpart is
``tests/controller_integration/test_inspect.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sdnmpi.controller import layout
from sdnmpi.controller.api import ApiHandler
from sdnmpi.controller.flows import FlowRule, Match, Output
from sdnmpi.core.generators import leaf_spine
from tests.controller.conftest import Setup, steady, synced_api
from tests.controller.conftest import request_line as line

PATH = ["h1", "leaf1", "spine2", "leaf2", "h3"]


@pytest.fixture
def setup() -> Setup:
    return steady(leaf_spine(2, 2, 2))


@pytest.fixture
def api(setup: Setup) -> ApiHandler:
    return synced_api(setup)


def held(setup: Setup) -> dict[int, list[FlowRule]]:
    return {d: setup.fabric.rules(d) for d in setup.fabric.tables}


def ask(setup: Setup, api: ApiHandler, **req: Any) -> dict[str, Any]:
    """One inspection request, the switches' tables read from the fake fabric."""
    answer = api.handle(line(**req))
    assert not answer.messages  # read-only
    if answer.finish is None:
        return answer.complete(True, 0)
    assert answer.tables
    return answer.finish(held(setup))


def send(setup: Setup, api: ApiHandler, **req: Any) -> None:
    answer = api.handle(line(**req))
    setup.send(answer.messages)
    assert answer.complete(True, 0)["ok"]


def test_a_default_route_hop_by_hop_equals_the_fabrics_forwarding(
    setup: Setup, api: ApiHandler
) -> None:
    for src, dst in (("h1", "h3"), ("h4", "h1"), ("h1", "h2")):
        reply = ask(setup, api, op="route_trace", src=src, dst=dst)
        hops = reply["trace"]["hops"]
        assert [h["dpid"] for h in hops] == list(setup.trace(src, dst).dpids)
        assert [(s.in_port, s.out_port) for s in setup.trace(src, dst).steps] == [
            (h["in_port"], h["out_port"]) for h in hops
        ]
        assert reply["trace"]["end"] == "delivered"
        assert reply["trace"]["reached"] == dst
        assert reply["agrees"] is True
        assert {h["kind"] for h in hops} <= {"default", "host"}


def test_hosts_are_found_by_name_ip_or_mac(setup: Setup, api: ApiHandler) -> None:
    h1, h3 = setup.topo.host("h1"), setup.topo.host("h3")
    by_name = ask(setup, api, op="route_trace", src="h1", dst="h3", source="intended")
    for src, dst in ((h1.ip, h3.ip), (h1.mac, h3.mac.upper())):
        other = ask(setup, api, op="route_trace", src=src, dst=dst, source="intended")
        assert other["trace"] == by_name["trace"]
        assert (other["src"], other["dst"]) == ("h1", "h3")


def test_a_job_route_is_traced_with_the_jobs_rules(setup: Setup, api: ApiHandler) -> None:
    send(setup, api, op="install_job", job_id=7, pairs={"h1>h3": PATH})
    reply = ask(setup, api, op="route_trace", src="h1", dst="h3")
    hops = reply["trace"]["hops"]
    assert [h["switch"] for h in hops] == PATH[1:-1]
    assert [h["kind"] for h in hops[:-1]] == ["job", "job"]  # the last hop: host delivery
    assert all(h["job"] == 7 and h["priority"] == layout.PRIORITY_JOB for h in hops[:-1])
    assert hops[0]["cookie"] == hex(layout.job_cookie(7))


def test_a_trace_over_a_switch_that_lost_a_rule_differs_from_the_intended_one(
    setup: Setup, api: ApiHandler
) -> None:
    send(setup, api, op="install_job", job_id=7, pairs={"h1>h3": PATH})
    leaf1 = setup.topo.switch("leaf1").dpid
    tables = held(setup)
    tables[leaf1] = [r for r in tables[leaf1] if layout.kind_of(r.cookie) != "job"]
    answer = api.handle(line(op="route_trace", src="h1", dst="h3"))
    assert answer.finish is not None
    reply = answer.finish(tables)
    assert reply["agrees"] is False
    assert reply["trace"]["hops"][0]["kind"] == "default"
    assert [h["switch"] for h in reply["intended"]["hops"]] == PATH[1:-1]


def test_a_switch_table_against_the_intended_one(setup: Setup, api: ApiHandler) -> None:
    leaf1 = setup.topo.switch("leaf1").dpid
    clean = ask(setup, api, op="route_table", switch="leaf1")
    assert clean["clean"] is True and clean["dpid"] == leaf1
    assert clean["diff"]["same"] == len(clean["intended"]) == len(clean["held"]) > 0
    tables = held(setup)
    rules = tables[leaf1]
    gone, changed = rules[3], rules[4]
    foreign = FlowRule(leaf1, priority=7, match=Match(in_port=1), actions=(Output(2),))
    extra = FlowRule(leaf1, priority=8, match=Match(in_port=1), cookie=layout.job_cookie(9))
    other = FlowRule(leaf1, changed.table_id, changed.priority, changed.match, (Output(99),),
                     changed.cookie)  # fmt: skip
    tables[leaf1] = [r for r in rules if r not in (gone, changed)] + [foreign, other, extra]
    answer = api.handle(line(op="route_table", switch=str(leaf1)))
    assert answer.finish is not None
    diff = answer.finish(tables)
    assert diff["clean"] is False
    assert diff["diff"]["missing"] == [gone.render()]
    assert diff["diff"]["extra"] == [extra.render()]  # an sdnmpi cookie: a difference
    assert diff["diff"]["foreign"] == [foreign.render()]  # another's: left alone
    assert diff["diff"]["differing"] == [{"intended": changed.render(), "held": other.render()}]


def test_ranks_of_a_tagged_job_and_a_primitive(setup: Setup, api: ApiHandler) -> None:
    send(setup, api, op="tag_join", job="42", rank=0, nprocs=2, host="h1")
    send(setup, api, op="tag_join", job="42", rank=1, nprocs=2, host="h3")
    ranks = ask(setup, api, op="route_trace", src=0, dst=1, job="42")
    hosts = ask(setup, api, op="route_trace", src="h1", dst="h3")
    assert (ranks["src"], ranks["dst"], ranks["src_rank"], ranks["dst_rank"]) == ("h1", "h3", 0, 1)
    assert ranks["trace"] == hosts["trace"]
    tagged = ask(setup, api, op="route_trace", src=0, dst=1, job="42", primitive="bcast")
    assert tagged["tag"] == tagged["eth_dst"] and tagged["tag"].startswith("a6:")
    assert tagged["primitive"] == "bcast"
    # the job announced no collectives: no tag rule, so the first switch sends it up
    assert tagged["trace"]["end"] == "controller"
    assert tagged["trace"]["hops"][0]["priority"] == layout.PRIORITY_TAG_MISS


def test_status_counts_the_fabric_jobs_and_rules(setup: Setup, api: ApiHandler) -> None:
    api.now, api.started_at, api.last_sync_at = (lambda: 100.0), 40.0, 90.0
    send(setup, api, op="install_job", job_id=7, pairs={"h1>h3": PATH})
    reply = ask(setup, api, op="status")
    assert (reply["switches"], reply["links"], reply["hosts"]) == (4, 4, 4)
    assert (reply["uptime_s"], reply["last_sync_ago_s"]) == (60.0, 10.0)
    assert reply["jobs"] == {"7": 1} and reply["synced"] is True
    leaf1 = reply["rules"]["leaf1"]
    assert leaf1["rules"] == len(setup.fabric.rules(setup.topo.switch("leaf1").dpid))
    assert leaf1["by_kind"]["job"] == 1


@pytest.mark.parametrize(
    ("req", "why"),
    [
        ({"op": "route_trace", "src": "h1"}, "takes keys"),
        ({"op": "route_trace", "src": "h1", "dst": "h9"}, "no host 'h9'"),
        ({"op": "route_trace", "src": "h1", "dst": "h3", "source": "x"}, "source 'x'"),
        ({"op": "route_trace", "src": "h1", "dst": "h3", "primitive": "bcast"}, "needs a job"),
        ({"op": "route_trace", "src": 0, "dst": 1, "job": "nope"}, "no rank table"),
        ({"op": "route_table", "switch": "spine9"}, "no connected switch 'spine9'"),
        ({"op": "route_table", "switch": "leaf1", "x": 1}, "takes keys"),
        ({"op": "status", "x": 1}, "takes keys"),
    ],
)
def test_bad_inspection_requests_are_refused(
    api: ApiHandler, req: dict[str, Any], why: str
) -> None:
    reply = api.handle(json.dumps(req).encode()).reply
    assert reply["ok"] is False and why in reply["error"], reply
