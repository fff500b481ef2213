"""Agents' reports through the tag service: the job is registered with the planner when
its last rank joins (proactively for announced collectives) and removed when the last
rank leaves; bad requests are refused with nothing changed."""

from __future__ import annotations

from typing import Any

import pytest

from sdnmpi.controller.flows import FlowRule
from sdnmpi.controller.tagservice import RestoreError, TagService, planner_job_id
from sdnmpi.core.generators import leaf_spine
from sdnmpi.errors import ConfigError, SdnMpiError
from sdnmpi.wire.tag import Primitive, Tag
from tests.controller.conftest import Setup, steady
from tests.controller.tagging import send, tag_rules

HOSTS = ["h1", "h3", "h5", "h7"]  # one rank per leaf of leaf_spine(2, 4, 2)


@pytest.fixture
def setup() -> Setup:
    return steady(leaf_spine(2, 4, 2))


def ask(setup: Setup, svc: TagService, **req: Any) -> dict[str, Any]:
    reply, msgs = svc.handle(req)
    setup.send(msgs)
    return reply


def join_all(setup: Setup, svc: TagService, job: str = "42") -> None:
    for rank, host in enumerate(HOSTS):
        reply = ask(setup, svc, op="tag_join", job=job, rank=rank, nprocs=4, host=host)
        assert reply["job_slot"] == 1
        assert reply["complete"] is (rank == 3)


def test_join_registers_with_announced_collectives_and_leave_removes(setup: Setup) -> None:
    svc = TagService(setup.planner)
    coll = {"name": "bcast", "root": 0, "count": 1 << 20, "type_bytes": 1, "comm": None}
    assert ask(setup, svc, op="tag_collectives", job="42", collectives=[coll])["collectives"] == 1
    join_all(setup, svc)
    assert svc.registered == {"42": 42}
    rules = tag_rules(setup.fabric.rules(), 42)
    assert rules, "proactive rules for the bcast"
    # a bcast message from rank 0 (h1) to rank 2 (h5) is delivered without the controller
    tag = Tag(1, Primitive.BCAST, 0, 2)
    trace = send(setup, "h1", "h5", tag.mac)
    assert trace.outcome == "delivered" and trace.host == "h5"
    for rank in range(3):
        assert ask(setup, svc, op="tag_leave", job="42", rank=rank)["job_done"] is False
    assert ask(setup, svc, op="tag_leave", job="42", rank=3)["job_done"] is True
    assert svc.registered == {} and tag_rules(setup.fabric.rules(), 42) == []


def test_collectives_after_the_job_reregister_it(setup: Setup) -> None:
    svc = TagService(setup.planner)
    join_all(setup, svc)
    assert tag_rules(setup.fabric.rules(), 42) == []  # reactive only: nothing yet
    coll = {"name": "reduce", "root": 0, "count": 1 << 20}
    ask(setup, svc, op="tag_collectives", job="42", collectives=[coll])
    assert tag_rules(setup.fabric.rules(), 42) != []


def test_connection_mirrors(setup: Setup) -> None:
    svc = TagService(setup.planner)
    join_all(setup, svc)
    a, b = "10.0.0.1:1024", "10.0.0.5:40000"
    assert ask(setup, svc, op="tag_conn", job="42", rank=0, local=a, remote=b)["peer"] is None
    assert ask(setup, svc, op="tag_conn", job="42", rank=2, local=b, remote=a)["peer"] == 0


@pytest.mark.parametrize(
    ("req", "needle"),
    [
        ({"op": "tag_join", "job": "42", "rank": 0, "nprocs": 4}, "takes keys"),
        ({"op": "tag_join", "job": "", "rank": 0, "nprocs": 4, "host": "h1"}, "1..64"),
        ({"op": "tag_join", "job": "42", "rank": "0", "nprocs": 4, "host": "h1"}, "integer"),
        ({"op": "tag_join", "job": "42", "rank": 4, "nprocs": 4, "host": "h1"}, "out of range"),
        ({"op": "tag_conn", "job": "9", "rank": 0, "local": "x", "remote": "y"}, "IP:PORT"),
        ({"op": "tag_leave", "job": "9", "rank": 0}, "not known"),
        ({"op": "tag_collectives", "job": "9", "collectives": {}}, "a list"),
        ({"op": "tag_collectives", "job": "9", "collectives": [{"name": "x"}]}, "unknown"),
        ({"op": "tag_collectives", "job": "9", "collectives": [{"name": "bcast", "root": -1}]},
         "integers 0"),
        ({"op": "tag_collectives", "job": "9", "collectives": [{"name": "bcast", "count": 2**40,
          "type_bytes": 2**20}]}, "2\\*\\*48 bytes"),
        ({"op": "tag_collectives", "job": "9", "collectives": [{"name": "bcast",
          "comm": list(range(5000))}]}, "at most 4096"),
        ({"op": "tag_conn", "job": "9", "rank": 0, "local": "10.0.0.1:" + "9" * 5000,
          "remote": "10.0.0.2:1"}, "bad port"),
        ({"op": "tag_conn", "job": "9", "rank": 0, "local": "10.0.0.1:\u0663",
          "remote": "10.0.0.2:1"}, "bad port"),
    ],
)  # fmt: skip
def test_bad_requests(setup: Setup, req: dict[str, Any], needle: str) -> None:
    svc = TagService(setup.planner)
    before = setup.fabric.snapshot()
    with pytest.raises(ConfigError, match=needle):
        svc.handle(req)
    assert setup.fabric.snapshot() == before


def test_a_rank_on_an_unknown_host_refuses_the_job(setup: Setup) -> None:
    svc = TagService(setup.planner)
    for rank, host in enumerate(["h1", "h3", "h5"]):
        ask(setup, svc, op="tag_join", job="42", rank=rank, nprocs=4, host=host)
    with pytest.raises(SdnMpiError, match="h99"):
        svc.handle({"op": "tag_join", "job": "42", "rank": 3, "nprocs": 4, "host": "h99"})
    assert svc.registered == {}
    assert 3 not in svc.hub.jobs["42"].hosts  # the refused rank did not join
    assert ask(setup, svc, op="tag_join", job="42", rank=3, nprocs=4, host="h7")["complete"]
    assert svc.registered == {"42": 42}
    assert not [r for r in setup.fabric.rules() if isinstance(r, FlowRule) and r.priority == 200]
    assert tag_rules(setup.fabric.rules(), 42) == []  # reactive: no collectives announced


def test_planner_job_ids() -> None:
    assert planner_job_id("12", 5) == 12
    assert planner_job_id("name", 5) == 2**47 + 5


def test_push_installs_a_collective_once(setup: Setup) -> None:
    svc = TagService(setup.planner)
    coll = {"name": "allreduce", "root": 0, "count": 1 << 18, "type_bytes": 4, "comm": None}
    with pytest.raises(ConfigError, match="not registered"):
        svc.handle({"op": "tag_push", "job": "42", "collective": coll})
    join_all(setup, svc)
    assert tag_rules(setup.fabric.rules(), 42) == []
    reply = ask(setup, svc, op="tag_push", job="42", collective=coll)
    assert reply == {"ok": True, "cached": False}
    installed = tag_rules(setup.fabric.rules(), 42)
    assert installed
    reply, msgs = svc.handle({"op": "tag_push", "job": "42", "collective": coll})
    assert reply == {"ok": True, "cached": True} and msgs == []
    # an allreduce message from rank 0 (h1) to rank 2 (h5) needs no controller now
    trace = send(setup, "h1", "h5", Tag(1, Primitive.ALLREDUCE, 0, 2).mac)
    assert trace.outcome == "delivered" and trace.host == "h5"


def test_snapshot_restores_a_tagged_job_into_a_new_controller(setup: Setup) -> None:
    svc = TagService(setup.planner)
    coll = {"name": "bcast", "root": 0, "count": 1 << 20, "type_bytes": 1, "comm": None}
    ask(setup, svc, op="tag_collectives", job="42", collectives=[coll])
    join_all(setup, svc)
    ask(setup, svc, op="tag_join", job="cg", rank=0, nprocs=2, host="h1")  # half joined
    snap = svc.snapshot()
    assert snap["42"]["slot"] == 1 and snap["cg"]["slot"] == 2
    assert snap["42"]["collectives"] == [coll]
    # a restarted controller: new planner, same switches
    fresh = steady(leaf_spine(2, 4, 2))
    restored = TagService(fresh.planner)
    fresh.send(restored.restore(snap))
    assert restored.snapshot() == snap
    assert restored.registered == {"42": 42}
    assert tag_rules(fresh.fabric.rules(), 42) == tag_rules(setup.fabric.rules(), 42) != []
    # the half-joined job completes as usual; a new job gets a free slot
    reply = ask(fresh, restored, op="tag_join", job="cg", rank=1, nprocs=2, host="h3")
    assert reply == {"ok": True, "job_slot": 2, "complete": True}
    assert (
        ask(fresh, restored, op="tag_join", job="x", rank=0, nprocs=1, host="h5")["job_slot"] == 3
    )


def test_restore_drops_bad_entries_and_keeps_the_others(setup: Setup) -> None:
    svc = TagService(setup.planner)
    join_all(setup, svc)
    good = svc.snapshot()["42"]
    doc = {
        "42": good,
        "bad-host": {**good, "slot": 5, "hosts": {"0": "h99"}, "nprocs": 1},
        "bad-slot": {**good, "slot": 1},  # taken by job 42
        "bad-keys": {"slot": 7},
        "bad-coll": {**good, "slot": 9, "collectives": [{"name": "nope"}]},
    }
    fresh = steady(leaf_spine(2, 4, 2))
    restored = TagService(fresh.planner)
    with pytest.raises(RestoreError) as exc:
        restored.restore(doc)
    for job in ("bad-host", "bad-slot", "bad-keys", "bad-coll"):
        assert job in str(exc.value)
    fresh.send(exc.value.msgs)
    assert set(restored.hub.jobs) == {"42"} and restored.registered == {"42": 42}
    assert restored.snapshot() == {"42": good}
