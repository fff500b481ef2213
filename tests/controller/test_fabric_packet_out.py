"""FakeOFNetwork extensions used by the tagged-routing tests: the packet as delivered
(after ``set_field``) and following a controller's packet-out.

``leaf_spine(2, 2, 1)``: h1 on leaf1 (dpid 1, port 1), h2 on leaf2 (dpid 2, port 1);
leaf uplinks are ports 2 (spine1, dpid 3) and 3 (spine2, dpid 4).
"""

from __future__ import annotations

import pytest

from sdnmpi.controller.flows import FlowRule, Match, Output, PacketOut, SetField
from sdnmpi.controller.packets import ipv4
from sdnmpi.core.generators import leaf_spine
from sdnmpi.testing import FakeOFNetwork, FakeOFNetworkError, Step

TOPO = leaf_spine(2, 2, 1)
H1, H2 = TOPO.host("h1").mac, TOPO.host("h2").mac
TAG = "a6:02:30:02:00:39"


def _fabric() -> FakeOFNetwork:
    fab = FakeOFNetwork(TOPO)
    m = Match(eth_dst=TAG)
    fab.apply(
        [
            FlowRule(1, 0, 200, m, (Output(3),)),
            FlowRule(4, 0, 200, m, (Output(2),)),
            FlowRule(2, 0, 200, m, (SetField("eth_dst", H2), Output(1))),
        ]
    )
    return fab


def test_trace_reports_the_packet_as_delivered_after_set_field():
    tr = _fabric().trace("h1", ipv4(H1, TAG))
    assert (tr.outcome, tr.host, tr.dpids) == ("delivered", "h2", (1, 4, 2))
    assert tr.packet is not None and (tr.packet.eth_src, tr.packet.eth_dst) == (H1, H2)


def test_packet_out_is_followed_from_its_port():
    fab = _fabric()
    po = PacketOut(1, 3, ipv4(H1, TAG).encode())
    tr = fab.trace_packet_out(po)
    assert (tr.outcome, tr.host, tr.dpids) == ("delivered", "h2", (1, 4, 2))
    assert tr.steps[0] == Step(1, po.in_port, 3)
    assert tr.packet is not None and tr.packet.eth_dst == H2
    direct = fab.trace_packet_out(PacketOut(2, 1, ipv4(H1, H2).encode()))
    assert (direct.outcome, direct.host, direct.dpids) == ("delivered", "h2", (2,))
    lost = fab.trace_packet_out(PacketOut(1, 2, ipv4(H1, TAG).encode()))  # spine1: no rule
    assert (lost.outcome, lost.dpids) == ("dropped", (1,))  # dropped at spine1
    unused = fab.trace_packet_out(PacketOut(1, 9, ipv4(H1, TAG).encode()))  # no cable
    assert unused.outcome == "dropped"


def test_packet_out_errors():
    fab = _fabric()
    with pytest.raises(FakeOFNetworkError, match="dpid 9"):
        fab.trace_packet_out(PacketOut(9, 1, ipv4(H1, TAG).encode()))
    with pytest.raises(FakeOFNetworkError, match="cannot be decoded"):
        fab.trace_packet_out(PacketOut(1, 3, b"\x00" * 4))
