"""Routes as switch hops, and their encoding into flow rules.

A :class:`Route` is one host pair's path as the switches see it: the source and
destination MACs and, for every switch on the way, the port the frame enters by
and the port it leaves by.  Routes come from a core
:class:`~sdnmpi.core.routing.model.Routing` (arc indices, converted with the
fabric it was computed on, so ports are exact even with parallel links) or from
a mapping of host-name pairs to node-name paths.

Encoding (all rules match Ethernet addresses, table 0):

* **default routes** (:func:`default_rules`): for every (switch, destination)
  the out-port most of the routes use becomes one rule on ``eth_dst``, and
  routes leaving by another port get an (``eth_src``, ``eth_dst``) rule at a
  slightly higher priority.  A destination-consistent routing (D-mod-K: every
  switch sends everything for a destination out of one port) gives exactly
  one rule per (switch, destination) and no pair rule; per-flow routers (ECMP,
  ours) get the pair rules they need.  ``encoding="pair"`` forces pair rules.
* **job routes** (:func:`job_rules`): one (``eth_src``, ``eth_dst``) rule per
  switch of each route, with the job's cookie.

The last hop (the destination's edge switch to the host) is never encoded: the
host delivery rule on that switch already sends ``eth_dst`` to the host port.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sdnmpi.controller import layout
from sdnmpi.controller.flows import FlowRule, Match, Output
from sdnmpi.controller.inventory import Inventory
from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.core.topology import Arc, Topology
from sdnmpi.errors import RoutingError

#: Priorities of the rule kinds, lowest first (see :mod:`sdnmpi.controller.planner`).

Encoding = Literal["auto", "pair"]
PairKey = tuple[str, str]  # (src MAC, dst MAC)


@dataclass(frozen=True)
class Hop:
    """A frame crosses switch ``dpid`` from ``in_port`` to ``out_port``."""

    dpid: int
    in_port: int
    out_port: int


@dataclass(frozen=True)
class Route:
    """The path of one host pair: MACs and the switch hops in order."""

    src_mac: str
    dst_mac: str
    hops: tuple[Hop, ...]

    @property
    def key(self) -> PairKey:
        """(src MAC, dst MAC)."""
        return (self.src_mac, self.dst_mac)


# -- building routes --------------------------------------------------------------------


def route_from_arcs(topology: Topology, arcs: Sequence[Arc]) -> Route:
    """The route of a host-to-host arc path of ``topology``."""
    if len(arcs) < 2:
        raise RoutingError(f"path {[a.index for a in arcs]} is shorter than host-switch-host")
    src, dst = arcs[0].src, arcs[-1].dst
    for end in (src, dst):
        if not topology.is_host(end):
            raise RoutingError(f"path from {src!r} to {dst!r}: {end!r} is not a host")
    hops = []
    for into, out in itertools.pairwise(arcs):
        if into.dst != out.src:
            raise RoutingError(
                f"path from {src!r} to {dst!r} is not contiguous: "
                f"{into.src}->{into.dst} then {out.src}->{out.dst}"
            )
        if topology.is_host(into.dst):
            raise RoutingError(f"path from {src!r} to {dst!r} transits host {into.dst!r}")
        hops.append(Hop(topology.switch(into.dst).dpid, into.dst_port, out.src_port))
    return Route(topology.host(src).mac, topology.host(dst).mac, tuple(hops))


def routes_from_routing(
    fabric: Fabric, routing: Routing, demands: Demands | None = None
) -> list[Route]:
    """One route per host pair of a core routing, in flow order.

    Flows of one pair normally share a path (``ours``, D-mod-K, default routes);
    when they do not (ECMP on rank pairs), MAC rules can carry only one, so the
    pair takes the path of its heaviest flow (bytes times phase repeats, if
    ``demands`` is given), ties to the first flow.
    """
    rows = routing.arcs.tolist()
    if any(not row or row[0] < 0 for row in rows):
        raise RoutingError(f"{routing.router}: a flow has an empty path")
    arc_src, arc_dst = fabric.arc_src.tolist(), fabric.arc_dst.tolist()
    weight = _flow_weight(demands, len(rows))
    best: dict[tuple[int, int], int] = {}
    for flow, row in enumerate(rows):
        last = row[row.index(-1) - 1] if -1 in row else row[-1]
        key = (arc_src[row[0]], arc_dst[last])
        if key not in best or weight[flow] > weight[best[key]]:
            best[key] = flow
    convert = _RouteBuilder(fabric.topology)
    return [convert(rows[flow]) for flow in best.values()]


class _RouteBuilder:
    """Arc-index paths of one topology to :class:`Route` values, fast: per-arc ends,
    ports and MACs looked up in lists, each :class:`Hop` built once and shared (all-pairs
    default routes of fat_tree(16) are a million routes over a few thousand distinct
    hops).  A path that fails a check is handed to :func:`route_from_arcs`, which
    names what is wrong."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        arcs = topology.arcs
        self.src = [a.src for a in arcs]
        self.dst = [a.dst for a in arcs]
        self.src_port = [a.src_port for a in arcs]
        self.dst_port = [a.dst_port for a in arcs]
        self.mac = {h.name: h.mac for h in topology.hosts}
        self.dpid = {s.name: s.dpid for s in topology.switches}
        self.hops: dict[tuple[int, int], Hop] = {}

    def __call__(self, row: Sequence[int]) -> Route:
        path = [a for a in row if a >= 0]
        hops: list[Hop] = []
        ok = len(path) >= 2
        if ok:
            for into, out in itertools.pairwise(path):
                hop = self.hops.get((into, out))
                if hop is None:
                    node = self.dst[into]
                    dpid = self.dpid.get(node)
                    if dpid is None or node != self.src[out]:
                        ok = False
                        break
                    hop = self.hops[(into, out)] = Hop(
                        dpid, self.dst_port[into], self.src_port[out]
                    )
                hops.append(hop)
        src, dst = (
            (self.mac.get(self.src[path[0]]), self.mac.get(self.dst[path[-1]]))
            if ok
            else (None, None)
        )
        if src is None or dst is None:
            arcs = self.topology.arcs
            return route_from_arcs(self.topology, [arcs[a] for a in path])  # raises
        return Route(src, dst, tuple(hops))


def _flow_weight(demands: Demands | None, n: int) -> list[float]:
    if demands is None:
        return [1.0] * n
    w = demands.size_bytes * demands.phase_repeat[demands.phase]
    return [float(x) for x in np.asarray(w, dtype=np.float64)]


def routes_from_names(
    topology: Topology, paths: Mapping[tuple[str, str], Sequence[str]]
) -> list[Route]:
    """Routes from node-name paths ``(src, dst) -> (src, sw, ..., dst)`` on ``topology``.

    A node may be written ``name:port`` (``"tor1:10"``): the path leaves it by that
    port, which picks one of several parallel links to the next node
    (:meth:`Topology.path_names` writes them).  Between two nodes joined by parallel links a
    plain name takes the lowest port.
    """
    out = []
    # the arc from a to b by port (None: the lowest port), looked up once per node pair
    found: dict[tuple[str, str, int | None], Arc] = {}
    for (src, dst), names in paths.items():
        hops = [topology.hop(n) for n in names]
        if len(hops) < 3 or hops[0][0] != src or hops[-1][0] != dst:
            raise RoutingError(
                f"path for {src!r} -> {dst!r} must run from {src!r} to {dst!r} "
                f"through at least one switch, got {list(names)}"
            )
        arcs = []
        for (a, port), (b, _) in itertools.pairwise(hops):
            arc = found.get((a, b, port))
            if arc is None:
                arc = found[(a, b, port)] = _arc(topology, a, b, port)
            arcs.append(arc)
        out.append(route_from_arcs(topology, arcs))
    return out


def _arc(topology: Topology, a: str, b: str, port: int | None = None) -> Arc:
    if a not in topology.out_arcs:
        raise RoutingError(f"unknown node {a!r} (not in the live topology {topology.name!r})")
    for arc in topology.out_arcs[a]:
        if arc.dst == b and port in (None, arc.src_port):
            return arc
    via = "" if port is None else f" by port {port}"
    raise RoutingError(f"no live link from {a!r}{via} to {b!r}: path is not contiguous")


# -- checking routes against what is live -------------------------------------------------


def route_problem(inventory: Inventory, route: Route) -> str | None:
    """Why ``route`` cannot be installed now, or ``None`` if every hop is live."""
    where = f"route {route.src_mac} -> {route.dst_mac}"
    src, dst = inventory.hosts.get(route.src_mac), inventory.hosts.get(route.dst_mac)
    if src is None or dst is None:
        missing = route.src_mac if src is None else route.dst_mac
        return f"{where}: unknown host {missing}"
    if route.src_mac == route.dst_mac or not route.hops:
        return f"{where}: empty route"
    first, last = route.hops[0], route.hops[-1]
    if (first.dpid, first.in_port) != (src.dpid, src.port):
        return f"{where}: starts at {first.dpid}:{first.in_port}, host is at {src.dpid}:{src.port}"
    if (last.dpid, last.out_port) != (dst.dpid, dst.port):
        return f"{where}: ends at {last.dpid}:{last.out_port}, host is at {dst.dpid}:{dst.port}"
    return _hops_problem(inventory, route, where)


def _hops_problem(inventory: Inventory, route: Route, where: str) -> str | None:
    seen: set[int] = set()
    for hop in route.hops:
        if hop.dpid not in inventory.switches_up:
            return f"{where}: switch {hop.dpid} is not connected"
        if hop.dpid in seen:
            return f"{where}: visits switch {hop.dpid} twice (loop)"
        seen.add(hop.dpid)
    for hop, nxt in itertools.pairwise(route.hops):
        peer = inventory.links.get((hop.dpid, hop.out_port))
        back = inventory.links.get((nxt.dpid, nxt.in_port))
        if peer != (nxt.dpid, nxt.in_port) or back != (hop.dpid, hop.out_port):
            return (
                f"{where}: no live link {hop.dpid}:{hop.out_port} -> "
                f"{nxt.dpid}:{nxt.in_port} (path is not contiguous)"
            )
    return None


# -- encoding -------------------------------------------------------------------------


def default_rules(routes: Iterable[Route], encoding: Encoding = "auto") -> list[FlowRule]:
    """Default-route rules: per destination where the routes agree, per pair elsewhere."""
    # (switch, destination) -> out-port -> sources: one dict lookup per hop
    by_dst: dict[tuple[int, str], dict[int, list[str]]] = {}
    for route in routes:
        dst, src = route.dst_mac, route.src_mac
        for hop in route.hops[:-1]:
            ports = by_dst.get((hop.dpid, dst))
            if ports is None:
                ports = by_dst[(hop.dpid, dst)] = {}
            srcs = ports.get(hop.out_port)
            if srcs is None:
                ports[hop.out_port] = [src]
            else:
                srcs.append(src)
    ck = layout.cookie("default")
    out: list[FlowRule] = []
    for (dpid, dst), ports in sorted(by_dst.items()):
        main = _main_port(ports) if encoding == "auto" else None
        if main is not None:
            match = Match(eth_dst=dst)
            out.append(FlowRule(dpid, 0, layout.PRIORITY_DEFAULT_DST, match, (Output(main),), ck))
        others = sorted((src, port) for port, srcs in ports.items() if port != main for src in srcs)
        for src, port in others:
            match = Match.pair(src, dst)
            out.append(FlowRule(dpid, 0, layout.PRIORITY_DEFAULT_PAIR, match, (Output(port),), ck))
    return out


def default_rules_of_routing(
    fabric: Fabric, routing: Routing, encoding: Encoding = "auto"
) -> list[FlowRule]:
    """:func:`default_rules` of :func:`routes_from_routing` (the same rules, in the same
    order), computed on the routing's arrays without building a :class:`Route`: the
    all-pairs default routes of fat_tree(16) are a million routes, and building them
    was most of the 10 s their rules took.  A routing these arrays cannot vouch for (a
    path that is not contiguous, or does not run from a host to a host through
    switches) takes the route-by-route way, which names the fault."""
    hops = _default_hops(fabric, routing)
    if hops is None:
        return default_rules(routes_from_routing(fabric, routing), encoding)
    topo, nhosts = fabric.topology, fabric.nhosts
    sw, port, src, dst = hops
    # rules sort by switch dpid, then destination MAC (as default_rules sorts them)
    macs = [h.mac for h in topo.hosts]
    dpids = [s.dpid for s in topo.switches]
    mac_rank, dpid_rank = _ranks(macs), _ranks(dpids)
    group = dpid_rank[sw] * nhosts + mac_rank[dst]
    main = _main_ports(group, port) if encoding == "auto" else np.full(0, -1, np.int64)
    pair = port != main[group] if encoding == "auto" else np.ones(port.size, dtype=bool)
    # a group's dst rule first, then its pair rules by source MAC and port
    g_main = np.nonzero(main >= 0)[0]
    n_main, n_pair = g_main.size, int(pair.sum())
    key_group = np.concatenate([g_main, group[pair]])
    key_kind = np.concatenate([np.zeros(n_main, np.int64), np.ones(n_pair, np.int64)])
    key_src = np.concatenate([np.zeros(n_main, np.int64), mac_rank[src[pair]]])
    key_port = np.concatenate([main[g_main], port[pair]])
    order = np.lexsort((key_port, key_src, key_kind, key_group))
    return _default_flow_rules(
        key_group[order].tolist(),
        key_kind[order].tolist(),
        key_src[order].tolist(),
        key_port[order].tolist(),
        sorted(dpids),
        sorted(macs),
    )


def _default_hops(
    fabric: Fabric, routing: Routing
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(switch index, out-port, source host, destination host) of every hop but the
    last of the first flow of each host pair, or ``None`` if a path is not the
    contiguous host-to-host path through switches that route building accepts."""
    arcs = np.asarray(routing.arcs)
    if arcs.ndim != 2 or arcs.shape[0] == 0 or arcs.shape[1] < 2:
        return None
    if bool((arcs[:, 0] < 0).any()):
        raise RoutingError(f"{routing.router}: a flow has an empty path")
    valid = arcs >= 0
    length = valid.sum(axis=1)
    nhosts = fabric.nhosts
    a_src, a_dst = np.asarray(fabric.arc_src), np.asarray(fabric.arc_dst)
    safe = np.where(valid, arcs, 0)
    src, dst = a_src[arcs[:, 0]], a_dst[safe[np.arange(arcs.shape[0]), length - 1]]
    inner = valid[:, 1:] & valid[:, :-1]  # hop i: arc i into a switch, arc i + 1 out
    joined = a_dst[safe[:, :-1]] == a_src[safe[:, 1:]]
    through = a_dst[safe[:, :-1]] >= nhosts  # hosts first, then switches
    if not (
        bool((valid[:, 1:] <= valid[:, :-1]).all())  # -1 only after the path
        and bool((length >= 2).all())
        and bool((src < nhosts).all() and (dst < nhosts).all())
        and bool((joined | ~inner).all() and (through | ~inner).all())
    ):
        return None
    _, first = np.unique(src * nhosts + dst, return_index=True)  # a pair's first flow
    first.sort()
    safe, length, src, dst = safe[first], length[first], src[first], dst[first]
    out_port = np.array([a.src_port for a in fabric.topology.arcs], dtype=np.int64)
    r, i = np.nonzero(np.arange(safe.shape[1] - 1)[None, :] < (length - 2)[:, None])
    return a_dst[safe[r, i]] - nhosts, out_port[safe[r, i + 1]], src[r], dst[r]


def _ranks(values: Sequence[object]) -> np.ndarray:
    """Each value's position in ``sorted(values)``."""
    rank = np.empty(len(values), dtype=np.int64)
    rank[sorted(range(len(values)), key=values.__getitem__)] = np.arange(len(values))  # type: ignore[arg-type]
    return rank


def _main_ports(group: np.ndarray, port: np.ndarray) -> np.ndarray:
    """Per group, its most used out-port (the lowest on ties; -1: an empty group)."""
    ngroups = int(group.max()) + 1 if group.size else 0
    nports = int(port.max()) + 1 if port.size else 1
    uses = np.bincount(group * nports + port, minlength=ngroups * nports)
    uses = uses.reshape(ngroups, nports)
    return np.where(uses.max(axis=1) > 0, np.argmax(uses, axis=1), -1)


def _default_flow_rules(
    groups: list[int],
    kinds: list[int],
    srcs: list[int],
    ports: list[int],
    dpids: list[int],
    macs: list[str],
) -> list[FlowRule]:
    """The rules of :func:`default_rules_of_routing`'s sorted columns (group: switch
    rank times hosts plus destination rank; kind 0: dst rule, 1: pair rule)."""
    nhosts = len(macs)
    ck = layout.cookie("default")
    actions: dict[int, tuple[Output]] = {}
    dst_matches: dict[str, Match] = {}
    checked: set[tuple[int, int]] = set()  # (dpid, priority) built the checked way
    out: list[FlowRule] = []
    for g, kind, s, p in zip(groups, kinds, srcs, ports, strict=True):
        dpid, dst = dpids[g // nhosts], macs[g % nhosts]
        action = actions.get(p)
        if action is None:
            action = actions[p] = (Output(p),)
        if kind == 0:
            priority = layout.PRIORITY_DEFAULT_DST
            match = dst_matches.get(dst)
            if match is None:
                match = dst_matches[dst] = Match(eth_dst=dst)
        else:
            priority = layout.PRIORITY_DEFAULT_PAIR
            match = Match.pair(macs[s], dst)
        if (dpid, priority) in checked:
            out.append(FlowRule.add_checked_before(dpid, priority, match, action, ck))
        else:
            out.append(FlowRule(dpid, 0, priority, match, action, ck))
            checked.add((dpid, priority))
    return out


def _main_port(ports: Mapping[int, list[str]]) -> int:
    """The most used out-port (lowest on ties)."""
    return min(ports, key=lambda p: (-len(ports[p]), p))


def job_rules(job_id: int, routes: Iterable[Route]) -> list[FlowRule]:
    """One (eth_src, eth_dst) rule per switch of each route but the last, job cookie."""
    ck = layout.job_cookie(job_id)
    out: list[FlowRule] = []
    actions: dict[int, tuple[Output]] = {}
    checked: set[int] = set()  # switches with a rule built the checked way
    for route in routes:
        match = Match.pair(route.src_mac, route.dst_mac)
        for hop in route.hops[:-1]:
            action = actions.get(hop.out_port)
            if action is None:
                action = actions[hop.out_port] = (Output(hop.out_port),)
            if hop.dpid in checked:
                out.append(
                    FlowRule.add_checked_before(hop.dpid, layout.PRIORITY_JOB, match, action, ck)
                )
            else:
                out.append(FlowRule(hop.dpid, 0, layout.PRIORITY_JOB, match, action, ck))
                checked.add(hop.dpid)
    return out
