"""Flow rules, cookies and packets as plain data: validation, rendering, codecs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdnmpi.controller import layout
from sdnmpi.controller.flows import (
    Barrier,
    FlowRule,
    FlowRuleError,
    Match,
    Output,
    SetField,
    ToController,
    batched,
    render_rules,
)
from sdnmpi.controller.layout import Kind
from sdnmpi.controller.packets import Packet, arp_reply, arp_request, decode, ipv4
from sdnmpi.errors import RoutingError, SdnMpiError

MAC = "02:00:00:00:00:01"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"eth_dst": "02:00:00:00:00:0G"}, "eth_dst"),
        ({"eth_src": "02-00-00-00-00-01"}, "eth_src"),
        ({"in_port": 0}, "in_port"),
        ({"in_port": 0xFFFFFFFD}, "in_port"),
        ({"eth_type": 0x10000}, "eth_type"),
        ({"arp_op": 1}, "0x0806"),
        ({"eth_type": 0x0806, "arp_tpa": "10.0.0.300"}, "arp_tpa"),
        ({"ip_proto": 6}, "0x0800"),
        ({"eth_type": 0x0800, "ip_proto": 1, "tp_dst": 80}, "ip_proto 6"),
        ({"eth_dst_mask": MAC}, "needs eth_dst"),
    ],
)
def test_match_rejects_bad_fields(kwargs, message):
    with pytest.raises(FlowRuleError, match=message):
        Match(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dpid": 0}, "dpid"),
        ({"dpid": 1, "priority": 70000}, "priority"),
        ({"dpid": 1, "cookie": -1}, "cookie"),
        ({"dpid": 1, "cookie_mask": 1}, "cookie_mask"),
        ({"dpid": 1, "command": "delete"}, "refusing"),
        ({"dpid": 1, "command": "modify"}, "command"),
        ({"dpid": 1, "table_id": 255}, "table_id"),
        ({"dpid": 1, "idle_timeout": 1 << 16}, "idle_timeout"),
        ({"dpid": 1, "command": "delete", "cookie_mask": 1, "match": Match(in_port=1)}, "no match"),
    ],
)
def test_flow_rule_rejects_bad_fields(kwargs, message):
    with pytest.raises(FlowRuleError, match=message):
        FlowRule(**kwargs)


def test_bad_actions_rejected():
    with pytest.raises(FlowRuleError, match="output port"):
        Output(0)
    with pytest.raises(FlowRuleError, match="only eth_dst"):
        SetField("ip_dst", MAC)  # type: ignore[arg-type]
    with pytest.raises(FlowRuleError, match="set_field eth_dst"):
        SetField("eth_dst", "nonsense")
    assert issubclass(FlowRuleError, SdnMpiError)


def test_render_is_ovs_ofctl_like():
    rule = FlowRule(
        7,
        0,
        1100,
        Match(in_port=3, eth_src=MAC, eth_type=0x0806, arp_op=1, arp_tpa="10.0.0.2"),
        (SetField("eth_dst", MAC), Output(2), ToController(128)),
        cookie=0x5D01 << 48,
        idle_timeout=10,
    )
    assert rule.render() == (
        "cookie=0x5d01000000000000, table=0, priority=1100,in_port=3,dl_src=02:00:00:00:00:01,"
        "dl_type=0x0806,arp_op=1,arp_tpa=10.0.0.2, idle_timeout=10, hard_timeout=0 "
        "actions=set_field:02:00:00:00:00:01->eth_dst,output:2,CONTROLLER:128"
    )
    drop = FlowRule(1, 0, 5, Match(eth_dst=MAC, eth_dst_mask=MAC))
    assert drop.render().endswith("dl_dst=02:00:00:00:00:01/02:00:00:00:00:01 actions=drop")
    delete = FlowRule(1, 255, cookie=0x10, cookie_mask=0xFF, command="delete")
    assert delete.render() == "delete cookie=0x10/0xff, table=255"
    strict = FlowRule(1, 0, 5, Match(eth_dst=MAC), command="delete_strict")
    assert (
        strict.render() == "delete_strict cookie=0x0, table=0, priority=5,dl_dst=02:00:00:00:00:01"
    )


def test_render_rules_groups_by_switch_highest_priority_first():
    rules = [FlowRule(2, 0, 1), FlowRule(1, 0, 1), FlowRule(1, 0, 9, Match(in_port=1))]
    assert render_rules(rules) == (
        "dpid=0x1\n"
        "  cookie=0x0, table=0, priority=9,in_port=1 actions=drop\n"
        "  cookie=0x0, table=0, priority=1 actions=drop\n"
        "dpid=0x2\n"
        "  cookie=0x0, table=0, priority=1 actions=drop\n"
    )


def test_batched_puts_a_barrier_after_each_chunk_per_switch():
    msgs = [FlowRule(d, 0, p) for p in range(5) for d in (1, 2)]
    out = batched(list(msgs), 2)
    for dpid in (1, 2):
        run = 0
        mine = [m for m in out if m.dpid == dpid]
        for m in mine:
            if isinstance(m, Barrier):
                assert 0 < run <= 2
                run = 0
            else:
                run += 1
        assert isinstance(mine[-1], Barrier)
    assert [m for m in out if isinstance(m, FlowRule)] == msgs
    with pytest.raises(FlowRuleError, match="batch size"):
        batched([], 0)


def test_cookie_layout():
    assert layout.cookie("base") == 0x5D01 << 48
    assert layout.cookie("host") == 0x5D02 << 48
    assert layout.cookie("default") == 0x5D03 << 48
    assert layout.job_cookie(0xABCDEF) == 0x5D04_0000_00AB_CDEF
    assert layout.kind_of(layout.job_cookie(3)) == "job"
    assert layout.job_of(layout.job_cookie(3)) == 3
    assert layout.kind_of(0x1234) is None
    kinds: tuple[Kind, ...] = ("base", "host", "default", "job")
    for kind in kinds:
        value = layout.cookie(kind)
        assert value & layout.OURS_MASK == layout.ours_cookie()
    with pytest.raises(RoutingError, match="job id"):
        layout.job_cookie(1 << 48)
    with pytest.raises(RoutingError, match="kind"):
        layout.cookie("other")  # type: ignore[arg-type]


def test_arp_frame_layout():
    req = arp_request(MAC, "10.0.0.1", "10.0.0.2")
    frame = req.encode()
    assert len(frame) == 60
    assert frame[:6] == b"\xff" * 6
    assert frame[12:14] == b"\x08\x06"
    assert frame[20:22] == b"\x00\x01"  # opcode request
    assert frame[38:42] == bytes([10, 0, 0, 2])
    assert decode(frame) == req
    assert req.is_group


def test_decode_untrusted_frames():
    assert decode(b"") is None
    assert decode(b"\x00" * 13) is None
    short_arp = arp_request(MAC, "10.0.0.1", "10.0.0.2").encode()[:30]
    assert decode(short_arp) is None
    bad_arp = bytearray(arp_request(MAC, "10.0.0.1", "10.0.0.2").encode())
    bad_arp[14:16] = b"\x00\x06"  # hardware type not Ethernet
    assert decode(bytes(bad_arp)) is None
    lldp = decode(bytes.fromhex("0180c200000e" + "020000000001" + "88cc") + b"\x00" * 46)
    assert lldp is not None
    assert (lldp.eth_type, lldp.is_group) == (0x88CC, True)


def test_decode_ipv4_tcp_ports():
    eth = bytes.fromhex("020000000002" + "020000000001" + "0800")
    ip = bytes([0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0]) + bytes(8)
    tcp = (40000).to_bytes(2, "big") + (5001).to_bytes(2, "big") + bytes(16)
    pkt = decode(eth + ip + tcp)
    assert pkt == ipv4(MAC, "02:00:00:00:00:02", 6, 5001)
    truncated = decode(eth + ip[:10])
    assert truncated is not None
    assert truncated.ip_proto is None


macs = st.lists(st.integers(0, 255), min_size=6, max_size=6).map(
    lambda b: ":".join(f"{x:02x}" for x in b)
)
ips = st.ip_addresses(v=4).map(str)


@given(macs, ips, macs, ips)
def test_arp_reply_round_trips(sha, spa, tha, tpa):
    reply = arp_reply(sha, spa, tha, tpa)
    assert decode(reply.encode()) == reply


@given(st.binary(max_size=80))
def test_decode_never_raises(data):
    pkt = decode(data)
    assert pkt is None or isinstance(pkt, Packet)


@given(macs, macs, st.sampled_from([6, 17, 1]), st.integers(0, 65535))
def test_ipv4_header_round_trips(src, dst, proto, port):
    pkt = ipv4(src, dst, proto, port)
    assert decode(pkt.encode()) == pkt
