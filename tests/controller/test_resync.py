"""Switches that reconnect get their complete rule set back; failures reroute; batching."""

from __future__ import annotations

from sdnmpi.controller import Barrier, FlowRule, Match, Output, Planner, PlannerConfig, layout
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.testing import FakeOFNetwork, discover
from tests.controller.conftest import steady


def test_reconnect_after_a_switch_restart_reproduces_its_table(topo):
    setup = steady(topo)
    fabric = Fabric(topo)
    demands = Demands.all_pairs(fabric, hosts=[topo.hosts[0].name, topo.hosts[-1].name])
    routing = route("ours", fabric, demands)
    setup.send(setup.planner.install_job(4, routing, fabric))
    assert any(r.cookie == layout.job_cookie(4) for r in setup.fabric.rules())
    before = setup.fabric.snapshot()
    for sw in topo.switches:
        setup.send(setup.planner.switch_down(sw.dpid))
        setup.fabric.tables[sw.dpid] = {}  # the switch restarted empty
        out = setup.send(setup.planner.switch_up(sw.dpid))
        first = out[0]
        assert isinstance(first, FlowRule)
        assert (first.command, first.cookie, first.cookie_mask) == (
            "delete",
            layout.ours_cookie(),
            layout.OURS_MASK,
        )
        # links come back by LLDP
        for arc in topo.out_arcs[sw.name]:
            if not topo.is_host(arc.dst):
                peer = (topo.switch(arc.dst).dpid, arc.dst_port)
                setup.send(setup.planner.link_up((sw.dpid, arc.src_port), peer))
                setup.send(setup.planner.link_up(peer, (sw.dpid, arc.src_port)))
    assert setup.fabric.snapshot() == before


def test_reconnect_with_stale_rules_removes_them():
    topo = leaf_spine(2, 2, 1)
    setup = steady(topo)
    before = setup.fabric.snapshot()
    stale = FlowRule(1, 0, 300, Match(eth_dst="02:00:00:00:00:77"), (Output(2),), 0x5D04 << 48)
    foreign = FlowRule(1, 0, 5, Match(eth_dst="02:00:00:00:00:78"), (Output(2),), 0x1234)
    setup.fabric.apply([stale, foreign])
    setup.send(setup.planner.switch_up(1))
    after = setup.fabric.snapshot()
    assert stale not in after[1]
    assert foreign in after[1]  # another controller's rule is left alone
    assert after[1] - {foreign} == before[1]


def test_reconnect_with_a_flow_dump_sends_only_the_difference():
    topo = leaf_spine(2, 2, 1)
    setup = steady(topo)
    before = setup.fabric.snapshot()
    assert setup.planner.switch_up(1, installed=setup.fabric.rules(1)) == []
    stale = FlowRule(1, 0, 300, Match(eth_dst="02:00:00:00:00:77"), (Output(2),), 0x5D04 << 48)
    lost = setup.fabric.rules(1)[0]
    setup.fabric.apply([stale, FlowRule(1, 0, lost.priority, lost.match, command="delete_strict")])
    out = setup.planner.switch_up(1, installed=setup.fabric.rules(1))
    rules = [m for m in out if isinstance(m, FlowRule)]
    assert [r.command for r in rules] == ["add", "delete_strict"]
    assert rules[0] == lost
    assert rules[1].match == stale.match
    setup.send(out)
    assert setup.fabric.snapshot() == before


def test_core_switch_down_reroutes_every_pair_around_it():
    topo = fat_tree(4)
    setup = steady(topo)
    core = topo.switch("core1").dpid
    setup.send(setup.planner.switch_down(core))
    for a, b in topo.host_pairs():
        tr = setup.trace(a, b)
        assert tr.host == b
        assert core not in tr.dpids
    setup.send(setup.planner.switch_up(core))
    assert all(setup.trace(a, b).host == b for a, b in topo.host_pairs())


def test_batches_end_with_barriers():
    topo = fat_tree(4)
    planner = Planner(topo, PlannerConfig(batch_size=7))
    out = discover(planner, topo)
    fab = FakeOFNetwork(topo)
    fab.apply(out)
    pending: dict[int, int] = {}
    for msg in out:
        if isinstance(msg, Barrier):
            assert pending.get(msg.dpid, 0) > 0
            pending[msg.dpid] = 0
        else:
            pending[msg.dpid] = pending.get(msg.dpid, 0) + 1
            assert pending[msg.dpid] <= 7
    assert set(pending.values()) == {0}
    assert fab.barriers == sum(isinstance(m, Barrier) for m in out)


def test_events_that_change_nothing_send_nothing():
    topo = leaf_spine(2, 2, 2)
    setup = steady(topo)
    h = topo.hosts[0]
    sw, port = topo.attachment(h.name)
    assert setup.planner.host_learned(h.mac, topo.switch(sw).dpid, port, h.ip, now=5.0) == []
    arc = next(a for a in topo.out_arcs["leaf1"] if not topo.is_host(a.dst))
    src, dst = (1, arc.src_port), (topo.switch(arc.dst).dpid, arc.dst_port)
    assert setup.planner.link_up(src, dst) == []


def test_a_known_link_seen_again_changes_no_version():
    """LLDP re-reports a link os-ken timed out and found again: nothing routing depends
    on changed, so no diff of the whole plan is due (about 1 s at fat_tree(16))."""
    topo = leaf_spine(2, 2, 2)
    inv = steady(topo).planner.inventory
    arc = next(a for a in topo.out_arcs["leaf1"] if not topo.is_host(a.dst))
    src, dst = (1, arc.src_port), (topo.switch(arc.dst).dpid, arc.dst_port)
    before = inv.version
    inv.link_up(src, dst)
    assert inv.version == before
    inv.link_up(src, dst, 5e9)  # a new capacity is a change
    assert inv.version == before + 1
    inv.link_up(src, dst, 5e9)
    assert inv.version == before + 1
    inv.link_down(src, dst)
    inv.link_up(src, dst)
    assert inv.version == before + 3


def test_host_move_updates_delivery_and_routes():
    topo = leaf_spine(2, 2, 2)
    setup = steady(topo)
    h1 = topo.host("h1")
    # h1 shows up on leaf2's (unused in the model) port 9: rules follow it there
    setup.send(setup.planner.host_learned(h1.mac, topo.switch("leaf2").dpid, 9, h1.ip))
    assert setup.planner.inventory.hosts[h1.mac].dpid == topo.switch("leaf2").dpid
    rules = setup.fabric.rules(topo.switch("leaf2").dpid)
    assert any(r.match.eth_dst == h1.mac and r.actions == (Output(9),) for r in rules)
    assert not any(r.match.eth_dst == h1.mac and r.priority == 500 for r in setup.fabric.rules(1))


def test_planner_without_a_model_names_what_it_discovers():
    topo = leaf_spine(2, 2, 1)
    planner = Planner()
    fab = FakeOFNetwork(topo)
    fab.apply(discover(planner, topo))
    live = planner.live_topology()
    assert live is not None
    assert sorted(s.name for s in live.switches) == ["s1", "s2", "s3", "s4"]
    assert sorted(h.name for h in live.hosts) == ["h020000000001", "h020000000002"]
    from sdnmpi.controller.packets import ipv4

    for a, b in topo.host_pairs():
        assert fab.trace(a, ipv4(topo.host(a).mac, topo.host(b).mac)).host == b


def test_event_by_event_and_coalesced_discovery_end_in_the_same_tables(topo):
    each = FakeOFNetwork(topo)
    each.apply(discover(Planner(topo), topo, each=True))
    once = FakeOFNetwork(topo)
    once.apply(discover(Planner(topo), topo))
    assert each.snapshot() == once.snapshot()


def test_sync_false_defers_the_messages():
    topo = leaf_spine(2, 2, 1)
    planner = Planner(topo)
    assert planner.switch_up(1, sync=False) == []
    out = planner.sync()
    assert isinstance(out[0], FlowRule)
    assert out[0].command == "delete"  # the pending wipe comes first
    assert planner.sync() == []


def test_model_hosts_are_routed_before_they_are_seen():
    topo = leaf_spine(2, 2, 2)
    planner = Planner(topo)
    fab = FakeOFNetwork(topo)
    fab.apply(discover(planner, topo, hosts=False))
    from sdnmpi.controller.packets import ipv4

    for a, b in topo.host_pairs():
        assert fab.trace(a, ipv4(topo.host(a).mac, topo.host(b).mac)).host == b
    h = topo.hosts[0]
    sw, port = topo.attachment(h.name)
    # seen where the model says, with the model's IP: nothing to change
    assert planner.host_learned(h.mac, topo.switch(sw).dpid, port, h.ip, now=3.0) == []
    assert planner.inventory.hosts[h.mac].last_seen_s == 3.0


def test_bad_planner_config_is_rejected():
    import pytest

    from sdnmpi.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown router 'nope'"):
        PlannerConfig(router="nope")
    with pytest.raises(ConfigError, match="encoding"):
        PlannerConfig(encoding="dst")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="batch size"):
        PlannerConfig(batch_size=0)


def test_a_switch_link_found_again_before_the_disconnection_is_kept():
    """os-ken delivers a switch's disconnection and LLDP's link events from different
    threads: the link event of a reconnection can come first.  The link must survive
    the late disconnection (it is not live while the switch is down, and live again when
    it is back), else discovery never completes."""
    from sdnmpi.controller.inventory import Inventory

    inv = Inventory()
    for dpid in (1, 2):
        inv.switch_up(dpid)
    inv.link_up((1, 3), (2, 4))
    inv.link_up((2, 4), (1, 3))
    assert inv.duplex_links() == [((1, 3), (2, 4))]
    inv.link_up((2, 4), (1, 3))  # found again after switch 1 reconnected ...
    inv.switch_down(1)  # ... and its disconnection delivered late
    assert inv.duplex_links() == []
    inv.switch_up(1)
    assert inv.duplex_links() == [((1, 3), (2, 4))]
