"""GraphML topologies, compatible with pfsim's ``milk.graphml``.

Node data: ``typ`` (``host`` | ``switch``), ``capacity`` (cores, on hosts),
``mac``, ``dpid``; edge data: ``capacity`` (Gbit/s) and ``port`` (the port on
the edge's *source* node).  A cable appears as two directed edges, one per
direction, or as a single edge; both are read as one full-duplex link.

sdnmpi adds optional keys it reads back: node ``ip``, ``level``; edge ``latency``
(seconds), ``annotation`` (comma-separated ``bandwidth``/``latency``), ``lag``
(aggregated-link group) and ``duplex`` (``false`` for a one-way link); graph
``sdnmpi_meta`` (JSON).  Export then import gives back an equal topology.

Parsing uses defusedxml: DTDs and entities are rejected.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree.ElementTree import Element, SubElement, indent, tostring

from sdnmpi.core.topology import DEFAULT_LATENCY_S, Host, Link, Switch, Topology, normalize_mac
from sdnmpi.errors import FormatError, SdnMpiError
from sdnmpi.formats import safexml
from sdnmpi.formats.native import parse_json

NS = "http://graphml.graphdrawing.org/xmlns"
_Q = f"{{{NS}}}"
GBPS = 1e9


@dataclass
class _Edge:
    src: str
    dst: str
    data: dict[str, str]


def load_graphml(path: str | Path) -> Topology:
    """Read a GraphML topology file."""
    p = Path(path)
    text = safexml.read(p)
    return parse_graphml(text, source=str(p), default_name=p.stem)


def parse_graphml(
    text: str | bytes, *, source: str = "<graphml>", default_name: str = "graphml"
) -> Topology:
    """Parse GraphML text into a validated :class:`Topology`."""
    root = safexml.parse(text, source)
    try:
        return _topology(root, source, default_name)
    except FormatError:
        raise
    except SdnMpiError as exc:
        raise FormatError(f"{source}: {exc}") from None


def _topology(root: Element, source: str, default_name: str) -> Topology:
    if _local(root.tag) != "graphml":
        raise FormatError(f"{source}: root element is <{_local(root.tag)}>, not <graphml>")
    keys = {k.get("id", ""): k.get("attr.name", k.get("id", "")) for k in _children(root, "key")}
    graphs = _children(root, "graph")
    if len(graphs) != 1:
        raise FormatError(f"{source}: expected one <graph>, found {len(graphs)}")
    graph = graphs[0]
    gdata = _data(graph, keys)
    directed = graph.get("edgedefault", "directed") == "directed"
    hosts, switches = _nodes(graph, keys, source)
    edges = [_edge(e, keys, source) for e in _children(graph, "edge")]
    links = _links(edges, directed, {h.name for h in hosts}, source)
    meta = _meta(gdata.get("sdnmpi_meta"), source)
    return Topology(
        gdata.get("name", default_name), tuple(hosts), tuple(switches), tuple(links), meta
    )


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(elem: Element, name: str) -> list[Element]:
    return [c for c in elem if _local(c.tag) == name]


def _data(elem: Element, keys: dict[str, str]) -> dict[str, str]:
    return {
        keys.get(d.get("key", ""), d.get("key", "")): (d.text or "").strip()
        for d in _children(elem, "data")
    }


#: An integer in ASCII digits, short enough to convert at once.
_INT = re.compile(r"-?[0-9]{1,20}")


def _number(value: str, what: str, source: str, kind: type[int] | type[float] = int) -> Any:
    """A finite number of ``kind`` (an int within 64 bits; "2.0" is 2), else FormatError."""
    text = value.strip()
    try:
        if len(text) > 64:  # no 4300-digit conversions
            raise ValueError(text)
        number: float | int = int(text) if kind is int and _INT.fullmatch(text) else float(text)
    except ValueError:
        raise FormatError(f"{source}: {what}: {value[:40]!r} is not a number") from None
    if isinstance(number, float):
        if not math.isfinite(number):
            raise FormatError(f"{source}: {what}: {value[:40]!r} is not a finite number")
        if kind is int:
            number = int(number)
    if kind is int and not -(2**63) <= number < 2**63:
        raise FormatError(f"{source}: {what}: {value[:40]!r} does not fit in 64 bits")
    return kind(number)


def _nodes(graph: Element, keys: dict[str, str], source: str) -> tuple[list[Host], list[Switch]]:
    hosts: list[Host] = []
    switches: list[Switch] = []
    for node in _children(graph, "node"):
        nid = node.get("id")
        if not nid:
            raise FormatError(f"{source}: <node> without id")
        data = _data(node, keys)
        typ = data.get("typ")
        where = f"node {nid!r}"
        if typ == "host":
            hosts.append(_host(nid, data, where, source))
        elif typ == "switch":
            if "dpid" not in data:
                raise FormatError(f"{source}: {where}: switch without dpid")
            level = _number(data["level"], f"{where} level", source) if "level" in data else None
            switches.append(Switch(nid, _number(data["dpid"], f"{where} dpid", source), level))
        else:
            raise FormatError(f"{source}: {where}: unknown node type {typ!r} (want host or switch)")
    return hosts, switches


def _host(nid: str, data: dict[str, str], where: str, source: str) -> Host:
    if "mac" not in data:
        raise FormatError(f"{source}: {where}: host without mac")
    try:
        mac = normalize_mac(data["mac"])
    except SdnMpiError as exc:
        raise FormatError(f"{source}: {where}: {exc}") from None
    cores = _number(data.get("capacity", "1"), f"{where} capacity", source)
    return Host(nid, mac, data.get("ip") or None, cores)


def _edge(elem: Element, keys: dict[str, str], source: str) -> _Edge:
    src, dst = elem.get("source"), elem.get("target")
    if not src or not dst:
        raise FormatError(f"{source}: <edge> without source or target")
    return _Edge(src, dst, _data(elem, keys))


def _links(edges: list[_Edge], directed: bool, host_names: set[str], source: str) -> list[Link]:
    """Pair each a->b edge with a b->a edge of the same cable; assign missing ports."""
    pending: dict[tuple[str, str], list[int]] = defaultdict(list)
    pairs: list[tuple[_Edge, _Edge | None]] = []
    for e in edges:
        one_way = e.data.get("duplex", "true").lower() == "false"
        back = pending.get((e.dst, e.src))
        if directed and not one_way and back:
            i = back.pop(0)
            pairs[i] = (pairs[i][0], e)
            continue
        if directed and not one_way:
            pending[(e.src, e.dst)].append(len(pairs))
        pairs.append((e, None))
    ports = _PortAllocator(edges, pairs, host_names)
    return [_link(fwd, rev, ports, source) for fwd, rev in pairs]


class _PortAllocator:
    """Gives a port to cable ends whose GraphML edge carries none."""

    def __init__(
        self, edges: Iterable[_Edge], pairs: list[tuple[_Edge, _Edge | None]], hosts: set[str]
    ):
        used: dict[str, set[int]] = defaultdict(set)
        for e in edges:
            if "port" in e.data and _INT.fullmatch(e.data["port"]):
                used[e.src].add(int(e.data["port"]))
        for fwd, rev in pairs:
            if rev is None and "dst_port" in fwd.data and _INT.fullmatch(fwd.data["dst_port"]):
                used[fwd.dst].add(int(fwd.data["dst_port"]))
        self._used = used

    def port(self, node: str, given: str | None, what: str, source: str) -> int:
        if given is not None:
            return int(_number(given, what, source))
        taken = self._used[node]
        port = max(taken, default=0) + 1
        taken.add(port)
        return port


def _link(fwd: _Edge, rev: _Edge | None, ports: _PortAllocator, source: str) -> Link:
    where = f"edge {fwd.src!r} -> {fwd.dst!r}"
    cap = _number(fwd.data.get("capacity", "1"), f"{where} capacity", source, float)
    if rev is not None:
        rcap = _number(rev.data.get("capacity", "1"), f"{where} capacity", source, float)
        if rcap != cap:
            raise FormatError(f"{source}: {where}: capacity {cap} Gbit/s one way, {rcap} the other")
    dst_given = rev.data.get("port") if rev is not None else fwd.data.get("dst_port")
    annotations = frozenset(
        a.strip() for a in fwd.data.get("annotation", "").split(",") if a.strip()
    )
    return Link(
        fwd.src,
        fwd.dst,
        ports.port(fwd.src, fwd.data.get("port"), f"{where} port", source),
        ports.port(fwd.dst, dst_given, f"{where} port", source),
        cap * GBPS,
        _number(
            fwd.data.get("latency", repr(DEFAULT_LATENCY_S)), f"{where} latency", source, float
        ),
        fwd.data.get("duplex", "true").lower() != "false",
        annotations,
        fwd.data.get("lag") or None,
    )


def _meta(text: str | None, source: str) -> dict[str, Any]:
    if not text:
        return {}
    meta = parse_json(text, f"{source}: sdnmpi_meta")
    if not isinstance(meta, dict):
        raise FormatError(f"{source}: sdnmpi_meta must be a JSON object")
    return meta


# -- export -------------------------------------------------------------------------

_KEYS = [
    ("d0", "graph", "name", "string"),
    ("d1", "node", "typ", "string"),
    ("d2", "node", "capacity", "long"),
    ("d3", "node", "mac", "string"),
    ("d4", "node", "dpid", "long"),
    ("d5", "edge", "capacity", "CAP"),
    ("d6", "edge", "port", "long"),
    ("d7", "node", "ip", "string"),
    ("d8", "node", "level", "long"),
    ("d9", "edge", "latency", "double"),
    ("d10", "edge", "annotation", "string"),
    ("d11", "edge", "lag", "string"),
    ("d12", "edge", "duplex", "boolean"),
    ("d13", "graph", "sdnmpi_meta", "string"),
    ("d14", "edge", "dst_port", "long"),
]


def dump_graphml(topo: Topology) -> str:
    """GraphML text for a topology (every cable as one edge per direction)."""
    integral = all((ln.capacity_bps / GBPS).is_integer() for ln in topo.links)
    root = Element("graphml", {"xmlns": NS})
    kid = {}
    for key_id, for_, name, declared in _KEYS:
        typ = ("long" if integral else "double") if declared == "CAP" else declared
        SubElement(root, "key", {"attr.name": name, "attr.type": typ, "for": for_, "id": key_id})
        kid[(for_, name)] = key_id
    graph = SubElement(root, "graph", {"edgedefault": "directed"})
    _put(graph, kid[("graph", "name")], topo.name)
    if topo.meta:
        _put(graph, kid[("graph", "sdnmpi_meta")], json.dumps(dict(topo.meta), sort_keys=True))
    for h in topo.hosts:
        _host_node(graph, kid, h)
    for s in topo.switches:
        node = SubElement(graph, "node", {"id": s.name})
        _put(node, kid[("node", "typ")], "switch")
        _put(node, kid[("node", "dpid")], str(s.dpid))
        if s.level is not None:
            _put(node, kid[("node", "level")], str(s.level))
    for ln in topo.links:
        cap = _fmt_gbps(ln.capacity_bps, integral)
        _edge_elem(graph, kid, ln, ln.src, ln.dst, ln.src_port, cap)
        if ln.duplex:
            _edge_elem(graph, kid, ln, ln.dst, ln.src, ln.dst_port, cap)
    indent(root)
    return "<?xml version='1.0' encoding='utf-8'?>\n" + tostring(root, encoding="unicode") + "\n"


def _fmt_gbps(bps: float, integral: bool) -> str:
    gbps = bps / GBPS
    return str(int(gbps)) if integral else repr(gbps)


def _put(parent: Element, key: str, value: str) -> None:
    SubElement(parent, "data", {"key": key}).text = value


def _host_node(graph: Element, kid: dict[tuple[str, str], str], h: Host) -> None:
    node = SubElement(graph, "node", {"id": h.name})
    _put(node, kid[("node", "typ")], "host")
    _put(node, kid[("node", "capacity")], str(h.cores))
    _put(node, kid[("node", "mac")], h.mac)
    if h.ip:
        _put(node, kid[("node", "ip")], h.ip)


def _edge_elem(
    graph: Element, kid: dict[tuple[str, str], str], ln: Link, a: str, b: str, port: int, cap: str
) -> None:
    edge = SubElement(graph, "edge", {"source": a, "target": b})
    _put(edge, kid[("edge", "capacity")], cap)
    _put(edge, kid[("edge", "port")], str(port))
    _put(edge, kid[("edge", "latency")], repr(ln.latency_s))
    if ln.annotations:
        _put(edge, kid[("edge", "annotation")], ",".join(sorted(ln.annotations)))
    if ln.lag:
        _put(edge, kid[("edge", "lag")], ln.lag)
    if not ln.duplex:
        _put(edge, kid[("edge", "duplex")], "false")
        _put(edge, kid[("edge", "dst_port")], str(ln.dst_port))
