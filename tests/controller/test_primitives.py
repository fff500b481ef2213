"""Per-primitive routing of tagged packets: modules, registry, proactive rules, unregister.

Topologies: ``leaf_spine(2, 4, 2)`` (h1..h8; leaves 1-4, spines 5-6) and the
``unisonflow`` preset (node01..node24 on 4 leaves, 2 spines, LAG uplinks).
"""

from __future__ import annotations

import doctest
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdnmpi.catalog import load_topology
from sdnmpi.controller import layout
from sdnmpi.controller.flows import FlowRule, SetField
from sdnmpi.controller.layout import PRIORITY_TAG, PRIORITY_TAG_DST
from sdnmpi.controller.packets import Packet, ipv4
from sdnmpi.controller.primitives import (
    Collective,
    PatternModule,
    PinnedModule,
    Registry,
    TagContext,
    TaggedJob,
    base,
    inbound,
    registry,
    tagged,
)
from sdnmpi.controller.primitives.tagged import collective_flows
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.errors import ConfigError, RoutingError
from sdnmpi.wire.tag import Primitive
from tests.controller.conftest import Setup, steady
from tests.controller.tagging import send, tag, tag_load, tag_rules, world_flows

UNISON_COLLS = [
    Collective("bcast", root=0, count=4096),
    Collective("reduce", root=7, count=4096),
]


def _unison(spec: str = "unisonflow") -> tuple[Setup, list[str]]:
    setup = steady(load_topology("unisonflow"), primitives=spec)
    return setup, [h.name for h in setup.topo.hosts]


def _spines(setup: Setup, dpids: tuple[int, ...]) -> set[str]:
    names = {setup.topo.switch_by_dpid[d].name for d in dpids}
    return {n for n in names if n.startswith("spine")}


@pytest.mark.parametrize(
    "module",
    [layout, registry, tagged, inbound, base],
    ids=lambda m: m.__name__.rsplit(".", 1)[-1],
)
def test_doctests(module: object) -> None:
    assert doctest.testmod(module).failed == 0  # type: ignore[arg-type]


# -- registry -------------------------------------------------------------------------------


def test_registry_standard_spec_and_errors():
    std = Registry.standard()
    assert std.module_for(Primitive.BCAST).name == "bcast"
    assert std.module_for(Primitive.P2P).name == "default"
    assert std.module_for(20).name == "default"  # reserved code
    reg = Registry.from_spec("unisonflow")
    assert reg.module_for(Primitive.BCAST) == PinnedModule("spine1")
    assert reg.module_for(Primitive.REDUCE) == PinnedModule("spine2")
    assert reg.module_for(Primitive.ALLREDUCE).name == "allreduce"
    reg = Registry.from_spec("alltoall=default, p2p=pattern:ecmp")
    assert reg.module_for(Primitive.ALLTOALL).name == "default"
    assert reg.module_for(Primitive.P2P) == PatternModule("pattern:ecmp", router="ecmp")
    for bad, message in [
        ("bcast", "PRIMITIVE=MODULE"),
        ("bogus=default", "unknown primitive 'bogus'"),
        ("bcast=teleport", "unknown primitive module 'teleport'"),
        ("bcast=pattern:nope", "unknown router 'nope'"),
    ]:
        with pytest.raises(ConfigError, match=message):
            Registry.from_spec(bad)
    from sdnmpi.controller import PlannerConfig

    with pytest.raises(ConfigError, match="teleport"):
        PlannerConfig(primitives="bcast=teleport")
    with pytest.raises(ConfigError, match="tag budget"):
        PlannerConfig(tag_budget=-1)


# -- the pinned policy (UnisonFlow) -------------------------------------------------------------


def test_pinned_policy_bcast_crosses_spine1_only_and_reduce_spine2_only():
    setup, hosts = _unison()
    before = setup.fabric.snapshot()
    out = setup.send(setup.planner.register_tagged_job(7, 3, 24, hosts, UNISON_COLLS))
    assert setup.planner.tag_regime(7) == "exact"
    assert {r.cookie for r in tag_rules(setup.fabric.rules())} == {layout.tag_cookie(7)}
    assert all(r.command == "add" for r in out if isinstance(r, FlowRule))
    crossed: dict[Primitive, set[str]] = {Primitive.BCAST: set(), Primitive.REDUCE: set()}
    for coll in UNISON_COLLS:
        flows = world_flows(coll, hosts)
        assert flows
        for prim, s, d in flows:
            tr = setup.fabric.trace(hosts[s], _pkt(setup, hosts[s], tag(3, prim, s, d)))
            assert (tr.outcome, tr.host) == ("delivered", hosts[d]), (prim, s, d, tr)
            assert tr.packet is not None and tr.packet.eth_dst == setup.topo.host(hosts[d]).mac
            crossed[Primitive(prim)] |= _spines(setup, tr.dpids)
    assert crossed == {Primitive.BCAST: {"spine1"}, Primitive.REDUCE: {"spine2"}}
    setup.send(setup.planner.unregister_tagged_job(7))
    assert setup.fabric.snapshot() == before


def test_pinned_falls_back_to_default_when_the_spine_is_cut_off():
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo, primitives="bcast=pinned:spine1")
    hosts = [h.name for h in topo.hosts]
    setup.send(setup.planner.register_tagged_job(1, 9, 8, hosts))
    mac = tag(9, Primitive.BCAST, 0, 4)  # h1 (leaf1) -> h5 (leaf3)
    assert _spines(setup, send(setup, "h1", "h5", mac).dpids) == {"spine1"}
    assert _spines(setup, setup.fabric.trace("h1", _pkt(setup, "h1", mac)).dpids) == {"spine1"}
    up = next(a for a in topo.out_arcs["leaf1"] if a.dst == "spine1")
    ends = ((1, up.src_port), (topo.switch("spine1").dpid, up.dst_port))
    setup.send(setup.planner.link_down(*ends))
    setup.send(setup.planner.link_down(ends[1], ends[0]))
    tr = setup.fabric.trace("h1", _pkt(setup, "h1", mac))
    assert (tr.outcome, tr.host) == ("delivered", "h5")
    assert _spines(setup, tr.dpids) == {"spine2"}
    setup.send(setup.planner.link_up(*ends))
    setup.send(setup.planner.link_up(ends[1], ends[0]))
    assert _spines(setup, setup.fabric.trace("h1", _pkt(setup, "h1", mac)).dpids) == {"spine1"}


def test_pinned_module_directly_returns_none_within_a_leaf_or_for_an_unknown_spine():
    setup, hosts = _unison()
    net = setup.planner.network()
    assert net is not None
    job = TaggedJob(1, 1, tuple(hosts))
    same_leaf = TagContext(job, Primitive.BCAST, 0, 1)
    across = TagContext(job, Primitive.BCAST, 0, 23)
    assert PinnedModule("spine1").route(same_leaf, net) is None
    assert PinnedModule("spine9").route(across, net) is None
    route = PinnedModule("spine2").route(across, net)
    assert route is not None
    assert [h.dpid for h in route.hops] == [1, 6, 4]


# -- pattern modules -----------------------------------------------------------------------------


def test_pattern_module_paths_are_installed_and_cached():
    setup, hosts = _unison("")
    coll = Collective("alltoall", count=64, comm=tuple(range(0, 24, 2)))
    setup.send(setup.planner.register_tagged_job(3, 5, 24, hosts, [coll]))
    net = setup.planner.network()
    assert net is not None
    module = setup.planner.primitives.module_for(Primitive.ALLTOALL)
    assert isinstance(module, PatternModule) and module.router == "ours"
    job = setup.planner.tagged[3].job
    routes = module.routes(job, coll, net)
    assert routes is module.routes(job, coll, net)  # cached per network
    flows = world_flows(coll, hosts)
    assert {(s, d) for _, s, d in flows} == set(routes)
    spines_used = set()
    for prim, s, d in flows:
        tr = setup.fabric.trace(hosts[s], _pkt(setup, hosts[s], tag(5, prim, s, d)))
        assert (tr.outcome, tr.host) == ("delivered", hosts[d])
        assert tr.dpids == tuple(h.dpid for h in routes[(s, d)].hops)
        spines_used |= _spines(setup, tr.dpids)
    assert spines_used == {"spine1", "spine2"}  # the router spreads the exchange


def test_pattern_module_without_a_registered_collective_uses_the_default_route():
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo)
    hosts = [h.name for h in topo.hosts]
    setup.send(setup.planner.register_tagged_job(2, 4, 8, hosts))
    for s, d in [(0, 7), (3, 6), (5, 1)]:
        tr = send(setup, hosts[s], hosts[d], tag(4, Primitive.BCAST, s, d))
        assert (tr.outcome, tr.host) == ("delivered", hosts[d])
        assert tr.dpids == setup.trace(hosts[s], hosts[d]).dpids  # default path


# -- proactive mode --------------------------------------------------------------------------


COLLS = [
    Collective("bcast", root=2, count=1 << 14),
    Collective("reduce", root=0, count=1 << 14, type_bytes=4),
    Collective("allreduce", count=1 << 12, type_bytes=8),
    Collective("alltoall", count=32, comm=(0, 1, 2, 3, 8, 9)),
    Collective("barrier", count=0),
]


def test_proactive_job_causes_no_packet_in_for_any_registered_message():
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo)
    ranks = [h.name for h in topo.hosts for _ in range(2)]  # 2 ranks per host, 16 ranks
    setup.send(setup.planner.register_tagged_job(11, 6, 16, ranks, COLLS))
    flows = set().union(*(world_flows(c, ranks) for c in COLLS))
    assert flows == set(collective_flows(setup.planner.tagged[11].job))
    for prim, s, d in sorted(flows):
        tr = setup.fabric.trace(ranks[s], _pkt(setup, ranks[s], tag(6, prim, s, d)))
        assert tr.outcome == "delivered" and tr.host == ranks[d], (prim, s, d, tr)
        assert tr.packet is not None and tr.packet.eth_dst == topo.host(ranks[d]).mac
        assert len(set(tr.dpids)) == len(tr.dpids)
    # point-to-point and an unregistered collective: the per-destination catch-all
    for prim, s, d in [(Primitive.P2P, 0, 15), (Primitive.GATHER, 5, 1), (Primitive.OTHER, 14, 2)]:
        tr = setup.fabric.trace(ranks[s], _pkt(setup, ranks[s], tag(6, prim, s, d)))
        assert (tr.outcome, tr.host) == ("delivered", ranks[d])
        assert tr.packet is not None and tr.packet.eth_dst == topo.host(ranks[d]).mac
    prios = {r.priority for r in tag_rules(setup.fabric.rules(), 11)}
    assert prios == {PRIORITY_TAG, PRIORITY_TAG_DST}


def test_last_hop_restores_the_real_mac_and_others_do_not():
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo)
    hosts = [h.name for h in topo.hosts]
    setup.send(setup.planner.register_tagged_job(1, 1, 8, hosts, [Collective("bcast", count=8)]))
    for rule in tag_rules(setup.fabric.rules()):
        if rule.priority != PRIORITY_TAG:
            continue
        sets = [a for a in rule.actions if isinstance(a, SetField)]
        attached = {topo.switch(topo.attachment(h)[0]).dpid for h in hosts}
        if sets:
            assert rule.dpid in attached and sets[0].field == "eth_dst"
            assert sets[0].value in {topo.host(h).mac for h in hosts}
        else:
            assert len(rule.actions) == 1


# -- unregister ------------------------------------------------------------------------------


def test_unregister_removes_exactly_that_jobs_tag_rules():
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo)
    hosts = [h.name for h in topo.hosts]
    base = setup.fabric.snapshot()
    setup.send(setup.planner.register_tagged_job(1, 1, 8, hosts, COLLS[:2]))
    mid = setup.fabric.snapshot()
    setup.send(
        setup.planner.install_job(1, {("h1", "h3"): ("h1", "leaf1", "spine2", "leaf2", "h3")})
    )
    with_job = setup.fabric.snapshot()
    setup.send(setup.planner.register_tagged_job(2, 2, 4, hosts[4:], COLLS[2:3]))
    assert tag_rules(setup.fabric.rules(), 2)
    out = setup.send(setup.planner.unregister_tagged_job(2))
    deletes = [m for m in out if isinstance(m, FlowRule)]
    assert {(r.command, r.cookie, r.cookie_mask) for r in deletes} == {
        ("delete", layout.tag_cookie(2), layout.FULL_MASK)
    }
    assert setup.fabric.snapshot() == with_job
    setup.send(setup.planner.remove_job(1))  # job routes of the same id: tag rules stay
    assert setup.fabric.snapshot() == mid
    setup.send(setup.planner.unregister_tagged_job(1))
    assert setup.fabric.snapshot() == base
    with pytest.raises(RoutingError, match="not registered"):
        setup.planner.unregister_tagged_job(1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"slot": 0}, "job slot 0"),
        ({"slot": 128}, "job slot 128"),
        ({"slot": 1}, "held by job 1"),
        ({"world_size": 3}, "not exactly 0..2"),
        ({"rank_hosts": ["h1", "h2", "h3", "h99"]}, "unknown host"),
        ({"collectives": [Collective("bcast", root=4)]}, "root 4 out of range"),
        ({"collectives": [Collective("bcast", comm=(0, 0))]}, "repeats a rank"),
        ({"collectives": [Collective("bcast", comm=(0, 9))]}, "outside the job"),
    ],
)
def test_bad_registrations_are_rejected_with_nothing_changed(kwargs, message):
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo)
    setup.send(setup.planner.register_tagged_job(1, 1, 2, ["h1", "h2"]))
    before = setup.fabric.snapshot()
    args: dict[str, Any] = {
        "slot": 2,
        "world_size": 4,
        "rank_hosts": ["h1", "h2", "h3", "h4"],
        "collectives": [],
    }
    args.update(kwargs)
    with pytest.raises(RoutingError, match=message):
        setup.planner.register_tagged_job(2, **args)
    assert set(setup.planner.tagged) == {1}
    assert setup.planner.sync() == []
    assert setup.fabric.snapshot() == before
    with pytest.raises(RoutingError, match="already registered"):
        setup.planner.register_tagged_job(1, 5, 2, ["h1", "h2"])
    with pytest.raises(RoutingError, match="unknown collective"):
        Collective("bcastt")


# -- property --------------------------------------------------------------------------------


@st.composite
def _tags(draw):
    if draw(st.booleans()):
        topo = leaf_spine(draw(st.integers(1, 3)), draw(st.integers(2, 4)), draw(st.integers(1, 2)))
    else:
        topo = fat_tree(4)
    n = len(topo.hosts)
    ranks = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=10))
    prims = [int(p) for p in Primitive]
    msgs = draw(
        st.lists(
            st.tuples(
                st.sampled_from(prims),
                st.integers(0, len(ranks) - 1),
                st.integers(0, len(ranks) - 1),
            ),
            min_size=1,
            max_size=8,
        )
    )
    spec = draw(
        st.sampled_from(
            ["", "unisonflow", "p2p=pattern:ecmp", "bcast=pinned:core1,reduce=pinned:agg1_1"]
        )
    )
    colls = draw(st.sampled_from([[], [Collective("allreduce", count=64)]]))
    return topo, ranks, msgs, spec, colls


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tags())
def test_property_random_valid_tags_reach_the_right_host_without_loops(case):
    topo, ranks, msgs, spec, colls = case
    setup = steady(topo, primitives=spec)
    hosts = [topo.hosts[r].name for r in ranks]
    setup.send(setup.planner.register_tagged_job(4, 17, len(hosts), hosts, colls))
    for prim, s, d in msgs:
        if hosts[s] == hosts[d]:
            continue
        for _ in range(2):  # the first may go through the controller, the second must not
            tr = send(setup, hosts[s], hosts[d], tag(17, prim, s, d))
            assert (tr.outcome, tr.host) == ("delivered", hosts[d])
            assert tr.packet is not None and tr.packet.eth_dst == topo.host(hosts[d]).mac
            assert len(set(tr.dpids)) == len(tr.dpids)
        direct = setup.fabric.trace(hosts[s], _pkt(setup, hosts[s], tag(17, prim, s, d)))
        assert (direct.outcome, direct.host) == ("delivered", hosts[d])
    if any(hosts[s] != hosts[d] for _, s, d in msgs):
        assert max(tag_load(setup.fabric).values()) >= 1


def _pkt(setup: Setup, src: str, mac: str) -> Packet:
    return ipv4(setup.topo.host(src).mac, mac)
