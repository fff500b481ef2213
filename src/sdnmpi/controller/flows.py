"""OpenFlow 1.3 flow rules as plain data: what the planner returns and the shim sends.

A :class:`FlowRule` is one ``OFPT_FLOW_MOD``: which switch (``dpid``), which
table, the priority, a :class:`Match`, the actions, the cookie and the command
(``add``, ``delete_strict``, or ``delete`` by cookie); a :class:`GroupMod` is one
``OFPT_GROUP_MOD`` (a group of type ALL: a copy out of each of its ports).  A :class:`Barrier`
marks the end of a batch the shim must confirm with ``OFPT_BARRIER_REQUEST``; a
:class:`PacketOut` is a frame the controller sends out of a port.  These values
know nothing of os-ken: the shim translates them one to one (faucet's
``valve_of`` plays the same role).

For the shim (os-ken 4.x, ``ofproto_v1_3``): ``add`` is ``OFPFC_ADD`` with one
``OFPIT_APPLY_ACTIONS`` instruction (none for drop); ``delete_strict`` and
``delete`` are ``OFPFC_DELETE_STRICT`` / ``OFPFC_DELETE`` with ``out_port=OFPP_ANY``
and ``out_group=OFPG_ANY`` (otherwise nothing matches); a masked ``eth_dst`` is
``OFPMatch(eth_dst=(mac, mask))``; :class:`ToController` is
``OFPActionOutput(OFPP_CONTROLLER, max_len)``; :class:`Group` is ``OFPActionGroup``, and a
:class:`GroupMod` is an ``OFPGroupMod`` of type ``OFPGT_ALL`` with one
``OFPBucket`` per output port.

Every value validates itself on construction (ports, MACs, IPv4 addresses, the
16- and 64-bit fields), so a bad rule fails in the planner, not on the wire.
:meth:`FlowRule.render` prints an ``ovs-ofctl dump-flows``-like line, stable
for golden tests and for comparing with what a switch reports.

>>> rule = FlowRule(1, priority=100, match=Match(eth_dst="02:00:00:00:00:01"),
...                 actions=(Output(1),), cookie=0x5D03 << 48)
>>> rule.render()
'cookie=0x5d03000000000000, table=0, priority=100,dl_dst=02:00:00:00:00:01 actions=output:1'
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from sdnmpi.errors import SdnMpiError

#: Highest physical port number (OFPP_MAX) and the reserved ports we use.
OFPP_MAX = 0xFFFFFF00
OFPP_IN_PORT = 0xFFFFFFF8
OFPP_CONTROLLER = 0xFFFFFFFD
OFPP_ANY = 0xFFFFFFFF
OFPTT_ALL = 0xFF
#: Highest group id (OFPG_MAX) and the wildcard of a delete (OFPG_ALL).
OFPG_MAX = 0xFFFFFF00
OFPG_ALL = 0xFFFFFFFC
OFPCML_NO_BUFFER = 0xFFFF

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_LLDP = 0x88CC
IP_PROTO_TCP = 6
IP_PROTO_UDP = 17
ARP_REQUEST = 1
ARP_REPLY = 2

#: The group bit of the first octet: set on broadcast and multicast MACs.
GROUP_BIT_MAC = "01:00:00:00:00:00"
BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"

_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_U16 = 0xFFFF
_U64 = 2**64 - 1

Command = Literal["add", "delete_strict", "delete"]
COMMANDS: frozenset[str] = frozenset({"add", "delete_strict", "delete"})


class FlowRuleError(SdnMpiError):
    """A flow rule, match or action with an invalid field."""


def check_mac(mac: str, what: str = "MAC") -> str:
    """``mac`` if it is in lower-case colon form, else :class:`FlowRuleError`.

    >>> check_mac("02:00:00:00:00:0a")
    '02:00:00:00:00:0a'
    """
    if not isinstance(mac, str) or not _MAC_RE.match(mac):
        raise FlowRuleError(f"{what} {mac!r} is not a lower-case aa:bb:cc:dd:ee:ff address")
    return mac


def check_ipv4(addr: str, what: str = "IPv4 address") -> str:
    """``addr`` if it is a dotted-quad IPv4 address, else :class:`FlowRuleError`."""
    try:
        ipaddress.IPv4Address(addr)
    except (ValueError, TypeError):
        raise FlowRuleError(f"{what} {addr!r} is not an IPv4 address") from None
    return addr


def check_port(port: int, what: str = "port") -> int:
    """A physical port number 1..OFPP_MAX, else :class:`FlowRuleError`."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= OFPP_MAX:
        raise FlowRuleError(f"{what} {port!r} is not a port number 1..{OFPP_MAX:#x}")
    return port


def check_group_id(group_id: int) -> int:
    """A group id 0..OFPG_MAX, else :class:`FlowRuleError`."""
    _check_range(group_id, OFPG_MAX, "group id")
    return group_id


def _check_range(value: int | None, high: int, what: str) -> None:
    if value is None or (type(value) is int and 0 <= value <= high):  # the common case first
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise FlowRuleError(f"{what} {value!r} out of range 0..{high:#x}")


# -- match ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """The OXM fields a rule matches on; ``None`` is a wildcard.

    ``eth_dst_mask`` turns ``eth_dst`` into a masked match (the group bit, for
    broadcast and multicast).  OpenFlow's prerequisites are enforced: ARP fields
    need ``eth_type`` 0x0806, ``ip_proto`` needs 0x0800, TCP/UDP ports need
    ``ip_proto`` 6 or 17.
    """

    in_port: int | None = None
    eth_src: str | None = None
    eth_dst: str | None = None
    eth_dst_mask: str | None = None
    eth_type: int | None = None
    arp_op: int | None = None
    arp_tpa: str | None = None
    ip_proto: int | None = None
    tp_src: int | None = None
    tp_dst: int | None = None
    ipv4_src: str | None = None
    ipv4_dst: str | None = None

    def __post_init__(self) -> None:
        if self.in_port is not None:
            check_port(self.in_port, "match in_port")
        for name in ("eth_src", "eth_dst", "eth_dst_mask"):
            value = getattr(self, name)
            if value is not None:
                check_mac(value, f"match {name}")
        if self.eth_dst_mask is not None and self.eth_dst is None:
            raise FlowRuleError("match eth_dst_mask needs eth_dst")
        _check_range(self.eth_type, _U16, "match eth_type")
        _check_range(self.arp_op, _U16, "match arp_op")
        _check_range(self.ip_proto, 0xFF, "match ip_proto")
        _check_range(self.tp_src, _U16, "match tp_src")
        _check_range(self.tp_dst, _U16, "match tp_dst")
        for name in ("arp_tpa", "ipv4_src", "ipv4_dst"):
            if getattr(self, name) is not None:
                check_ipv4(getattr(self, name), f"match {name}")
        self._check_prerequisites()

    @classmethod
    def pair(cls, eth_src: str, eth_dst: str) -> Match:
        """``Match(eth_src=eth_src, eth_dst=eth_dst)``, checking only those two fields
        (the others are wildcards, so nothing else can be wrong): a job's rules build one
        per host pair, 16,384 for a 1024-host job with 16 partners per host.

        >>> Match.pair("02:00:00:00:00:01", "02:00:00:00:00:02") == Match(
        ...     eth_src="02:00:00:00:00:01", eth_dst="02:00:00:00:00:02")
        True
        """
        check_mac(eth_src, "match eth_src")
        check_mac(eth_dst, "match eth_dst")
        match = object.__new__(cls)
        fields = match.__dict__
        fields.update(_WILDCARDS)
        fields["eth_src"] = eth_src
        fields["eth_dst"] = eth_dst
        fields["_hash"] = hash((None, eth_src, eth_dst, *_AFTER_DST))  # as __hash__ does
        return match

    def __hash__(self) -> int:
        # Cached: a rule's key holds its match, and the planner hashes keys for every
        # rule it compares (30,000 per 1024-host job).  The fields are frozen.
        try:
            return self.__dict__["_hash"]  # type: ignore[no-any-return]
        except KeyError:
            value = hash(tuple(getattr(self, f) for f in _MATCH_FIELDS))
            self.__dict__["_hash"] = value
            return value

    def _check_prerequisites(self) -> None:
        arp = self.arp_op is not None or self.arp_tpa is not None
        if arp and self.eth_type != ETH_TYPE_ARP:
            raise FlowRuleError("match arp_op/arp_tpa need eth_type=0x0806")
        ip = self.ip_proto is not None or self.ipv4_src is not None or self.ipv4_dst is not None
        if ip and self.eth_type != ETH_TYPE_IPV4:
            raise FlowRuleError("match ip_proto/ipv4_src/ipv4_dst need eth_type=0x0800")
        ports = self.tp_src is not None or self.tp_dst is not None
        if ports and self.ip_proto not in (IP_PROTO_TCP, IP_PROTO_UDP):
            raise FlowRuleError("match tp_src/tp_dst need ip_proto 6 (TCP) or 17 (UDP)")

    @cached_property
    def rendered(self) -> str:
        """:meth:`render`, computed once (the planner orders rules by it)."""
        return self.render()

    def render(self) -> str:
        """``ovs-ofctl`` field list, e.g. ``in_port=1,dl_dst=...``; empty for match-all."""
        parts: list[str] = []
        if self.in_port is not None:
            parts.append(f"in_port={self.in_port}")
        if self.eth_src is not None:
            parts.append(f"dl_src={self.eth_src}")
        if self.eth_dst is not None:
            mask = f"/{self.eth_dst_mask}" if self.eth_dst_mask is not None else ""
            parts.append(f"dl_dst={self.eth_dst}{mask}")
        if self.eth_type is not None:
            parts.append(f"dl_type={self.eth_type:#06x}")
        if self.arp_op is not None:
            parts.append(f"arp_op={self.arp_op}")
        if self.arp_tpa is not None:
            parts.append(f"arp_tpa={self.arp_tpa}")
        if self.ipv4_src is not None:
            parts.append(f"nw_src={self.ipv4_src}")
        if self.ipv4_dst is not None:
            parts.append(f"nw_dst={self.ipv4_dst}")
        if self.ip_proto is not None:
            parts.append(f"nw_proto={self.ip_proto}")
        if self.tp_src is not None:
            parts.append(f"tp_src={self.tp_src}")
        if self.tp_dst is not None:
            parts.append(f"tp_dst={self.tp_dst}")
        return ",".join(parts)


# -- actions ----------------------------------------------------------------------------


_MATCH_FIELDS = tuple(Match.__dataclass_fields__)
_WILDCARDS = dict.fromkeys(_MATCH_FIELDS)
_AFTER_DST = (None,) * (len(_MATCH_FIELDS) - 3)  # the fields after in_port, eth_src, eth_dst
assert _MATCH_FIELDS[:3] == ("in_port", "eth_src", "eth_dst")


@dataclass(frozen=True)
class Output:
    """Send out of a physical port (``OFPAT_OUTPUT``)."""

    port: int

    def __post_init__(self) -> None:
        check_port(self.port, "output port")

    def render(self) -> str:
        return f"output:{self.port}"


@dataclass(frozen=True)
class ToController:
    """Send to the controller as a packet-in, at most ``max_len`` bytes of it."""

    max_len: int = OFPCML_NO_BUFFER

    def __post_init__(self) -> None:
        _check_range(self.max_len, _U16, "controller max_len")

    def render(self) -> str:
        return f"CONTROLLER:{self.max_len}"


@dataclass(frozen=True)
class SetField:
    """Rewrite a MAC header field (``OFPAT_SET_FIELD``): ``eth_dst`` or ``eth_src``."""

    field: Literal["eth_dst", "eth_src"]
    value: str

    def __post_init__(self) -> None:
        if self.field not in ("eth_dst", "eth_src"):
            raise FlowRuleError(f"set_field on {self.field!r}: only eth_dst and eth_src")
        check_mac(self.value, f"set_field {self.field}")

    def render(self) -> str:
        return f"set_field:{self.value}->{self.field}"


@dataclass(frozen=True)
class Group:
    """Hand the packet to group ``group_id`` (``OFPAT_GROUP``): a switch-replicated
    broadcast's copies (:class:`GroupMod`)."""

    group_id: int

    def __post_init__(self) -> None:
        check_group_id(self.group_id)

    def render(self) -> str:
        return f"group:{self.group_id}"


Action = Output | ToController | SetField | Group
_ACTIONS = (Output, ToController, SetField, Group)


# -- messages ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FlowRule:
    """One flow-mod.  ``command``: ``add``, ``delete_strict`` (match and priority
    exactly), or ``delete`` (every rule whose cookie agrees with ``cookie`` under
    ``cookie_mask``, in ``table_id`` or all tables with :data:`OFPTT_ALL`).

    Empty ``actions`` on an ``add`` means drop.
    """

    dpid: int
    table_id: int = 0
    priority: int = 0
    match: Match = field(default_factory=Match)
    actions: tuple[Action, ...] = ()
    cookie: int = 0
    cookie_mask: int = 0
    idle_timeout: int = 0
    hard_timeout: int = 0
    command: Command = "add"

    def __post_init__(self) -> None:
        if isinstance(self.dpid, bool) or not isinstance(self.dpid, int) or not self.dpid >= 1:
            raise FlowRuleError(f"dpid {self.dpid!r} is not a datapath id 1..2^64-1")
        _check_range(self.dpid, _U64, "dpid")
        _check_range(self.priority, _U16, "priority")
        _check_range(self.cookie, _U64, "cookie")
        _check_range(self.cookie_mask, _U64, "cookie_mask")
        _check_range(self.idle_timeout, _U16, "idle_timeout")
        _check_range(self.hard_timeout, _U16, "hard_timeout")
        if self.command not in COMMANDS:
            raise FlowRuleError(f"command {self.command!r} not one of {sorted(COMMANDS)}")
        self._check_command()

    @classmethod
    def add_checked_before(
        cls, dpid: int, priority: int, match: Match, actions: tuple[Action, ...], cookie: int
    ) -> FlowRule:
        """An ``add`` in table 0 built without :meth:`__post_init__`'s checks, for the
        caller that made an equal rule the checked way already for this ``dpid``,
        ``priority`` and ``cookie`` (``match`` and ``actions`` are checked objects):
        a fabric's default routes are 150,000 rules of a few such values, and checking
        each took a second."""
        rule = object.__new__(cls)
        rule.__dict__.update(
            dpid=dpid, table_id=0, priority=priority, match=match, actions=actions,
            cookie=cookie, cookie_mask=0, idle_timeout=0, hard_timeout=0, command="add",
        )  # fmt: skip
        return rule

    def _check_command(self) -> None:
        high = OFPTT_ALL if self.command == "delete" else OFPTT_ALL - 1
        _check_range(self.table_id, high, "table_id")
        if self.command == "add" and self.cookie_mask:
            raise FlowRuleError("an add has no cookie_mask (it sets the cookie)")
        if self.command == "delete":
            if not self.cookie_mask:
                raise FlowRuleError("delete by cookie needs a cookie_mask (refusing to delete all)")
            if self.match != Match() or self.actions:
                raise FlowRuleError("delete by cookie takes no match and no actions")
        elif not all(isinstance(a, _ACTIONS) for a in self.actions):
            raise FlowRuleError(f"unknown action in {self.actions!r}")

    @cached_property
    def key(self) -> tuple[int, int, int, Match]:
        """What identifies a rule in a switch: (dpid, table, priority, match).

        Cached (the planner's diff asks for it for every rule after every event).
        """
        return (self.dpid, self.table_id, self.priority, self.match)

    def render(self) -> str:
        """One ``ovs-ofctl dump-flows``-like line (``add``) or a description of the delete."""
        if self.command == "delete":
            return f"delete cookie={self.cookie:#x}/{self.cookie_mask:#x}, table={self.table_id}"
        match = self.match.render()
        head = f"cookie={self.cookie:#x}, table={self.table_id}, priority={self.priority}"
        head += f",{match}" if match else ""
        if self.idle_timeout or self.hard_timeout:
            head += f", idle_timeout={self.idle_timeout}, hard_timeout={self.hard_timeout}"
        if self.command == "delete_strict":
            return f"delete_strict {head}"
        actions = ",".join(a.render() for a in self.actions) or "drop"
        return f"{head} actions={actions}"


@dataclass(frozen=True)
class Barrier:
    """End of a batch for switch ``dpid``: the shim sends a barrier and waits for its reply."""

    dpid: int


@dataclass(frozen=True)
class PacketOut:
    """Send ``data`` (a whole Ethernet frame) out of ``port`` of switch ``dpid``.

    ``in_port`` is the port the frame is said to come from (the controller by default).
    """

    dpid: int
    port: int
    data: bytes
    in_port: int = OFPP_CONTROLLER

    def __post_init__(self) -> None:
        check_port(self.port, "packet-out port")
        if not self.data:
            raise FlowRuleError("packet-out with an empty frame")


GroupCommand = Literal["add", "modify", "delete"]
GROUP_COMMANDS: frozenset[str] = frozenset({"add", "modify", "delete"})


@dataclass(frozen=True)
class GroupMod:
    """One ``OFPT_GROUP_MOD`` of a group of type ALL: every bucket outputs the packet to
    one port (``ports``, in order), so the switch sends a copy out of each.

    ``add`` fails on the switch if the group exists, ``modify`` if it does not;
    ``delete`` (no ports) also removes the flows that point to the group, and is not an
    error for a group the switch does not hold.  ``group_id`` :data:`OFPG_ALL` deletes
    every group of the switch.

    >>> GroupMod(1, 0x5D000001, "add", (2, 3)).render()
    'group_id=1560281089,type=all,bucket=output:2,bucket=output:3'
    """

    dpid: int
    group_id: int
    command: GroupCommand = "add"
    ports: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.dpid, bool) or not isinstance(self.dpid, int) or not self.dpid >= 1:
            raise FlowRuleError(f"dpid {self.dpid!r} is not a datapath id 1..2^64-1")
        _check_range(self.dpid, _U64, "dpid")
        if self.command not in GROUP_COMMANDS:
            raise FlowRuleError(f"group command {self.command!r} not one of add, modify, delete")
        if self.command == "delete":
            if self.group_id != OFPG_ALL:
                check_group_id(self.group_id)
            if self.ports:
                raise FlowRuleError("a group delete takes no buckets")
            return
        check_group_id(self.group_id)
        for port in self.ports:
            check_port(port, "bucket output port")
        if len(set(self.ports)) != len(self.ports):
            raise FlowRuleError(f"group {self.group_id}: a port twice in {self.ports}")

    def render(self) -> str:
        """``ovs-ofctl dump-groups``-like (``add``/``modify``), or the delete."""
        if self.command == "delete":
            return f"delete group_id={'all' if self.group_id == OFPG_ALL else self.group_id}"
        buckets = "".join(f",bucket=output:{p}" for p in self.ports)
        return f"group_id={self.group_id},type=all{buckets}"


Message = FlowRule | Barrier | PacketOut | GroupMod


def batched(messages: list[Message], chunk: int) -> list[Message]:
    """``messages`` with a :class:`Barrier` after every ``chunk`` flow-mods of a switch,
    and after the last one of each switch.  Order within a switch is kept.

    >>> r = [FlowRule(1, priority=p) for p in range(3)]
    >>> [type(m).__name__ for m in batched(r, 2)]
    ['FlowRule', 'FlowRule', 'Barrier', 'FlowRule', 'Barrier']
    """
    if chunk < 1:
        raise FlowRuleError(f"batch size must be >= 1, got {chunk}")
    out: list[Message] = []
    pending: dict[int, int] = {}
    for msg in messages:
        out.append(msg)
        if isinstance(msg, FlowRule | GroupMod):
            pending[msg.dpid] = pending.get(msg.dpid, 0) + 1
            if pending[msg.dpid] == chunk:
                out.append(Barrier(msg.dpid))
                pending[msg.dpid] = 0
        elif isinstance(msg, Barrier):
            pending[msg.dpid] = 0
    out.extend(Barrier(dpid) for dpid, count in pending.items() if count)
    return out


def render_rules(rules: list[FlowRule] | tuple[FlowRule, ...]) -> str:
    """Rules grouped by switch, sorted like ``ovs-ofctl dump-flows --sort=priority``
    reversed (highest priority first), one ``dpid=N`` header per switch."""
    lines: list[str] = []
    for dpid in sorted({r.dpid for r in rules}):
        lines.append(f"dpid={dpid:#x}")
        mine = [r for r in rules if r.dpid == dpid]
        mine.sort(key=lambda r: (r.table_id, -r.priority, r.match.render(), r.render()))
        lines.extend(f"  {r.render()}" for r in mine)
    return "\n".join(lines) + ("\n" if lines else "")
