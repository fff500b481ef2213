"""Random call sequences: every call is idempotent, and the controller always holds
exactly the routes of the jobs the store knows as routed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.core.generators import leaf_spine
from sdnmpi.manager import planning
from sdnmpi.manager.fake import FakeControllerFabric
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


def apply(svc: ManagerService, fabric: FakeControllerFabric, op: tuple) -> object:
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
    fabric.fail_install = 1
    return None


def outcome(svc, fabric, op) -> object:
    try:
        return apply(svc, fabric, op)
    except ManagerError as exc:
        return exc.kind


def check_controller_matches_store(svc: ManagerService, fabric: FakeControllerFabric) -> None:
    routed = {j.job_id: j for j in svc.store.list_jobs() if j.state is JobState.ROUTED}
    assert set(fabric.held) == set(routed)
    for job_id, job in routed.items():
        assert fabric.held[job_id] == planning.pairs_of(job.routes)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(OPS, max_size=25))
def test_calls_are_idempotent_and_controller_matches_store(ops):
    fabric = FakeControllerFabric(TOPO)
    svc = ManagerService(MemoryStore(), fabric, FakeClock(1.0))
    for op in ops:
        first = outcome(svc, fabric, op)
        if op[0] == "fail_next_install":
            continue
        jobs = svc.store.list_jobs(include_finished=True)
        held = fabric.jobs()
        second = outcome(svc, fabric, op)
        assert second == first, op
        assert svc.store.list_jobs(include_finished=True) == jobs
        assert fabric.jobs() == held
        check_controller_matches_store(svc, fabric)
    check_controller_matches_store(svc, fabric)
