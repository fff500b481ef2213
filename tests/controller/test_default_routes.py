"""Default routes: every host pair is delivered along the path the router chose."""

from __future__ import annotations

from collections import Counter

import pytest

from sdnmpi.controller.layout import PRIORITY_DEFAULT_DST, PRIORITY_DEFAULT_PAIR
from sdnmpi.core.generators import fat_tree, leaf_spine
from tests.controller.conftest import planned, steady


@pytest.mark.parametrize("router", ["dmodk", "ecmp", "ours"])
def test_every_pair_follows_the_routers_path(topo, router):
    setup = steady(topo, router)
    assert setup.planner.default_router() == router
    fabric, demands, routing = planned(topo, router)
    for flow in range(len(demands)):
        src = fabric.names[int(demands.src[flow])]
        dst = fabric.names[int(demands.dst[flow])]
        tr = setup.trace(src, dst)
        assert (tr.outcome, tr.host) == ("delivered", dst), (src, dst, tr)
        assert tr.dpids == setup.dpids(routing.node_path(fabric, flow)), (src, dst)


def test_dmodk_is_one_destination_rule_per_switch_and_destination(topo):
    setup = steady(topo, "dmodk")
    rules = [r for r in setup.fabric.rules() if r.priority in (100, 110)]
    assert rules
    assert all(r.priority == PRIORITY_DEFAULT_DST for r in rules)
    assert all(r.match.eth_src is None for r in rules)
    per_key = Counter((r.dpid, r.match.eth_dst) for r in rules)
    assert set(per_key.values()) == {1}
    # every (switch, destination) that some path crosses before its last hop has its rule
    fabric, demands, routing = planned(topo, "dmodk")
    wanted = set()
    for flow in range(len(demands)):
        dst_mac = topo.host(fabric.names[int(demands.dst[flow])]).mac
        for name in routing.node_path(fabric, flow)[1:-2]:
            wanted.add((topo.switch(name).dpid, dst_mac))
    assert set(per_key) == wanted


def test_ecmp_gets_pair_rules_where_it_is_not_destination_consistent():
    # "ours" on uniform all-pairs traffic keeps its D-mod-K start (it meets the
    # lower bound), so only ECMP is sure to need exceptions here.
    setup = steady(fat_tree(4), "ecmp")
    rules = setup.fabric.rules()
    pair = [r for r in rules if r.priority == PRIORITY_DEFAULT_PAIR]
    dst = [r for r in rules if r.priority == PRIORITY_DEFAULT_DST]
    assert pair
    assert dst
    assert all(r.match.eth_src is not None for r in pair)
    # a pair rule only exists where its destination rule points elsewhere
    main = {(r.dpid, r.match.eth_dst): r.actions for r in dst}
    assert all(main[(r.dpid, r.match.eth_dst)] != r.actions for r in pair)


def test_pair_encoding_can_be_forced(topo):
    setup = steady(topo, "dmodk", encoding="pair")
    default = [r for r in setup.fabric.rules() if r.priority in (100, 110)]
    assert {r.priority for r in default} == {PRIORITY_DEFAULT_PAIR}
    for a, b in topo.host_pairs():
        assert setup.trace(a, b).host == b


def test_every_switch_has_the_base_rules_and_hosts_their_delivery(topo):
    setup = steady(topo)
    for sw in topo.switches:
        rules = setup.fabric.rules(sw.dpid)
        assert sum(r.priority in (0, 1000, 1100) for r in rules) == 4
    for host in topo.hosts:
        sw, port = topo.attachment(host.name)
        delivery = [
            r
            for r in setup.fabric.rules(topo.switch(sw).dpid)
            if r.priority == 500 and r.match.eth_dst == host.mac
        ]
        assert [r.actions[0].port for r in delivery] == [port]  # type: ignore[union-attr]


def test_planner_view_equals_the_fabric(topo):
    setup = steady(topo)
    for sw in topo.switches:
        assert setup.planner.installed(sw.dpid) == setup.fabric.rules(sw.dpid)
        assert sorted(setup.planner.desired(sw.dpid), key=lambda r: r.render()) == sorted(
            setup.fabric.rules(sw.dpid), key=lambda r: r.render()
        )


def test_live_topology_equals_the_model_once_discovered():
    topo = fat_tree(4)
    setup = steady(topo)
    assert setup.planner.live_topology() == topo


def test_partial_fabric_routes_the_component_with_most_hosts():
    topo = leaf_spine(2, 4, 2)
    setup = steady(topo)
    # leaf4 loses both uplinks: h7, h8 are cut off, the others still talk
    leaf4 = topo.switch("leaf4").dpid
    for arc in topo.out_arcs["leaf4"]:
        if not topo.is_host(arc.dst):
            peer = (topo.switch(arc.dst).dpid, arc.dst_port)
            setup.send(setup.planner.link_down((leaf4, arc.src_port), peer))
            setup.send(setup.planner.link_down(peer, (leaf4, arc.src_port)))
    live = setup.planner.live_topology()
    assert live is not None
    assert {h.name for h in live.hosts} == {f"h{i}" for i in range(1, 7)}
    for a in ("h1", "h3", "h6"):
        for b in ("h1", "h3", "h6"):
            if a != b:
                assert setup.trace(a, b).host == b
        # no route to the cut-off host: the first switch hands the packet up, no flood
        assert setup.trace(a, "h7").outcome == "controller"
    assert setup.trace("h7", "h8").host == "h8"  # same leaf: delivery still works


def test_defaults_computed_ahead_are_taken_while_the_topology_is_theirs():
    """A shim computes the defaults with its lock released (DefaultRoutes.compute) and
    offers them: a sync then sends the same messages as one that computed them itself,
    and an offer for a topology that changed meanwhile is not used."""
    topo = fat_tree(4)
    ahead, inline = steady(topo), steady(topo)
    for setup in (ahead, inline):
        setup.planner.switch_down(topo.switches[0].dpid, sync=False)
    defaults = ahead.planner.defaults
    live = ahead.planner.live_topology()
    assert live is not None
    assert defaults.needs(live) and inline.planner.defaults.needs(live)
    state = defaults.compute(live)
    assert defaults.needs(live), "compute changed the state"
    defaults.offer(state)
    assert not defaults.needs(live)
    assert ahead.planner.sync() == inline.planner.sync()
    assert defaults.current is state
    # an offer made for a topology that changed before the sync is left aside
    stale = defaults.compute(live)
    ahead.planner.switch_down(topo.switches[1].dpid, sync=False)
    defaults.offer(stale)
    assert defaults.needs(ahead.planner.live_topology())
    ahead.planner.sync()
    current = defaults.current
    assert current is not None and current is not stale
    assert current.topology == ahead.planner.live_topology()


@pytest.mark.parametrize("router", ["dmodk", "ecmp", "ours", "minhop"])
@pytest.mark.parametrize("encoding", ["auto", "pair"])
def test_rules_from_the_routing_arrays_are_the_routes_rules(topo, router, encoding):
    """The defaults' rules come from the routing's arrays (no Route built): the same
    rules, in the same order, as encoding the routes one by one."""
    from sdnmpi.controller.routes import (
        default_rules,
        default_rules_of_routing,
        routes_from_routing,
    )
    from sdnmpi.core.routing import Demands, Fabric, route

    fabric = Fabric(topo)
    routing = route(router, fabric, Demands.all_pairs(fabric), seed=3)
    want = default_rules(routes_from_routing(fabric, routing), encoding)
    assert want and default_rules_of_routing(fabric, routing, encoding) == want


def test_a_broken_routing_is_named_as_route_by_route():
    """A path that is not contiguous takes the route-by-route way and its error."""
    import numpy as np

    from sdnmpi.controller.routes import default_rules_of_routing, routes_from_routing
    from sdnmpi.core.routing import Demands, Fabric, Routing, route
    from sdnmpi.errors import RoutingError

    topo = fat_tree(4)
    fabric = Fabric(topo)
    good = route("dmodk", fabric, Demands.all_pairs(fabric))
    arcs = np.array(good.arcs)
    arcs[3, 1] = arcs[9, 2]  # a hop from somewhere else
    broken = Routing("dmodk", arcs)
    with pytest.raises(RoutingError) as slow:
        routes_from_routing(fabric, broken)
    with pytest.raises(RoutingError) as fast:
        default_rules_of_routing(fabric, broken)
    assert str(fast.value) == str(slow.value)
    arcs[5, 0] = -1
    with pytest.raises(RoutingError, match="empty path"):
        default_rules_of_routing(fabric, Routing("dmodk", arcs))


def test_the_routes_themselves_are_built_only_when_asked_for():
    """A sync, its log line (the router's name) and the rules need no Route per pair
    (a million at fat_tree(16): seconds under the controller's lock)."""
    setup = steady(fat_tree(4))
    state = setup.planner.defaults.current
    assert state is not None and state.rules
    assert setup.planner.default_router() == "dmodk"
    assert "routes" not in vars(state)
    routes = setup.planner.default_routes()
    assert len(routes) == 16 * 15 and "routes" in vars(state)
    assert state.net.default_route("h01", "h05") in routes
