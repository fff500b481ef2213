"""Tagged packet-ins: is the destination MAC a tag of an active job, and if not, why.

A packet reaches the controller with a tag when no rule carries it yet
(reactive mode) or when it is not a tag the controller routes: a bad CRC, a
reserved primitive code, a slot no job holds, ranks that do not match the
packet's real source and destination, or a foreign locally administered MAC.
:func:`inspect` tells which, so the planner can route the flow or deliver
the packet on its destination's default route and log the reason once.

>>> ipv4_destination(bytes(12) + bytes([8, 0, 0x45]) + bytes(15) + bytes([10, 0, 0, 7]))
'10.0.0.7'
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sdnmpi.controller.flows import FlowRule, Match, Output, SetField
from sdnmpi.controller.primitives.base import Flow, TaggedJob
from sdnmpi.wire.tag import (
    TAG_JOB_SLOT_BITS,
    TAG_JOB_SLOT_SHIFT,
    TagError,
    decode,
)

_ETH_HEADER = 14
_NON_MAC_FIELDS = ("in_port", "eth_type", "arp_op", "arp_tpa", "ip_proto", "tp_src", "tp_dst")
_ETH_TYPE_IPV4 = b"\x08\x00"

#: (MAC, IPv4 address or None) of a host by name, None if unknown.
HostLookup = Callable[[str], tuple[str, str | None] | None]


@dataclass(frozen=True)
class Verdict:
    """A routable flow of ``job`` (``reason`` None), or why the packet is not one."""

    job: TaggedJob | None
    flow: Flow | None
    reason: str | None
    slot: int | None
    detail: str = ""


def ipv4_destination(frame: bytes) -> str | None:
    """The IPv4 destination of an untagged-VLAN Ethernet frame, ``None`` if not IPv4."""
    if len(frame) < _ETH_HEADER + 20 or frame[12:14] != _ETH_TYPE_IPV4:
        return None
    ip = frame[_ETH_HEADER:]
    if ip[0] >> 4 != 4 or (ip[0] & 0x0F) < 5:
        return None
    return str(ipaddress.IPv4Address(ip[16:20]))


def locally_administered_unicast(mac: str) -> bool:
    """Whether ``mac`` has the locally administered bit set and the group bit clear."""
    first = int(mac[:2], 16)
    return first & 0x02 == 0x02 and first & 0x01 == 0


def raw_slot(mac: str) -> int:
    """The job-slot bits of a MAC read as a tag (for logging undecodable tags)."""
    value = int(mac.replace(":", "")[2:], 16)
    return value >> TAG_JOB_SLOT_SHIFT & ((1 << TAG_JOB_SLOT_BITS) - 1)


def inspect(
    eth_dst: str,
    eth_src: str,
    ip_dst: str | None,
    jobs_by_slot: Mapping[int, TaggedJob],
    host: HostLookup,
) -> Verdict:
    """Classify a packet-in's tag (see the module docstring)."""
    try:
        tag = decode(eth_dst)
    except TagError as exc:
        if exc.reason in ("prefix", "version", "syntax"):
            return Verdict(None, None, "foreign MAC", None, str(exc))
        return Verdict(None, None, f"bad tag ({exc.reason})", raw_slot(eth_dst), str(exc))
    slot = tag.job_slot
    if not tag.known_primitive:
        return Verdict(None, None, "reserved primitive", slot, f"code {tag.primitive}")
    job = jobs_by_slot.get(slot)
    if job is None:
        return Verdict(None, None, "inactive slot", slot, eth_dst)
    flow = (tag.primitive, tag.src_rank, tag.dst_rank)
    problem = _rank_problem(job, flow, eth_src, ip_dst, host)
    if problem is not None:
        return Verdict(job, None, "inconsistent ranks", slot, problem)
    return Verdict(job, flow, None, slot)


def _rank_problem(
    job: TaggedJob, flow: Flow, eth_src: str, ip_dst: str | None, host: HostLookup
) -> str | None:
    _, src, dst = flow
    if src >= job.world_size or dst >= job.world_size:
        return f"rank {max(src, dst)} outside world size {job.world_size}"
    src_host, dst_host = host(job.host_of(src)), host(job.host_of(dst))
    if src_host is None or src_host[0] != eth_src:
        return f"source rank {src} is not on the sender {eth_src}"
    if dst_host is None or ip_dst is None or dst_host[1] != ip_dst:
        return f"destination rank {dst} is not on the IPv4 destination {ip_dst}"
    if job.host_of(src) == job.host_of(dst):
        return f"ranks {src} and {dst} share host {job.host_of(src)}"
    return None


# -- sending the packet on: what a switch table does with a frame ----------------------


def with_dst(frame: bytes, mac: str) -> bytes:
    """``frame`` with its destination MAC replaced."""
    return bytes.fromhex(mac.replace(":", "")) + frame[6:]


def table_hit(rules: Sequence[FlowRule], src: str, dst: str) -> tuple[str, int] | None:
    """(eth_dst after the rule, out-port) of the top rule matching a frame by MACs only.

    Rules that match other fields (ARP, LLDP) are skipped; ``None`` when the top
    rule does not output to a port (the table-miss rule, a drop).
    """
    best: FlowRule | None = None
    for rule in rules:
        if _mac_hit(rule.match, src, dst) and (best is None or rule.priority > best.priority):
            best = rule
    port = None
    for action in best.actions if best is not None else ():
        if isinstance(action, SetField) and action.field == "eth_dst":
            dst = action.value
        elif isinstance(action, Output):
            port = action.port
    return (dst, port) if port is not None else None


def _mac_hit(match: Match, src: str, dst: str) -> bool:
    if any(getattr(match, name) is not None for name in _NON_MAC_FIELDS):
        return False
    if match.eth_src is not None and match.eth_src != src:
        return False
    if match.eth_dst is None:
        return True
    mask = int((match.eth_dst_mask or "ff:ff:ff:ff:ff:ff").replace(":", ""), 16)
    return int(dst.replace(":", ""), 16) & mask == int(match.eth_dst.replace(":", ""), 16) & mask
