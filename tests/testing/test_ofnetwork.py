"""FakeOFNetwork: OpenFlow table semantics and packet traces on hand-made rules; FakeClock."""

from __future__ import annotations

import pytest

from sdnmpi.controller.flows import (
    ETH_TYPE_ARP,
    OFPP_CONTROLLER,
    OFPTT_ALL,
    Barrier,
    FlowRule,
    Match,
    Output,
    PacketOut,
    SetField,
    ToController,
)
from sdnmpi.controller.packets import arp_request, ipv4
from sdnmpi.core.generators import leaf_spine
from sdnmpi.testing import FakeClock, FakeOFNetwork, FakeOFNetworkError, Step, matches

# leaf_spine(2, 2, 1): hosts h1 (leaf1 port 1), h2 (leaf2 port 1); leaves have
# dpids 1, 2 and spines 3, 4; leaf uplinks are ports 2 (spine1) and 3 (spine2).
TOPO = leaf_spine(2, 2, 1)
H1, H2 = TOPO.host("h1").mac, TOPO.host("h2").mac
PKT = ipv4(H1, H2)


def _port(a: str, b: str) -> int:
    return next(arc.src_port for arc in TOPO.out_arcs[a] if arc.dst == b)


def _dpid(name: str) -> int:
    return TOPO.switch(name).dpid


def _fwd(sw: str, to: str, cookie: int = 0, priority: int = 10, **match: object) -> FlowRule:
    m = Match(eth_dst=H2, **match)  # type: ignore[arg-type]
    return FlowRule(_dpid(sw), 0, priority, m, (Output(_port(sw, to)),), cookie)


def test_topology_layout_assumed_by_these_tests():
    assert [s.name for s in TOPO.switches] == ["leaf1", "leaf2", "spine1", "spine2"]
    assert TOPO.attachment("h1") == ("leaf1", 1)


def test_trace_follows_rules_to_the_host():
    fab = FakeOFNetwork(TOPO)
    fab.apply([_fwd("leaf1", "spine2"), _fwd("spine2", "leaf2"), _fwd("leaf2", "h2")])
    tr = fab.trace("h1", PKT)
    assert tr.outcome == "delivered"
    assert tr.host == "h2"
    assert tr.dpids == (_dpid("leaf1"), _dpid("spine2"), _dpid("leaf2"))
    assert tr.steps[0] == Step(_dpid("leaf1"), 1, _port("leaf1", "spine2"))


def test_table_miss_without_rule_drops():
    fab = FakeOFNetwork(TOPO)
    assert fab.trace("h1", PKT).outcome == "dropped"
    fab.apply([FlowRule(1, 0, 0, Match(), (ToController(),))])
    assert fab.trace("h1", PKT).outcome == "controller"
    assert fab.output_ports(1, PKT, 1) == (OFPP_CONTROLLER,)


def test_highest_priority_wins_and_add_replaces_same_match():
    fab = FakeOFNetwork(TOPO)
    low = _fwd("leaf1", "spine1", priority=10)
    high = _fwd("leaf1", "spine2", priority=20, eth_src=H1)
    fab.apply([low, high])
    assert fab.output_ports(1, PKT, 1) == (_port("leaf1", "spine2"),)
    replaced = FlowRule(1, 0, 20, high.match, (Output(_port("leaf1", "spine1")),), 7)
    fab.apply([replaced])
    assert fab.rules(1) == [replaced, low]


def test_same_priority_overlap_is_an_error():
    fab = FakeOFNetwork(TOPO)
    fab.apply([_fwd("leaf1", "spine1"), _fwd("leaf1", "spine2", eth_src=H1)])
    with pytest.raises(FakeOFNetworkError, match="matches 2 rules"):
        fab.lookup(1, 1, PKT)


def test_delete_strict_and_delete_by_cookie():
    fab = FakeOFNetwork(TOPO)
    a = _fwd("leaf1", "spine1", cookie=0x0101)
    b = _fwd("leaf1", "spine1", cookie=0x0102, priority=20, eth_src=H1)
    c = _fwd("spine1", "leaf2", cookie=0x0201)
    fab.apply([a, b, c])
    # strict delete with a cookie filter that does not agree: nothing happens
    fab.apply(
        [FlowRule(1, 0, 10, a.match, cookie=0x9, cookie_mask=0xFFFF, command="delete_strict")]
    )
    assert len(fab.rules()) == 3
    fab.apply([FlowRule(1, 0, 10, a.match, command="delete_strict")])
    assert fab.rules() == [b, c]
    # by cookie under a mask, in all tables of switch 3 only
    fab.apply([FlowRule(3, OFPTT_ALL, cookie=0x0200, cookie_mask=0xFF00, command="delete")])
    assert fab.rules() == [b]
    fab.apply([FlowRule(1, 0, cookie=0x0100, cookie_mask=0xFF00, command="delete")])
    assert fab.rules() == []


def test_loop_and_flood_are_detected():
    fab = FakeOFNetwork(TOPO)
    fab.apply([_fwd("leaf1", "spine1"), _fwd("spine1", "leaf1")])
    assert fab.trace("h1", PKT).outcome == "loop"
    fab2 = FakeOFNetwork(TOPO)
    outs = (Output(_port("leaf1", "spine1")), Output(_port("leaf1", "spine2")))
    fab2.apply([FlowRule(1, 0, 1, Match(), outs)])
    assert fab2.trace("h1", PKT).outcome == "flooded"


def test_set_field_rewrites_before_output():
    fab = FakeOFNetwork(TOPO)
    tag = "0a:00:00:00:00:99"
    fab.apply(
        [
            FlowRule(1, 0, 10, Match(eth_dst=H2), (SetField("eth_dst", tag), Output(2))),
            FlowRule(3, 0, 10, Match(eth_dst=tag), (SetField("eth_dst", H2), Output(2))),
            _fwd("leaf2", "h2"),
        ]
    )
    tr = fab.trace("h1", PKT)
    assert (tr.outcome, tr.host) == ("delivered", "h2")


def test_output_to_an_unwired_port_drops():
    fab = FakeOFNetwork(TOPO)
    fab.apply([FlowRule(1, 0, 1, Match(), (Output(40),))])
    assert fab.trace("h1", PKT).outcome == "dropped"


def test_unknown_switch_rejected_barriers_and_packet_outs_recorded():
    fab = FakeOFNetwork(TOPO)
    with pytest.raises(FakeOFNetworkError, match="dpid 99"):
        fab.apply([FlowRule(99, 0, 1)])
    out = PacketOut(1, 1, b"\x00" * 60)
    fab.apply([Barrier(1), out])
    assert fab.barriers == 1
    assert fab.packet_outs == [out]


def test_match_fields_and_masks():
    arp = arp_request(H1, "10.0.0.1", "10.0.0.2")
    group = Match(eth_dst="01:00:00:00:00:00", eth_dst_mask="01:00:00:00:00:00")
    assert matches(group, 1, arp)
    assert not matches(group, 1, PKT)
    assert matches(Match(eth_type=ETH_TYPE_ARP, arp_tpa="10.0.0.2"), 1, arp)
    assert not matches(Match(eth_type=ETH_TYPE_ARP, arp_tpa="10.0.0.3"), 1, arp)
    assert matches(Match(in_port=1, ip_proto=6, eth_type=0x0800, tp_dst=5001), 1, PKT)
    assert not matches(Match(in_port=2), 1, PKT)


def test_snapshot_compares_tables():
    fab = FakeOFNetwork(TOPO)
    before = fab.snapshot()
    fab.apply([_fwd("leaf1", "spine1", cookie=5)])
    assert fab.snapshot() != before
    fab.apply([FlowRule(1, 0, cookie=5, cookie_mask=0xFF, command="delete")])
    assert fab.snapshot() == before


def test_fake_clock():
    clock = FakeClock()
    assert clock.now() == 0.0
    assert clock.advance(1.5) == 1.5
    assert clock() == 1.5
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1)
