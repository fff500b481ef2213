"""ARP frames as real hosts send them (RFC 826), written by hand, not by our encoder."""

from __future__ import annotations

from sdnmpi.controller.packets import arp_request, decode

# who-has 10.0.0.2 tell 10.0.0.1, from 02:00:00:00:00:01, as on the wire
WIRE_REQUEST = bytes.fromhex(
    "ffffffffffff"
    "020000000001"
    "0806"  # Ethernet: broadcast, source, ARP
    "0001"
    "0800"
    "06"
    "04"
    "0001"  # htype Ethernet, ptype IPv4, hlen, plen, request
    "020000000001"
    "0a000001"  # sender MAC, sender IP
    "000000000000"
    "0a000002"  # target MAC, target IP
)


def test_a_real_arp_request_decodes():
    pkt = decode(WIRE_REQUEST)
    assert pkt is not None
    assert (pkt.arp_op, pkt.arp_spa, pkt.arp_tpa) == (1, "10.0.0.1", "10.0.0.2")


def test_our_arp_frames_carry_the_ipv4_protocol_type():
    frame = arp_request("02:00:00:00:00:01", "10.0.0.1", "10.0.0.2").encode()
    assert frame[12:14] == b"\x08\x06"  # EtherType ARP
    assert frame[16:18] == b"\x08\x00"  # protocol type IPv4 (RFC 826)
    assert frame[: len(WIRE_REQUEST)] == WIRE_REQUEST
