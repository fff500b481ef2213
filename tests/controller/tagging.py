"""Helpers for the tagged-routing tests: tagged frames, tag rule counts, flows."""

from __future__ import annotations

import ipaddress
from collections import Counter

from sdnmpi.controller import layout
from sdnmpi.controller.flows import FlowRule, PacketOut
from sdnmpi.controller.packets import Packet, ipv4
from sdnmpi.controller.primitives import Collective
from sdnmpi.core.collectives import expand
from sdnmpi.core.topology import Topology
from sdnmpi.testing import FakeOFNetwork, Trace
from sdnmpi.wire.tag import Tag
from tests.controller.conftest import Setup


def frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str) -> bytes:
    """A TCP/IPv4 frame with real IPv4 addresses (Packet.encode leaves them zero)."""
    raw = bytearray(ipv4(src_mac, dst_mac).encode())
    raw[26:30] = ipaddress.IPv4Address(src_ip).packed
    raw[30:34] = ipaddress.IPv4Address(dst_ip).packed
    return bytes(raw)


def tagged(topo: Topology, src: str, dst: str, mac: str) -> tuple[Packet, bytes]:
    """The packet and frame ``src`` sends to host ``dst`` with destination MAC ``mac``."""
    s, d = topo.host(src), topo.host(dst)
    assert s.ip is not None and d.ip is not None
    return ipv4(s.mac, mac), frame(s.mac, mac, s.ip, d.ip)


def tag_rules(rules: list[FlowRule], job_id: int | None = None) -> list[FlowRule]:
    """The tag-kind rules among ``rules`` (of one job if given)."""
    return [
        r
        for r in rules
        if layout.kind_of(r.cookie) == "tag"
        and (job_id is None or layout.job_of(r.cookie) == job_id)
    ]


def tag_load(fabric: FakeOFNetwork) -> Counter[int]:
    """Tag rules held per switch."""
    return Counter(r.dpid for r in tag_rules(fabric.rules()))


def world_flows(coll: Collective, rank_hosts: list[str]) -> set[tuple[int, int, int]]:
    """(primitive, src, dst) world-rank flows between distinct hosts of one collective,
    expanded here independently of the planner."""
    comm = coll.comm if coll.comm is not None else tuple(range(len(rank_hosts)))
    sched = expand(
        coll.name if coll.name != "reduce_scatter_block" else "reduce_scatter",
        len(comm),
        coll.count,
        root=coll.root,
        type_bytes=coll.type_bytes,
    )
    out = set()
    for m in sched.messages():
        s, d = comm[m.src], comm[m.dst]
        if rank_hosts[s] != rank_hosts[d]:
            out.add((coll.primitive, s, d))
    return out


def send(setup: Setup, src: str, dst: str, mac: str) -> Trace:
    """Trace a tagged packet; if it reaches the controller, hand it over (packet-in at
    the switch where it stopped) and follow the controller's packet-out instead."""
    pkt, data = tagged(setup.topo, src, dst, mac)
    tr = setup.fabric.trace(src, pkt)
    if tr.outcome != "controller":
        return tr
    if tr.steps:  # stopped after some hops: where it entered the last switch
        dpid, in_port = _stopped_at(setup, tr)
    else:
        switch, in_port = setup.topo.attachment(src)
        dpid = setup.topo.switch(switch).dpid
    out = setup.send(setup.planner.packet_in(dpid, in_port, data))
    outs = [m for m in out if isinstance(m, PacketOut)]
    assert len(outs) == 1, out
    return setup.fabric.trace_packet_out(outs[0])


def _stopped_at(setup: Setup, tr: Trace) -> tuple[int, int]:
    last = tr.steps[-1]
    name = setup.topo.switch_by_dpid[last.dpid].name
    arc = next(a for a in setup.topo.out_arcs[name] if a.src_port == last.out_port)
    return setup.topo.switch(arc.dst).dpid, arc.dst_port


def tag(slot: int, primitive: int, src: int, dst: int) -> str:
    return Tag(slot, primitive, src, dst).mac
