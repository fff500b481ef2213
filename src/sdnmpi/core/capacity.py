"""Capacity figures of a topology: bisection bandwidth and oversubscription."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from sdnmpi.core.topology import Topology


@dataclass(frozen=True)
class Bisection:
    """The smallest bisection found: bandwidth one way across it, and its halves."""

    bandwidth_bps: float
    left: tuple[str, ...]
    right: tuple[str, ...]
    full_bps: float

    @property
    def ratio(self) -> float:
        """Bisection bandwidth over the full-bisection ideal (half the hosts' NICs)."""
        return self.bandwidth_bps / self.full_bps if self.full_bps else 0.0


def flow_graph(topo: Topology) -> nx.DiGraph:
    """Node-level digraph whose edge ``capacity`` sums the parallel arcs."""
    g = nx.DiGraph()
    g.add_nodes_from(topo.node_names)
    for arc in topo.arcs:
        if g.has_edge(arc.src, arc.dst):
            g[arc.src][arc.dst]["capacity"] += arc.capacity_bps
        else:
            g.add_edge(arc.src, arc.dst, capacity=arc.capacity_bps)
    return g


def cut_bandwidth_bps(topo: Topology, left: Sequence[str], right: Sequence[str]) -> float:
    """Maximum flow from the ``left`` hosts to the ``right`` hosts (one way)."""
    g = flow_graph(topo)
    for h in left:
        g.add_edge("__source__", h)  # no capacity attribute: unbounded
    for h in right:
        g.add_edge(h, "__sink__")
    return float(nx.maximum_flow_value(g, "__source__", "__sink__"))


def bisection(topo: Topology) -> Bisection:
    """The smallest host bisection among structured candidates.

    Exact bisection width is NP-hard in general; we evaluate the max-flow of the
    splits of a few host orders (as declared, grouped by attachment switch, and
    spectral (Fiedler vector) order) and keep the smallest, in both directions.
    For fat-trees, leaf-spine and XGFT built by :mod:`sdnmpi.core.generators` the
    declared order splits along pods, which is the true minimum; for arbitrary
    graphs the result is an upper bound on the bisection width.
    """
    hosts = [h.name for h in topo.hosts]
    half = len(hosts) // 2
    host_bps = {h: sum(a.capacity_bps for a in topo.host_arcs(h)) for h in hosts}
    best: Bisection | None = None
    for order in _candidate_orders(topo):
        left, right = order[:half], order[half:]
        for a, b in ((left, right), (right, left)):
            full = min(sum(host_bps[h] for h in a), sum(host_bps[h] for h in b))
            bw = cut_bandwidth_bps(topo, a, b)
            if best is None or bw < best.bandwidth_bps:
                best = Bisection(bw, tuple(a), tuple(b), full)
    assert best is not None
    return best


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _candidate_orders(topo: Topology) -> list[list[str]]:
    hosts = [h.name for h in topo.hosts]
    if len(hosts) < 2:
        return []
    by_switch = sorted(hosts, key=lambda h: (_natural(topo.attachment(h)[0]), _natural(h)))
    orders = [hosts, by_switch]
    spectral = _fiedler_order(topo, hosts)
    if spectral is not None:
        orders.append(spectral)
    unique: list[list[str]] = []
    for order in orders:
        if order not in unique:
            unique.append(order)
    return unique


def _fiedler_order(topo: Topology, hosts: list[str]) -> list[str] | None:
    g = nx.Graph()
    for arc in topo.arcs:
        w = g.get_edge_data(arc.src, arc.dst, {"weight": 0.0})["weight"]
        g.add_edge(arc.src, arc.dst, weight=w + arc.capacity_bps / 1e9)
    if g.number_of_nodes() < 3 or not nx.is_connected(g):
        return None
    try:
        vec = nx.fiedler_vector(g, weight="weight", seed=1, method="lanczos")
    except (nx.NetworkXError, ImportError):
        return None
    value = dict(zip(g.nodes(), vec, strict=True))
    return sorted(hosts, key=lambda h: (value[h], _natural(h)))


def oversubscription(topo: Topology) -> dict[int, float]:
    """Per switch level, the worst ratio of capacity from below to capacity upward.

    A leaf with 8 hosts of 1 Gbit/s and two 1 Gbit/s uplinks gives ``{1: 4.0}``.
    Top-level switches (no uplinks) are left out; 1.0 everywhere is non-blocking.
    """
    level = {h.name: 0 for h in topo.hosts} | topo.levels
    ratios: dict[int, float] = {}
    for sw in topo.switches:
        lv = level[sw.name]
        down = sum(a.capacity_bps for a in topo.arcs if a.dst == sw.name and level[a.src] < lv)
        up = sum(a.capacity_bps for a in topo.out_arcs[sw.name] if level[a.dst] > lv)
        if up > 0 and down > 0:
            ratios[lv] = max(ratios.get(lv, 0.0), down / up)
    return dict(sorted(ratios.items()))
