"""Aggregated job rules and the per-switch job-rule budget, on the fake fabric: every
pair still follows its planned path (traced through the switches' tables), fewer rules
than one per pair and switch, no switch over the budget, a job over it refused with
nothing changed, and a full table rolling a job back to default routes."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from sdnmpi.controller import layout
from sdnmpi.controller.api import ApiHandler
from sdnmpi.controller.flows import FlowRule
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Demands, Fabric, Routing, route
from sdnmpi.core.topology import Topology
from sdnmpi.errors import RoutingError
from sdnmpi.testing import FakeOFNetwork
from tests.controller.conftest import Setup, steady


def _job(
    topo: Topology, pairs: list[tuple[int, int]], seed: int = 0
) -> tuple[Fabric, Demands, Routing]:
    fabric = Fabric(topo)
    n = len(pairs)

    def ro(values: object) -> np.ndarray:
        arr = np.array(values, dtype=np.int64).reshape(-1)
        arr.setflags(write=False)
        return arr

    hosts = [fabric.index[h.name] for h in topo.hosts]
    demands = Demands(
        ro([hosts[a] for a, _ in pairs]),
        ro([hosts[b] for _, b in pairs]),
        ro([10**6 + 1000 * i for i in range(n)]),
        ro([0] * n),
        ro([-1] * n),
        ro([-1] * n),
        ("job",),
        ro([1]),
    )
    return fabric, demands, route("ecmp", fabric, demands, seed=seed)


def _alltoall(hosts: list[int]) -> list[tuple[int, int]]:
    return [(a, b) for a in hosts for b in hosts if a != b]


def _job_rules(setup: Setup) -> list[FlowRule]:
    kinds = {"job", "jobdst"}
    return [r for r in setup.fabric.rules() if layout.kind_of(r.cookie) in kinds]


def _check_paths(setup: Setup, fabric: Fabric, demands: Demands, routing: Routing) -> None:
    for flow in range(len(demands)):
        a = fabric.names[int(demands.src[flow])]
        b = fabric.names[int(demands.dst[flow])]
        tr = setup.trace(a, b)
        assert (tr.outcome, tr.host) == ("delivered", b), (a, b, tr)
        assert tr.dpids == setup.dpids(routing.node_path(fabric, flow)), (a, b)


def _all_delivered(setup: Setup) -> None:
    for a, b in setup.topo.host_pairs():
        tr = setup.trace(a, b)
        assert (tr.outcome, tr.host) == ("delivered", b), (a, b, tr)


def test_aggregated_rules_carry_every_pair_on_its_planned_path() -> None:
    topo = fat_tree(4)
    exact, agg = steady(topo), steady(topo, job_rules="aggregate")
    jobs = {
        3: _job(topo, _alltoall(list(range(0, 8))), 1),
        4: _job(topo, _alltoall([8, 10, 12, 14]), 2),
    }
    for setup in (exact, agg):
        for job_id, (fabric, demands, routing) in jobs.items():
            setup.send(setup.planner.install_job(job_id, routing, fabric, demands))
    for fabric, demands, routing in jobs.values():
        _check_paths(agg, fabric, demands, routing)
    _all_delivered(agg)  # pairs of no job too (per-destination rules reach their host)
    n_exact, n_agg = len(_job_rules(exact)), len(_job_rules(agg))
    assert 0 < n_agg < n_exact
    kinds = Counter(layout.kind_of(r.cookie) for r in _job_rules(agg))
    assert kinds["jobdst"] > 0 and kinds["job"] > 0
    # the planner counts what the switches hold, and says so (the ``rules`` query)
    held = Counter(r.dpid for r in _job_rules(agg))
    assert agg.planner.job_routes.usage == held
    api = ApiHandler(agg.planner)
    reply = api.handle(b'{"op": "rules"}\n').complete(True, 0.0)
    assert reply == {
        "ok": True,
        "mode": "aggregate",
        "budget": None,
        "rules": {str(d): n for d, n in sorted(held.items())},
    }
    # removing one job keeps the other on its paths, and leaves no rule of it behind
    agg.send(agg.planner.remove_job(3))
    _check_paths(agg, *jobs[4])
    _all_delivered(agg)
    assert not any(r.cookie == layout.job_cookie(3) for r in agg.fabric.rules())


def test_an_exact_rule_wins_over_a_per_destination_rule_on_the_same_switch() -> None:
    topo = fat_tree(4)
    setup = steady(topo, job_rules="aggregate")
    # four sources of pod 0 to host 15 by three paths: a per-destination rule for the
    # shared next hop, exact rules for the odd ones, on the same switches
    fabric, demands, routing = _job(topo, [(0, 15), (1, 15), (2, 15), (3, 15)], 5)
    setup.send(setup.planner.install_job(9, routing, fabric, demands))
    _check_paths(setup, fabric, demands, routing)
    rules = _job_rules(setup)
    assert {r.priority for r in rules} <= {layout.PRIORITY_JOB, layout.PRIORITY_JOB_DST}
    assert layout.PRIORITY_DEFAULT_PAIR > layout.PRIORITY_JOB_DST > layout.PRIORITY_DEFAULT_DST
    _all_delivered(setup)


def test_no_switch_goes_over_the_budget_and_a_job_over_it_changes_nothing() -> None:
    topo = fat_tree(4)
    for mode in ("exact", "aggregate"):
        setup = steady(topo, job_rules=mode, job_budget=6)
        small = _job(topo, [(0, 12), (1, 13)], 1)
        setup.send(setup.planner.install_job(1, small[2], small[0], small[1]))
        before, jobs = setup.fabric.snapshot(), dict(setup.planner.jobs)
        big = _job(topo, _alltoall(list(range(2, 16))), 2)
        with pytest.raises(RoutingError, match="budget of 6"):
            setup.planner.install_job(2, big[2], big[0], big[1])
        assert setup.planner.jobs == jobs and setup.fabric.snapshot() == before
        assert setup.planner.sync() == []  # nothing pending either
        assert max(Counter(r.dpid for r in _job_rules(setup)).values()) <= 6
        _check_paths(setup, *small)


def test_a_full_table_rolls_the_job_back_to_default_routes() -> None:
    topo = fat_tree(4)
    setup = steady(topo, job_rules="aggregate")
    held = max(len(setup.fabric.rules(s.dpid)) for s in topo.switches)
    full = FakeOFNetwork(topo, max_flows=held + 1)  # room for one more rule per switch
    full.apply(setup.messages)
    setup.fabric = full
    before = full.snapshot()
    api = ApiHandler(setup.planner)
    api.synced = True
    fabric, demands, routing = _job(topo, _alltoall([0, 1, 4, 5, 8, 9, 12, 13]), 3)
    names = {
        f"{fabric.names[int(demands.src[f])]}>{fabric.names[int(demands.dst[f])]}": list(
            routing.node_path(fabric, f)
        )
        for f in range(len(demands))
    }
    answer = api.handle(json.dumps({"op": "install_job", "job_id": 5, "pairs": names}).encode())
    assert answer.undo is not None
    seen = len(full.errors)
    full.apply(answer.messages)
    errors = full.errors[seen:]
    assert errors and all(why == "table full" for _, why in errors)
    why = "; ".join(f"switch {m.dpid:#x} refused: {e}" for m, e in errors)
    undo = answer.undo(why)
    full.apply(undo.messages)
    reply = undo.complete(True, 0.0)
    assert (
        reply["ok"] is False
        and "table full" in reply["error"]
        and "default routes" in reply["error"]
    )
    assert 5 not in setup.planner.jobs and api.job_pairs == {}
    assert full.snapshot() == before  # nothing of the job left on any switch
    _all_delivered(setup)


def test_a_refused_replacement_restores_the_jobs_previous_routes() -> None:
    topo = fat_tree(4)
    setup = steady(topo, job_rules="aggregate")
    api = ApiHandler(setup.planner)
    api.synced = True
    fabric, demands, routing = _job(topo, [(0, 15)], 4)
    a, b = fabric.names[int(demands.src[0])], fabric.names[int(demands.dst[0])]
    one = {f"{a}>{b}": list(routing.node_path(fabric, 0))}
    setup.send(
        api.handle(json.dumps({"op": "install_job", "job_id": 6, "pairs": one}).encode()).messages
    )
    before = setup.fabric.snapshot()
    fabric, demands, routing = _job(topo, _alltoall([0, 1, 4, 5, 8, 9, 12, 13]), 3)
    many = {
        f"{fabric.names[int(demands.src[f])]}>{fabric.names[int(demands.dst[f])]}": list(
            routing.node_path(fabric, f)
        )
        for f in range(len(demands))
    }
    answer = api.handle(json.dumps({"op": "install_job", "job_id": 6, "pairs": many}).encode())
    assert answer.undo is not None
    undo = answer.undo("switch 0x1 refused: table full")
    setup.send(answer.messages)
    setup.send(undo.messages)
    reply = undo.complete(True, 0.0)
    assert reply["ok"] is False and "previous routes restored" in reply["error"]
    assert api.job_pairs == {6: {(a, b): one[f"{a}>{b}"]}}
    assert setup.fabric.snapshot() == before


def test_exact_rules_per_switch_stay_counted_through_the_per_job_fast_path() -> None:
    """Exact rules (the default) are installed and removed by the per-job fast path
    (only the job's own rules computed; at 320 switches the full difference cost a
    second per job); the job rules per switch it reports stay what the switches hold."""
    topo = fat_tree(4)
    setup = steady(topo)
    assert setup.planner.fast_jobs
    jobs = {
        3: _job(topo, _alltoall(list(range(0, 8))), 1),
        4: _job(topo, _alltoall([8, 10, 12, 14]), 2),
    }
    for job_id, (fabric, demands, routing) in jobs.items():
        setup.send(setup.planner.install_job(job_id, routing, fabric, demands))
        held = Counter(r.dpid for r in _job_rules(setup))
        assert setup.planner.job_routes.usage == held and held
    for fabric, demands, routing in jobs.values():
        _check_paths(setup, fabric, demands, routing)
    setup.send(setup.planner.remove_job(3))
    held = Counter(r.dpid for r in _job_rules(setup))
    assert setup.planner.job_routes.usage == held
    assert not any(r.cookie == layout.job_cookie(3) for r in setup.fabric.rules())
    _check_paths(setup, *jobs[4])
