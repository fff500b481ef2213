"""Planning outside the lock, with real threads: calls are not blocked by a slow
planner, commits check their snapshot, bad outcomes leave default routes and say why.

The service runs under a lock as the server runs it (:func:`released` while a plan
is computed) and, where it matters, with the server's background thread
(:class:`Background`) for rebalancing.  :class:`Gate` holds chosen jobs' plans
until the test lets them go.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sdnmpi.core.routing.ours  # noqa: F401  (imported once, not within a timed call)
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.manager import planning, rebalance
from sdnmpi.manager.background import Background
from sdnmpi.manager.fake import FakeController
from sdnmpi.manager.memory import MemoryStore
from sdnmpi.manager.model import Job, JobState, RoutePair
from sdnmpi.manager.planning import PlanRequest
from sdnmpi.manager.requests import PatternUpload
from sdnmpi.manager.service import ManagerService, released
from sdnmpi.testing import FakeClock
from sdnmpi.wire import manager_pb2 as pb
from tests.cliutil import run_cli as run
from tests.manager.conftest import ALICE, SCHED, pattern_bytes
from tests.manager.test_server import Running, write_pattern
from tests.manager.test_service import create, run_job

#: The longest a call may wait for the lock while another job is planned.
BOUND_S = 0.5
#: Ranks 0 -> 1 and 2 -> 3 (two host pairs once placed), and one pair alone.
TWO = Pattern("two", 4, (Phase.from_cells("x", [(0, 1, 10**6), (2, 3, 10**6)]),))
ONE = Pattern("one", 2, (Phase.from_cells("x", [(0, 1, 10**6)]),))


class Gate:
    """A planner that holds the plans of chosen jobs until :meth:`open` (counting
    every job's calls); the plans themselves are :func:`planning.plan_job`'s."""

    def __init__(self, held: set[int], then: Callable[[PlanRequest], None] | None = None):
        self.held = held
        self.then = then
        self.calls: dict[int, int] = {}
        self.started = threading.Event()
        self.go = threading.Event()

    def __call__(self, req: PlanRequest) -> tuple[RoutePair, ...]:
        job_id = req.job.job_id
        self.calls[job_id] = self.calls.get(job_id, 0) + 1
        if job_id in self.held:
            self.started.set()
            assert self.go.wait(30), "the test never opened the gate"
        if self.then is not None:
            self.then(req)
        return planning.plan_job(req)

    def open(self) -> None:
        self.go.set()


class Locked:
    """A service (memory store, fake controller on leaf_spine(2, 2, 4)) behind one
    lock, with the server's background thread."""

    def __init__(self, rebalance: int = 8) -> None:
        self.controller = FakeController(leaf_spine(2, 2, 4))
        self.service = ManagerService(
            MemoryStore(), self.controller, FakeClock(1000.0), rebalance=rebalance
        )
        self.cond = threading.Condition()
        self.service.unlocked = functools.partial(released, self.cond)
        self.background = Background(self.cond)
        self.service.routing.background = self.background.submit

    def call(self, fn: Callable[[], Job]) -> tuple[Job, float]:
        """``fn()`` under the lock, as the server runs a call; and the seconds it
        waited for the lock."""
        t0 = time.monotonic()
        with self.cond:
            waited = time.monotonic() - t0
            out = fn()
        return out, waited

    def in_thread(self, fn: Callable[[], Job]) -> list[Job]:
        """``fn()`` under the lock in a thread; its result lands in the list."""
        out: list[Job] = []
        threading.Thread(target=lambda: out.append(self.call(fn)[0]), daemon=True).start()
        return out

    def idle(self) -> None:
        assert self.background.wait_idle(30), "background work did not finish"


@pytest.fixture
def locked() -> Iterator[Locked]:
    s = Locked()
    yield s
    s.background.stop()


def _upload(pattern: Pattern) -> PatternUpload:
    return PatternUpload("p.json", pattern_bytes(pattern))


def _ready(svc: ManagerService, job_id: int, nodes: list[str], pattern: Pattern) -> None:
    """Create and start the job, register every rank but the last."""
    create(svc, job_id, len(nodes), pattern_file=_upload(pattern))
    svc.start_job(SCHED, job_id)
    for rank, node in enumerate(nodes[:-1]):
        svc.register_process(SCHED, job_id, rank, node)


def _last_rank(s: Locked, job_id: int, nodes: list[str]) -> list[Job]:
    """The registration that routes the job, in a thread."""
    last = len(nodes) - 1
    return s.in_thread(lambda: s.service.register_process(SCHED, job_id, last, nodes[last]))


def _result(out: list[Job]) -> Job:
    deadline = time.monotonic() + 30
    while not out and time.monotonic() < deadline:
        time.sleep(0.01)
    assert out, "the call did not return"
    return out[0]


def _beside(s: Locked) -> Job:
    """Job 1 (h3 -> h7) routed, then job 2 (h1 -> h5, h2 -> h6) beside it; job 2."""
    s.call(lambda: run_job(s.service, 1, ["h3", "h7"], pattern_file=_upload(ONE)))
    create(s.service, 2, 4, pattern_file=_upload(TWO))
    s.service.start_job(SCHED, 2)
    for rank, node in enumerate(["h1", "h5", "h2", "h6"]):
        s.call(functools.partial(s.service.register_process, SCHED, 2, rank, node))
    s.idle()
    return s.service.get_job(SCHED, 2)


def _spines(job: Job) -> list[str]:
    return [r.path[2] for r in job.routes]


# -- nobody waits for another job's planning -------------------------------------------


def test_calls_are_not_blocked_while_a_slow_planner_runs(locked: Locked):
    """Job 7's plan is held; meanwhile GetJob, ListJobs, another job's whole life
    (created, started, routed, finished) each take the lock at once."""
    s, svc = locked, locked.service
    gate = svc.routing.planner = Gate({7})
    _ready(svc, 7, ["h1", "h5"], ONE)
    out = _last_rank(s, 7, ["h1", "h5"])
    assert gate.started.wait(30)
    slowest = 0.0
    for fn in (
        lambda: svc.get_job(SCHED, 7),
        lambda: svc.list_jobs(ALICE)[0],
        lambda: run_job(svc, 8, ["h2", "h6"]),
        lambda: svc.finish_job(SCHED, 8),
    ):
        _, took = s.call(fn)
        slowest = max(slowest, took)
    assert slowest < BOUND_S, f"a call waited {slowest:.3f} s for job 7's planning"
    assert svc.get_job(SCHED, 7).state is JobState.STARTING and not out
    gate.open()
    assert _result(out).state is JobState.ROUTED
    s.idle()
    assert 7 in s.controller.held and 8 not in s.controller.held


def test_finishing_a_job_does_not_wait_for_the_re_planning_it_starts(locked: Locked):
    """Job 2 (two pairs) avoided job 1's spine; job 1's end re-plans job 2 on the
    background thread.  FinishJob and GetJob return while that plan is held."""
    s, svc = locked, locked.service
    two = _beside(s)
    assert _spines(two) == ["spine2", "spine2"]  # beside job 1 on spine1
    gate = svc.routing.planner = Gate({2})
    t0 = time.monotonic()
    job, _ = s.call(lambda: svc.finish_job(SCHED, 1))
    assert job.state is JobState.FINISHED and time.monotonic() - t0 < BOUND_S
    assert gate.started.wait(30)
    job, took = s.call(lambda: svc.get_job(SCHED, 2))
    assert took < BOUND_S and _spines(job) == ["spine2", "spine2"]
    gate.open()
    s.idle()
    moved = svc.get_job(SCHED, 2)
    assert sorted(_spines(moved)) == ["spine1", "spine2"]  # job 2 gained job 1's links
    assert s.controller.held[2] == planning.pairs_of(moved.routes)


def test_a_job_end_re_plans_only_jobs_near_it():
    """Job 3 (within leaf3) passes no switch of job 1's: only job 2, which ran
    beside job 1 (leaf1 to leaf2), is re-planned when job 1 ends."""
    controller = FakeController(leaf_spine(2, 3, 4))
    svc = ManagerService(MemoryStore(), controller, FakeClock(), rebalance=8)
    run_job(svc, 1, ["h01", "h05"], pattern_file=_upload(ONE))  # leaf1 -> leaf2
    run_job(svc, 2, ["h02", "h06", "h03", "h07"], pattern_file=_upload(TWO))  # the same
    run_job(svc, 3, ["h09", "h10"], pattern_file=_upload(ONE))  # within leaf3
    gate = svc.routing.planner = Gate(set())
    svc.finish_job(SCHED, 1)
    assert gate.calls == {2: 1}
    assert sorted(_spines(svc.get_job(SCHED, 2))) == ["spine1", "spine2"]


def test_ends_queued_while_rebalancing_runs_are_rebalanced_in_one_pass(
    locked: Locked, monkeypatch: pytest.MonkeyPatch
):
    """Job 1's end re-plans job 2 (held); jobs 3 and 4 end meanwhile: their
    rebalancing is one pass for both, not one each."""
    s, svc = locked, locked.service
    _beside(s)
    for job_id, nodes in ((3, ["h4", "h8"]), (4, ["h8", "h4"])):
        s.call(lambda: run_job(svc, job_id, nodes, pattern_file=_upload(ONE)))  # noqa: B023
    s.idle()
    passes: list[list[int]] = []
    for_end = rebalance.for_end

    def recorded(ended: list[Job], *args: Any, **kw: Any) -> dict[int, tuple[RoutePair, ...]]:
        passes.append(sorted(j.job_id for j in ended))
        return for_end(ended, *args, **kw)

    monkeypatch.setattr(rebalance, "for_end", recorded)
    gate = svc.routing.planner = Gate({2})
    s.call(lambda: svc.finish_job(SCHED, 1))
    assert gate.started.wait(30)
    s.call(lambda: svc.finish_job(SCHED, 3))
    s.call(lambda: svc.finish_job(SCHED, 4))
    gate.held.clear()
    gate.open()
    s.idle()
    assert passes and passes[0] == [1]
    assert [3, 4] in passes and [3] not in passes and [4] not in passes, passes


def test_rebalancing_waits_between_its_plans_while_a_call_plans(locked: Locked):
    """Job 1's end re-plans jobs 2 and 3 one after the other on the background
    thread.  While it plans the first, job 7's routing starts: the second re-plan
    waits until job 7's plan is done (they would share the processor)."""
    s, svc = locked, locked.service
    svc.routing.yield_s = 30.0
    _beside(s)
    s.call(lambda: run_job(svc, 3, ["h4", "h8"], pattern_file=_upload(ONE)))
    s.idle()
    order: list[str] = []
    first, seven_started, go = threading.Event(), threading.Event(), threading.Event()

    def planner(req: PlanRequest) -> tuple[RoutePair, ...]:
        job_id = req.job.job_id
        order.append(f"plan {job_id}")
        if job_id == 7:
            seven_started.set()
            assert go.wait(30)
            order.append("7 planned")
        elif not first.is_set():  # the rebalancing's first re-plan
            first.set()
            assert seven_started.wait(30)
        return planning.plan_job(req)

    svc.routing.planner = planner
    _ready(svc, 7, ["h1", "h7"], ONE)
    s.call(lambda: svc.finish_job(SCHED, 1))
    assert first.wait(30)
    out = _last_rank(s, 7, ["h1", "h7"])
    assert seven_started.wait(30)
    time.sleep(0.3)  # the first re-plan returned meanwhile; the second waits
    assert order in (["plan 2", "plan 7"], ["plan 3", "plan 7"]), order
    go.set()
    assert _result(out).state is JobState.ROUTED
    s.idle()
    assert order[2] == "7 planned" and sorted(order[3:5]) == ["plan 2", "plan 3"], order


def test_a_job_waiting_for_a_switchs_resync_holds_no_lock(locked: Locked):
    """While job 7 waits to be planned again (its install taken back for a
    reconnecting switch), another caller's GetJob takes the lock at once."""
    s, svc = locked, locked.service
    s.controller.fail_install_resync = 1
    waited: list[float] = []

    def sleep(seconds: float) -> None:
        t0 = time.monotonic()
        done = threading.Event()

        def get() -> None:
            s.call(lambda: svc.get_job(SCHED, 7))
            done.set()

        threading.Thread(target=get).start()
        assert done.wait(5)
        waited.append(time.monotonic() - t0)

    svc.routing.sleep = sleep
    _ready(svc, 7, ["h1", "h5"], ONE)
    seven, _ = s.call(lambda: svc.register_process(SCHED, 7, 1, "h5"))
    assert seven.state is JobState.ROUTED and len(waited) == 1 and waited[0] < BOUND_S


# -- commits check their snapshot ----------------------------------------------------------


def test_a_commit_that_finds_its_snapshot_stale_plans_again(locked: Locked):
    """Job 7's plan (h1 -> h5 on an empty fabric) is held while job 8 (h3 -> h7, the
    same spine on an empty fabric: D-mod-K's) is routed.  At commit job 7's plan is
    stale: planned again against job 8's load, it takes the other spine."""
    s, svc = locked, locked.service
    gate = svc.routing.planner = Gate({7})
    _ready(svc, 7, ["h1", "h5"], ONE)
    out = _last_rank(s, 7, ["h1", "h5"])
    assert gate.started.wait(30)
    eight, _ = s.call(lambda: run_job(svc, 8, ["h3", "h7"], pattern_file=_upload(ONE)))
    gate.held.clear()
    gate.open()
    seven = _result(out)
    s.idle()
    assert seven.state is JobState.ROUTED and seven.detail == ""
    assert gate.calls[7] == 2 and _spines(seven) != _spines(eight)
    assert s.controller.held[7] == planning.pairs_of(seven.routes)


def test_a_plan_stale_at_every_commit_is_installed_with_a_note():
    """Each time job 7 (h1 -> h5) is planned, another job is routed meanwhile on the
    links it chose (on an empty fabric and beside jobs on both spines, D-mod-K's
    spine: h7 like h5; beside one job, the other spine): after three plans job 7
    keeps the last one, and its detail says against which load it was planned."""
    s = Locked(rebalance=0)  # nothing moves in between
    svc = s.service
    others = iter([(21, ["h3", "h7"]), (22, ["h2", "h6"]), (23, ["h4", "h7"])])

    def route_another(req: PlanRequest) -> None:
        if req.job.job_id == 7:
            job_id, nodes = next(others)
            s.call(lambda: run_job(svc, job_id, nodes, pattern_file=_upload(ONE)))

    svc.routing.planner = Gate(set(), then=route_another)
    _ready(svc, 7, ["h1", "h5"], ONE)
    seven, _ = s.call(lambda: svc.register_process(SCHED, 7, 1, "h5"))
    s.idle()
    assert seven.state is JobState.ROUTED and 7 in s.controller.held
    assert "planned against the load before job(s) [23] were routed (3 tries)" in seven.detail


def test_a_move_whose_job_ended_meanwhile_is_dropped(locked: Locked):
    """Job 2's re-plan after job 1's end is held while job 2 finishes: the move is
    not installed, and job 2 stays finished without routes."""
    s, svc = locked, locked.service
    _beside(s)
    gate = svc.routing.planner = Gate({2})
    s.call(lambda: svc.finish_job(SCHED, 1))
    assert gate.started.wait(30)
    s.call(lambda: svc.finish_job(SCHED, 2))
    calls = len(s.controller.calls)
    gate.open()
    s.idle()
    assert s.controller.calls[calls:] == [] and s.controller.held == {}
    assert svc.get_job(SCHED, 2).state is JobState.FINISHED


# -- bad outcomes: default routes, said once ----------------------------------------------


def test_a_job_that_arrives_and_ends_while_another_is_planned_is_not_installed(
    locked: Locked, caplog: pytest.LogCaptureFixture
):
    """Job 7 is being planned; job 8 arrives, its plan is held too, and it finishes
    before its commit: nothing of job 8 is installed, and its detail says so."""
    s, svc = locked, locked.service
    gate = svc.routing.planner = Gate({7, 8})
    _ready(svc, 7, ["h1", "h5"], ONE)
    out7 = _last_rank(s, 7, ["h1", "h5"])
    _ready(svc, 8, ["h2", "h6"], ONE)
    out8 = _last_rank(s, 8, ["h2", "h6"])
    deadline = time.monotonic() + 30
    while gate.calls.get(8) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    with caplog.at_level(logging.INFO, logger="sdnmpi.manager.jobrouting"):
        finished, took = s.call(lambda: svc.finish_job(SCHED, 8))
        assert finished.state is JobState.FINISHED and took < BOUND_S
        gate.open()
        assert _result(out7).state is JobState.ROUTED
        eight = _result(out8)
        s.idle()
    assert eight.state is JobState.FINISHED
    assert "nothing installed" in eight.detail
    assert ("install", 8) not in s.controller.calls and 8 not in s.controller.held
    listed = {j.job_id: j for j in svc.list_jobs(SCHED, include_finished=True)}
    assert "finished before its routes were committed" in listed[8].detail
    said = [r for r in caplog.records if "job 8" in r.getMessage() and "nothing" in r.getMessage()]
    assert len(said) == 1


def test_a_planner_that_raises_leaves_default_routes_and_says_why(
    locked: Locked, caplog: pytest.LogCaptureFixture
):
    s, svc = locked, locked.service

    def broken(req: PlanRequest) -> tuple[RoutePair, ...]:
        raise RuntimeError("boom")

    svc.routing.planner = broken
    _ready(svc, 7, ["h1", "h5"], ONE)
    with caplog.at_level(logging.INFO, logger="sdnmpi.manager"):
        job, _ = s.call(lambda: svc.register_process(SCHED, 7, 1, "h5"))
        s.idle()
    assert job.state is JobState.DEFAULT
    assert job.detail == "routing failed (internal error): RuntimeError('boom')"
    assert ("install", 7) not in s.controller.calls and 7 not in s.controller.held
    [listed] = svc.list_jobs(SCHED)
    assert listed.state is JobState.DEFAULT and "RuntimeError('boom')" in listed.detail
    said = [r for r in caplog.records if "boom" in r.getMessage() or r.exc_info]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]


# -- through the server and the CLI --------------------------------------------------------


def test_get_job_over_grpc_is_answered_while_a_plan_is_held(sock_dir: Path, controller):
    """The real server (SQLite store): job 5's routing RegisterProcess waits for its
    plan, another client's GetJob and ListJobs are answered meanwhile."""
    r = Running(sock_dir, controller, sock_dir / "m.db")
    try:
        gate = r.service.routing.planner = Gate({5})
        with r.client() as c:
            c.create_job(5, "slow", 1000, 2, pattern_file=write_pattern(sock_dir / "p.json"))
            c.start_job(5)
            c.register_process(5, 0, "h1")
        routed: list[object] = []

        def last_rank() -> None:
            with r.client() as c:
                routed.append(c.register_process(5, 1, "h5"))

        threading.Thread(target=last_rank, daemon=True).start()
        assert gate.started.wait(30)
        with r.client() as other:
            t0 = time.monotonic()
            assert other.get_job(5).state == pb.JOB_STATE_STARTING
            assert [j.job_id for j in other.list_jobs()] == [5]
            assert time.monotonic() - t0 < 2 * BOUND_S
        gate.open()
        deadline = time.monotonic() + 30
        while not routed and time.monotonic() < deadline:
            time.sleep(0.01)
        with r.client() as c:
            assert c.get_job(5).state == pb.JOB_STATE_ROUTED
    finally:
        r.stop()


def test_manager_jobs_shows_why_a_job_runs_on_default_routes(
    capsys: pytest.CaptureFixture[str], sock_dir: Path, controller
):
    r = Running(sock_dir, controller, sock_dir / "m.db")
    try:

        def broken(req: PlanRequest) -> tuple[RoutePair, ...]:
            raise RuntimeError("boom")

        r.service.routing.planner = broken
        with r.client() as c:
            c.create_job(5, "x", 1000, 2, pattern_file=write_pattern(sock_dir / "p.json"))
            c.start_job(5)
            c.register_process(5, 0, "h1")
            c.register_process(5, 1, "h5")
        code, out, _ = run(capsys, "manager", "jobs", "-m", str(sock_dir / "root.sock"), "--json")
        assert code == 0
        [job] = json.loads(out)
        assert job["state"] == "DEFAULT" and job["pairs"] == 0
        assert job["detail"] == "routing failed (internal error): RuntimeError('boom')"
        assert 5 not in controller.held
    finally:
        r.stop()
