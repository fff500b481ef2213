"""Reactive tagged routing and the fallback for tags the controller does not route.

``leaf_spine(2, 4, 2)``: h1, h2 on leaf1 (dpid 1, ports 1-2), h3, h4 on leaf2, ...;
spines are dpids 5 and 6.  Job 9 holds slot 3 with rank r on host h(r+1).
"""

from __future__ import annotations

import logging

import pytest

from sdnmpi.controller import layout
from sdnmpi.controller.flows import (
    OFPCML_NO_BUFFER,
    Barrier,
    FlowRule,
    PacketOut,
    SetField,
    ToController,
)
from sdnmpi.controller.layout import PRIORITY_TAG
from sdnmpi.controller.primitives.inbound import ipv4_destination, locally_administered_unicast
from sdnmpi.core.generators import leaf_spine
from sdnmpi.wire.tag import Primitive
from tests.controller.conftest import Setup, steady
from tests.controller.tagging import frame, tag, tag_rules, tagged

LOGGER = "sdnmpi.controller"


@pytest.fixture
def setup() -> Setup:
    s = steady(leaf_spine(2, 4, 2), primitives="bcast=pinned:spine2")
    hosts = [h.name for h in s.topo.hosts]
    s.send(s.planner.register_tagged_job(9, 3, 8, hosts))
    return s


def _packet_in(setup: Setup, src: str, dst: str, mac: str) -> list:
    _, data = tagged(setup.topo, src, dst, mac)
    switch, port = setup.topo.attachment(src)
    return setup.send(setup.planner.packet_in(setup.topo.switch(switch).dpid, port, data))


def test_reactive_first_packet_installs_the_whole_path_then_sends_it_on(setup):
    mac = tag(3, Primitive.BCAST, 0, 6)  # h1 -> h7, bcast pinned to spine2
    pkt, _ = tagged(setup.topo, "h1", "h7", mac)
    assert setup.fabric.trace("h1", pkt).outcome == "controller"
    miss = setup.fabric.lookup(1, 1, pkt)
    assert miss is not None and miss.actions == (ToController(OFPCML_NO_BUFFER),)  # whole frame
    out = _packet_in(setup, "h1", "h7", mac)
    rules = [m for m in out if isinstance(m, FlowRule)]
    assert [type(m) for m in out][-1] is PacketOut  # after the rules and their barriers
    assert any(isinstance(m, Barrier) for m in out)
    assert {r.dpid for r in rules} == {1, 6, 4}  # leaf1, spine2, leaf4: the whole path
    assert all(r.cookie == layout.tag_cookie(9) and r.priority == PRIORITY_TAG for r in rules)
    assert all(r.match.eth_dst == mac for r in rules)
    last = next(r for r in rules if r.dpid == 4)
    assert SetField("eth_dst", setup.topo.host("h7").mac) in last.actions
    po = out[-1]
    assert po.dpid == 1 and po.data[:6] == bytes.fromhex(mac.replace(":", ""))
    tr = setup.fabric.trace_packet_out(po)
    assert (tr.outcome, tr.host) == ("delivered", "h7")
    assert tr.packet is not None and tr.packet.eth_dst == setup.topo.host("h7").mac
    # the next packets never reach the controller
    tr = setup.fabric.trace("h1", pkt)
    assert (tr.outcome, tr.host, tr.dpids) == ("delivered", "h7", (1, 6, 4))
    # a second packet-in for the same flow (in flight before the rules) adds nothing
    again = _packet_in(setup, "h1", "h7", mac)
    assert [type(m) for m in again] == [PacketOut]


def test_reactive_fast_path_agrees_with_a_full_recomputation(setup, monkeypatch):
    hosts = [h.name for h in setup.topo.hosts]
    full = setup.planner._compute_desired
    calls: list[int] = []

    def counted() -> object:
        calls.append(1)
        return full()

    monkeypatch.setattr(setup.planner, "_compute_desired", counted)
    for i, (s, d) in enumerate([(0, 6), (1, 4), (2, 7), (6, 0), (5, 3), (0, 6)]):
        prim = (Primitive.BCAST, Primitive.P2P, Primitive.ALLTOALL)[i % 3]
        out = _packet_in(setup, hosts[s], hosts[d], tag(3, prim, s, d))
        assert isinstance(out[-1], PacketOut)
    assert len(tag_rules(setup.fabric.rules(), 9)) > 6
    assert calls == []  # every new flow took the fast path
    for sw in setup.topo.switches:  # a reconnect recomputes everything: nothing differs
        assert setup.planner.switch_up(sw.dpid, installed=setup.fabric.rules(sw.dpid)) == []
        assert set(setup.planner.desired(sw.dpid)) == set(setup.fabric.rules(sw.dpid))


def test_packet_in_at_the_last_switch_rewrites_the_frame(setup):
    mac = tag(3, Primitive.P2P, 0, 1)  # h1 -> h2, both on leaf1
    out = _packet_in(setup, "h1", "h2", mac)
    po = out[-1]
    assert isinstance(po, PacketOut) and po.port == 2
    assert po.data[:6] == bytes.fromhex(setup.topo.host("h2").mac.replace(":", ""))
    tr = setup.fabric.trace_packet_out(po)
    assert (tr.outcome, tr.host) == ("delivered", "h2")


def _flip_crc(mac: str) -> str:
    return mac[:-1] + format(int(mac[-1], 16) ^ 1, "x")


CASES = {
    "bad tag (crc)": lambda: _flip_crc(tag(3, Primitive.BCAST, 0, 6)),
    "reserved primitive": lambda: tag(3, 20, 0, 6),
    "inactive slot": lambda: tag(4, Primitive.BCAST, 0, 6),
    "inconsistent ranks": lambda: tag(3, Primitive.BCAST, 1, 6),  # rank 1 is h2, not h1
    "foreign MAC": lambda: "0a:11:22:33:44:55",
}


@pytest.mark.parametrize("reason", sorted(CASES))
def test_unroutable_tags_are_delivered_on_default_routes_and_logged_once(setup, caplog, reason):
    mac = CASES[reason]()
    assert locally_administered_unicast(mac)
    before = setup.fabric.snapshot()
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for _ in range(3):
        out = _packet_in(setup, "h1", "h7", mac)
        assert [type(m) for m in out] == [PacketOut]
        tr = setup.fabric.trace_packet_out(out[0])
        assert (tr.outcome, tr.host) == ("delivered", "h7")
        assert tr.packet is not None and tr.packet.eth_dst == setup.topo.host("h7").mac
        assert tr.dpids == setup.trace("h1", "h7").dpids  # the default path
    logged = [r for r in caplog.records if reason in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in caplog.records]
    assert setup.fabric.snapshot() == before  # no rule for garbage


def test_log_once_is_per_reason_and_slot(setup, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for slot in (4, 5, 4, 5, 6):
        _packet_in(setup, "h1", "h7", tag(slot, Primitive.BCAST, 0, 6))
    inactive = [r for r in caplog.records if "inactive slot" in r.getMessage()]
    assert len(inactive) == 3
    # slot 4 changes hands twice: its reasons are logged afresh
    hosts = [h.name for h in setup.topo.hosts]
    setup.send(setup.planner.register_tagged_job(10, 4, 8, hosts))
    setup.send(setup.planner.unregister_tagged_job(10))
    _packet_in(setup, "h1", "h7", tag(4, Primitive.BCAST, 0, 6))
    inactive = [r for r in caplog.records if "inactive slot" in r.getMessage()]
    assert len(inactive) == 4


def test_tag_to_an_unknown_ip_is_dropped_and_logged_once(setup, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    h1 = setup.topo.host("h1")
    data = frame(h1.mac, tag(3, Primitive.BCAST, 0, 6), "10.0.0.1", "10.9.9.9")
    for _ in range(2):
        assert setup.planner.packet_in(1, 1, data) == []
    assert len([r for r in caplog.records if "no such host" in r.getMessage()]) == 1


def test_real_host_macs_and_globally_administered_macs_are_left_alone(setup):
    h1, h7 = setup.topo.host("h1"), setup.topo.host("h7")
    known = frame(h1.mac, h7.mac, "10.0.0.1", "10.0.0.7")
    assert setup.planner.packet_in(1, 1, known) == []
    universal = frame(h1.mac, "00:11:22:33:44:55", "10.0.0.1", "10.0.0.7")
    assert setup.planner.packet_in(1, 1, universal) == []


def test_reactive_flows_survive_a_switch_reconnect(setup):
    mac = tag(3, Primitive.ALLREDUCE, 2, 5)  # h3 -> h6
    _packet_in(setup, "h3", "h6", mac)
    rules = setup.fabric.rules(2)
    setup.fabric.tables[2] = {}  # the switch restarted empty and reconnects
    setup.send(setup.planner.switch_up(2))
    assert setup.fabric.rules(2) == rules
    assert tag_rules(rules, 9)


def test_ipv4_destination_parsing_rejects_short_and_non_ipv4_frames():
    good = frame("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2")
    assert ipv4_destination(good) == "10.0.0.2"
    assert ipv4_destination(good[:30]) is None
    assert ipv4_destination(good[:12] + b"\x08\x06" + good[14:]) is None
    assert ipv4_destination(good[:14] + b"\x65" + good[15:]) is None  # IPv6 version nibble
