"""Packets as plain data: the header fields the planner and the fake fabric look at.

:func:`decode` parses an untrusted Ethernet frame (packet-in data) into a
:class:`Packet`, checking every length first and returning ``None`` for what it
cannot parse; :meth:`Packet.encode` builds a frame (the proxy-ARP reply).  Only
Ethernet II, ARP over IPv4, and the IPv4 addresses, protocol and TCP/UDP ports are read:
everything the rules match on.

>>> p = arp_reply("02:00:00:00:00:02", "10.0.0.2", "02:00:00:00:00:01", "10.0.0.1")
>>> decode(p.encode()) == p
True
>>> q = ipv4("02:00:00:00:00:01", "02:00:00:00:00:02", tp_dst=5001)
>>> decode(q.encode()) == q
True
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from sdnmpi.controller.flows import (
    ARP_REPLY,
    ARP_REQUEST,
    BROADCAST_MAC,
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    IP_PROTO_TCP,
    IP_PROTO_UDP,
    check_ipv4,
    check_mac,
)

_ETH = struct.Struct("!6s6sH")
_ARP = struct.Struct("!HHBBH6s4s6s4s")
_ARP_HEAD = (1, ETH_TYPE_IPV4, 6, 4)  # hardware Ethernet, protocol IPv4, address lengths
_MIN_FRAME = 60


@dataclass(frozen=True)
class Packet:
    """Header fields of one frame; ``None`` where the frame has no such field."""

    eth_src: str
    eth_dst: str
    eth_type: int
    arp_op: int | None = None
    arp_sha: str | None = None
    arp_spa: str | None = None
    arp_tha: str | None = None
    arp_tpa: str | None = None
    ip_proto: int | None = None
    tp_src: int | None = None
    tp_dst: int | None = None
    ipv4_src: str | None = None
    ipv4_dst: str | None = None

    def __post_init__(self) -> None:
        check_mac(self.eth_src, "eth_src")
        check_mac(self.eth_dst, "eth_dst")
        for mac in (self.arp_sha, self.arp_tha):
            if mac is not None:
                check_mac(mac, "ARP hardware address")
        for ip in (self.arp_spa, self.arp_tpa, self.ipv4_src, self.ipv4_dst):
            if ip is not None:
                check_ipv4(ip, "IPv4 address")

    @property
    def is_group(self) -> bool:
        """Broadcast or multicast destination (group bit set)."""
        return int(self.eth_dst[:2], 16) & 1 == 1

    def encode(self) -> bytes:
        """The frame as bytes, padded to 60 bytes: ARP frames carry their ARP body,
        IPv4 ones a header with the protocol, the addresses (0.0.0.0 where ``None``) and
        the ports."""
        head = _ETH.pack(_mac(self.eth_dst), _mac(self.eth_src), self.eth_type)
        body = b""
        if self.eth_type == ETH_TYPE_ARP:
            body = _ARP.pack(
                *_ARP_HEAD,
                self.arp_op or 0,
                _mac(self.arp_sha or "00:00:00:00:00:00"),
                _ip(self.arp_spa or "0.0.0.0"),
                _mac(self.arp_tha or "00:00:00:00:00:00"),
                _ip(self.arp_tpa or "0.0.0.0"),
            )
        elif self.eth_type == ETH_TYPE_IPV4 and self.ip_proto is not None:
            body = self._ipv4_body()
        frame = head + body
        return frame + bytes(max(0, _MIN_FRAME - len(frame)))

    def _ipv4_body(self) -> bytes:
        """A 20-byte IPv4 header (no checksum) and the L4 ports."""
        ports = b""
        if self.tp_src is not None or self.tp_dst is not None:
            ports = struct.pack("!HH", self.tp_src or 0, self.tp_dst or 0) + bytes(16)
        total = 20 + len(ports)
        head = struct.pack(
            "!BBHHHBBH4s4s",
            *(0x45, 0, total, 0, 0, 64, self.ip_proto or 0, 0),
            _ip(self.ipv4_src or "0.0.0.0"),
            _ip(self.ipv4_dst or "0.0.0.0"),
        )
        return head + ports


def _mac(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.split(":"))


def _ip(text: str) -> bytes:
    return ipaddress.IPv4Address(text).packed


def _mac_text(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def _ip_text(raw: bytes) -> str:
    return str(ipaddress.IPv4Address(raw))


def decode(frame: bytes) -> Packet | None:
    """Parse an Ethernet frame; ``None`` if it is too short or malformed."""
    if len(frame) < _ETH.size:
        return None
    dst, src, eth_type = _ETH.unpack_from(frame)
    eth_src, eth_dst = _mac_text(src), _mac_text(dst)
    if eth_type == ETH_TYPE_ARP:
        return _decode_arp(frame, eth_src, eth_dst)
    if eth_type == ETH_TYPE_IPV4:
        body = frame[_ETH.size :]
        proto, tp_src, tp_dst = _decode_ipv4(body)
        src, dst = _ipv4_addresses(body)
        return Packet(
            eth_src,
            eth_dst,
            eth_type,
            ip_proto=proto,
            tp_src=tp_src,
            tp_dst=tp_dst,
            ipv4_src=src,
            ipv4_dst=dst,
        )
    return Packet(eth_src, eth_dst, eth_type)


def _decode_arp(frame: bytes, eth_src: str, eth_dst: str) -> Packet | None:
    if len(frame) < _ETH.size + _ARP.size:
        return None
    htype, ptype, hlen, plen, op, sha, spa, tha, tpa = _ARP.unpack_from(frame, _ETH.size)
    if (htype, ptype, hlen, plen) != _ARP_HEAD:
        return None
    return Packet(
        eth_src,
        eth_dst,
        ETH_TYPE_ARP,
        arp_op=op,
        arp_sha=_mac_text(sha),
        arp_spa=_ip_text(spa),
        arp_tha=_mac_text(tha),
        arp_tpa=_ip_text(tpa),
    )


def _decode_ipv4(data: bytes) -> tuple[int | None, int | None, int | None]:
    """(protocol, source port, destination port) of an IPv4 packet, ``None`` where absent."""
    if len(data) < 20 or data[0] >> 4 != 4:
        return None, None, None
    ihl = (data[0] & 0x0F) * 4
    proto = data[9]
    if proto in (IP_PROTO_TCP, IP_PROTO_UDP) and ihl >= 20 and len(data) >= ihl + 4:
        tp_src, tp_dst = struct.unpack_from("!HH", data, ihl)
        return proto, tp_src, tp_dst
    return proto, None, None


def _ipv4_addresses(data: bytes) -> tuple[str | None, str | None]:
    """(source, destination) of an IPv4 header; 0.0.0.0 (unset) reads as ``None``."""
    if len(data) < 20 or data[0] >> 4 != 4:
        return None, None
    src, dst = data[12:16], data[16:20]
    return (_ip_text(src) if any(src) else None), (_ip_text(dst) if any(dst) else None)


def arp_request(sha: str, spa: str, tpa: str) -> Packet:
    """A broadcast ARP request from ``sha``/``spa`` asking for ``tpa``."""
    return Packet(
        sha,
        BROADCAST_MAC,
        ETH_TYPE_ARP,
        arp_op=ARP_REQUEST,
        arp_sha=sha,
        arp_spa=spa,
        arp_tha="00:00:00:00:00:00",
        arp_tpa=tpa,
    )


def arp_reply(sha: str, spa: str, tha: str, tpa: str) -> Packet:
    """A unicast ARP reply: ``spa`` is at ``sha``, sent to ``tha``/``tpa``."""
    return Packet(
        sha, tha, ETH_TYPE_ARP, arp_op=ARP_REPLY, arp_sha=sha, arp_spa=spa, arp_tha=tha, arp_tpa=tpa
    )


def ipv4(
    eth_src: str,
    eth_dst: str,
    ip_proto: int = IP_PROTO_TCP,
    tp_dst: int = 5001,
    ipv4_src: str | None = None,
    ipv4_dst: str | None = None,
) -> Packet:
    """An IPv4 packet header (TCP or UDP with a destination port, else bare; addresses
    only if given)."""
    ports = ip_proto in (IP_PROTO_TCP, IP_PROTO_UDP)
    return Packet(
        eth_src,
        eth_dst,
        ETH_TYPE_IPV4,
        ip_proto=ip_proto,
        tp_src=40000 if ports else None,
        tp_dst=tp_dst if ports else None,
        ipv4_src=ipv4_src,
        ipv4_dst=ipv4_dst,
    )


def multicast_mac(group: str) -> str:
    """The Ethernet address of IPv4 multicast group ``group`` (RFC 1112: 01:00:5e and
    its low 23 bits).

    >>> multicast_mac("239.192.0.1")
    '01:00:5e:40:00:01'
    """
    raw = ipaddress.IPv4Address(group).packed
    return _mac_text(bytes((1, 0, 0x5E, raw[1] & 0x7F, raw[2], raw[3])))
