"""Job routes: installed over the defaults for their pairs only, removed exactly, and
bad route sets rejected before anything changes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdnmpi.controller import layout
from sdnmpi.controller.flows import FlowRule
from sdnmpi.controller.layout import PRIORITY_JOB
from sdnmpi.controller.routes import Hop, Route
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.core.topology import Topology
from sdnmpi.errors import RoutingError
from tests.controller.conftest import Setup, steady


def _demands(fabric: Fabric, pairs: list[tuple[int, int]], sizes: list[int]) -> Demands:
    n = len(pairs)

    def ro(values: object) -> np.ndarray:
        arr = np.array(values, dtype=np.int64).reshape(-1)
        arr.setflags(write=False)
        return arr

    return Demands(
        ro([p[0] for p in pairs]),
        ro([p[1] for p in pairs]),
        ro(sizes),
        ro([0] * n),
        ro([-1] * n),
        ro([-1] * n),
        ("job",),
        ro([1]),
    )


def _shift(topo: Topology, by: int) -> list[tuple[int, int]]:
    n = len(topo.hosts)
    return [(i, (i + by) % n) for i in range(n)]


def _paths_by_pair(setup: Setup) -> dict[tuple[str, str], tuple[int, ...]]:
    return {(a, b): setup.trace(a, b).dpids for a, b in setup.topo.host_pairs()}


def _install_ours(setup: Setup, job: int, pairs: list[tuple[int, int]], sizes: list[int]):
    fabric = Fabric(setup.topo)
    demands = _demands(fabric, pairs, sizes)
    routing = route("ours", fabric, demands)
    out = setup.send(setup.planner.install_job(job, routing, fabric, demands))
    return fabric, demands, routing, out


def _check_job_paths(setup: Setup, fabric, demands, routing) -> set[tuple[str, str]]:
    pairs = set()
    for flow in range(len(demands)):
        a = fabric.names[int(demands.src[flow])]
        b = fabric.names[int(demands.dst[flow])]
        tr = setup.trace(a, b)
        assert (tr.outcome, tr.host) == ("delivered", b), (a, b, tr)
        assert tr.dpids == setup.dpids(routing.node_path(fabric, flow)), (a, b)
        pairs.add((a, b))
    return pairs


def test_job_routes_override_defaults_for_their_pairs_only(topo):
    setup = steady(topo)
    before_tables = setup.fabric.snapshot()
    before = _paths_by_pair(setup)
    # a skewed job: everyone sends to host 0 heavily and to a shift partner lightly
    n = len(topo.hosts)
    pairs = [(i, 0) for i in range(1, n)] + [(i, (i + 3) % n) for i in range(n)]
    fabric, demands, routing, out = _install_ours(setup, 7, pairs, [10**6] * (n - 1) + [10] * n)
    added = [m for m in out if isinstance(m, FlowRule)]
    assert added
    assert all(r.command == "add" and r.cookie == layout.job_cookie(7) for r in added)
    assert all(r.priority == PRIORITY_JOB and r.match.eth_src for r in added)
    job_pairs = _check_job_paths(setup, fabric, demands, routing)
    for pair, dpids in _paths_by_pair(setup).items():
        if pair not in job_pairs:
            assert dpids == before[pair], pair
    out = setup.send(setup.planner.remove_job(7))
    deletes = [m for m in out if isinstance(m, FlowRule)]
    assert {r.command for r in deletes} == {"delete"}
    assert {(r.cookie, r.cookie_mask) for r in deletes} == {
        (layout.job_cookie(7), layout.FULL_MASK)
    }
    assert len(deletes) == len({r.dpid for r in added})  # one per switch that had rules
    assert setup.fabric.snapshot() == before_tables
    assert setup.planner.jobs == {}


def test_two_jobs_are_independent():
    topo = fat_tree(4)
    setup = steady(topo)
    base = setup.fabric.snapshot()
    _install_ours(setup, 1, [(0, 5), (5, 0)], [100, 100])
    mid = setup.fabric.snapshot()
    _install_ours(setup, 2, [(1, 9), (9, 1)], [100, 100])
    setup.send(setup.planner.remove_job(2))
    assert setup.fabric.snapshot() == mid
    setup.send(setup.planner.remove_job(1))
    assert setup.fabric.snapshot() == base


def test_job_from_node_name_paths():
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo)
    # dmodk sends h1 -> h3 over one spine; pin it to the other one
    default = setup.trace("h1", "h3").dpids
    reverse = setup.trace("h3", "h1").dpids
    spine = "spine2" if topo.switch("spine1").dpid in default else "spine1"
    path = {("h1", "h3"): ("h1", "leaf1", spine, "leaf2", "h3")}
    setup.send(setup.planner.install_job(42, path))
    assert setup.trace("h1", "h3").dpids == setup.dpids(path[("h1", "h3")])
    assert setup.trace("h3", "h1").dpids == reverse  # only the named direction moves
    # replacing the job's routes (what the API's install_job does for a known job)
    other = "spine1" if spine == "spine2" else "spine2"
    moved = {("h1", "h3"): ("h1", "leaf1", other, "leaf2", "h3")}
    setup.send(setup.planner.replace_job(42, moved))
    assert setup.trace("h1", "h3").dpids == setup.dpids(moved[("h1", "h3")])
    with pytest.raises(RoutingError, match="h9"):  # a bad replacement leaves the job as it was
        setup.planner.replace_job(42, {("h1", "h9"): ("h1", "leaf1", other, "leaf4", "h9")})
    assert setup.trace("h1", "h3").dpids == setup.dpids(moved[("h1", "h3")])
    setup.send(setup.planner.remove_job(42))
    assert setup.trace("h1", "h3").dpids == default


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ({("h1", "h9"): ("h1", "leaf1", "spine1", "leaf4", "h9")}, "h9"),
        ({("h1", "h3"): ("h1", "leaf1", "spine9", "leaf2", "h3")}, "spine9"),
        ({("h1", "h3"): ("h1", "leaf1", "leaf2", "h3")}, "not contiguous"),
        ({("h1", "h3"): ("h1", "leaf1", "spine1", "leaf3", "h3")}, "not contiguous"),
        ({("h1", "h3"): ("h1", "h3")}, "at least one switch"),
        ({("h1", "h3"): ("h2", "leaf1", "spine1", "leaf2", "h3")}, "must run from"),
    ],
)
def test_invalid_name_paths_are_rejected_with_nothing_changed(path, message):
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo)
    good = {("h5", "h7"): ("h5", "leaf3", "spine1", "leaf4", "h7")}
    before = setup.fabric.snapshot()
    with pytest.raises(RoutingError, match=message):
        setup.planner.install_job(3, {**good, **path})
    assert setup.planner.jobs == {}
    assert setup.planner.installed(1) == setup.fabric.rules(1)
    # the planner still produces nothing for an unchanged state
    assert setup.planner.switch_up(1, installed=setup.fabric.rules(1)) == []
    assert setup.fabric.snapshot() == before


def _hops(setup: Setup, names: tuple[str, ...]) -> Route:
    topo = setup.topo
    from sdnmpi.controller.routes import routes_from_names

    return routes_from_names(topo, {(names[0], names[-1]): names})[0]


def test_invalid_hop_routes_are_rejected():
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo)
    good = _hops(setup, ("h1", "leaf1", "spine1", "leaf2", "h3"))
    wrong_port = Route(good.src_mac, good.dst_mac, (*good.hops[:-1], Hop(2, 1, 9)))
    cases = {
        "ends at": wrong_port,
        "unknown host": Route("02:00:00:00:00:99", good.dst_mac, good.hops),
        "starts at": Route(good.src_mac, good.dst_mac, (Hop(1, 2, 3), *good.hops[1:])),
        "not connected": Route(
            good.src_mac, good.dst_mac, (good.hops[0], Hop(77, 1, 1), good.hops[-1])
        ),
        "not contiguous": Route(good.src_mac, good.dst_mac, (good.hops[0], good.hops[-1])),
        "twice": Route(good.src_mac, good.dst_mac, (good.hops[0], good.hops[0], good.hops[-1])),
        "empty route": Route(good.src_mac, good.dst_mac, ()),
    }
    for message, bad in cases.items():
        with pytest.raises(RoutingError, match=message):
            setup.planner.install_job(5, [good, bad])
        assert setup.planner.jobs == {}
    setup.send(setup.planner.install_job(5, [good]))
    with pytest.raises(RoutingError, match="already has routes"):
        setup.planner.install_job(5, [good])
    with pytest.raises(RoutingError, match="routed by job 5"):
        setup.planner.install_job(6, [good])
    with pytest.raises(RoutingError, match="two routes"):
        setup.planner.install_job(6, [_hops(setup, ("h2", "leaf1", "spine1", "leaf2", "h3"))] * 2)
    with pytest.raises(RoutingError, match="no routes"):
        setup.planner.remove_job(6)
    with pytest.raises(RoutingError, match="job id"):
        setup.planner.install_job(-1, [good])
    with pytest.raises(RoutingError, match="Fabric"):
        setup.planner.install_job(8, route("dmodk", Fabric(topo), Demands.all_pairs(Fabric(topo))))


def test_job_over_a_lost_link_falls_back_to_defaults_and_returns():
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo)
    default = setup.trace("h1", "h3").dpids
    spine = "spine2" if topo.switch("spine1").dpid in default else "spine1"
    names = ("h1", "leaf1", spine, "leaf2", "h3")
    setup.send(setup.planner.install_job(9, {("h1", "h3"): names}))
    pinned = setup.dpids(names)
    assert setup.trace("h1", "h3").dpids == pinned
    up = next(a for a in topo.out_arcs["leaf1"] if a.dst == spine)
    ends = ((1, up.src_port), (topo.switch(spine).dpid, up.dst_port))
    setup.send(setup.planner.link_down(ends[0], ends[1]))
    setup.send(setup.planner.link_down(ends[1], ends[0]))
    tr = setup.trace("h1", "h3")
    assert tr.host == "h3"
    assert topo.switch(spine).dpid not in tr.dpids
    setup.send(setup.planner.link_up(ends[0], ends[1]))
    setup.send(setup.planner.link_up(ends[1], ends[0]))
    assert setup.trace("h1", "h3").dpids == pinned


@st.composite
def _scenario(draw):
    if draw(st.booleans()):
        k = draw(st.sampled_from([2, 4, 6]))
        topo = fat_tree(k, hosts_per_edge=draw(st.integers(1, 2 if k < 6 else 1)))
    else:
        topo = leaf_spine(draw(st.integers(1, 3)), draw(st.integers(2, 4)), draw(st.integers(1, 3)))
    n = len(topo.hosts)
    pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] != p[1])
    pairs = draw(st.lists(pair, min_size=1, max_size=12, unique=True))
    sizes = draw(st.lists(st.integers(1, 10**6), min_size=len(pairs), max_size=len(pairs)))
    router = draw(st.sampled_from(["dmodk", "ecmp"]))
    return topo, pairs, sizes, router


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenario())
def test_property_job_routes_deliver_loop_free_along_their_plan(scenario):
    topo, pairs, sizes, router = scenario
    setup = steady(topo, router)
    before = setup.fabric.snapshot()
    fabric, demands, routing, _ = _install_ours(setup, 11, pairs, sizes)
    job_pairs = _check_job_paths(setup, fabric, demands, routing)
    for a, b in topo.host_pairs():
        tr = setup.trace(a, b)
        assert (tr.outcome, tr.host) == ("delivered", b)
        assert len(set(tr.dpids)) == len(tr.dpids)
    assert job_pairs
    setup.send(setup.planner.remove_job(11))
    assert setup.fabric.snapshot() == before


def test_named_paths_choose_among_parallel_links_by_port():
    # leaf_spine(1, 2, 1, uplinks_per_pair=2): leaf1 reaches spine1 by ports 2 and 3,
    # spine1 reaches leaf2 by ports 3 and 4; plain names take the lowest port
    topo = leaf_spine(1, 2, 1, uplinks_per_pair=2)
    setup = steady(topo, "ecmp")
    plain = _hops(setup, ("h1", "leaf1", "spine1", "leaf2", "h2"))
    assert [h.out_port for h in plain.hops] == [2, 3, 1]
    second = ("h1", "leaf1:3", "spine1:4", "leaf2", "h2")
    assert [h.out_port for h in _hops(setup, second).hops] == [3, 4, 1]
    by_port = {(a.src, a.src_port): a for a in topo.arcs}
    arcs = [by_port[k] for k in (("h1", 1), ("leaf1", 3), ("spine1", 4), ("leaf2", 1))]
    assert topo.path_names(arcs) == list(second)
    setup.send(setup.planner.install_job(5, {("h1", "h2"): list(second)}))
    steps = setup.trace("h1", "h2").steps
    assert [(s.dpid, s.out_port) for s in steps] == [(1, 3), (3, 4), (2, 1)]
    with pytest.raises(RoutingError, match="by port 9"):
        _hops(setup, ("h1", "leaf1:9", "spine1", "leaf2", "h2"))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["install", "remove"]), st.integers(1, 3), st.integers(0, 99)),
        min_size=1,
        max_size=8,
    )
)
def test_a_jobs_fast_path_sends_what_the_full_difference_sends(ops):
    """A job's arrival, change or removal on synced switches computes only its own rules
    (Planner._job_changed): the messages and the switches' tables are exactly those of
    the full recomputation, whatever the order of jobs coming, changing and going."""
    topo = fat_tree(4)
    fast, full = steady(topo), steady(topo)
    full.planner.fast_jobs = False
    taken: list[bool] = []
    changed = fast.planner._job_changed

    def counted(*args):
        out = changed(*args)
        taken.append(out is not None)
        return out

    fast.planner._job_changed = counted  # type: ignore[method-assign]
    fabric = Fabric(topo)
    n = len(topo.hosts)
    for op, job, seed in ops:
        rng = np.random.default_rng(seed)
        # each job its own sources (hosts job, job+3, ...) so no two jobs share a pair
        pairs = [(s, int(d)) for s in range(job - 1, n, 3) for d in rng.choice(n, 2) if d != s]
        outs = []
        for setup in (fast, full):
            planner = setup.planner
            if op == "remove":
                msgs = planner.remove_job(job) if job in planner.jobs else []
            elif not pairs:
                continue
            else:
                demands = _demands(fabric, pairs, [1] * len(pairs))
                routing = route("ecmp", fabric, demands, seed=seed)
                msgs = planner.replace_job(job, routing, fabric)
            outs.append(msgs)
            setup.send(msgs)
        assert len(outs) in (0, 2)
        if outs:
            assert outs[0] == outs[1]
        assert fast.fabric.snapshot() == full.fabric.snapshot()
        for sw in topo.switches:
            assert sorted(fast.planner.desired(sw.dpid), key=repr) == sorted(
                full.planner.desired(sw.dpid), key=repr
            )
    assert fast.planner.sync() == []
    assert all(taken)  # the fast path was taken every time (not the fallback)
