"""Topology generators: leaf-spine, k-ary fat-tree, XGFT, and oversubscription.

Generated hosts get locally administered MACs ``02:00:00:xx:xx:xx`` and IPv4
addresses from ``10.0.0.0/8`` in host order; switches get dpids 1, 2, ... in
switch order, leaves (level 1) first.  Ports are numbered from 1: on every
switch the down ports (toward hosts) come first, then the up ports.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sdnmpi.core.topology import DEFAULT_LATENCY_S, Host, Link, Switch, Topology
from sdnmpi.errors import TopologyError

GBPS = 1e9
_NET = ipaddress.ip_network("10.0.0.0/8")


def host_mac(index: int) -> str:
    """The MAC of generated host ``index`` (0-based).

    >>> host_mac(0), host_mac(300)
    ('02:00:00:00:00:01', '02:00:00:00:01:2d')
    """
    n = index + 1
    return "02:00:00:" + ":".join(f"{(n >> s) & 0xFF:02x}" for s in (16, 8, 0))


def host_ip(index: int) -> str:
    """The IPv4 address of generated host ``index``: ``10.0.0.1`` upward."""
    return str(_NET[index + 1])


def _hosts(names: Sequence[str], cores: int) -> tuple[Host, ...]:
    return tuple(Host(n, host_mac(i), host_ip(i), cores) for i, n in enumerate(names))


def _width(count: int) -> int:
    return max(1, len(str(count)))


def _positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise TopologyError(f"{name} must be > 0, got {value}")


def leaf_spine(
    spines: int,
    leaves: int,
    hosts_per_leaf: int,
    *,
    host_bps: float = GBPS,
    uplink_bps: float = GBPS,
    uplinks_per_pair: int = 1,
    lag: bool = False,
    cores: int = 1,
    latency_s: float = DEFAULT_LATENCY_S,
    name: str | None = None,
) -> Topology:
    """A 2-tier leaf-spine (folded Clos) fabric.

    Every leaf connects to every spine with ``uplinks_per_pair`` cables of
    ``uplink_bps`` each.  With ``lag=True`` those cables form one aggregated link
    (LACP) per leaf-spine pair; otherwise they are parallel links.  Leaf ports:
    hosts ``1..hosts_per_leaf``, then uplinks spine-major.

    >>> t = leaf_spine(2, 4, 6)
    >>> len(t.hosts), len(t.switches), len(t.links)
    (24, 6, 32)
    """
    _positive(spines=spines, leaves=leaves, hosts_per_leaf=hosts_per_leaf)
    _positive(uplinks_per_pair=uplinks_per_pair, host_bps=host_bps, uplink_bps=uplink_bps)
    nh = leaves * hosts_per_leaf
    hosts = _hosts([f"h{i + 1:0{_width(nh)}d}" for i in range(nh)], cores)
    leaf_sw = [Switch(f"leaf{i + 1}", i + 1, 1) for i in range(leaves)]
    spine_sw = [Switch(f"spine{i + 1}", leaves + i + 1, 2) for i in range(spines)]
    links = [
        Link(hosts[li * hosts_per_leaf + j].name, leaf.name, 1, j + 1, host_bps, latency_s)
        for li, leaf in enumerate(leaf_sw)
        for j in range(hosts_per_leaf)
    ]
    for li, leaf in enumerate(leaf_sw):
        for si, spine in enumerate(spine_sw):
            group = f"{leaf.name}-{spine.name}" if lag and uplinks_per_pair > 1 else None
            for u in range(uplinks_per_pair):
                leaf_port = hosts_per_leaf + si * uplinks_per_pair + u + 1
                spine_port = li * uplinks_per_pair + u + 1
                links.append(
                    Link(
                        leaf.name,
                        spine.name,
                        leaf_port,
                        spine_port,
                        uplink_bps,
                        latency_s,
                        lag=group,
                    )
                )
    meta: dict[str, Any] = {
        "kind": "leaf_spine",
        "spines": spines,
        "leaves": leaves,
        "hosts_per_leaf": hosts_per_leaf,
        "uplinks_per_pair": uplinks_per_pair,
        "lag": lag,
    }
    return Topology(
        name or f"leaf-spine-{spines}x{leaves}x{hosts_per_leaf}",
        hosts,
        tuple(leaf_sw + spine_sw),
        tuple(links),
        meta,
    )


def fat_tree(
    k: int,
    *,
    hosts_per_edge: int | None = None,
    host_bps: float = GBPS,
    link_bps: float = GBPS,
    cores: int = 1,
    latency_s: float = DEFAULT_LATENCY_S,
    name: str | None = None,
) -> Topology:
    """The 3-tier k-ary fat-tree of Al-Fares, Loukissas and Vahdat (SIGCOMM 2008).

    ``k`` pods of ``k/2`` edge and ``k/2`` aggregation switches, ``(k/2)^2`` core
    switches, ``k^3/4`` hosts.  Aggregation switch ``j`` of every pod connects to
    cores ``j*k/2 .. (j+1)*k/2-1``.  ``hosts_per_edge`` above ``k/2`` gives an
    oversubscribed edge tier (``hosts_per_edge : k/2``).

    >>> t = fat_tree(4)
    >>> len(t.hosts), len(t.switches)
    (16, 20)
    """
    if k < 2 or k % 2:
        raise TopologyError(f"fat-tree arity k must be an even number >= 2, got {k}")
    half = k // 2
    hpe = half if hosts_per_edge is None else hosts_per_edge
    _positive(hosts_per_edge=hpe, host_bps=host_bps, link_bps=link_bps)
    nh = k * half * hpe
    hosts = _hosts([f"h{i + 1:0{_width(nh)}d}" for i in range(nh)], cores)
    edges = [Switch(f"edge{p + 1}_{e + 1}", 0, 1) for p in range(k) for e in range(half)]
    aggs = [Switch(f"agg{p + 1}_{a + 1}", 0, 2) for p in range(k) for a in range(half)]
    cores_sw = [Switch(f"core{c + 1}", 0, 3) for c in range(half * half)]
    switches = [replace(s, dpid=i + 1) for i, s in enumerate(edges + aggs + cores_sw)]
    links: list[Link] = []
    for e, edge in enumerate(edges):
        for j in range(hpe):
            links.append(Link(hosts[e * hpe + j].name, edge.name, 1, j + 1, host_bps, latency_s))
    for p in range(k):
        for e in range(half):
            for a in range(half):
                edge, agg = edges[p * half + e], aggs[p * half + a]
                links.append(Link(edge.name, agg.name, hpe + a + 1, e + 1, link_bps, latency_s))
        for a in range(half):
            for c in range(half):
                agg, core = aggs[p * half + a], cores_sw[a * half + c]
                links.append(Link(agg.name, core.name, half + c + 1, p + 1, link_bps, latency_s))
    meta = {"kind": "fat_tree", "k": k, "hosts_per_edge": hpe}
    return Topology(name or f"fat-tree-k{k}", hosts, tuple(switches), tuple(links), meta)


def xgft(
    h: int,
    m: Sequence[int],
    w: Sequence[int],
    *,
    link_bps: float | Sequence[float] = GBPS,
    cores: int = 1,
    latency_s: float = DEFAULT_LATENCY_S,
    name: str | None = None,
) -> Topology:
    """An extended generalized fat-tree XGFT(h; m1..mh; w1..wh) (Öhring et al. 1995).

    Level 0 holds ``prod(m)`` hosts; a level-``l`` node has ``m_l`` children and
    ``w_{l+1}`` parents.  A node at level ``l`` is labelled ``(x_1..x_h)`` with
    ``x_i < w_i`` for ``i <= l`` and ``x_i < m_i`` above; nodes at levels ``l-1``
    and ``l`` are joined when their labels agree everywhere except position ``l``.
    ``link_bps`` is one capacity for all levels or one per level (``h`` values,
    level 1 = host links), which models oversubscription.  Ports: children
    ``1..m_l`` by child index, then parents.

    >>> t = xgft(2, [4, 4], [1, 2])  # a 2-tier leaf-spine: 4 leaves, 2 spines
    >>> len(t.hosts), len(t.switches), len(t.links)
    (16, 6, 24)
    """
    m, w = list(m), list(w)
    if h < 1 or len(m) != h or len(w) != h:
        raise TopologyError(f"XGFT needs h >= 1 and h values of m and w, got h={h}, m={m}, w={w}")
    if min(m) < 1 or min(w) < 1:
        raise TopologyError(f"XGFT m and w values must be >= 1, got m={m}, w={w}")
    caps = (
        [float(link_bps)] * h if isinstance(link_bps, int | float) else [float(c) for c in link_bps]
    )
    if len(caps) != h:
        raise TopologyError(f"XGFT link_bps needs {h} values (one per level), got {len(caps)}")
    _positive(**{f"link_bps[{i}]": c for i, c in enumerate(caps)})
    levels = [_xgft_labels(level, m, w) for level in range(h + 1)]
    width = _width(len(levels[0]))
    names = [[f"h{i + 1:0{width}d}" for i in range(len(levels[0]))]]
    names += [[f"s{lv}_{'.'.join(map(str, lab))}" for lab in levels[lv]] for lv in range(1, h + 1)]
    hosts = _hosts(names[0], cores)
    switches = tuple(
        Switch(names[lv][i], 0, lv) for lv in range(1, h + 1) for i in range(len(levels[lv]))
    )
    switches = tuple(replace(s, dpid=i + 1) for i, s in enumerate(switches))
    links = [
        link
        for lv in range(1, h + 1)
        for link in _xgft_level_links(lv, levels, names, m, w, caps[lv - 1], latency_s)
    ]
    meta = {"kind": "xgft", "h": h, "m": m, "w": w}
    label = f"xgft-{h}-{'.'.join(map(str, m))}-{'.'.join(map(str, w))}"
    return Topology(name or label, hosts, switches, tuple(links), meta)


def _xgft_labels(level: int, m: list[int], w: list[int]) -> list[tuple[int, ...]]:
    ranges = [range(w[i]) if i < level else range(m[i]) for i in range(len(m))]
    # Enumerate with x_h most significant so that siblings are contiguous.
    return [tuple(reversed(t)) for t in itertools.product(*reversed(ranges))]


def _xgft_level_links(
    lv: int,
    levels: list[list[tuple[int, ...]]],
    names: list[list[str]],
    m: list[int],
    w: list[int],
    cap: float,
    latency_s: float,
) -> list[Link]:
    pos = lv - 1
    upper_index = {lab: i for i, lab in enumerate(levels[lv])}
    links: list[Link] = []
    for ci, child in enumerate(levels[lv - 1]):
        for parent_digit in range(w[pos]):
            parent = (*child[:pos], parent_digit, *child[pos + 1 :])
            child_port = parent_digit + 1 + (m[pos - 1] if lv > 1 else 0)
            links.append(
                Link(
                    names[lv - 1][ci],
                    names[lv][upper_index[parent]],
                    child_port,
                    child[pos] + 1,
                    cap,
                    latency_s,
                )
            )
    return links


def oversubscribe(topo: Topology, ratio: float, name: str | None = None) -> Topology:
    """Scale every switch-to-switch link's capacity by ``1/ratio``.

    The edge tier of a non-blocking fabric becomes ``ratio``:1 oversubscribed
    (and its bisection bandwidth ``1/ratio`` of full); the ratios of higher
    tiers, whose links all scale alike, stay as they were.
    """
    _positive(ratio=ratio)
    links = [
        ln
        if topo.is_host(ln.src) or topo.is_host(ln.dst)
        else replace(ln, capacity_bps=ln.capacity_bps / ratio)
        for ln in topo.links
    ]
    meta = {**topo.meta, "oversubscription": ratio * float(topo.meta.get("oversubscription", 1.0))}
    out = topo.with_links(links, name or f"{topo.name}-os{ratio:g}")
    return Topology(out.name, out.hosts, out.switches, out.links, meta)
