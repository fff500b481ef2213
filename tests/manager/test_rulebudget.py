"""The manager's rule budget: a job's pairs admitted beside the routed jobs' within the
switches' job-rule budget, counted exactly as the controller counts what it installs,
and a job too large for it left on default routes with the reason in its detail."""

from __future__ import annotations

from collections import Counter

from sdnmpi.controller import Planner, PlannerConfig
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.routing import rules as rulecore
from sdnmpi.core.topology import Topology
from sdnmpi.manager import rulebudget
from sdnmpi.manager.model import JobState, RoutePair
from sdnmpi.manager.service import ManagerService
from sdnmpi.testing import FakeOFNetwork, discover
from tests.manager.test_service import run_job


def _off_default(topo: Topology, pairs: list[tuple[str, str]]) -> list[RoutePair]:
    """Each pair over the spine its default route does not take (a rule on its leaf)."""
    view = rulebudget.fabric_rules(topo)
    empty = rulecore.RuleSet({}, {})
    out = []
    for src, dst in pairs:
        hops = rulecore.trace(empty, view.defaults, view.peer, view.edge, src, dst)
        assert hops is not None
        spine = view.peer(*hops[0])
        other = "spine2" if spine == "spine1" else "spine1"
        leaf_a, leaf_b = view.edge[src], view.edge[dst]
        out.append(RoutePair(src, dst, (src, str(leaf_a), other, str(leaf_b), dst), 1e6))
    return out


def _controller_usage(topo: Topology, routes: list[RoutePair]) -> Counter[str]:
    """Job rules per switch (by name) the controller holds for ``routes`` (aggregated)."""
    planner = Planner(topo, PlannerConfig(job_rules="aggregate"))
    fabric = FakeOFNetwork(topo)
    fabric.apply(discover(planner, topo))
    fabric.apply(planner.install_job(1, {(r.src, r.dst): list(r.path) for r in routes}))
    names = {s.dpid: s.name for s in topo.switches}
    return Counter({names[d]: n for d, n in planner.job_routes.usage.items()})


def test_the_budget_admits_pairs_the_controller_then_counts_the_same() -> None:
    topo = leaf_spine(2, 2, 4)
    view = rulebudget.fabric_rules(topo)
    srcs, dsts = ["h1", "h2", "h3", "h4"], ["h5", "h6", "h7", "h8"]
    routes = _off_default(topo, [(a, b) for a in srcs for b in dsts])
    free = rulebudget.within_budget(view, routes, {}, None, 1)
    assert free.fallback == () and len(free.kept) == 16
    assert free.counts == _controller_usage(topo, routes)
    # every pair to one destination shares a per-destination rule on leaf1 (4 rules);
    # a spine holds no default rule for the destinations D-mod-K sends by the other
    # spine, so it needs one per destination too (2 each)
    assert free.counts == {"leaf1": 4, "spine1": 2, "spine2": 2}
    tight = rulebudget.within_budget(view, routes, {}, 2, 1)
    assert max(tight.counts.values()) <= 2 and len(tight.kept) == 8
    assert tight.counts == _controller_usage(topo, list(tight.kept))
    assert "8 of 16 host pair(s) on default routes: rule budget 2" in tight.note()


def test_routed_jobs_keep_their_rules_and_share_the_budget() -> None:
    topo = leaf_spine(2, 2, 4)
    view = rulebudget.fabric_rules(topo)
    first = _off_default(topo, [("h1", "h5"), ("h2", "h6")])
    second = _off_default(topo, [("h3", "h7"), ("h4", "h8")])
    done = rulebudget.within_budget(view, second, {1: first}, 3, 2)
    assert len(done.kept) == 1 and done.counts["leaf1"] == 3  # two held, one added
    assert done.counts == _controller_usage(topo, [*first, *done.kept])
    nothing = rulebudget.within_budget(view, second, {1: first}, 2, 2)
    assert nothing.kept == () and len(nothing.fallback) == 2


def test_a_job_too_large_for_the_budget_runs_on_default_routes(
    service: ManagerService, controller
) -> None:
    service.routing.rule_budget = 0
    topo = controller.live
    taken = _off_default(topo, [("h1", "h5")])[0]
    # the pattern's pair routed off its default route needs a rule: none fits
    service.routing.planner = lambda req: (taken,)
    job = run_job(service, 7, ["h1", "h5"])
    assert job.state is JobState.DEFAULT
    assert "1 of 1 host pair(s) on default routes: rule budget 0" in job.detail
    assert 7 not in controller.held


def test_a_move_that_does_not_fit_the_budget_whole_is_dropped(
    service: ManagerService, controller
) -> None:
    topo = controller.live
    job = run_job(service, 1, ["h1", "h5"])
    assert job.state is JobState.ROUTED
    routed = {1: job}
    moved = tuple(_off_default(topo, [(r.src, r.dst) for r in job.routes]))
    service.routing.rule_budget = 0
    assert service.routing._moves_within_budget({1: moved}, routed, topo) == {}
    service.routing.rule_budget = 10
    assert service.routing._moves_within_budget({1: moved}, routed, topo) == {1: moved}


def test_when_exact_rules_fit_every_pair_is_admitted_as_the_fit_would() -> None:
    """The shortcut (one exact rule per pair and switch off its default route fits
    every switch: no fit run) admits what :func:`rulecore.fit` admits and counts the
    same rules; one rule less of budget and the fit runs (and leaves pairs out)."""
    topo = leaf_spine(2, 2, 4)
    view = rulebudget.fabric_rules(topo)
    first = _off_default(topo, [("h1", "h5"), ("h2", "h6")])
    second = _off_default(topo, [(a, b) for a in ("h3", "h4") for b in ("h7", "h8")])
    fixed = [view.pair_path(r, 1) for r in first]
    mine = [view.pair_path(r, 2) for r in second]
    exact = Counter(s for p in [*fixed, *mine] for s, _ in p.hops)  # every hop is off default
    budget = max(exact.values())
    done = rulebudget.within_budget(view, second, {1: first}, budget, 2)
    full = rulecore.fit(mine, view.defaults, view.peer, view.edge, budget, fixed=fixed)
    assert done.kept == tuple(second) and len(full.admitted) == len(second)
    assert (
        dict(done.counts) == dict(full.counts) == dict(_controller_usage(topo, [*first, *second]))
    )
    assert max(done.counts.values()) < budget  # aggregated: fewer than the exact bound
    tighter = rulebudget.within_budget(view, second, {1: first}, max(done.counts.values()) - 1, 2)
    assert tighter.fallback and "on default routes" in tighter.note()
