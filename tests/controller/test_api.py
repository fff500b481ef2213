"""The controller's API handler on the fake fabric: every op of docs/controller-api.md,
what it changes, what it sends, and what it refuses (nothing half-applied)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sdnmpi.controller import layout
from sdnmpi.controller.api import Answer, ApiHandler
from sdnmpi.controller.flows import Barrier, FlowRule
from sdnmpi.controller.jobstore import StoredState
from sdnmpi.controller.measure import FIRST_ID
from sdnmpi.controller.planner import Planner
from sdnmpi.core.generators import leaf_spine
from sdnmpi.wire.controller_api import OPS, encode_pairs
from tests.controller.conftest import Setup, steady, synced_api
from tests.controller.conftest import request_line as line

PATH = ["h1", "leaf1", "spine2", "leaf2", "h3"]


@pytest.fixture
def setup() -> Setup:
    return steady(leaf_spine(2, 2, 2))


@pytest.fixture
def api(setup: Setup) -> ApiHandler:
    return synced_api(setup)


def sent(setup: Setup, answer: Answer) -> dict[str, Any]:
    """Apply the answer's messages to the fake fabric, as the shim sends them."""
    setup.send(answer.messages)
    return answer.complete(True, 0.01)


def test_install_and_remove_a_job(setup: Setup, api: ApiHandler) -> None:
    answer = api.handle(line(op="install_job", job_id=7, pairs={"h1>h3": PATH}))
    assert answer.confirm and answer.save and answer.timed
    assert answer.label == "install_job 7" and answer.flow_mods > 0  # logged once confirmed
    assert any(isinstance(m, Barrier) for m in answer.messages)
    reply = sent(setup, answer)
    assert reply["ok"] and reply["job_id"] == 7 and reply["flow_mods"] > 0
    assert reply["switches"] == len({m.dpid for m in answer.messages})
    assert setup.trace("h1", "h3").dpids == setup.dpids(tuple(PATH))  # the job's path
    jobs = api.handle(line(op="jobs")).complete(True, 0)
    assert jobs == {"ok": True, "jobs": {"7": encode_pairs({("h1", "h3"): PATH})}}
    assert api.snapshot()[0] == {7: {("h1", "h3"): PATH}}
    removed = sent(setup, api.handle(line(op="remove_job", job_id=7)))
    assert removed["ok"] and api.job_pairs == {} and 7 not in api.planner.jobs
    assert setup.trace("h1", "h3").outcome == "delivered"  # on its default route again


@pytest.mark.parametrize(
    ("request_line", "why"),
    [
        (b"{", "not JSON"),
        (b"[1]", "unknown op"),
        (line(op="fly"), "unknown op 'fly'"),
        (line(op="install_job", job_id=1), "takes keys"),
        (line(op="install_job", job_id="1", pairs={}), "not an integer"),
        (line(op="install_job", job_id=1, pairs={"h1": PATH}), "src>dst"),
        (line(op="install_job", job_id=1, pairs={"h1>h3": ["h1", "nowhere", "h3"]}), "nowhere"),
        (line(op="jobs", extra=1), "unknown op 'jobs'"),
        (line(op="tag_join", job="j", rank=0, nprocs=2), "takes keys"),
        (line(op="measure_read", job_id=FIRST_ID), "no measurement job"),
        (line(op="measure_read", job_id=5), "measurement job_id"),
    ],
)
def test_bad_requests_are_refused_and_change_nothing(
    api: ApiHandler, request_line: bytes, why: str
) -> None:
    before = (dict(api.job_pairs), api.tags.snapshot(), dict(api.planner.jobs))
    answer = api.handle(request_line)
    assert answer.reply["ok"] is False and why in answer.reply["error"]
    assert not answer.messages and not answer.save
    assert (dict(api.job_pairs), api.tags.snapshot(), dict(api.planner.jobs)) == before


def test_nothing_that_changes_rules_before_the_first_sync(setup: Setup) -> None:
    api = ApiHandler(setup.planner)
    for op in ("install_job", "tag_join", "measure_start"):
        req: dict[str, object] = dict.fromkeys(OPS[op], 1) | {"op": op}
        req |= {"pairs": {}, "job": "j", "host": "h1", "hosts": ["h1", "h3"], "job_id": FIRST_ID}
        req = {k: v for k, v in req.items() if k in OPS[op]}
        answer = api.handle(json.dumps(req).encode())
        assert answer.reply == {"ok": False, "error": "the fabric is not discovered yet"}, op
    assert api.handle(line(op="topology")).reply["ok"]  # queries are answered


def test_a_tagged_job_joins_and_leaves(setup: Setup, api: ApiHandler) -> None:
    first = api.handle(line(op="tag_join", job="42", rank=0, nprocs=2, host="h1"))
    assert first.save and first.complete(True, 0) == {"ok": True, "job_slot": 1, "complete": False}
    assert first.label == ""  # nothing sent to the switches, nothing to log
    done = api.handle(line(op="tag_join", job="42", rank=1, nprocs=2, host="h3"))
    assert sent(setup, done) == {"ok": True, "job_slot": 1, "complete": True}
    assert api.snapshot()[1]["42"]["hosts"] == {"0": "h1", "1": "h3"}
    asked = api.handle(line(op="tag_conn", job="42", rank=0, local="1.1.1.1:5", remote="1.1.1.2:6"))
    assert not asked.save and asked.complete(True, 0) == {"ok": True, "peer": None}
    api.handle(line(op="tag_leave", job="42", rank=0))
    gone = sent(setup, api.handle(line(op="tag_leave", job="42", rank=1)))
    assert gone == {"ok": True, "job_done": True} and api.snapshot()[1] == {}


def test_measurement_reads_the_counters_of_the_pairs_first_switches(
    setup: Setup, api: ApiHandler
) -> None:
    job = FIRST_ID + 1
    started = sent(setup, api.handle(line(op="measure_start", job_id=job, hosts=["h1", "h3"])))
    assert started == {"ok": True, "pairs": 2, "skipped": []}
    read = api.handle(line(op="measure_read", job_id=job)).counters
    assert read is not None and read.job_id == job and read.dpids
    h1, h3 = setup.topo.host("h1").mac, setup.topo.host("h3").mac
    rows = {dpid: [(h1, h3, 1200), (h3, h1, 40)] for dpid in read.dpids}
    assert api.counted(read, rows) == {"ok": True, "bytes": {"h1>h3": 1200, "h3>h1": 40}}
    assert sent(setup, api.handle(line(op="measure_stop", job_id=job))) == {"ok": True}
    assert api.counted(read, rows)["ok"] is False


def test_restore_takes_back_what_it_can_and_says_when_the_store_changed(
    setup: Setup,
) -> None:
    api = ApiHandler(setup.planner)
    good = StoredState(jobs={3: {("h1", "h3"): PATH}})
    msgs, changed = api.restore(good)
    assert not changed and api.job_pairs == {3: {("h1", "h3"): PATH}}
    assert msgs == [] and any(r.cookie == layout.job_cookie(3) for r in _flow_mods(setup))
    other = ApiHandler(steady(leaf_spine(2, 2, 2)).planner)
    stale = StoredState(jobs={3: {("h1", "h3"): PATH}, 4: {("h1", "h3"): ["h1", "gone", "h3"]}})
    _, changed = other.restore(stale)
    assert changed and set(other.job_pairs) == {3}


def _flow_mods(setup: Setup) -> list[FlowRule]:
    """What the planner's next sync sends (applied to the fake fabric)."""
    return [m for m in setup.send(setup.planner.sync()) if isinstance(m, FlowRule)]


def test_a_restart_with_several_stored_jobs_sends_nothing(setup: Setup, api: ApiHandler) -> None:
    """The switches keep every job's rules across a controller restart, so the first
    sync after restoring the job store sends nothing (restoring job by job used to diff
    the switches against the first job alone: every later job's rules deleted, re-added)."""
    jobs = {
        3: {"h1>h3": PATH},
        4: {"h2>h4": ["h2", "leaf1", "spine1", "leaf2", "h4"]},
        5: {"h4>h1": ["h4", "leaf2", "spine2", "leaf1", "h1"]},
    }
    for job, pairs in jobs.items():
        assert sent(setup, api.handle(line(op="install_job", job_id=job, pairs=pairs)))["ok"]
    held = {sw.dpid: setup.planner.installed(sw.dpid) for sw in setup.topo.switches}
    restarted, topo = Planner(setup.topo), setup.topo
    for dpid, rules in held.items():
        restarted.switch_up(dpid, rules, sync=False)
    for arc in topo.arcs:  # LLDP; the shim's first sync waits for the restored jobs
        if not (topo.is_host(arc.src) or topo.is_host(arc.dst)):
            src, dst = topo.switch(arc.src).dpid, topo.switch(arc.dst).dpid
            restarted.link_up((src, arc.src_port), (dst, arc.dst_port), sync=False)
    fresh = ApiHandler(restarted)
    msgs, changed = fresh.restore(StoredState(jobs=api.snapshot()[0]))
    assert (msgs, changed) == ([], False) and set(fresh.job_pairs) == {3, 4, 5}
    assert restarted.sync() == []


def test_a_crash_inside_is_an_internal_error_reply(api: ApiHandler) -> None:
    def boom(*args: object) -> None:
        raise RuntimeError("planner bug")

    api.planner.replace_job = boom  # type: ignore[method-assign,assignment]
    answer = api.handle(line(op="install_job", job_id=1, pairs={"h1>h3": PATH}))
    assert answer.reply == {"ok": False, "error": "internal error: RuntimeError: planner bug"}
