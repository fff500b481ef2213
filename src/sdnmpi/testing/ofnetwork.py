"""A fake OpenFlow fabric: applies flow rules and follows packets through them.

The counterpart of faucet's ``FakeOFTable`` for a whole topology: each switch of
a :class:`~sdnmpi.core.topology.Topology` holds flow tables; :meth:`FakeOFNetwork.apply`
executes the planner's messages (``add`` replaces a rule with the same table,
priority and match; ``delete_strict`` removes exactly one; ``delete`` removes
every rule whose cookie agrees under the mask); :meth:`FakeOFNetwork.output_ports`
answers which ports a packet leaves a switch by (highest priority wins, as in
OpenFlow 1.3; two matching rules at the same top priority are an error, since
a switch's choice would be undefined); :meth:`FakeOFNetwork.trace` follows a packet
from a host until it reaches a host, is dropped, goes to the controller, is
copied to several ports (a flood) or loops, rewriting the packet as the rules'
``set_field`` actions say (so a tagged packet arrives with its real MAC);
:meth:`FakeOFNetwork.trace_packet_out` follows a controller's packet-out the same way.

Groups of type ALL (:class:`~sdnmpi.controller.flows.GroupMod`) are held per switch as
OpenFlow 1.3 and Open vSwitch hold them: ``add`` of an existing group, ``modify`` of a
missing one, a group beyond the switch's ``max_groups`` and a flow pointing to a missing
group are refused with an error (recorded in :attr:`FakeOFNetwork.errors`, the message
not applied, as the switch answers ``OFPT_ERROR``); deleting a group deletes the flows
that point to it.  A switch whose table holds ``max_flows`` rules refuses to add another
("table full", as ``OFPET_FLOW_MOD_FAILED``/``OFPFMFC_TABLE_FULL``; replacing a rule in
place is still accepted).  :meth:`FakeOFNetwork.spread` follows every copy of a packet a group
makes (a switch-replicated broadcast) and counts where the copies end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from sdnmpi.controller.flows import (
    OFPG_ALL,
    OFPP_CONTROLLER,
    OFPTT_ALL,
    Barrier,
    FlowRule,
    Group,
    GroupMod,
    Match,
    Message,
    Output,
    PacketOut,
    SetField,
    ToController,
)
from sdnmpi.controller.packets import Packet, decode
from sdnmpi.core.topology import Topology
from sdnmpi.errors import SdnMpiError

Outcome = Literal["delivered", "dropped", "controller", "flooded", "loop"]
TableKey = tuple[int, Match]  # (priority, match)


class FakeOFNetworkError(SdnMpiError):
    """A message the fake fabric cannot apply, or an ambiguous lookup."""


@dataclass(frozen=True)
class Step:
    """A packet crossed switch ``dpid`` from ``in_port`` to ``out_port``."""

    dpid: int
    in_port: int
    out_port: int


@dataclass(frozen=True)
class Trace:
    """Where a packet went: the switch steps and how it ended.

    ``host`` is the receiving host when ``outcome`` is ``delivered``; ``packet``
    is the packet as it was last sent or received (after every ``set_field``).
    """

    steps: tuple[Step, ...]
    outcome: Outcome
    host: str | None = None
    packet: Packet | None = None

    @property
    def dpids(self) -> tuple[int, ...]:
        """The switches crossed, in order."""
        return tuple(s.dpid for s in self.steps)


@dataclass
class Spread:
    """Where the copies of one packet went (:meth:`FakeOFNetwork.spread`).

    ``delivered`` counts the copies each host received; ``dropped`` the copies no rule
    (or no link) carried on; ``controller`` those sent to the controller; ``loop`` is
    set when a copy came back to a (switch, port) it had crossed.
    """

    delivered: Counter[str] = field(default_factory=Counter)
    dropped: int = 0
    controller: int = 0
    loop: bool = False
    steps: list[Step] = field(default_factory=list)


class FakeOFNetwork:
    """Flow and group tables for every switch of ``topology`` (see module docstring).

    ``max_groups``: groups a switch can hold (``None``: no limit), as a switch's
    "out of groups" error; ``max_flows``: rules a switch's table holds (``None``: no
    limit), as a switch's "table full" error.
    """

    def __init__(
        self, topology: Topology, max_groups: int | None = None, max_flows: int | None = None
    ) -> None:
        self.topology = topology
        self.tables: dict[int, dict[int, dict[TableKey, FlowRule]]] = {
            s.dpid: {} for s in topology.switches
        }
        self.groups: dict[int, dict[int, tuple[int, ...]]] = {s.dpid: {} for s in topology.switches}
        self.max_groups = max_groups
        self.max_flows = max_flows
        #: Messages a switch refused, with the reason (``OFPT_ERROR`` replies).
        self.errors: list[tuple[Message, str]] = []
        self.packet_outs: list[PacketOut] = []
        self.barriers = 0
        self._peer = {(a.src, a.src_port): (a.dst, a.dst_port) for a in topology.arcs}

    # -- applying messages --------------------------------------------------------------
    def apply(self, messages: Iterable[Message]) -> None:
        """Execute flow-mods, count barriers, record packet-outs, in order."""
        for msg in messages:
            if isinstance(msg, Barrier):
                self._switch(msg.dpid)
                self.barriers += 1
            elif isinstance(msg, PacketOut):
                self._switch(msg.dpid)
                self.packet_outs.append(msg)
            elif isinstance(msg, GroupMod):
                self._group_mod(msg)
            else:
                self._flow_mod(msg)

    def _switch(self, dpid: int) -> dict[int, dict[TableKey, FlowRule]]:
        if dpid not in self.tables:
            raise FakeOFNetworkError(f"no switch with dpid {dpid} in {self.topology.name!r}")
        return self.tables[dpid]

    def _group_mod(self, mod: GroupMod) -> None:
        self._switch(mod.dpid)
        groups = self.groups[mod.dpid]
        if mod.command == "delete":
            gone = set(groups) if mod.group_id == OFPG_ALL else {mod.group_id} & set(groups)
            for gid in gone:
                del groups[gid]
            for table in self.tables[mod.dpid].values():
                for key in [k for k, r in table.items() if _groups_of(r) & gone]:
                    del table[key]
        elif mod.command == "add" and mod.group_id in groups:
            self.errors.append((mod, "group exists"))
        elif mod.command == "add" and self.max_groups is not None:
            if len(groups) >= self.max_groups:
                self.errors.append((mod, "out of groups"))
            else:
                groups[mod.group_id] = mod.ports
        elif mod.command == "modify" and mod.group_id not in groups:
            self.errors.append((mod, "unknown group"))
        else:
            groups[mod.group_id] = mod.ports

    def _flow_mod(self, rule: FlowRule) -> None:
        tables = self._switch(rule.dpid)
        missing = _groups_of(rule) - set(self.groups[rule.dpid])
        if rule.command == "add" and missing:
            self.errors.append((rule, f"bad out group {sorted(missing)}"))
        elif rule.command == "add" and self._full(tables, rule):
            self.errors.append((rule, "table full"))
        elif rule.command == "add":
            tables.setdefault(rule.table_id, {})[(rule.priority, rule.match)] = rule
        elif rule.command == "delete_strict":
            table = tables.get(rule.table_id, {})
            old = table.get((rule.priority, rule.match))
            if old is not None and _cookie_agrees(old, rule):
                del table[(rule.priority, rule.match)]
        else:
            for table_id, table in tables.items():
                if rule.table_id in (OFPTT_ALL, table_id):
                    for key in [k for k, r in table.items() if _cookie_agrees(r, rule)]:
                        del table[key]

    def _full(self, tables: dict[int, dict[TableKey, FlowRule]], rule: FlowRule) -> bool:
        """Whether adding ``rule`` (not replacing one in place) overflows the table."""
        table = tables.get(rule.table_id, {})
        return (
            self.max_flows is not None
            and (rule.priority, rule.match) not in table
            and len(table) >= self.max_flows
        )

    # -- reading the tables -------------------------------------------------------------
    def rules(self, dpid: int | None = None) -> list[FlowRule]:
        """The rules of one switch (or all), highest priority first."""
        dpids = [dpid] if dpid is not None else sorted(self.tables)
        out = [r for d in dpids for t in self._switch(d).values() for r in t.values()]
        return sorted(out, key=lambda r: (r.dpid, r.table_id, -r.priority, r.match.render()))

    def snapshot(self) -> dict[int, frozenset[FlowRule]]:
        """Every switch's rules as a comparable value."""
        return {d: frozenset(self.rules(d)) for d in sorted(self.tables)}

    def lookup(self, dpid: int, in_port: int, packet: Packet, table_id: int = 0) -> FlowRule | None:
        """The rule a packet hits in one table, ``None`` on a table miss with no rule."""
        table = self._switch(dpid).get(table_id, {})
        hits = [r for r in table.values() if matches(r.match, in_port, packet)]
        if not hits:
            return None
        top = max(r.priority for r in hits)
        best = [r for r in hits if r.priority == top]
        if len(best) > 1:
            shown = "; ".join(r.render() for r in best)
            raise FakeOFNetworkError(f"switch {dpid}: {packet} matches {len(best)} rules: {shown}")
        return best[0]

    def forward(self, dpid: int, in_port: int, packet: Packet) -> list[tuple[int, Packet]]:
        """(out port, packet as sent) for each output of the rule the packet hits."""
        rule = self.lookup(dpid, in_port, packet)
        out: list[tuple[int, Packet]] = []
        for action in rule.actions if rule is not None else ():
            if isinstance(action, SetField):
                packet = _set_field(packet, action)
            elif isinstance(action, Output):
                out.append((action.port, packet))
            elif isinstance(action, ToController):
                out.append((OFPP_CONTROLLER, packet))
            elif isinstance(action, Group):
                ports = self.groups[dpid].get(action.group_id, ())
                out += [(port, packet) for port in ports]
        return out

    def output_ports(self, dpid: int, packet: Packet, in_port: int) -> tuple[int, ...]:
        """The ports ``packet`` leaves switch ``dpid`` by (:data:`OFPP_CONTROLLER` included)."""
        return tuple(port for port, _ in self.forward(dpid, in_port, packet))

    # -- following packets ----------------------------------------------------------------
    def trace(self, src_host: str, packet: Packet, max_hops: int = 64) -> Trace:
        """Follow ``packet`` sent by ``src_host`` until it ends (see :class:`Trace`)."""
        switch, port = self.topology.attachment(src_host)
        return self._follow(switch, port, packet, [], max_hops)

    def trace_packet_out(self, po: PacketOut, max_hops: int = 64) -> Trace:
        """Follow a packet-out: its frame leaves ``po.port`` of ``po.dpid``, then the rules.

        The first step's ``in_port`` is the packet-out's (the controller by default).
        """
        packet = decode(po.data)
        if packet is None:
            raise FakeOFNetworkError(f"packet-out on switch {po.dpid}: frame cannot be decoded")
        switch = self._name(po.dpid)
        steps = [Step(po.dpid, po.in_port, po.port)]
        peer = self._peer.get((switch, po.port))
        if peer is None:
            return Trace(tuple(steps), "dropped", packet=packet)
        if self.topology.is_host(peer[0]):
            return Trace(tuple(steps), "delivered", peer[0], packet)
        return self._follow(peer[0], peer[1], packet, steps, max_hops)

    def spread(self, src_host: str, packet: Packet, max_copies: int = 4096) -> Spread:
        """Follow every copy of ``packet`` sent by ``src_host`` (groups copy it)."""
        switch, port = self.topology.attachment(src_host)
        out = Spread()
        todo = [(switch, port, packet)]
        seen: set[tuple[str, int, Packet]] = set()
        while todo and len(out.steps) < max_copies:
            switch, port, pkt = todo.pop()
            if (switch, port, pkt) in seen:
                out.loop = True
                continue
            seen.add((switch, port, pkt))
            dpid = self.topology.switch(switch).dpid
            outs = self.forward(dpid, port, pkt)
            out.dropped += not outs
            for out_port, copy in outs:
                if out_port == OFPP_CONTROLLER:
                    out.controller += 1
                    continue
                out.steps.append(Step(dpid, port, out_port))
                peer = self._peer.get((switch, out_port))
                if peer is None:
                    out.dropped += 1
                elif self.topology.is_host(peer[0]):
                    out.delivered[peer[0]] += 1
                else:
                    todo.append((peer[0], peer[1], copy))
        out.loop = out.loop or bool(todo)
        return out

    def group_table(self, dpid: int) -> dict[int, tuple[int, ...]]:
        """Switch ``dpid``'s groups: id -> bucket output ports."""
        self._switch(dpid)
        return dict(self.groups[dpid])

    def group_snapshot(self) -> dict[int, dict[int, tuple[int, ...]]]:
        """Every switch's groups as a comparable value."""
        return {d: dict(g) for d, g in sorted(self.groups.items())}

    def _name(self, dpid: int) -> str:
        self._switch(dpid)
        return self.topology.switch_by_dpid[dpid].name

    def _follow(
        self, switch: str, port: int, packet: Packet, steps: list[Step], max_hops: int
    ) -> Trace:
        """Follow ``packet`` arriving at ``switch``:``port`` until it ends."""
        dpid = self.topology.switch(switch).dpid
        seen: set[tuple[int, int, Packet]] = set()
        while len(steps) < max_hops:
            if (dpid, port, packet) in seen:
                return Trace(tuple(steps), "loop", packet=packet)
            seen.add((dpid, port, packet))
            outs = self.forward(dpid, port, packet)
            physical = [(p, pkt) for p, pkt in outs if p != OFPP_CONTROLLER]
            if len(physical) > 1:
                return Trace(tuple(steps), "flooded", packet=packet)
            if not physical:
                return Trace(tuple(steps), "controller" if outs else "dropped", packet=packet)
            out_port, packet = physical[0]
            steps.append(Step(dpid, port, out_port))
            peer = self._peer.get((switch, out_port))
            if peer is None:
                return Trace(tuple(steps), "dropped", packet=packet)
            if self.topology.is_host(peer[0]):
                return Trace(tuple(steps), "delivered", peer[0], packet)
            switch, port = peer
            dpid = self.topology.switch(switch).dpid
        return Trace(tuple(steps), "loop", packet=packet)


def _set_field(packet: Packet, action: SetField) -> Packet:
    if action.field == "eth_dst":
        return replace(packet, eth_dst=action.value)
    return replace(packet, eth_src=action.value)


def _groups_of(rule: FlowRule) -> set[int]:
    return {a.group_id for a in rule.actions if isinstance(a, Group)}


def _cookie_agrees(rule: FlowRule, selector: FlowRule) -> bool:
    mask = selector.cookie_mask
    return rule.cookie & mask == selector.cookie & mask


def _mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def matches(match: Match, in_port: int, packet: Packet) -> bool:
    """Whether ``packet`` arriving on ``in_port`` matches ``match`` (``None`` = any)."""
    if match.in_port is not None and match.in_port != in_port:
        return False
    if match.eth_dst is not None:
        mask = _mac_int(match.eth_dst_mask) if match.eth_dst_mask else (1 << 48) - 1
        if _mac_int(packet.eth_dst) & mask != _mac_int(match.eth_dst) & mask:
            return False
    pairs = (
        (match.eth_src, packet.eth_src),
        (match.eth_type, packet.eth_type),
        (match.arp_op, packet.arp_op),
        (match.arp_tpa, packet.arp_tpa),
        (match.ip_proto, packet.ip_proto),
        (match.tp_src, packet.tp_src),
        (match.tp_dst, packet.tp_dst),
        (match.ipv4_src, packet.ipv4_src),
        (match.ipv4_dst, packet.ipv4_dst),
    )
    return all(want is None or want == have for want, have in pairs)
