"""Random call sequences: every call is idempotent, and the controller always holds
exactly the routes of the jobs the store knows as routed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.core.generators import leaf_spine
from sdnmpi.manager import planning
from sdnmpi.manager.fake import FakeController
from sdnmpi.manager.memory import MemoryStore
from sdnmpi.manager.model import Caller, JobState, ManagerError
from sdnmpi.manager.requests import CreateJob, PatternUpload
from sdnmpi.manager.service import ManagerService
from sdnmpi.testing import FakeClock
from tests.manager.conftest import pairs_pattern, pattern_bytes

TOPO = leaf_spine(2, 2, 2)
HOSTS = [h.name for h in TOPO.hosts]
SCHED = Caller(0, True)
PATTERN = PatternUpload("p.json", pattern_bytes(pairs_pattern(2)))

OPS = st.one_of(
    st.tuples(st.just("create"), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("start"), st.integers(1, 3)),
    st.tuples(st.just("finish"), st.integers(1, 3)),
    st.tuples(st.just("register"), st.integers(1, 3), st.integers(0, 2), st.sampled_from(HOSTS)),
    st.tuples(
        st.just("fail_next_install"),
    ),
)


def apply(svc: ManagerService, controller: FakeController, op: tuple) -> object:
    name = op[0]
    if name == "create":
        upload = PATTERN if op[2] else None
        return svc.create_job(SCHED, CreateJob(op[1], "j", 0, 2, pattern_file=upload))
    if name == "start":
        return svc.start_job(SCHED, op[1])
    if name == "finish":
        return svc.finish_job(SCHED, op[1])
    if name == "register":
        return svc.register_process(SCHED, op[1], op[2], op[3])
    controller.fail_install = 1
    return None


def outcome(svc, controller, op) -> object:
    try:
        return apply(svc, controller, op)
    except ManagerError as exc:
        return exc.kind


def check_controller_matches_store(svc: ManagerService, controller: FakeController) -> None:
    routed = {j.job_id: j for j in svc.store.list_jobs() if j.state is JobState.ROUTED}
    assert set(controller.held) == set(routed)
    for job_id, job in routed.items():
        assert controller.held[job_id] == planning.pairs_of(job.routes)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(OPS, max_size=25))
def test_calls_are_idempotent_and_controller_matches_store(ops):
    controller = FakeController(TOPO)
    svc = ManagerService(MemoryStore(), controller, FakeClock(1.0))
    for op in ops:
        first = outcome(svc, controller, op)
        if op[0] == "fail_next_install":
            continue
        jobs = svc.store.list_jobs(include_finished=True)
        held = controller.jobs()
        second = outcome(svc, controller, op)
        assert second == first, op
        assert svc.store.list_jobs(include_finished=True) == jobs
        assert controller.jobs() == held
        check_controller_matches_store(svc, controller)
    check_controller_matches_store(svc, controller)
