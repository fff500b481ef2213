"""Inspect routes: walk a packet through flow tables hop by hop, and diff two tables.

Pure (no sockets, no os-ken): the controller's API (``route_trace`` and ``route_table``,
docs/INSPECT.md) gives these functions either the rules the planner intends each switch
to hold or the rules the switches reported (``OFPFlowStatsRequest``), and the CLI
(``sdnmpi routes``) prints what they return.  Like OpenSM's ``ibtracert``: for each
switch the packet crosses, the port it came in by, the rule that decides it (the
highest-priority rule of table 0 that matches, as OpenFlow picks it), and the port it
leaves by.

:func:`trace` follows a :class:`Probe` (the headers of one packet) from the port its
source host is attached to; each :class:`Hop` names its rule (priority, cookie, the
cookie's kind: ``default``, ``job``, ``jobdst``, ``tag``, ``host``, ...).  The walk ends
at a host (``delivered``), at the controller, at a drop, at an OpenFlow group (a
broadcast tree), at a switch with no matching rule, or when it comes back to a switch
and port it has crossed before with the same headers (a loop).

:func:`table_diff` compares the rules a switch should hold with those it holds, by what
identifies a rule in a switch (table, priority, match): ``missing`` (intended, not on
the switch), ``extra`` (on the switch with an sdnmpi cookie, not intended) and
``differing`` (same match, other actions or cookie).  Rules without an sdnmpi cookie
(other controllers', os-ken's own LLDP rule) are ``foreign``: listed, not a difference,
as the controller leaves them alone.

>>> from sdnmpi.controller.flows import FlowRule, Match, Output
>>> rules = {1: [FlowRule(1, priority=100, match=Match(eth_dst="02:00:00:00:00:02"),
...                       actions=(Output(2),), cookie=0x5D03 << 48)]}
>>> t = trace(rules, {}, {(1, 2): "h2"}, (1, 1), Probe("02:00:00:00:00:01",
...           "02:00:00:00:00:02"), {1: "s1"})
>>> [(h.switch, h.in_port, h.out_port, h.kind) for h in t.hops], t.end, t.reached
([('s1', 1, 2, 'default')], 'delivered', 'h2')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sdnmpi.controller import layout
from sdnmpi.controller.flows import (
    ETH_TYPE_IPV4,
    IP_PROTO_TCP,
    FlowRule,
    Group,
    Match,
    Output,
    SetField,
    ToController,
)

PortRef = tuple[int, int]
#: Longest walk followed before it is called a loop (a fabric's diameter is far less).
MAX_HOPS = 64


@dataclass(frozen=True)
class Probe:
    """The headers of the packet traced: unicast IPv4/TCP between two hosts, or to an
    MPI tag (``eth_dst`` a tag MAC, docs/tag-layout.md)."""

    eth_src: str
    eth_dst: str
    ipv4_src: str | None = None
    ipv4_dst: str | None = None
    eth_type: int = ETH_TYPE_IPV4
    ip_proto: int = IP_PROTO_TCP


@dataclass(frozen=True)
class Hop:
    """One switch the packet crosses and the rule that decided it."""

    switch: str
    dpid: int
    in_port: int
    out_port: int | None
    priority: int | None
    cookie: int | None
    kind: str | None
    job: int | None
    rule: str

    def to_dict(self) -> dict[str, Any]:
        """The hop as the API and ``--json`` give it (docs/INSPECT.md)."""
        return {
            "switch": self.switch,
            "dpid": self.dpid,
            "in_port": self.in_port,
            "out_port": self.out_port,
            "priority": self.priority,
            "cookie": None if self.cookie is None else f"{self.cookie:#x}",
            "kind": self.kind,
            "job": self.job,
            "rule": self.rule,
        }


@dataclass(frozen=True)
class Trace:
    """A walk: the hops, how it ended and where (a host's name for ``delivered``)."""

    hops: tuple[Hop, ...]
    end: str
    reached: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "hops": [h.to_dict() for h in self.hops],
            "end": self.end,
            "reached": self.reached,
        }

    def path(self) -> list[str]:
        """The switches crossed, by name."""
        return [h.switch for h in self.hops]


def matches(match: Match, probe: Probe, in_port: int) -> bool:
    """Whether a packet with ``probe``'s headers arriving on ``in_port`` matches."""
    if match.in_port is not None and match.in_port != in_port:
        return False
    if match.eth_src is not None and match.eth_src != probe.eth_src:
        return False
    if match.eth_dst is not None and not _mac_in(probe.eth_dst, match.eth_dst, match.eth_dst_mask):
        return False
    if match.eth_type is not None and match.eth_type != probe.eth_type:
        return False
    if match.ip_proto is not None and match.ip_proto != probe.ip_proto:
        return False
    if match.ipv4_src is not None and match.ipv4_src != probe.ipv4_src:
        return False
    if match.ipv4_dst is not None and match.ipv4_dst != probe.ipv4_dst:
        return False
    # ARP fields and transport ports: the probe is an IPv4 packet without known ports
    return (
        match.arp_op is None
        and match.arp_tpa is None
        and match.tp_src is None
        and (match.tp_dst is None)
    )


def _mac_in(mac: str, want: str, mask: str | None) -> bool:
    if mask is None:
        return mac == want
    m = int(mask.replace(":", ""), 16)
    return int(mac.replace(":", ""), 16) & m == int(want.replace(":", ""), 16) & m


def decide(rules: Sequence[FlowRule], probe: Probe, in_port: int) -> FlowRule | None:
    """The rule of table 0 a switch applies: the highest-priority match (OpenFlow leaves
    ties between overlapping rules of equal priority undefined; the first is taken)."""
    best: FlowRule | None = None
    for rule in rules:
        if rule.table_id != 0 or rule.command != "add":
            continue
        if (best is None or rule.priority > best.priority) and matches(rule.match, probe, in_port):
            best = rule
    return best


def trace(
    rules: Mapping[int, Sequence[FlowRule]],
    links: Mapping[PortRef, PortRef],
    attached: Mapping[PortRef, str],
    start: PortRef,
    probe: Probe,
    names: Mapping[int, str],
) -> Trace:
    """Follow ``probe`` from switch port ``start`` (where its source host is attached).

    ``rules``: each switch's table; ``links``: switch port -> the port at its other end;
    ``attached``: switch port -> the host on it; ``names``: dpid -> switch name.
    """
    hops: list[Hop] = []
    seen: set[tuple[int, int, str]] = set()
    dpid, in_port = start
    while True:
        name = names.get(dpid, f"s{dpid}")
        if dpid not in rules:
            return Trace(tuple(hops), "switch not known")
        if (dpid, in_port, probe.eth_dst) in seen or len(hops) >= MAX_HOPS:
            return Trace(tuple(hops), "loop")
        seen.add((dpid, in_port, probe.eth_dst))
        rule = decide(rules[dpid], probe, in_port)
        if rule is None:
            hops.append(Hop(name, dpid, in_port, None, None, None, None, None, "(no rule)"))
            return Trace(tuple(hops), "no matching rule")
        out: int | None = None
        end: str | None = None
        for act in rule.actions:
            if isinstance(act, SetField):
                if act.field == "eth_dst":
                    probe = replace(probe, eth_dst=act.value)
                else:
                    probe = replace(probe, eth_src=act.value)
            elif isinstance(act, Output) and out is None:
                out = act.port
            elif isinstance(act, ToController):
                end = end or "controller"
            elif isinstance(act, Group):
                end = end or f"group {act.group_id:#x}"
        kind = layout.kind_of(rule.cookie)
        job = layout.job_of(rule.cookie) if kind in ("job", "tag", "bcast") else None
        hops.append(Hop(name, dpid, in_port, out, rule.priority, rule.cookie, kind, job,
                        rule.render()))  # fmt: skip
        if out is None:
            return Trace(tuple(hops), end or "dropped")
        here = (dpid, out)
        if here in links:
            dpid, in_port = links[here]
            continue
        if here in attached:
            return Trace(tuple(hops), "delivered", attached[here])
        return Trace(tuple(hops), "port leads nowhere known")


# -- tables --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableDiff:
    """Intended against held rules of one switch (see the module docstring)."""

    missing: tuple[FlowRule, ...]
    extra: tuple[FlowRule, ...]
    differing: tuple[tuple[FlowRule, FlowRule], ...]
    same: int
    foreign: tuple[FlowRule, ...] = ()

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.differing)

    def to_dict(self) -> dict[str, Any]:
        return {
            "same": self.same,
            "missing": [r.render() for r in self.missing],
            "extra": [r.render() for r in self.extra],
            "differing": [{"intended": a.render(), "held": b.render()} for a, b in self.differing],
            "foreign": [r.render() for r in self.foreign],
        }


def _essence(rule: FlowRule) -> tuple[Any, ...]:
    return (rule.actions, rule.cookie, rule.idle_timeout, rule.hard_timeout)


def table_diff(intended: Sequence[FlowRule], held: Sequence[FlowRule]) -> TableDiff:
    """Compare by (table, priority, match); see the module docstring.

    >>> from sdnmpi.controller.flows import FlowRule, Match, Output
    >>> m = Match(eth_dst="02:00:00:00:00:02")
    >>> a = FlowRule(1, priority=100, match=m, actions=(Output(2),))
    >>> b = FlowRule(1, priority=100, match=m, actions=(Output(3),))
    >>> d = table_diff([a], [b]); (len(d.missing), len(d.extra), len(d.differing), d.same)
    (0, 0, 1, 0)
    """
    want = {r.key: r for r in intended}
    have = {r.key: r for r in held if r.key in want or layout.kind_of(r.cookie) is not None}
    foreign = tuple(sorted((r for r in held if r.key not in have), key=rule_order))
    missing = tuple(sorted((r for k, r in want.items() if k not in have), key=rule_order))
    extra = tuple(sorted((r for k, r in have.items() if k not in want), key=rule_order))
    both = [(want[k], have[k]) for k in want if k in have]
    differing = tuple(
        sorted(
            ((a, b) for a, b in both if _essence(a) != _essence(b)), key=lambda p: rule_order(p[0])
        )
    )
    return TableDiff(missing, extra, differing, len(both) - len(differing), foreign)


def rule_order(rule: FlowRule) -> tuple[int, int, str]:
    return (rule.table_id, -rule.priority, rule.match.render())
