"""The topology model: hosts, switches and the links between them.

A :class:`Topology` is an immutable value.  Links are cables: full duplex by
default (the same capacity each way), or directed.  Each end has a port number,
as OpenFlow sees it.  Several links between the same two nodes are *parallel
links* (each its own next hop for multipath routing) unless they share a ``lag``
name, in which case they are the members of one aggregated link (LACP: one
logical port whose traffic the switch hashes over the members).

Links can be annotated ``bandwidth`` (bandwidth-class) or ``latency``
(latency-class), as NetSA's topology information module does.

Everything is validated on construction; :class:`~sdnmpi.errors.TopologyError`
lists what is wrong (dangling links, duplicate names, MACs, dpids or ports,
hosts that cannot reach each other).
"""

from __future__ import annotations

import ipaddress
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

from sdnmpi.errors import TopologyError

LinkClass = Literal["bandwidth", "latency"]
LINK_CLASSES: frozenset[str] = frozenset({"bandwidth", "latency"})
#: Default per-hop latency of generated links: cable plus a cut-through switch.
DEFAULT_LATENCY_S = 1e-6
MAX_PORT = 0xFFFFFF00  # OFPP_MAX: highest physical port number in OpenFlow 1.3
MAX_DPID = 2**64 - 1

_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def normalize_mac(mac: str) -> str:
    """Lower-case colon form of a MAC address, or :class:`TopologyError`.

    >>> normalize_mac("00-30-48-CF-F0-39")
    '00:30:48:cf:f0:39'
    """
    norm = mac.strip().lower().replace("-", ":")
    if not _MAC_RE.match(norm):
        raise TopologyError(f"invalid MAC address {mac!r}")
    return norm


@dataclass(frozen=True)
class Host:
    """A compute node: ``cores`` is the number of MPI slots it offers."""

    name: str
    mac: str
    ip: str | None = None
    cores: int = 1


@dataclass(frozen=True)
class Switch:
    """An OpenFlow switch; ``level`` is 1 for leaf/edge switches, upward from there.

    ``level`` may be ``None`` (unknown): :meth:`Topology.levels` infers it.
    """

    name: str
    dpid: int
    level: int | None = None


@dataclass(frozen=True)
class Link:
    """A cable from ``src``:``src_port`` to ``dst``:``dst_port``.

    ``capacity_bps`` is per direction.  ``duplex=False`` makes it one-way.
    """

    src: str
    dst: str
    src_port: int
    dst_port: int
    capacity_bps: float
    latency_s: float = DEFAULT_LATENCY_S
    duplex: bool = True
    annotations: frozenset[str] = frozenset()
    lag: str | None = None

    def describe(self) -> str:
        """``leaf1:5 <-> spine1:1`` style label."""
        arrow = "<->" if self.duplex else "->"
        return f"{self.src}:{self.src_port} {arrow} {self.dst}:{self.dst_port}"


@dataclass(frozen=True)
class Arc:
    """One direction of a link: what routers and simulators work on."""

    index: int
    link: int
    src: str
    dst: str
    src_port: int
    dst_port: int
    capacity_bps: float
    latency_s: float
    annotations: frozenset[str]
    lag: str | None


@dataclass(frozen=True, eq=False)
class Topology:
    """Hosts, switches and links, validated on construction."""

    name: str
    hosts: tuple[Host, ...]
    switches: tuple[Switch, ...]
    links: tuple[Link, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            shown = "\n  ".join(problems[:20])
            more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
            raise TopologyError(f"topology {self.name!r} is invalid:\n  {shown}{more}")

    # -- lookups ----------------------------------------------------------------
    @cached_property
    def host_index(self) -> dict[str, int]:
        """Host name -> position in :attr:`hosts`."""
        return {h.name: i for i, h in enumerate(self.hosts)}

    @cached_property
    def switch_index(self) -> dict[str, int]:
        """Switch name -> position in :attr:`switches`."""
        return {s.name: i for i, s in enumerate(self.switches)}

    def host(self, name: str) -> Host:
        """The host called ``name``."""
        try:
            return self.hosts[self.host_index[name]]
        except KeyError:
            raise TopologyError(f"topology {self.name!r} has no host {name!r}") from None

    def switch(self, name: str) -> Switch:
        """The switch called ``name``."""
        try:
            return self.switches[self.switch_index[name]]
        except KeyError:
            raise TopologyError(f"topology {self.name!r} has no switch {name!r}") from None

    def is_host(self, name: str) -> bool:
        """Whether ``name`` is a host."""
        return name in self.host_index

    @cached_property
    def host_by_mac(self) -> dict[str, Host]:
        """MAC address -> host."""
        return {h.mac: h for h in self.hosts}

    @cached_property
    def switch_by_dpid(self) -> dict[int, Switch]:
        """Datapath id -> switch."""
        return {s.dpid: s for s in self.switches}

    # -- graph views --------------------------------------------------------------
    @cached_property
    def arcs(self) -> tuple[Arc, ...]:
        """Every direction of every link; duplex links give two arcs."""
        out: list[Arc] = []
        for i, ln in enumerate(self.links):
            ends = [(ln.src, ln.dst, ln.src_port, ln.dst_port)]
            if ln.duplex:
                ends.append((ln.dst, ln.src, ln.dst_port, ln.src_port))
            for a, b, pa, pb in ends:
                out.append(
                    Arc(
                        len(out),
                        i,
                        a,
                        b,
                        pa,
                        pb,
                        ln.capacity_bps,
                        ln.latency_s,
                        ln.annotations,
                        ln.lag,
                    )
                )
        return tuple(out)

    @cached_property
    def out_arcs(self) -> dict[str, tuple[Arc, ...]]:
        """Node name -> arcs leaving it, in port order."""
        table: dict[str, list[Arc]] = {n: [] for n in self.node_names}
        for arc in self.arcs:
            table[arc.src].append(arc)
        return {n: tuple(sorted(a, key=lambda x: x.src_port)) for n, a in table.items()}

    @cached_property
    def node_names(self) -> tuple[str, ...]:
        """Hosts then switches."""
        return tuple(h.name for h in self.hosts) + tuple(s.name for s in self.switches)

    def neighbors(self, name: str) -> tuple[str, ...]:
        """Distinct nodes reachable over one arc from ``name``, in port order."""
        return tuple(dict.fromkeys(a.dst for a in self.out_arcs[name]))

    def host_arcs(self, host: str) -> tuple[Arc, ...]:
        """Arcs from a host into the fabric."""
        self.host(host)
        return self.out_arcs[host]

    def attachment(self, host: str) -> tuple[str, int]:
        """(switch, port) of the host's first link."""
        arcs = self.host_arcs(host)
        return arcs[0].dst, arcs[0].dst_port

    def hosts_of(self, switch: str) -> tuple[str, ...]:
        """Hosts directly attached to a switch."""
        return tuple(a.dst for a in self.out_arcs[switch] if self.is_host(a.dst))

    @cached_property
    def levels(self) -> dict[str, int]:
        """Switch -> level: the explicit one, else hops from the nearest host."""
        dist = _bfs(self, [h.name for h in self.hosts])
        return {
            s.name: s.level if s.level is not None else dist.get(s.name, 0) for s in self.switches
        }

    def path_names(self, arcs: Sequence[Arc]) -> list[str]:
        """The node names of an arc path; a node joined to the next one by parallel
        links is written ``name:out_port``, so the path names the cable it takes
        (:meth:`hop` reads it back).

        >>> from sdnmpi.core.generators import leaf_spine
        >>> t = leaf_spine(1, 2, 1, uplinks_per_pair=2)  # two cables per leaf-spine pair
        >>> t.path_names([t.arcs[i] for i in (0, 6, 11, 3)])  # second cable up, second down
        ['h1', 'leaf1:3', 'spine1:4', 'leaf2', 'h2']
        """
        out = []
        for arc in arcs:
            parallel = sum(1 for a in self.out_arcs[arc.src] if a.dst == arc.dst)
            out.append(f"{arc.src}:{arc.src_port}" if parallel > 1 else arc.src)
        return [*out, arcs[-1].dst] if arcs else out

    def hop(self, name: str) -> tuple[str, int | None]:
        """(node, out port or None) of a path element ``name`` or ``name:port``.

        >>> from sdnmpi.core.generators import leaf_spine
        >>> t = leaf_spine(1, 2, 1)
        >>> t.hop("leaf1:3"), t.hop("leaf1"), t.hop("no:such")
        (('leaf1', 3), ('leaf1', None), ('no:such', None))
        """
        node, sep, port = name.rpartition(":")
        if name in self.out_arcs or not sep or not port.isdigit():
            return name, None
        return node, int(port)

    def host_pairs(self) -> Iterable[tuple[str, str]]:
        """All ordered pairs of distinct hosts."""
        names = [h.name for h in self.hosts]
        return ((a, b) for a in names for b in names if a != b)

    # -- derived topologies ---------------------------------------------------------
    def renamed(self, mapping: Mapping[str, str], name: str | None = None) -> Topology:
        """A copy with nodes renamed (names not in ``mapping`` stay)."""

        def rn(n: str) -> str:
            return mapping.get(n, n)

        return Topology(
            name or self.name,
            tuple(replace(h, name=rn(h.name)) for h in self.hosts),
            tuple(replace(s, name=rn(s.name)) for s in self.switches),
            tuple(replace(ln, src=rn(ln.src), dst=rn(ln.dst)) for ln in self.links),
            dict(self.meta),
        )

    def with_links(self, links: Iterable[Link], name: str | None = None) -> Topology:
        """A copy with another link list."""
        return Topology(name or self.name, self.hosts, self.switches, tuple(links), dict(self.meta))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        return (
            self.name == other.name
            and self.hosts == other.hosts
            and self.switches == other.switches
            and self.links == other.links
            and dict(self.meta) == dict(other.meta)
        )

    __hash__ = None  # type: ignore[assignment]


def _bfs(topo: Topology, sources: list[str]) -> dict[str, int]:
    dist = dict.fromkeys(sources, 0)
    queue = deque(sources)
    while queue:
        node = queue.popleft()
        for arc in topo.out_arcs[node]:
            if arc.dst not in dist:
                dist[arc.dst] = dist[node] + 1
                queue.append(arc.dst)
    return dist


# -- validation -------------------------------------------------------------------


def _problems(topo: Topology) -> list[str]:
    problems = _node_problems(topo)
    names = {h.name for h in topo.hosts} | {s.name for s in topo.switches}
    problems += _link_problems(topo, names)
    if not problems:
        problems += _port_problems(topo)
        problems += _lag_problems(topo)
    if not problems:
        problems += _reachability_problems(topo)
    return problems


def _duplicates(values: Iterable[Any]) -> list[Any]:
    seen: set[Any] = set()
    dups: list[Any] = []
    for v in values:
        if v in seen and v not in dups:
            dups.append(v)
        seen.add(v)
    return dups


def _node_problems(topo: Topology) -> list[str]:
    out: list[str] = []
    all_names = [h.name for h in topo.hosts] + [s.name for s in topo.switches]
    out += [
        f"node name {n!r} not a non-empty string"
        for n in all_names
        if not isinstance(n, str) or not n
    ]
    out += [f"duplicate node name {n!r}" for n in _duplicates(all_names)]
    out += [f"duplicate MAC address {m!r}" for m in _duplicates(h.mac for h in topo.hosts)]
    out += [f"duplicate IP address {a!r}" for a in _duplicates(h.ip for h in topo.hosts if h.ip)]
    out += [f"duplicate dpid {d}" for d in _duplicates(s.dpid for s in topo.switches)]
    for h in topo.hosts:
        if not _MAC_RE.match(h.mac):
            out.append(
                f"host {h.name!r}: invalid MAC {h.mac!r} (want lower-case aa:bb:cc:dd:ee:ff)"
            )
        if h.ip is not None and not _valid_ip(h.ip):
            out.append(f"host {h.name!r}: invalid IP address {h.ip!r}")
        if h.cores < 1:
            out.append(f"host {h.name!r}: cores must be >= 1, got {h.cores}")
    for s in topo.switches:
        if not 1 <= s.dpid <= MAX_DPID:
            out.append(f"switch {s.name!r}: dpid {s.dpid} out of range 1..2^64-1")
        if s.level is not None and s.level < 1:
            out.append(f"switch {s.name!r}: level must be >= 1, got {s.level}")
    return out


def _valid_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _link_problems(topo: Topology, names: set[str]) -> list[str]:
    out: list[str] = []
    for i, ln in enumerate(topo.links):
        where = f"link {i} ({ln.describe()})"
        out += [
            f"{where}: unknown node {n!r} (dangling link)"
            for n in (ln.src, ln.dst)
            if n not in names
        ]
        if ln.src == ln.dst:
            out.append(f"{where}: connects {ln.src!r} to itself")
        for port in (ln.src_port, ln.dst_port):
            if not 1 <= port <= MAX_PORT:
                out.append(f"{where}: port {port} out of range 1..{MAX_PORT}")
        if not ln.capacity_bps > 0:
            out.append(f"{where}: capacity must be > 0 bit/s, got {ln.capacity_bps}")
        if not ln.latency_s >= 0:
            out.append(f"{where}: latency must be >= 0 s, got {ln.latency_s}")
        unknown = sorted(set(ln.annotations) - LINK_CLASSES)
        if unknown:
            out.append(f"{where}: unknown annotation(s) {unknown} (known: bandwidth, latency)")
    return out


def _port_problems(topo: Topology) -> list[str]:
    """Each (node, port) is one cable end: it may face only one peer port."""
    peer: dict[tuple[str, int], tuple[str, int]] = {}
    outgoing: set[tuple[str, int]] = set()
    out: list[str] = []
    for arc in topo.arcs:
        here, there = (arc.src, arc.src_port), (arc.dst, arc.dst_port)
        if here in outgoing:
            out.append(f"duplicate port: {arc.src}:{arc.src_port} sends on two links")
        outgoing.add(here)
        for a, b in ((here, there), (there, here)):
            if peer.setdefault(a, b) != b:
                out.append(
                    f"duplicate port: {a[0]}:{a[1]} is wired to both "
                    f"{peer[a][0]}:{peer[a][1]} and {b[0]}:{b[1]}"
                )
    return list(dict.fromkeys(out))


def _lag_problems(topo: Topology) -> list[str]:
    groups: dict[str, list[Link]] = {}
    for ln in topo.links:
        if ln.lag is not None:
            groups.setdefault(ln.lag, []).append(ln)
    out: list[str] = []
    for lag, members in groups.items():
        ends = {frozenset((m.src, m.dst)) for m in members}
        shape = {(m.capacity_bps, m.duplex) for m in members}
        if len(ends) > 1:
            out.append(f"aggregated link {lag!r}: members join different node pairs")
        if len(shape) > 1:
            out.append(f"aggregated link {lag!r}: members differ in capacity or duplex mode")
    return out


def _reachability_problems(topo: Topology) -> list[str]:
    if not topo.hosts:
        return ["no hosts"]
    linked = {a.src for a in topo.arcs} | {a.dst for a in topo.arcs}
    out = [f"host {h.name!r} has no link" for h in topo.hosts if h.name not in linked]
    if out:
        return out
    first = topo.hosts[0].name
    forward = _bfs(topo, [first])
    out += [
        f"host {h.name!r} cannot be reached from {first!r} (disconnected)"
        for h in topo.hosts
        if h.name not in forward
    ]
    reverse = _reverse_reach(topo, first)
    out += [
        f"host {h.name!r} cannot reach {first!r} (disconnected)"
        for h in topo.hosts
        if h.name not in reverse and h.name in forward
    ]
    return out


def _reverse_reach(topo: Topology, target: str) -> set[str]:
    incoming: dict[str, list[str]] = {}
    for arc in topo.arcs:
        incoming.setdefault(arc.dst, []).append(arc.src)
    seen = {target}
    queue = deque([target])
    while queue:
        node = queue.popleft()
        for prev in incoming.get(node, ()):
            if prev not in seen:
                seen.add(prev)
                queue.append(prev)
    return seen
