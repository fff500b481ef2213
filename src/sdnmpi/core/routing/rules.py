"""The flow rules a routing needs on each switch, aggregated, and a per-switch budget.

A job route is one path per host pair.  Encoded naively it costs one exact
(``eth_src``, ``eth_dst``) rule on every switch of the path but the last (the last
switch delivers by the host rule).  Hardware switches hold a few thousand such
entries, so the rules are aggregated (:func:`aggregate`):

* a pair whose next hop on a switch is the one the **default routes** give it there
  needs no rule at all;
* pairs to the same destination leaving a switch by the same port share one
  **per-destination** rule (``eth_dst`` only, priority between the default pair
  exceptions and the default destination rules: see :mod:`sdnmpi.controller.layout`),
  when ``per_destination`` is on; a per-destination rule sends *every* frame to that
  destination crossing the switch that way (other pairs that pass there need an
  exact rule to keep their planned next hop, and traffic of no job follows it), so
  one is used only where it saves rules, and only if following the per-destination
  rules from there still reaches the destination (checked by :func:`_unsafe`; on a
  fat-tree with valley-free paths it always does).

Per switch and destination the choice is exact: with ``n_x`` of the pairs there
leaving by port ``x``, ``m`` the default port and ``n`` them all, the rules are
``min(n - n_m, 1 + n - max_x n_x)``.

:func:`fit` keeps every switch within a **budget**: pairs are admitted in order of
their score (by default the bytes they carry per rule they cost; the caller may pass
the bytes they move off the most loaded links, :func:`relief`), a pair whose rules do
not fit stays on the default routes, and the rule counts are exactly those of
:func:`aggregate` over the admitted pairs.  :func:`trace` follows a pair through the
resulting rules (what a switch does), so the caller can recompute link loads with
the pairs that fell back.

Pure and generic: switches and hosts are any hashable names (node names for the
manager, dpids and MACs for the controller); ``peer(switch, port)`` says which switch
a port leads to (``None``: a host), ``edge[host]`` which switch a host hangs off.

>>> edge = {"a": "l1", "b": "l1", "c": "l2"}
>>> links = {("l1", 1): "s1", ("l1", 2): "s2", ("s1", 1): "l2", ("s2", 1): "l2"}
>>> def peer(switch, port):
...     return links.get((switch, port))
>>> defaults = DefaultTable({("l1", "c"): 1, ("s1", "c"): 1, ("s2", "c"): 1}, {})
>>> paths = [PairPath("a", "c", (("l1", 2), ("s2", 1))), PairPath("b", "c", (("l1", 2), ("s2", 1)))]
>>> rules = aggregate(paths, defaults, peer, edge)
>>> rules.counts(), dict(rules.dst["l1"])  # one per-destination rule on l1, none on s2
({'l1': 1}, {'c': 2})
>>> trace(rules, defaults, peer, edge, "a", "c")
(('l1', 2), ('s2', 1))
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.errors import RoutingError

#: The rule budget per switch a hardware table of a few thousand entries allows.
DEFAULT_BUDGET = 2000

Hop = tuple[Hashable, int]  # (switch, out port)
Peer = Callable[[Hashable, int], Hashable | None]
Edge = Mapping[Any, Any]  # host -> its switch (any hashable names)


@dataclass(frozen=True)
class PairPath:
    """One host pair's planned path: ``hops`` = (switch, out port) on every switch but
    the last; ``weight`` (bytes) and ``job`` are carried along."""

    src: Hashable
    dst: Hashable
    hops: tuple[Hop, ...]
    weight: float = 1.0
    job: int = 0

    @property
    def key(self) -> tuple[Hashable, Hashable]:
        """(src, dst)."""
        return (self.src, self.dst)


@dataclass(frozen=True)
class DefaultTable:
    """The default routes as the switches hold them: the port for each (switch,
    destination), and the (switch, source, destination) exceptions to it."""

    dst: Mapping[tuple[Hashable, Hashable], int]
    pair: Mapping[tuple[Hashable, Hashable, Hashable], int]

    def port(self, switch: Hashable, src: Hashable, dst: Hashable) -> int | None:
        """The port the default routes send (src, dst) out of ``switch`` (None: no rule)."""
        found = self.pair.get((switch, src, dst)) if self.pair else None
        return found if found is not None else self.dst.get((switch, dst))


@dataclass(frozen=True)
class ExactRule:
    """A pair's rule on one switch."""

    port: int
    job: int


@dataclass(frozen=True)
class RuleSet:
    """The rules per switch: exact ones by (src, dst), per-destination ones by dst."""

    exact: Mapping[Hashable, Mapping[tuple[Hashable, Hashable], ExactRule]]
    dst: Mapping[Hashable, Mapping[Hashable, int]]

    def counts(self) -> dict[Hashable, int]:
        """Rules per switch (switches with none left out)."""
        out: Counter[Hashable] = Counter()
        for table in (self.exact, self.dst):
            for switch, rules in table.items():
                out[switch] += len(rules)
        return {s: n for s, n in out.items() if n}

    def port(self, switch: Hashable, src: Hashable, dst: Hashable) -> int | None:
        """The port these rules send (src, dst) out of ``switch`` (None: no rule)."""
        hit = self.exact.get(switch, {}).get((src, dst))
        return hit.port if hit is not None else None


@dataclass(frozen=True)
class Fit:
    """What :func:`fit` kept: the rules, the pairs admitted (their rules installed or
    none needed) and those left on the default routes, and rules per switch."""

    rules: RuleSet
    admitted: tuple[PairPath, ...]
    fallback: tuple[PairPath, ...]
    counts: Mapping[Hashable, int] = field(default_factory=dict)


# -- forwarding and tracing ------------------------------------------------------------


def forward(
    rules: RuleSet, defaults: DefaultTable, switch: Hashable, src: Hashable, dst: Hashable
) -> int | None:
    """The port a frame (src, dst) leaves ``switch`` by, the highest priority first:
    exact job rule, default pair exception, per-destination job rule, default."""
    port = rules.port(switch, src, dst)
    if port is not None:
        return port
    if defaults.pair:
        port = defaults.pair.get((switch, src, dst))
        if port is not None:
            return port
    port = rules.dst.get(switch, {}).get(dst)
    return port if port is not None else defaults.dst.get((switch, dst))


def trace(
    rules: RuleSet,
    defaults: DefaultTable,
    peer: Peer,
    edge: Edge,
    src: Hashable,
    dst: Hashable,
) -> tuple[Hop, ...] | None:
    """The hops (src, dst) takes through ``rules`` over ``defaults`` up to the
    destination's switch, or ``None`` if it is lost (no rule, a loop, a wrong host)."""
    switch, last = edge[src], edge[dst]
    hops: list[Hop] = []
    seen = set()
    while switch != last:
        port = forward(rules, defaults, switch, src, dst)
        if port is None or switch in seen:
            return None
        seen.add(switch)
        hops.append((switch, port))
        switch = peer(switch, port)
        if switch is None:
            return None
    return tuple(hops)


# -- aggregation within a budget ----------------------------------------------------------


class _Groups:
    """The pairs counted per (switch, destination) and the rules they cost."""

    def __init__(self, defaults: DefaultTable, per_destination: bool) -> None:
        self.defaults = defaults
        self.per_destination = per_destination and not defaults.pair
        self.ports: dict[tuple[Hashable, Hashable], Counter[int]] = defaultdict(Counter)
        self.barred: set[tuple[Hashable, Hashable]] = set()  # no per-destination rule
        self.used: Counter[Hashable] = Counter()

    def cost(self, key: tuple[Hashable, Hashable], ports: Counter[int]) -> int:
        """Rules a (switch, destination) group costs: exact only, or one
        per-destination rule and exact ones for the pairs leaving by another port."""
        total = sum(ports.values())
        base = self.defaults.dst.get(key)
        plain = total - (ports[base] if base is not None else 0)
        if not self.per_destination or key in self.barred or not ports:
            return plain
        port, n = max(ports.items(), key=lambda kv: (kv[1], -kv[0]))
        return min(plain, 1 + total - n) if port != base else plain

    def delta(self, path: PairPath) -> dict[Hashable, int]:
        """Rules each switch of ``path`` would gain if the pair were admitted."""
        out: dict[Hashable, int] = {}
        for switch, port in path.hops:
            key = (switch, path.dst)
            if (switch, path.src, path.dst) in self.defaults.pair:
                extra = int(self.defaults.pair[(switch, path.src, path.dst)] != port)
            else:
                ports = self.ports[key]
                before = self.cost(key, ports)
                ports[port] += 1
                extra = self.cost(key, ports) - before
                ports[port] -= 1
            if extra:
                out[switch] = out.get(switch, 0) + extra
        return out

    def add(self, path: PairPath) -> None:
        """Count ``path`` in its groups and the switches' use."""
        for switch, port in path.hops:
            if (switch, path.src, path.dst) in self.defaults.pair:
                if self.defaults.pair[(switch, path.src, path.dst)] != port:
                    self.used[switch] += 1
                continue
            key = (switch, path.dst)
            ports = self.ports[key]
            before = self.cost(key, ports)
            ports[port] += 1
            self.used[switch] += self.cost(key, ports) - before

    def add_all(self, paths: Iterable[PairPath]) -> None:
        """Count many paths at once (the switches' use computed once at the end)."""
        odd: Counter[Hashable] = Counter()
        pair = self.defaults.pair
        for path in paths:
            for switch, port in path.hops:
                if pair and (switch, path.src, path.dst) in pair:
                    odd[switch] += pair[(switch, path.src, path.dst)] != port
                else:
                    self.ports[(switch, path.dst)][port] += 1
        self.used = odd
        for key, ports in self.ports.items():
            self.used[key[0]] += self.cost(key, ports)

    def choice(self, key: tuple[Hashable, Hashable]) -> int | None:
        """The group's per-destination port (None: exact rules only)."""
        ports = self.ports.get(key)
        if not ports or not self.per_destination or key in self.barred:
            return None
        base = self.defaults.dst.get(key)
        port, n = max(ports.items(), key=lambda kv: (kv[1], -kv[0]))
        if port == base or n == 0:
            return None
        plain = ports.total() - (ports[base] if base is not None else 0)
        return port if 1 + ports.total() - n < plain else None


def _dst_rules(groups: _Groups) -> dict[Hashable, dict[Hashable, int]]:
    dst: dict[Hashable, dict[Hashable, int]] = defaultdict(dict)
    for (switch, d), _ in groups.ports.items():
        port = groups.choice((switch, d))
        if port is not None:
            dst[switch][d] = port
    return dict(dst)


def _rules(groups: _Groups, admitted: Iterable[PairPath]) -> RuleSet:
    exact: dict[Hashable, dict[tuple[Hashable, Hashable], ExactRule]] = defaultdict(dict)
    dst = _dst_rules(groups)
    for path in admitted:
        for switch, port in path.hops:
            chosen = dst.get(switch, {}).get(path.dst)
            base = groups.defaults.port(switch, path.src, path.dst)
            if (switch, path.src, path.dst) not in groups.defaults.pair and chosen is not None:
                base = chosen
            if port != base:
                exact[switch][path.key] = ExactRule(port, path.job)
    return RuleSet(dict(exact), dst)


def _unsafe(
    rules: RuleSet, defaults: DefaultTable, peer: Peer, edge: Edge
) -> list[tuple[Hashable, Hashable]]:
    """Per-destination rules from which the per-destination rules do not reach the
    destination (a loop, a switch without a rule for it): (switch, destination)."""
    bad = []
    for switch, table in rules.dst.items():
        for d in table:
            here: Hashable | None = switch
            seen: set[Hashable] = set()
            while here is not None and here != edge[d] and here not in seen:
                seen.add(here)
                port = rules.dst.get(here, {}).get(d, defaults.dst.get((here, d)))
                here = None if port is None else peer(here, port)
            if here != edge[d]:
                bad.append((switch, d))
    return bad


def default_score(path: PairPath) -> float:
    """Bytes per switch of the path (an upper bound on the rules it costs)."""
    return path.weight / max(1, len(path.hops))


def fit(
    paths: Sequence[PairPath],
    defaults: DefaultTable,
    peer: Peer,
    edge: Edge,
    budget: int | None = DEFAULT_BUDGET,
    *,
    fixed: Sequence[PairPath] = (),
    per_destination: bool = True,
    score: Callable[[PairPath], float] = default_score,
) -> Fit:
    """Admit ``paths`` (best ``score`` first) while every switch's rules, with those of
    the ``fixed`` pairs (already installed: always kept), stay within ``budget``
    (``None``: no limit).  Per-destination rules that would not reach their
    destination are barred and the pairs admitted again without them."""
    if budget is not None and budget < 0:
        raise RoutingError(f"rule budget must be >= 0 rules per switch, got {budget}")
    order = sorted(range(len(paths)), key=lambda i: -score(paths[i]))
    barred: set[tuple[Hashable, Hashable]] = set()
    candidates = [paths[i] for i in order]
    while True:
        groups = _Groups(defaults, per_destination)
        groups.barred = barred
        groups.add_all(fixed)
        admitted: list[PairPath] = []
        fallback: list[PairPath] = []
        for path in candidates:
            need = groups.delta(path)
            if budget is None or all(groups.used[s] + n <= budget for s, n in need.items()):
                groups.add(path)
                admitted.append(path)
            else:
                fallback.append(path)
        dst = RuleSet({}, _dst_rules(groups))
        bad = _unsafe(dst, defaults, peer, edge) if groups.per_destination else []
        if not bad:
            rules = _rules(groups, [*fixed, *admitted])
            return Fit(rules, tuple(admitted), tuple(fallback), rules.counts())
        barred |= set(bad)  # planned again without them: the rules only shrink


def aggregate(
    paths: Sequence[PairPath],
    defaults: DefaultTable,
    peer: Peer,
    edge: Edge,
    *,
    per_destination: bool = True,
) -> RuleSet:
    """Every pair's rules, aggregated (:func:`fit` without a budget)."""
    return fit(paths, defaults, peer, edge, None, per_destination=per_destination).rules


# -- helpers for callers ---------------------------------------------------------------------


def relief(
    paths: Sequence[PairPath],
    defaults: DefaultTable,
    peer: Peer,
    edge: Edge,
    capacity: Callable[[Hop], float] | None = None,
) -> Callable[[PairPath], float]:
    """A :func:`fit` score: the bytes a pair moves off the most loaded hop of its
    default route (load of all ``paths`` as planned, over ``capacity``), per switch of
    its path.  A pair whose default route is its planned one scores its bytes."""
    load: dict[Hop, float] = defaultdict(float)
    for p in paths:
        for hop in p.hops:
            load[hop] += p.weight
    empty = RuleSet({}, {})
    cap = capacity or (lambda hop: 1.0)

    def score(path: PairPath) -> float:
        default = trace(empty, defaults, peer, edge, path.src, path.dst) or ()
        mine = set(path.hops)
        off = [load.get(h, 0.0) / cap(h) for h in default if h not in mine]
        return path.weight * (1.0 + max(off, default=0.0)) / max(1, len(path.hops))

    return score


def defaults_from_routing(
    fabric: Fabric, routing: Routing, demands: Demands
) -> tuple[DefaultTable, dict[Hashable, Hashable]]:
    """The default table of an all-pairs ``routing`` (node names, out ports) as the
    controller encodes default routes (:func:`sdnmpi.controller.routes.default_rules`:
    the most used port per (switch, destination), lowest port on ties, exceptions per
    pair), and each host's switch."""
    arcs = routing.arcs
    valid = arcs >= 0
    length = valid.sum(axis=1)
    col = np.arange(arcs.shape[1])[None, :]
    inner = valid & (col >= 1) & (col < (length - 1)[:, None])  # switch -> next, last hop out
    flow, pos = np.nonzero(inner)
    arc = arcs[flow, pos]
    switch = fabric.arc_src[arc]
    dst = demands.dst[flow]
    src_port = np.array([a.src_port for a in fabric.topology.arcs], dtype=np.int64)
    port = src_port[arc]
    nn = fabric.nnodes
    group = switch.astype(np.int64) * nn + dst
    maxport = int(port.max(initial=0)) + 1
    combo = group * maxport + port
    uniq, counts = np.unique(combo, return_counts=True)
    g, p = uniq // maxport, uniq % maxport
    order = np.lexsort((p, -counts, g))  # per group: most used, then lowest port
    g, p = g[order], p[order]
    first = np.r_[True, g[1:] != g[:-1]]
    names = fabric.names
    main = dict(zip(g[first].tolist(), p[first].tolist(), strict=True))
    table = {(names[k // nn], names[k % nn]): v for k, v in main.items()}
    main_of = np.array([main[k] for k in group.tolist()], dtype=np.int64) if group.size else port
    odd = np.flatnonzero(main_of != port)
    pair: dict[tuple[Hashable, Hashable, Hashable], int] = {
        (names[int(switch[i])], names[int(demands.src[flow[i]])], names[int(dst[i])]): int(port[i])
        for i in odd.tolist()
    }
    edge: dict[Hashable, Hashable] = {
        h.name: fabric.topology.attachment(h.name)[0] for h in fabric.topology.hosts
    }
    return DefaultTable(table, pair), edge


def name_peer(fabric: Fabric) -> Callable[[Hashable, int], Hashable | None]:
    """``peer`` over node names: the switch a (switch, port) leads to, None for a host."""
    topo = fabric.topology
    links: dict[Hop, Hashable] = {
        (a.src, a.src_port): a.dst for a in topo.arcs if not topo.is_host(a.dst)
    }
    return lambda switch, port: links.get((switch, port))
