"""Fast checks of the shim's encoding and the port-statistics module (no switch needed)."""

from __future__ import annotations

import gc
import json
import weakref

import pytest
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser  # type: ignore[import-untyped]
from os_ken.ofproto.ofproto_protocol import ProtocolDesc  # type: ignore[import-untyped]

from sdnmpi.controller import layout, ofcodec
from sdnmpi.controller.flows import FlowRule, GroupMod, Match, Output, PacketOut, SetField
from sdnmpi.controller.oskenapp import Heap, settle_heap
from sdnmpi.controller.packets import arp_request
from sdnmpi.controller.planner import Planner
from sdnmpi.controller.portstats import PortStats
from sdnmpi.core.generators import leaf_spine
from sdnmpi.errors import ConfigError


def _dp() -> ProtocolDesc:
    return ProtocolDesc(ofproto_v1_3.OFP_VERSION)


def _stats_of(mod) -> ofproto_v1_3_parser.OFPFlowStats:
    """The flow-stats entry a switch would report for an add flow-mod."""
    return ofproto_v1_3_parser.OFPFlowStats(
        mod.table_id, 1, 0, mod.priority, mod.idle_timeout, mod.hard_timeout, 0,
        mod.cookie, 0, 0, mod.match, mod.instructions,
    )  # fmt: skip


def _full_planner() -> tuple[Planner, list[FlowRule]]:
    model = leaf_spine(2, 2, 2)
    planner = Planner(model)
    for s in model.switches:
        planner.switch_up(s.dpid, sync=False)
    for ln in model.links:
        if not (model.is_host(ln.src) or model.is_host(ln.dst)):
            a = (model.switch(ln.src).dpid, ln.src_port)
            b = (model.switch(ln.dst).dpid, ln.dst_port)
            planner.link_up(a, b, sync=False)
            planner.link_up(b, a, sync=False)
    msgs = planner.sync()
    return planner, [m for m in msgs if isinstance(m, FlowRule) and m.command == "add"]


def test_every_planner_rule_round_trips_through_os_ken_messages():
    dp = _dp()
    _, rules = _full_planner()
    assert len(rules) > 20
    for rule in rules:
        mod = ofcodec.flow_mod(dp, rule)
        mod.serialize()
        assert mod.command == ofproto_v1_3.OFPFC_ADD
        assert ofcodec.rule_from_stats(rule.dpid, _stats_of(mod)) == rule


def test_deletes_use_any_port_and_group():
    dp = _dp()
    rule = FlowRule(1, 255, cookie=0x5D << 56, cookie_mask=0xFF << 56, command="delete")
    mod = ofcodec.flow_mod(dp, rule)
    mod.serialize()
    assert (mod.command, mod.out_port, mod.out_group) == (
        ofproto_v1_3.OFPFC_DELETE,
        ofproto_v1_3.OFPP_ANY,
        ofproto_v1_3.OFPG_ANY,
    )
    assert (mod.cookie, mod.cookie_mask, mod.instructions) == (0x5D << 56, 0xFF << 56, [])
    strict = FlowRule(1, 0, 100, Match(eth_dst="02:00:00:00:00:01"), command="delete_strict")
    assert ofcodec.flow_mod(dp, strict).command == ofproto_v1_3.OFPFC_DELETE_STRICT


def test_set_field_and_l4_match_encode():
    dp = _dp()
    rule = FlowRule(
        1,
        0,
        300,
        Match(eth_type=0x0800, ip_proto=17, tp_dst=5001),
        (SetField("eth_dst", "02:00:00:00:00:09"),),
    )
    mod = ofcodec.flow_mod(dp, rule)
    mod.serialize()
    assert dict(mod.match.items())["udp_dst"] == 5001
    assert ofcodec.rule_from_stats(1, _stats_of(mod)) == rule


def test_packet_out_carries_an_ipv4_arp_frame():
    po = PacketOut(1, 2, arp_request("02:00:00:00:00:01", "10.0.0.1", "10.0.0.2").encode())
    msg = ofcodec.packet_out(_dp(), po)
    msg.serialize()
    assert msg.in_port == ofproto_v1_3.OFPP_CONTROLLER
    assert msg.data[16:18] == b"\x08\x00"  # ARP protocol type IPv4 on the wire
    assert msg.actions[0].port == 2


def test_port_stats_rates_resets_and_files(tmp_path):
    s = PortStats(history=2)
    assert s.add(1, 1, rx_bytes=0, tx_bytes=0, now=0.0) is None
    r = s.add(1, 1, rx_bytes=1250, tx_bytes=0, now=1.0)
    assert r is not None
    assert (r.rx_bps, r.tx_bps) == (10_000.0, 0.0)
    assert s.add(1, 1, rx_bytes=10, tx_bytes=0, now=2.0) is None  # counter reset
    s.add(1, 1, rx_bytes=20, tx_bytes=0, now=3.0)
    s.add(1, 1, rx_bytes=30, tx_bytes=0, now=4.0)
    assert [x.time_s for x in s.series()] == [3.0, 4.0]  # history 2
    s.write(tmp_path / "p.json")
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["counters"] == [{"dpid": 1, "port_no": 1, "rx_bytes": 30, "tx_bytes": 0}]
    s.write(tmp_path / "p.csv")
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[0] == "dpid,port_no,time_s,rx_bps,tx_bps"
    assert len(lines) == 3
    with pytest.raises(ConfigError):
        PortStats(history=0)


def _bcast_planner() -> tuple[Planner, list[FlowRule], list[GroupMod]]:
    """A planner on leaf_spine(2, 2, 2) holding one broadcast tree h1 -> h2, h3, h4."""
    planner, _ = _full_planner()
    _, msgs = planner.open_bcast(0x2A, 0, {0: "h1", 1: "h2", 2: "h3", 3: "h4"})
    rules = [m for m in msgs if isinstance(m, FlowRule)]
    groups = [m for m in msgs if isinstance(m, GroupMod)]
    assert len(rules) == len(groups) > 1
    return planner, rules, groups


def test_broadcast_rules_and_groups_round_trip_through_os_ken_messages():
    dp = _dp()
    _, rules, groups = _bcast_planner()
    for rule in rules:
        mod = ofcodec.flow_mod(dp, rule)
        mod.serialize()
        assert ofcodec.rule_from_stats(rule.dpid, _stats_of(mod)) == rule
        assert rule.match.ipv4_dst is not None and rule.priority == layout.PRIORITY_BCAST
    for group in groups:
        mod = ofcodec.group_mod(dp, group)
        mod.serialize()
        assert (mod.command, mod.type, mod.group_id) == (
            ofproto_v1_3.OFPGC_ADD, ofproto_v1_3.OFPGT_ALL, group.group_id
        )  # fmt: skip
        desc = ofproto_v1_3_parser.OFPGroupDescStats(mod.type, mod.group_id, mod.buckets)
        foreign = ofproto_v1_3_parser.OFPGroupDescStats(mod.type, 7, mod.buckets)
        assert ofcodec.groups_from_desc(group.dpid, [desc, foreign]) == {group.group_id: group}
    for command in ("modify", "delete"):
        ports = groups[0].ports if command == "modify" else ()
        mod = ofcodec.group_mod(dp, GroupMod(1, groups[0].group_id, command, ports))
        mod.serialize()
        assert mod.command == getattr(ofproto_v1_3, f"OFPGC_{command.upper()}")


def test_a_group_the_controller_does_not_make_reads_as_unknown():
    parser = ofproto_v1_3_parser
    gid = layout.bcast_group_id(3)
    two = parser.OFPBucket(actions=[parser.OFPActionOutput(1, 0), parser.OFPActionOutput(2, 0)])
    select = parser.OFPGroupDescStats(ofproto_v1_3.OFPGT_SELECT, gid, [])
    odd = parser.OFPGroupDescStats(ofproto_v1_3.OFPGT_ALL, gid + 1, [two])
    assert ofcodec.groups_from_desc(1, [select, odd]) == {gid: None, gid + 1: None}
    assert ofcodec.error_text(6, 3) == "OFPET_GROUP_MOD_FAILED/OFPGMFC_OUT_OF_GROUPS"
    assert ofcodec.error_text(99, 1) == "type 99/code 1"


def test_route_rules_encode_byte_for_byte_as_os_ken_does():
    """flow_mod_bytes (the shim's fast path) gives exactly os-ken's bytes for every rule
    it takes, and refuses (None) the others, which os-ken encodes."""
    dp = _dp()
    planner, rules = _full_planner()
    h1, h3 = "02:00:00:00:00:01", "02:00:00:00:00:03"
    job = FlowRule(1, 0, layout.PRIORITY_JOB, Match(in_port=1, eth_src=h1, eth_dst=h3),
                   (Output(3), Output(4)), layout.job_cookie(9))  # fmt: skip
    strict = FlowRule(1, 0, 100, Match(eth_dst=h3), cookie=5, cookie_mask=layout.FULL_MASK,
                      command="delete_strict")  # fmt: skip
    by_cookie = FlowRule(1, 0, cookie=5, cookie_mask=layout.FULL_MASK, command="delete")
    fast = 0
    for xid, rule in enumerate([*rules, job, strict, by_cookie], 1):
        mod = ofcodec.flow_mod(dp, rule)
        mod.set_xid(xid)
        mod.serialize()
        got = ofcodec.flow_mod_bytes(rule, xid)
        if got is None:  # control-plane rules: masks, eth_type, to the controller
            assert (
                rule.match.eth_type is not None
                or rule.match.eth_dst_mask is not None
                or any(not isinstance(a, Output) for a in rule.actions)
            )
            continue
        fast += 1
        assert got == bytes(mod.buf), rule
    assert fast >= len(rules) - 5 * len(planner.inventory.switches_up) + 3


def test_settle_heap_sets_survivors_aside_until_the_next_settle():
    """What survives a settle is out of the collector's reach (a cycle that becomes
    garbage stays), until the next settle collects before it freezes again."""

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a  # a reference cycle: only the collector frees it
    alive = weakref.ref(a)
    try:
        frozen, seconds = settle_heap()
        assert frozen == gc.get_freeze_count() > 0 and seconds >= 0
        del a, b
        gc.collect()
        assert alive() is not None  # frozen: not collected
        settle_heap()
        assert alive() is None  # unfrozen, collected, then the rest frozen again
    finally:
        gc.unfreeze()


class _Node:
    other: object = None


def _cycle() -> weakref.ref:
    return weakref.ref(_pair())


def _pair() -> _Node:
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a reference cycle: only the collector frees it
    return a


def test_heap_pauses_the_collector_during_requests_nested_and_interleaved():
    heap = Heap()
    assert gc.isenabled()
    try:
        with heap.paused():
            assert not gc.isenabled()
            with heap.paused():  # a second request interleaved (green threads)
                assert not gc.isenabled()
            assert not gc.isenabled()  # the first is still running
        assert gc.isenabled()
        gc.disable()  # disabled by someone else: left disabled
        with heap.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_heap_after_a_request_frees_its_cycles_and_sets_survivors_aside():
    heap = Heap(every=3)
    try:
        settle_heap()
        with heap.paused():
            dead = _cycle()  # garbage of the request
            kept = [_Node() for _ in range(100)]  # what it leaves behind
        assert dead() is not None  # paused: nothing collected yet
        before = gc.get_freeze_count()
        heap.after(changed=True)
        assert dead() is None  # collected before the freeze, never set aside
        assert gc.get_freeze_count() >= before + len(kept)
        # a cycle set aside that dies later waits for the settle every `every` requests
        held = _pair()
        later = weakref.ref(held)
        heap.after(changed=True)  # second: set aside while alive
        del held
        gc.collect()
        assert later() is not None  # dead, but set aside: not collected
        heap.after(changed=False)  # not counted: no state changed
        gc.collect()
        assert later() is not None
        heap.after(changed=True)  # the third: a full settle
        assert later() is None
        with heap.paused():  # inside a request, after() waits for the outermost one
            frozen = gc.get_freeze_count()
            heap.after(changed=True)
            assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
