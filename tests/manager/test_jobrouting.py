"""Job routing on both stores with the fake controller: routes with the other jobs'
load, rebalancing, reconcile after a restart, and routing with the lock released."""

from __future__ import annotations

import functools
import itertools
import threading
import time

import numpy as np
import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.routing import Fabric
from sdnmpi.manager import planning
from sdnmpi.manager.fake import FakeController
from sdnmpi.manager.model import Job, JobState, Kind, ManagerError
from sdnmpi.manager.requests import PatternUpload, PutPattern
from sdnmpi.manager.service import ManagerService, released
from sdnmpi.manager.store import Store
from sdnmpi.testing import FakeClock
from tests.manager.conftest import ALICE, SCHED, pairs_pattern, pattern_bytes
from tests.manager.test_service import create, run_job

# -- routes with the other jobs' load --------------------------------------------------


def test_second_job_avoids_the_first_jobs_busy_links(service: ManagerService, controller, topo):
    """Job 1 (h1 -> h5) takes spine1.  Alone, h3 -> h7 would also take spine1 (checked
    below); with job 1's load the manager routes it over spine2: no arc carries both."""
    fab = Fabric(topo)
    first = run_job(service, 1, ["h1", "h5"])
    alone = planning.plan(topo, pairs_pattern(), _procs(["h3", "h7"]), "ours")
    second = run_job(service, 2, ["h3", "h7"])
    load1 = planning.arc_bytes(fab, first.routes)
    load2 = planning.arc_bytes(fab, second.routes)
    alone_load = planning.arc_bytes(fab, alone)
    assert np.any((load1 > 0) & (alone_load > 0) & ~fab.is_host_arc)  # would contend
    assert not np.any((load1 > 0) & (load2 > 0))  # does not
    assert first.routes[0].path[2] != second.routes[0].path[2]


def test_finished_jobs_no_longer_count_as_load(service: ManagerService, topo):
    run_job(service, 1, ["h1", "h5"])
    service.finish_job(SCHED, 1)
    second = run_job(service, 2, ["h3", "h7"])
    assert second.routes[0].path[2] == "spine1"


#: exp_manager's four jobs on leaf_spine(2, 4, 2): two leaves' pairs each, every leaf
#: with two jobs leaving it; a conflict-free assignment exists (1, 3 on one spine and
#: 2, 4 on the other), but greedy arrival order can miss it.
_BOTH = Pattern("both", 2, (Phase.from_cells("x", [(0, 1, 10**6), (1, 0, 10**6)]),))
FOUR_JOBS = {1: ["h1", "h6"], 2: ["h2", "h8"], 3: ["h3", "h7"], 4: ["h4", "h5"]}


def _arrive(order: tuple[int, ...], rebalance: int) -> tuple[ManagerService, FakeController]:
    from sdnmpi.manager.memory import MemoryStore

    controller = FakeController(leaf_spine(2, 4, 2))
    svc = ManagerService(MemoryStore(), controller, FakeClock(), rebalance=rebalance)
    for job_id in order:
        pattern = PatternUpload("p.json", pattern_bytes(_BOTH))
        job = run_job(svc, job_id, FOUR_JOBS[job_id], pattern_file=pattern)
        assert job.state is JobState.ROUTED
    return svc, controller


def _shared_links(controller: FakeController) -> int:
    """Switch-to-switch arcs that carry more than one job."""
    seen: dict[tuple[str, str], set[int]] = {}
    for job_id, pairs in controller.held.items():
        for path in pairs.values():
            for hop in itertools.pairwise(path[1:-1]):
                seen.setdefault(hop, set()).add(job_id)
    return sum(len(jobs) > 1 for jobs in seen.values())


def test_jobs_routed_one_by_one_can_collide_in_some_arrival_orders():
    """Without moving running jobs, some orders leave a later job no free spine (what
    exp_manager measured once: x1.20 instead of x2); with it, every order is free."""
    orders = list(itertools.permutations(FOUR_JOBS))
    greedy = [_shared_links(_arrive(order, rebalance=0)[1]) for order in orders]
    assert any(greedy), "the scenario no longer shows the greedy tie problem"
    for order in orders:
        svc, controller = _arrive(order, rebalance=8)
        assert _shared_links(controller) == 0, order
        for job in svc.list_jobs(SCHED):  # the store follows the controller
            assert controller.held[job.job_id] == planning.pairs_of(job.routes)


def test_jobs_above_the_pair_bound_are_never_re_planned(monkeypatch):
    """Re-planning a big job costs minutes: above the bound, arrival order decides."""
    from sdnmpi.manager import rebalance

    monkeypatch.setattr(rebalance, "MAX_PAIRS", 0)
    orders = itertools.permutations(FOUR_JOBS)
    assert any(_shared_links(_arrive(order, rebalance=8)[1]) for order in orders)


def test_a_move_the_controller_refuses_leaves_the_job_where_it_was():
    """The new job is installed; the running job it would move keeps its routes, in the
    controller and in the store alike."""
    moved = []
    for order in itertools.permutations(FOUR_JOBS):
        svc, controller = _arrive(order[:2], rebalance=8)
        before = {j: dict(p) for j, p in controller.held.items()}
        last = order[2]
        real = controller.install

        def refuse(job_id, pairs, last=last, real=real):
            if job_id != last:
                moved.append(job_id)
                raise ManagerError(Kind.UNAVAILABLE, "install_job: barriers not confirmed")
            return real(job_id, pairs)

        controller.install = refuse  # type: ignore[method-assign]
        pattern = PatternUpload("p.json", pattern_bytes(_BOTH))
        job = run_job(svc, last, FOUR_JOBS[last], pattern_file=pattern)
        assert job.state is JobState.ROUTED
        for other in svc.list_jobs(SCHED):
            assert controller.held[other.job_id] == planning.pairs_of(other.routes)
            if other.job_id != last:
                assert controller.held[other.job_id] == before[other.job_id]
    assert moved, "no arrival order tried to move a running job"


def _procs(nodes: list[str]):
    from sdnmpi.manager.model import Process

    return [Process(r, n) for r, n in enumerate(nodes)]


# -- recovery ---------------------------------------------------------------------------


def test_reconcile_reinstalls_missing_and_removes_stale(
    service: ManagerService, controller: FakeController
):
    kept = run_job(service, 1, ["h1", "h5"])
    run_job(service, 2, ["h2", "h6"])
    service.finish_job(SCHED, 2)
    controller.held.clear()  # the controller restarted without its state file
    controller.held[2] = {("h2", "h6"): ["h2", "leaf1", "spine1", "leaf2", "h6"]}  # finished
    controller.held[77] = {("h3", "h7"): ["h3", "leaf1", "spine1", "leaf2", "h7"]}  # unknown
    controller.held[2**40 + 5] = {("h4", "h8"): ["h4", "leaf1", "spine2", "leaf2", "h8"]}  # record
    out = service.reconcile()
    assert out.reinstalled == (1,) and out.removed == (2, 77)
    assert set(controller.held) == {1, 2**40 + 5}
    del controller.held[2**40 + 5]
    assert controller.held[1] == planning.pairs_of(kept.routes)
    assert service.reconcile().reinstalled == ()  # nothing left to do


def test_reconcile_routes_a_job_interrupted_before_routing(store: Store, controller, clock):
    svc = ManagerService(store, controller, clock)
    create(svc)
    svc.start_job(SCHED, 7)
    svc.register_process(SCHED, 7, 0, "h1")
    from sdnmpi.manager.model import Process

    store.add_process(7, Process(1, "h5"))  # crashed after recording the last rank
    out = ManagerService(store, controller, clock).reconcile()
    assert out.routed == (7,)
    job = store.get_job(7)
    assert job is not None and job.state is JobState.ROUTED


def test_reconcile_routes_again_a_job_killed_between_install_and_commit(
    store: Store, controller, clock
):
    """The controller holds routes the store never recorded (the manager died after the
    install, before saving ROUTED): they are removed, the job is routed again, and the
    controller ends with exactly the routes the store has."""
    svc = ManagerService(store, controller, clock)
    create(svc)
    svc.start_job(SCHED, 7)
    svc.register_process(SCHED, 7, 0, "h1")
    from sdnmpi.manager.model import Process

    store.add_process(7, Process(1, "h5"))
    controller.held[7] = {("h1", "h5"): ["h1", "leaf1", "spine2", "leaf2", "h5"]}
    out = ManagerService(store, controller, clock).reconcile()
    assert out.removed == (7,) and out.routed == (7,)
    job = store.get_job(7)
    assert job is not None and job.state is JobState.ROUTED
    assert controller.held[7] == planning.pairs_of(job.routes)


def test_failed_removal_is_retried_by_reconcile(service: ManagerService, controller):
    run_job(service, 1, ["h1", "h5"])
    controller.down = True
    done = service.finish_job(SCHED, 1)
    assert done.state is JobState.FINISHED and "removal failed" in done.detail
    controller.down = False
    assert 1 in controller.held
    assert service.reconcile().removed == (1,)
    assert controller.held == {}


def test_host_pairs_shared_with_another_job_keep_its_routes(service: ManagerService, controller):
    """Jobs on shared nodes: the controller routes a host pair for one job only."""
    first = run_job(service, 1, ["h1", "h5"])
    assert first.state is JobState.ROUTED
    # ranks 0 -> 1 on h1 -> h5 (held by job 1) and 2 -> 3 on h2 -> h6 (free)
    second = run_job(service, 2, ["h1", "h5", "h2", "h6"])
    assert second.state is JobState.ROUTED
    assert [(r.src, r.dst) for r in second.routes] == [("h2", "h6")]
    assert "1 host pair(s) shared with job 1" in second.detail
    assert set(controller.jobs()[2]) == {("h2", "h6")}
    # entirely shared: default routes, with the reason
    third = run_job(service, 3, ["h1", "h5"])
    assert third.state is JobState.DEFAULT and "shared with job 1" in third.detail


# -- routing outside the lock -----------------------------------------------------------


class HeldRouter:
    """``planning.plan`` that waits, once started, until the test lets it go."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started, self.go = threading.Event(), threading.Event()
        self.calls = 0
        real = planning.plan

        def plan(*args: object, **kw: object) -> object:
            self.calls += 1
            self.started.set()
            assert self.go.wait(30), "the test never let the router go"
            return real(*args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(planning, "plan", plan)


def _routing_in_a_thread(service: ManagerService, cond: threading.Condition) -> list[Job]:
    """Job 7 (2 ranks) started, rank 0 registered; rank 1's registration, the one that
    routes, runs in a thread under ``cond`` as the server runs calls.  Its result
    lands in the returned list."""
    create(service)
    service.start_job(SCHED, 7)
    service.register_process(SCHED, 7, 0, "h1")
    out: list[Job] = []

    def last_rank() -> None:
        with cond:
            out.append(service.register_process(SCHED, 7, 1, "h5"))

    threading.Thread(target=last_rank, daemon=True).start()
    return out


@pytest.fixture
def locked(service: ManagerService) -> threading.Condition:
    """The server's lock, released while routes are computed (as ManagerServer sets)."""
    cond = threading.Condition()
    service.unlocked = functools.partial(released, cond)
    return cond


def _result(out: list[Job]) -> Job:
    deadline = time.monotonic() + 30
    while not out and time.monotonic() < deadline:
        time.sleep(0.01)
    assert out, "the routing call did not return"
    return out[0]


def test_other_calls_run_while_a_job_is_routed(
    service: ManagerService, locked: threading.Condition, controller, monkeypatch
):
    """A router may take many seconds on a large job (ours on a 724-rank all-to-all on
    20 hosts: 7.4 s, bench_manager.py --largest); it runs with the lock released, so
    another call does not wait for it, and a reconcile meanwhile does not route the
    job again."""
    router = HeldRouter(monkeypatch)
    out = _routing_in_a_thread(service, locked)
    assert router.started.wait(30)
    assert locked.acquire(timeout=10), "the lock stayed held while the job was routed"
    try:
        assert service.get_job(SCHED, 7).state is JobState.STARTING
        assert service.list_jobs(ALICE) and 7 not in controller.held
        service.reconcile()
    finally:
        locked.release()
    router.go.set()
    assert _result(out).state is JobState.ROUTED
    assert 7 in controller.held and router.calls == 1


def test_a_job_finished_while_it_is_routed_gets_no_routes(
    service: ManagerService, locked: threading.Condition, controller, monkeypatch
):
    router = HeldRouter(monkeypatch)
    out = _routing_in_a_thread(service, locked)
    assert router.started.wait(30)
    with locked:
        assert service.finish_job(SCHED, 7).state is JobState.FINISHED
    router.go.set()
    assert _result(out).state is JobState.FINISHED
    assert 7 not in controller.held and ("install", 7) not in controller.calls
    assert service.get_job(SCHED, 7).state is JobState.FINISHED


def test_a_job_repatterned_while_it_is_routed_is_routed_on_its_new_pattern(
    service: ManagerService, locked: threading.Condition, controller, monkeypatch
):
    """SetJobPattern meanwhile: the routes computed for the old pattern are dropped and
    the job is routed again, on the new one, by the call that was routing it."""
    router = HeldRouter(monkeypatch)
    service.patterns.put(
        ALICE, PutPattern("other", PatternUpload("o.json", pattern_bytes(pairs_pattern(2, 5))))
    )
    out = _routing_in_a_thread(service, locked)
    assert router.started.wait(30)
    with locked:
        assert service.set_job_pattern(SCHED, 7, "other").state is JobState.STARTING
    router.go.set()
    job = _result(out)
    assert job.state is JobState.ROUTED and job.pattern_name == "other"
    assert router.calls == 2 and [r.size_bytes for r in job.routes] == [5.0]
