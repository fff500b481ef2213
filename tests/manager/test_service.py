"""The service core on both stores with the fake controller: states, idempotency,
authorization, bad input, cost bounds (job routing: tests/manager/test_jobrouting.py)."""

from __future__ import annotations

import pytest

from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.manager import jobrouting, planning
from sdnmpi.manager.model import Job, JobState, Kind, ManagerError
from sdnmpi.manager.requests import CreateJob, PatternUpload, PutPattern
from sdnmpi.manager.service import ManagerService
from sdnmpi.manager.store import Store
from sdnmpi.testing import FakeClock
from tests.manager.conftest import ALICE, BOB, SCHED, pairs_pattern, pattern_bytes


def create(svc: ManagerService, job_id: int = 7, ntasks: int = 2, **kw: object) -> Job:
    args: dict[str, object] = {
        "job_id": job_id,
        "name": "job",
        "uid": ALICE.uid,
        "ntasks": ntasks,
        "pattern_file": PatternUpload(
            "p.json", pattern_bytes(pairs_pattern(max(2, min(ntasks, 8))))
        ),
    }
    args.update(kw)
    return svc.create_job(SCHED, CreateJob(**args))  # type: ignore[arg-type]


def run_job(svc: ManagerService, job_id: int, nodes: list[str], **kw: object) -> Job:
    create(svc, job_id, len(nodes), **kw)
    svc.start_job(SCHED, job_id)
    job = None
    for rank, node in enumerate(nodes):
        job = svc.register_process(SCHED, job_id, rank, node, 100 + rank)
    assert job is not None
    return job


def kind(exc: pytest.ExceptionInfo[ManagerError]) -> Kind:
    return exc.value.kind


# -- state machine and idempotency ------------------------------------------------------


def test_job_life_routes_installed_then_removed(
    service: ManagerService, controller, clock: FakeClock
):
    job = create(service)
    assert job.state is JobState.CREATED
    assert service.start_job(SCHED, 7).state is JobState.STARTING
    service.register_process(SCHED, 7, 0, "h1")
    clock.advance(1)
    job = service.register_process(SCHED, 7, 1, "h5")
    assert job.state is JobState.ROUTED and job.installed
    assert controller.held[7] == planning.pairs_of(job.routes)
    assert [(r.src, r.dst) for r in job.routes] == [("h1", "h5")]
    assert job.install.flow_mods == 3
    done = service.finish_job(SCHED, 7)
    assert done.state is JobState.FINISHED and done.finished_s == clock()
    assert 7 not in controller.held


def test_ranks_may_register_before_start(service: ManagerService, controller):
    create(service)
    service.register_process(SCHED, 7, 0, "h1")
    service.register_process(SCHED, 7, 1, "h5")
    assert 7 not in controller.held
    assert service.start_job(SCHED, 7).state is JobState.ROUTED


def test_every_call_is_idempotent(service: ManagerService, controller):
    first = create(service)
    assert create(service) == first
    service.start_job(SCHED, 7)
    again = service.start_job(SCHED, 7)
    assert again.state is JobState.STARTING
    service.register_process(SCHED, 7, 0, "h1", 5)
    same = service.register_process(SCHED, 7, 0, "h1", 5)
    assert same.process_map()[0].node == "h1"
    routed = service.register_process(SCHED, 7, 1, "h5")
    installs = controller.calls.count(("install", 7))
    assert service.register_process(SCHED, 7, 1, "h5") == routed
    full = service.start_job(SCHED, 7)
    assert full == service.get_job(SCHED, 7)
    assert full.state is JobState.ROUTED and full.routes == routed.routes
    assert controller.calls.count(("install", 7)) == installs
    done = service.finish_job(SCHED, 7)
    removes = controller.calls.count(("remove", 7))
    assert service.finish_job(SCHED, 7) == done
    assert controller.calls.count(("remove", 7)) == removes


def test_create_with_other_arguments_is_already_exists(service: ManagerService):
    create(service)
    with pytest.raises(ManagerError) as exc:
        create(service, name="other")
    assert kind(exc) is Kind.ALREADY_EXISTS
    with pytest.raises(ManagerError) as exc:
        create(service, pattern_file=PatternUpload("p.json", pattern_bytes(pairs_pattern(2, 5))))
    assert kind(exc) is Kind.ALREADY_EXISTS


def test_job_without_pattern_stays_on_default_routes(service: ManagerService, controller):
    job = run_job(service, 3, ["h1", "h5"], pattern_file=None)
    assert job.state is JobState.DEFAULT and "no pattern" in job.detail
    assert controller.held == {}


def test_builtin_spec_pattern(service: ManagerService, controller):
    nodes = ["h1", "h2", "h5", "h6"]
    job = run_job(
        service, 4, nodes, pattern_file=None, pattern_name="allreduce:nprocs=4,bytes=65536"
    )
    assert job.state is JobState.ROUTED
    assert job.pattern_name == "allreduce:nprocs=4,bytes=65536"
    assert len(controller.held[4]) > 0


def test_routing_failure_is_default_with_detail(service: ManagerService, controller):
    controller.fail_install = 1
    job = run_job(service, 5, ["h1", "h5"])
    assert job.state is JobState.DEFAULT
    assert "routing failed" in job.detail and "barriers" in job.detail
    assert 5 not in controller.held


def test_an_install_taken_back_for_a_reconnecting_switch_is_planned_again(
    service: ManagerService, controller
):
    """The controller took the install back because a switch disconnected before
    confirming (it is resynced when it returns): the job stays STARTING with nothing
    installed, is planned again after a wait, and is routed."""
    controller.fail_install_resync = 2
    seen: list[tuple[float, JobState, bool]] = []

    def sleep(seconds: float) -> None:
        seen.append((seconds, service.get_job(SCHED, 5).state, 5 in controller.held))

    service.routing.sleep = sleep
    job = run_job(service, 5, ["h1", "h5"])
    assert job.state is JobState.ROUTED and job.detail == ""
    assert seen == [(0.5, JobState.STARTING, False), (1.0, JobState.STARTING, False)]
    assert controller.calls.count(("install", 5)) == 3 and ("remove", 5) not in controller.calls
    assert controller.held[5] == planning.pairs_of(job.routes)


def test_a_switch_that_never_resyncs_leaves_the_job_on_default_routes(
    service: ManagerService, controller
):
    controller.fail_install_resync = 99
    waits: list[float] = []
    service.routing.sleep = waits.append
    job = run_job(service, 5, ["h1", "h5"])
    assert job.state is JobState.DEFAULT
    assert "routing failed" in job.detail and "disconnected before confirming" in job.detail
    assert waits == list(jobrouting.RESYNC_WAITS_S) and sum(waits) < 10  # a job start waits 10 s
    assert controller.calls.count(("install", 5)) == len(waits) + 1 and 5 not in controller.held


def test_unknown_router_name_is_invalid(service: ManagerService):
    with pytest.raises(ManagerError) as exc:
        create(service, router="nope")
    assert kind(exc) is Kind.INVALID_ARGUMENT


def test_finish_before_routes_and_finish_removes_only_its_job(service: ManagerService, controller):
    run_job(service, 1, ["h1", "h5"])
    run_job(service, 2, ["h2", "h6"])
    create(service, 3)
    service.finish_job(SCHED, 3)
    service.finish_job(SCHED, 1)
    assert set(controller.held) == {2}


class Killed(BaseException):
    """The manager process dies here (not an error any caller handles)."""


def test_a_manager_killed_while_finishing_never_reinstalls_the_job(
    service: ManagerService, controller, store: Store, clock: FakeClock
):
    """Killed right after the controller removed the routes, before the call returned:
    the restarted manager's reconcile leaves the finished job without routes."""
    run_job(service, 1, ["h1", "h5"])
    real_remove = controller.remove

    def remove_then_die(job_id: int) -> None:
        real_remove(job_id)
        raise Killed

    controller.remove = remove_then_die
    with pytest.raises(Killed):
        service.finish_job(SCHED, 1)
    controller.remove = real_remove
    restarted = ManagerService(store, controller, clock)
    restarted.reconcile()
    assert 1 not in controller.held
    assert restarted.get_job(SCHED, 1).state is JobState.FINISHED


def test_a_manager_killed_before_removing_removes_at_reconcile(
    service: ManagerService, controller, store: Store, clock: FakeClock
):
    run_job(service, 1, ["h1", "h5"])

    def die(job_id: int) -> None:
        raise Killed

    real_remove, controller.remove = controller.remove, die
    with pytest.raises(Killed):
        service.finish_job(SCHED, 1)
    controller.remove = real_remove
    assert 1 in controller.held  # the routes outlived the manager...
    ManagerService(store, controller, clock).reconcile()
    assert 1 not in controller.held  # ...until it came back


def test_set_job_pattern_reinstalls(service: ManagerService, controller):
    run_job(service, 7, ["h1", "h2", "h5", "h6"])
    flipped = pairs_pattern(4)
    other = PatternUpload("r.json", pattern_bytes(_reverse(flipped)))
    service.patterns.put(ALICE, PutPattern("rev", other))
    job = service.set_job_pattern(ALICE, 7, "rev")
    assert job.state is JobState.ROUTED and job.pattern_name == "rev"
    assert {(r.src, r.dst) for r in job.routes} == {("h2", "h1"), ("h6", "h5")}
    assert controller.held[7] == planning.pairs_of(job.routes)
    installs = controller.calls.count(("install", 7))
    assert service.set_job_pattern(ALICE, 7, "rev") == job
    assert controller.calls.count(("install", 7)) == installs


def _reverse(p):
    from sdnmpi.core.pattern import Pattern, Phase

    cells = [(r + 1, r, 10**6) for r in range(0, p.nprocs - 1, 2)]
    return Pattern("rev", p.nprocs, (Phase.from_cells("back", cells),))


# -- authorization ------------------------------------------------------------------


#: A user's own job id (outside Slurm): 2^32 and above.
UJ = 2**32 + 9


def test_users_act_only_on_their_own_jobs(service: ManagerService):
    req = CreateJob(UJ, "mine", ALICE.uid, 2)
    assert service.create_job(ALICE, req).uid == ALICE.uid
    with pytest.raises(ManagerError) as exc:
        service.create_job(BOB, CreateJob(UJ + 1, "forged", ALICE.uid, 2))
    assert kind(exc) is Kind.PERMISSION_DENIED
    # another user's job looks like no job at all: nothing of its owner is revealed
    for call in (
        lambda: service.start_job(BOB, UJ),
        lambda: service.finish_job(BOB, UJ),
        lambda: service.get_job(BOB, UJ),
        lambda: service.register_process(BOB, UJ, 0, "h1"),
    ):
        with pytest.raises(ManagerError) as exc:
            call()
        assert kind(exc) is Kind.NOT_FOUND and str(exc.value) == f"no job {UJ}"
    with pytest.raises(ManagerError) as exc:
        service.create_job(BOB, CreateJob(UJ, "mine", BOB.uid, 2))
    assert kind(exc) is Kind.ALREADY_EXISTS and str(ALICE.uid) not in str(exc.value)
    assert service.list_jobs(BOB) == []
    assert [j.job_id for j in service.list_jobs(ALICE)] == [UJ]
    assert service.start_job(ALICE, UJ).state is JobState.DEFAULT
    assert service.finish_job(SCHED, UJ).state is JobState.FINISHED


# -- job identity: the scheduler's ids, offers, node binding ----------------------------


def offer(svc: ManagerService, who=ALICE, job_id: int = 7, ntasks: int = 2, **kw: object):
    args: dict[str, object] = {
        "job_id": job_id, "name": "job", "uid": who.uid, "ntasks": ntasks,
        "pattern_file": PatternUpload("p.json", pattern_bytes(pairs_pattern(ntasks))),
    }  # fmt: skip
    args.update(kw)
    return svc.offer_job(who, CreateJob(**args))  # type: ignore[arg-type]


def test_only_the_scheduler_creates_slurm_job_ids(service: ManagerService):
    """Squatting: a user creating a future Slurm job id is refused, so the real job's
    CreateJob (slurmstepd's) succeeds and no one else sees its nodes."""
    for job_id in (7, 2**32 - 1):
        with pytest.raises(ManagerError) as exc:
            service.create_job(BOB, CreateJob(job_id, "squat", BOB.uid, 2))
        assert kind(exc) is Kind.PERMISSION_DENIED and "scheduler" in str(exc.value)
    assert service.list_jobs(SCHED) == []
    assert service.create_job(BOB, CreateJob(2**32, "own", BOB.uid, 2)).uid == BOB.uid
    with pytest.raises(ManagerError) as exc:
        service.create_job(SCHED, CreateJob(2**32 + 1, "x", 0, 2, from_offer=True))
    assert kind(exc) is Kind.INVALID_ARGUMENT


def test_the_scheduler_takes_the_owners_offer_never_another_users(
    service: ManagerService, controller
):
    offer(service, BOB, 7, ntasks=4)  # the squatter offers first, for the victim's job
    mine = offer(service, ALICE, 7)
    assert (mine.uid, mine.pattern_name) == (ALICE.uid, "p.json")
    job = service.create_job(SCHED, CreateJob(7, "", ALICE.uid, 2, from_offer=True))
    assert (job.uid, job.pattern_name, job.name) == (ALICE.uid, "p.json", "job")
    assert service.store.get_offer(7, ALICE.uid) is None  # taken
    # a second slurmstepd's identical call is the same job
    assert service.create_job(SCHED, CreateJob(7, "", ALICE.uid, 2, from_offer=True)) == job
    service.start_job(SCHED, 7)
    service.register_process(SCHED, 7, 0, "h1")
    assert service.register_process(SCHED, 7, 1, "h5").state is JobState.ROUTED
    with pytest.raises(ManagerError) as exc:
        service.get_job(BOB, 7)
    assert kind(exc) is Kind.NOT_FOUND
    with pytest.raises(ManagerError) as exc:  # too late: the job exists
        offer(service, ALICE, 7)
    assert kind(exc) is Kind.FAILED_PRECONDITION


def test_without_an_offer_the_scheduler_job_runs_on_default_routes(service: ManagerService):
    job = service.create_job(SCHED, CreateJob(8, "j", ALICE.uid, 2, from_offer=True))
    assert job.pattern_json == b""
    started = service.start_job(SCHED, 8)
    assert started.state is JobState.DEFAULT
    assert started.detail == "no pattern offered by the job's srun; no pattern: default routes"
    offer(service, ALICE, 9, ntasks=2)
    job = service.create_job(SCHED, CreateJob(9, "j", ALICE.uid, 4, from_offer=True))
    assert job.pattern_json and job.ntasks == 4  # a 2-rank pattern fits a 4-task job


def test_offers_are_checked_and_bounded(service: ManagerService, clock: FakeClock):
    for bad in (
        lambda: offer(service, ALICE, 2**32 + 5),  # not a scheduler id
        lambda: offer(service, ALICE, 7, pattern_file=None),  # no pattern
        lambda: offer(service, ALICE, 7, ntasks=2,
                      pattern_file=PatternUpload("p.json", pattern_bytes(pairs_pattern(4)))),
    ):  # fmt: skip
        with pytest.raises(ManagerError) as exc:
            bad()
        assert kind(exc) is Kind.INVALID_ARGUMENT
    with pytest.raises(ManagerError) as exc:
        service.offer_job(BOB, CreateJob(7, "x", ALICE.uid, 2, pattern_name="alltoall"))
    assert kind(exc) is Kind.PERMISSION_DENIED
    from sdnmpi.manager.model import MAX_OFFERS_PER_UID, OFFER_TTL_S

    for job_id in range(100, 100 + MAX_OFFERS_PER_UID):
        offer(service, BOB, job_id)
    assert offer(service, BOB, 100).job_id == 100  # replacing one's own offer is fine
    with pytest.raises(ManagerError) as exc:
        offer(service, BOB, 99)
    assert kind(exc) is Kind.RESOURCE_EXHAUSTED and str(MAX_OFFERS_PER_UID) in str(exc.value)
    assert offer(service, ALICE, 99).uid == ALICE.uid  # one user's quota is not another's
    clock.advance(OFFER_TTL_S + 1)
    assert offer(service, BOB, 99).job_id == 99  # expired offers no longer count
    assert service.store.offer_usage(BOB.uid)[0] == 1


def test_finish_without_a_job_withdraws_the_offer(service: ManagerService):
    offer(service, ALICE, 7)
    with pytest.raises(ManagerError) as exc:
        service.finish_job(ALICE, 7)
    assert kind(exc) is Kind.NOT_FOUND and "withdrawn" in str(exc.value)
    assert service.store.get_offer(7, ALICE.uid) is None


def test_users_cannot_register_ranks_of_scheduler_jobs(service: ManagerService):
    """Host-pair claiming: the ranks of a Slurm job are registered by slurmstepd on
    the job's nodes, never by a user, not even the job's own."""
    offer(service, ALICE, 7)
    service.create_job(SCHED, CreateJob(7, "", ALICE.uid, 2, from_offer=True))
    for who in (ALICE, BOB):
        with pytest.raises(ManagerError) as exc:
            service.register_process(who, 7, 0, "h1")
        assert kind(exc) in (Kind.PERMISSION_DENIED, Kind.NOT_FOUND)
    assert service.store.count_processes(7) == 0


def test_a_scheduler_job_takes_host_pairs_a_user_job_holds(service: ManagerService, controller):
    """A user's own job routed first on h1-h5 leaves those pairs to the Slurm job."""
    squat = service.create_job(
        BOB, CreateJob(UJ, "claim", BOB.uid, 2,
                       pattern_file=PatternUpload("p.json", pattern_bytes(pairs_pattern(2)))),
    )  # fmt: skip
    service.start_job(BOB, squat.job_id)
    service.register_process(BOB, UJ, 0, "h1")
    assert service.register_process(BOB, UJ, 1, "h5").state is JobState.ROUTED
    job = run_job(service, 7, ["h1", "h5"])
    assert job.state is JobState.ROUTED and job.detail == ""
    assert [(r.src, r.dst) for r in job.routes] == [("h1", "h5")]
    evicted = service.get_job(BOB, UJ)
    assert evicted.state is JobState.DEFAULT and "scheduler job 7" in evicted.detail
    assert UJ not in controller.held and 7 in controller.held


def test_patterns_anyone_reads_owner_or_scheduler_replaces(service: ManagerService):
    upload = PatternUpload("p.json", pattern_bytes())
    info = service.patterns.put(ALICE, PutPattern("cg", upload, "mine"))
    assert info.owner_uid == ALICE.uid and info.nranks == 2
    assert service.patterns.get(BOB, "cg").sha256 == info.sha256
    assert service.patterns.put(BOB, PutPattern("cg", upload, "mine")) == info  # no change
    other = PatternUpload("q.json", pattern_bytes(pairs_pattern(4)))
    with pytest.raises(ManagerError) as exc:
        service.patterns.put(ALICE, PutPattern("cg", other))
    assert kind(exc) is Kind.ALREADY_EXISTS
    with pytest.raises(ManagerError) as exc:
        service.patterns.put(BOB, PutPattern("cg", other, replace=True))
    assert kind(exc) is Kind.PERMISSION_DENIED
    with pytest.raises(ManagerError) as exc:
        service.patterns.delete(BOB, "cg")
    assert kind(exc) is Kind.PERMISSION_DENIED
    replaced = service.patterns.put(SCHED, PutPattern("cg", other, replace=True))
    assert replaced.owner_uid == ALICE.uid and replaced.nranks == 4
    assert service.patterns.delete(ALICE, "cg").name == "cg"
    assert service.patterns.list(BOB) == []


# -- bad input (issue 6) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "want", "text"),
    [
        ({"pattern_file": None, "pattern_name": "nosuchpattern"}, Kind.NOT_FOUND, "unknown"),
        ({"pattern_file": None, "pattern_name": "cg:nprocs=64"}, Kind.INVALID_ARGUMENT, "at most"),
        ({"pattern_file": None, "pattern_name": "cg:bogus=1"}, Kind.INVALID_ARGUMENT, "nprocs"),
        ({"pattern_file": PatternUpload("p.json", b"{not json")}, Kind.INVALID_ARGUMENT, "JSON"),
        ({"pattern_file": PatternUpload("p.xml", b"<netsa><oops")}, Kind.INVALID_ARGUMENT, "p.xml"),
        (
            {"pattern_file": PatternUpload("p.tar.gz", b"not a tar")},
            Kind.INVALID_ARGUMENT,
            "corrupt",
        ),
        ({"pattern_file": PatternUpload("p.exe", b"x")}, Kind.INVALID_ARGUMENT, "ending in"),
        ({"job_id": 0}, Kind.INVALID_ARGUMENT, "job_id"),
        ({"job_id": 2**40}, Kind.INVALID_ARGUMENT, "job_id"),
        ({"ntasks": 0}, Kind.INVALID_ARGUMENT, "ntasks"),
        ({"ntasks": 65537}, Kind.INVALID_ARGUMENT, "ntasks"),
        ({"name": "x" * 300}, Kind.INVALID_ARGUMENT, "job name"),
        ({"name": "bad\nname"}, Kind.INVALID_ARGUMENT, "control"),
        (
            {"pattern_file": PatternUpload("p.json", pattern_bytes(pairs_pattern(8)))},
            Kind.INVALID_ARGUMENT,
            "8 ranks",
        ),
    ],
)
def test_bad_create_requests(service: ManagerService, kw, want, text):
    with pytest.raises(ManagerError, match=text) as exc:
        create(service, **kw)
    assert kind(exc) is want
    assert service.list_jobs(SCHED, include_finished=True) == []


def test_oversized_pattern_file_is_refused(service: ManagerService):
    big = PatternUpload("p.json", b" " * (64 * 1024 * 1024 + 1))
    with pytest.raises(ManagerError, match="more than") as exc:
        create(service, pattern_file=big)
    assert kind(exc) is Kind.INVALID_ARGUMENT


def test_bad_registrations(service: ManagerService):
    create(service)
    cases = [
        ((7, 2, "h1"), Kind.INVALID_ARGUMENT, "out of range"),
        ((7, 0, "nowhere"), Kind.INVALID_ARGUMENT, "not a host"),
        ((7, 0, "leaf1"), Kind.INVALID_ARGUMENT, "not a host"),
        ((99, 0, "h1"), Kind.NOT_FOUND, "no job 99"),
    ]
    for args, want, text in cases:
        with pytest.raises(ManagerError, match=text) as exc:
            service.register_process(SCHED, *args)
        assert kind(exc) is want
    service.register_process(SCHED, 7, 0, "h1")
    with pytest.raises(ManagerError, match="registered on") as exc:
        service.register_process(SCHED, 7, 0, "h2")
    assert kind(exc) is Kind.FAILED_PRECONDITION


def test_finish_unknown_job_is_not_found(service: ManagerService):
    with pytest.raises(ManagerError, match="no job 404") as exc:
        service.finish_job(SCHED, 404)
    assert kind(exc) is Kind.NOT_FOUND


def test_start_after_finish_is_refused(service: ManagerService):
    create(service)
    service.finish_job(SCHED, 7)
    with pytest.raises(ManagerError) as exc:
        service.start_job(SCHED, 7)
    assert kind(exc) is Kind.FAILED_PRECONDITION


def test_controller_down_at_registration_is_unavailable(service: ManagerService, controller):
    create(service)
    controller.down = True
    with pytest.raises(ManagerError, match="cannot check node") as exc:
        service.register_process(SCHED, 7, 0, "h1")
    assert kind(exc) is Kind.UNAVAILABLE


def test_controller_down_when_routing_leaves_default(service: ManagerService, controller):
    create(service)
    service.start_job(SCHED, 7)
    service.register_process(SCHED, 7, 0, "h1")
    real = controller.install

    def boom(job_id, pairs):
        controller.down = True
        return real(job_id, pairs)

    controller.install = boom
    job = service.register_process(SCHED, 7, 1, "h5")
    assert job.state is JobState.DEFAULT and "connection refused" in job.detail


# -- cost bounds ------------------------------------------------------------------------


def test_patterns_beyond_the_cell_budget_are_refused_before_they_grow(service: ManagerService):
    """alltoall:nprocs=1536 held the lock 7.3 s; 4096 needed over 3 GiB: both are
    refused with the limit named, and the job is not created."""
    from sdnmpi.manager.patternfile import MAX_PATTERN_CELLS, MAX_SPEC_NPROCS

    for spec, limit in (
        ("alltoall:nprocs=1536,bytes=1048576", str(MAX_PATTERN_CELLS)),
        ("allreduce:nprocs=10000,bytes=8", str(MAX_SPEC_NPROCS)),
    ):
        with pytest.raises(ManagerError) as exc:
            service.create_job(SCHED, CreateJob(7, "big", 0, 10000, pattern_name=spec))
        assert kind(exc) is Kind.RESOURCE_EXHAUSTED and limit in str(exc.value)
    assert service.store.get_job(7) is None
    # the schedule's messages are charged as each step is made: the refusal costs the
    # budget, not the request (1536 ranks once built all 2.4 million cells first)
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    huge = CreateJob(8, "big", 0, 4096, pattern_name="alltoall:nprocs=4096,bytes=1048576")
    with pytest.raises(ManagerError):
        service.create_job(SCHED, huge)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 400 * 1024  # KiB
    ok = service.create_job(
        SCHED, CreateJob(7, "ok", 0, 512, pattern_name="alltoall:nprocs=512,bytes=8")
    )
    assert ok.pattern_json


def test_an_uploaded_file_beyond_the_cell_budget_is_refused(service: ManagerService):
    from sdnmpi.manager.patternfile import MAX_PATTERN_CELLS

    n = 1024  # one phase of n*(n-1) > 2^19 cells, in a JSON file of a few MB
    cells = [(s, d, 1) for s in range(n) for d in range(n) if s != d]
    big = pattern_bytes(Pattern("dense", n, (Phase.from_cells("all", cells),)))
    with pytest.raises(ManagerError) as exc:
        service.patterns.put(ALICE, PutPattern("dense", PatternUpload("d.json", big)))
    assert kind(exc) is Kind.RESOURCE_EXHAUSTED and str(MAX_PATTERN_CELLS) in str(exc.value)
    assert service.store.get_pattern("dense") is None


def test_per_user_quotas_name_their_limit(service: ManagerService, monkeypatch):
    import sdnmpi.manager.patterns as patterns_mod
    import sdnmpi.manager.service as svc_mod

    monkeypatch.setattr(svc_mod, "MAX_JOBS_PER_UID", 2)
    monkeypatch.setattr(patterns_mod, "MAX_PATTERNS_PER_UID", 2)
    for i in range(2):
        service.create_job(BOB, CreateJob(UJ + i, "j", BOB.uid, 2))
    with pytest.raises(ManagerError) as exc:
        service.create_job(BOB, CreateJob(UJ + 2, "j", BOB.uid, 2))
    assert kind(exc) is Kind.RESOURCE_EXHAUSTED and "2 unfinished jobs" in str(exc.value)
    service.finish_job(BOB, UJ)  # a finished job no longer counts, nor keeps its pattern
    assert service.create_job(BOB, CreateJob(UJ + 2, "j", BOB.uid, 2)).uid == BOB.uid
    finished = service.store.get_job(UJ)
    assert finished is not None and finished.pattern_json == b""
    assert service.create_job(SCHED, CreateJob(7, "s", BOB.uid, 2)).uid == BOB.uid  # scheduler
    upload = PatternUpload("p.json", pattern_bytes())
    for name in ("a", "b"):
        service.patterns.put(BOB, PutPattern(name, upload))
    assert service.patterns.put(BOB, PutPattern("a", PatternUpload(
        "q.json", pattern_bytes(pairs_pattern(4))), replace=True)).nranks == 4  # fmt: skip
    with pytest.raises(ManagerError) as exc:
        service.patterns.put(BOB, PutPattern("c", upload))
    assert kind(exc) is Kind.RESOURCE_EXHAUSTED and "2 stored patterns" in str(exc.value)
    assert service.patterns.put(ALICE, PutPattern("c", upload)).owner_uid == ALICE.uid
    monkeypatch.setattr(patterns_mod, "MAX_PATTERN_BYTES_PER_UID", 10)
    with pytest.raises(ManagerError) as exc:
        service.patterns.put(ALICE, PutPattern("d", upload))
    assert kind(exc) is Kind.RESOURCE_EXHAUSTED and "limit per user is 10" in str(exc.value)
