"""Proxy ARP, host learning from packets, and no flooding of broadcasts on loops."""

from __future__ import annotations

import pytest

from sdnmpi.controller import Message, PacketOut, Planner, PlannerConfig
from sdnmpi.controller.flows import BROADCAST_MAC, ETH_TYPE_IPV4, OFPP_CONTROLLER
from sdnmpi.controller.packets import Packet, arp_request, decode, ipv4
from sdnmpi.testing import FakeOFNetwork, discover
from tests.controller.conftest import Setup, steady


def _arp_in(setup: Setup, host: str, target_ip: str) -> list[Message]:
    topo = setup.topo
    sw, port = topo.attachment(host)
    h = topo.host(host)
    assert h.ip is not None
    frame = arp_request(h.mac, h.ip, target_ip).encode()
    return setup.planner.packet_in(topo.switch(sw).dpid, port, frame, now=1.0)


def test_arp_request_for_a_known_ip_gets_a_proxy_reply(topo):
    if topo.hosts[0].ip is None:
        pytest.skip("milk has no IP addresses in its model: see the learned-from-ARP test")
    setup = steady(topo)
    a, b = topo.hosts[0], topo.hosts[-1]
    out = _arp_in(setup, a.name, b.ip)
    assert len(out) == 1
    reply = out[0]
    assert isinstance(reply, PacketOut)
    sw, port = topo.attachment(a.name)
    assert (reply.dpid, reply.port) == (topo.switch(sw).dpid, port)
    pkt = decode(reply.data)
    assert pkt is not None
    assert (pkt.eth_src, pkt.eth_dst, pkt.arp_op) == (b.mac, a.mac, 2)
    assert (pkt.arp_sha, pkt.arp_spa, pkt.arp_tha, pkt.arp_tpa) == (b.mac, b.ip, a.mac, a.ip)


def test_unknown_ip_self_and_gratuitous_arp_get_nothing(topo):
    setup = steady(topo)
    host = topo.hosts[0]
    if host.ip is None:
        pytest.skip("milk has no IP addresses in its model")
    assert _arp_in(setup, host.name, "192.0.2.77") == []
    assert _arp_in(setup, host.name, host.ip) == []


def test_hosts_are_learned_from_arp_then_answered_milk():
    from sdnmpi.catalog import load_topology

    topo = load_topology("milk")
    planner = Planner(topo, PlannerConfig(expect_model_hosts=False))
    fab = FakeOFNetwork(topo)
    fab.apply(discover(planner, topo, hosts=False))
    assert planner.default_routes() == ()
    ips = {h.name: f"10.1.0.{i + 1}" for i, h in enumerate(topo.hosts)}
    for h in topo.hosts:  # every host asks for the first one
        sw, port = topo.attachment(h.name)
        frame = arp_request(h.mac, ips[h.name], ips[topo.hosts[0].name]).encode()
        out = planner.packet_in(topo.switch(sw).dpid, port, frame, now=2.0)
        fab.apply(out)
        replies = [m for m in out if isinstance(m, PacketOut)]
        assert len(replies) == (0 if h is topo.hosts[0] else 1)
    assert {e.ip for e in planner.inventory.hosts.values()} == set(ips.values())
    assert planner.inventory.hosts[topo.hosts[3].mac].last_seen_s == 2.0
    for a, b in topo.host_pairs():
        tr = fab.trace(a, ipv4(topo.host(a).mac, topo.host(b).mac))
        assert tr.host == b


def test_first_packet_learns_a_host_without_ip():
    from sdnmpi.core.generators import leaf_spine

    topo = leaf_spine(2, 2, 2)
    planner = Planner(topo, PlannerConfig(expect_model_hosts=False))
    discover(planner, topo, hosts=False)
    h1 = topo.host("h1")
    frame = ipv4(h1.mac, topo.host("h2").mac).encode()
    sw, port = topo.attachment("h1")
    out = planner.packet_in(topo.switch(sw).dpid, port, frame)
    assert out  # the delivery rule for h1
    assert planner.inventory.hosts[h1.mac].ip is None
    # the same packet seen on an inter-switch port is not a sighting
    uplink = next(a for a in topo.out_arcs["leaf2"] if not topo.is_host(a.dst))
    other = ipv4(topo.host("h3").mac, h1.mac).encode()
    assert planner.packet_in(topo.switch("leaf2").dpid, uplink.src_port, other) == []
    assert topo.host("h3").mac not in planner.inventory.hosts


def test_broadcasts_and_multicasts_are_never_flooded(topo):
    setup = steady(topo)
    for host in topo.hosts:
        ip = host.ip or "10.9.9.9"
        arp = setup.fabric.trace(host.name, arp_request(host.mac, ip, "10.9.9.8"))
        assert (arp.outcome, arp.steps) == ("controller", ())
        for dst in (BROADCAST_MAC, "01:00:5e:00:00:fb", "33:33:00:00:00:01"):
            pkt = Packet(host.mac, dst, ETH_TYPE_IPV4)
            tr = setup.fabric.trace(host.name, pkt)
            assert (tr.outcome, tr.steps) == ("dropped", ())
        lldp = Packet(host.mac, "01:80:c2:00:00:0e", 0x88CC)
        assert setup.fabric.trace(host.name, lldp).outcome == "controller"


def test_unknown_unicast_goes_to_the_controller_only(topo):
    setup = steady(topo)
    host = topo.hosts[0]
    pkt = ipv4(host.mac, "02:99:00:00:00:01")
    sw, port = topo.attachment(host.name)
    assert setup.fabric.output_ports(topo.switch(sw).dpid, pkt, port) == (OFPP_CONTROLLER,)
    assert setup.fabric.trace(host.name, pkt).outcome == "controller"


def test_lldp_and_garbage_packet_ins_are_ignored():
    from sdnmpi.core.generators import leaf_spine

    topo = leaf_spine(1, 2, 1)
    planner = Planner(topo)
    discover(planner, topo)
    lldp = Packet("02:00:00:00:00:07", "01:80:c2:00:00:0e", 0x88CC).encode()
    assert planner.packet_in(1, 1, lldp) == []
    assert planner.packet_in(1, 1, b"\x01\x02") == []
    assert planner.packet_in(99, 1, lldp) == []  # switch not connected


def test_unicast_arp_follows_the_routes_without_the_controller(topo):
    """A host revalidating a neighbour sends ARP to its MAC: delivered like any frame to
    that MAC, so neighbours stay valid while the controller restarts."""
    from dataclasses import replace

    from sdnmpi.controller.flows import ETH_TYPE_ARP

    setup = steady(topo)
    a, b = topo.hosts[0], topo.hosts[-1]
    probe = replace(arp_request(a.mac, a.ip or "10.9.9.1", b.ip or "10.9.9.2"), eth_dst=b.mac)
    assert probe.eth_type == ETH_TYPE_ARP
    trace = setup.fabric.trace(a.name, probe)
    assert (trace.outcome, trace.host) == ("delivered", b.name)
