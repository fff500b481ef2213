"""Hand-built Ethernet frames for the tagger's BPF_PROG_TEST_RUN tests."""

from __future__ import annotations

import socket
import struct

DST_MAC = bytes.fromhex("020000000002")
SRC_MAC = bytes.fromhex("020000000001")
ETH_IP, ETH_ARP, ETH_IPV6 = 0x0800, 0x0806, 0x86DD
TCP, UDP = 6, 17


def eth(ethertype: int, payload: bytes) -> bytes:
    return DST_MAC + SRC_MAC + struct.pack("!H", ethertype) + payload


def ipv4(
    saddr: str,
    daddr: str,
    proto: int,
    payload: bytes,
    *,
    options: bytes = b"",
    ihl: int | None = None,
    frag_off: int = 0,
) -> bytes:
    """An IPv4 header (checksum left 0: the tagger does not check it) plus payload."""
    assert len(options) % 4 == 0
    ihl = 5 + len(options) // 4 if ihl is None else ihl
    total = 20 + len(options) + len(payload)
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x40 | ihl,
        0,
        total,
        0x1234,
        frag_off,
        64,
        proto,
        0,
        socket.inet_aton(saddr),
        socket.inet_aton(daddr),
    )
    return header + options + payload


def tcp(sport: int, dport: int, payload: bytes = b"") -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 0x50, 0x18, 1024, 0, 0) + payload


def udp(sport: int, dport: int, payload: bytes = b"") -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def tcp_frame(saddr: str, daddr: str, sport: int, dport: int, payload: bytes = b"x" * 32) -> bytes:
    return eth(ETH_IP, ipv4(saddr, daddr, TCP, tcp(sport, dport, payload)))


def arp_request(spa: str, tpa: str) -> bytes:
    body = struct.pack("!HHBBH", 1, ETH_IP, 6, 4, 1) + SRC_MAC + socket.inet_aton(spa)
    return eth(ETH_ARP, body + b"\x00" * 6 + socket.inet_aton(tpa))


def ipv6_tcp(sport: int, dport: int) -> bytes:
    segment = tcp(sport, dport, b"y" * 16)
    header = struct.pack("!IHBB", 0x60000000, len(segment), TCP, 64)
    addrs = socket.inet_pton(socket.AF_INET6, "fd00::1") + socket.inet_pton(
        socket.AF_INET6, "fd00::2"
    )
    return eth(ETH_IPV6, header + addrs + segment)
