"""sdnmpi's own JSON formats for topologies and patterns (lossless).

Topology::

    {"format": "sdnmpi-topology", "version": 1, "name": ..., "meta": {...},
     "hosts": [{"name", "mac", "ip", "cores"}],
     "switches": [{"name", "dpid", "level"}],
     "links": [{"src", "dst", "src_port", "dst_port", "capacity_bps", "latency_s",
                "duplex", "annotations", "lag"}]}

Pattern (cells column-wise, so large patterns stay compact)::

    {"format": "sdnmpi-pattern", "version": 1, "name": ..., "nprocs": N,
     "hosts": null | [names], "meta": {...},
     "phases": [{"label", "repeat", "src": [...], "dst": [...], "size_bytes": [...],
                 "messages": [...], "kind": null | [null|"bandwidth"|"latency"],
                 "max_hops": null | [...], "sizes": [[src, dst, [[size, count], ...]]]}]}

Readers reject unknown keys and wrong types with the file and the field named.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sdnmpi.core.pattern import KIND_CODES, KIND_NAMES, Pattern, Phase
from sdnmpi.core.topology import Host, Link, Switch, Topology
from sdnmpi.errors import FormatError, SdnMpiError

TOPOLOGY_FORMAT = "sdnmpi-topology"
PATTERN_FORMAT = "sdnmpi-pattern"
VERSION = 1


# -- topology -----------------------------------------------------------------------


def topology_to_dict(topo: Topology) -> dict[str, Any]:
    """The JSON object of a topology."""
    return {
        "format": TOPOLOGY_FORMAT,
        "version": VERSION,
        "name": topo.name,
        "meta": dict(topo.meta),
        "hosts": [{"name": h.name, "mac": h.mac, "ip": h.ip, "cores": h.cores} for h in topo.hosts],
        "switches": [{"name": s.name, "dpid": s.dpid, "level": s.level} for s in topo.switches],
        "links": [
            {
                "src": ln.src,
                "dst": ln.dst,
                "src_port": ln.src_port,
                "dst_port": ln.dst_port,
                "capacity_bps": ln.capacity_bps,
                "latency_s": ln.latency_s,
                "duplex": ln.duplex,
                "annotations": sorted(ln.annotations),
                "lag": ln.lag,
            }
            for ln in topo.links
        ],
    }


def topology_from_dict(obj: Any, source: str = "<json>") -> Topology:
    """A topology from its JSON object; errors name ``source`` and the field."""
    r = _Reader(source)
    top = r.obj(
        obj, "topology", {"format", "version", "name", "meta", "hosts", "switches", "links"}
    )
    r.header(top, TOPOLOGY_FORMAT)
    hosts = [_host(r, h, i) for i, h in enumerate(r.items(top, "hosts"))]
    switches = [_switch(r, s, i) for i, s in enumerate(r.items(top, "switches"))]
    links = [_link(r, ln, i) for i, ln in enumerate(r.items(top, "links"))]
    try:
        return Topology(
            r.text(top, "name"), tuple(hosts), tuple(switches), tuple(links), r.meta(top)
        )
    except SdnMpiError as exc:
        raise FormatError(f"{source}: {exc}") from None


def _host(r: _Reader, obj: Any, i: int) -> Host:
    h = r.obj(obj, f"hosts[{i}]", {"name", "mac", "ip", "cores"})
    ip = r.optional(h, "ip", str, f"hosts[{i}]")
    return Host(r.text(h, "name"), r.text(h, "mac"), ip, r.integer(h, "cores", f"hosts[{i}]"))


def _switch(r: _Reader, obj: Any, i: int) -> Switch:
    s = r.obj(obj, f"switches[{i}]", {"name", "dpid", "level"})
    return Switch(
        r.text(s, "name"),
        r.integer(s, "dpid", f"switches[{i}]"),
        r.optional(s, "level", int, f"switches[{i}]"),
    )


def _link(r: _Reader, obj: Any, i: int) -> Link:
    keys = {
        "src",
        "dst",
        "src_port",
        "dst_port",
        "capacity_bps",
        "latency_s",
        "duplex",
        "annotations",
        "lag",
    }
    where = f"links[{i}]"
    ln = r.obj(obj, where, keys)
    annotations = r.items(ln, "annotations")
    if not all(isinstance(a, str) for a in annotations):
        raise FormatError(f"{r.source}: {where}.annotations must be strings")
    return Link(
        r.text(ln, "src"),
        r.text(ln, "dst"),
        r.integer(ln, "src_port", where),
        r.integer(ln, "dst_port", where),
        r.number(ln, "capacity_bps", where),
        r.number(ln, "latency_s", where),
        r.flag(ln, "duplex", where),
        frozenset(annotations),
        r.optional(ln, "lag", str, where),
    )


# -- pattern --------------------------------------------------------------------------


def pattern_to_dict(pattern: Pattern) -> dict[str, Any]:
    """The JSON object of a pattern."""
    return {
        "format": PATTERN_FORMAT,
        "version": VERSION,
        "name": pattern.name,
        "nprocs": pattern.nprocs,
        "hosts": list(pattern.hosts) if pattern.hosts is not None else None,
        "meta": dict(pattern.meta),
        "phases": [_phase_to_dict(p) for p in pattern.phases],
    }


def _phase_to_dict(p: Phase) -> dict[str, Any]:
    return {
        "label": p.label,
        "repeat": p.repeat,
        "src": p.src.tolist(),
        "dst": p.dst.tolist(),
        "size_bytes": p.size_bytes.tolist(),
        "messages": p.messages.tolist(),
        "kind": None if p.kind is None else [KIND_NAMES[int(k)] for k in p.kind],
        "max_hops": None if p.max_hops is None else p.max_hops.tolist(),
        "sizes": [[s, d, [list(b) for b in hist]] for (s, d), hist in sorted(p.sizes.items())],
    }


def pattern_from_dict(obj: Any, source: str = "<json>") -> Pattern:
    """A pattern from its JSON object; errors name ``source`` and the field."""
    r = _Reader(source)
    top = r.obj(obj, "pattern", {"format", "version", "name", "nprocs", "hosts", "meta", "phases"})
    r.header(top, PATTERN_FORMAT)
    hosts = top.get("hosts")
    if hosts is not None and (
        not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts)
    ):
        raise FormatError(f"{source}: hosts must be null or a list of names")
    phases = tuple(_phase(r, p, i) for i, p in enumerate(r.items(top, "phases")))
    try:
        return Pattern(
            r.text(top, "name"),
            r.integer(top, "nprocs", "pattern"),
            phases,
            None if hosts is None else tuple(hosts),
            r.meta(top),
        )
    except SdnMpiError as exc:
        raise FormatError(f"{source}: {exc}") from None


def _phase(r: _Reader, obj: Any, i: int) -> Phase:
    keys = {"label", "repeat", "src", "dst", "size_bytes", "messages", "kind", "max_hops", "sizes"}
    where = f"phases[{i}]"
    p = r.obj(obj, where, keys)
    cols = {k: r.integers(p, k, where) for k in ("src", "dst", "size_bytes", "messages")}
    kind = p.get("kind")
    if kind is not None:
        if not isinstance(kind, list) or not all(k in KIND_CODES for k in kind):
            raise FormatError(f"{r.source}: {where}.kind must list null, 'bandwidth' or 'latency'")
        kind = [KIND_CODES[k] for k in kind]
    hops = r.integers(p, "max_hops", where) if p.get("max_hops") is not None else None
    try:
        return Phase.from_arrays(
            r.text(p, "label"),
            cols["src"],
            cols["dst"],
            cols["size_bytes"],
            cols["messages"],
            repeat=r.integer(p, "repeat", where),
            kind=kind,
            max_hops=hops,
            sizes=_sizes(r, p.get("sizes", []), where),
        )
    except SdnMpiError as exc:
        raise FormatError(f"{r.source}: {where}: {exc}") from None


def _sizes(r: _Reader, obj: Any, where: str) -> dict[tuple[int, int], tuple[tuple[int, int], ...]]:
    out: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}
    if not isinstance(obj, list):
        raise FormatError(f"{r.source}: {where}.sizes must be a list")
    for entry in obj:
        try:
            s, d, hist = entry
            out[(int(s), int(d))] = tuple((int(a), int(b)) for a, b in hist)
        except (TypeError, ValueError):
            raise FormatError(
                f"{r.source}: {where}.sizes entry {entry!r} is not [src, dst, [[size, count]...]]"
            ) from None
    return out


# -- files ----------------------------------------------------------------------------


def parse_json(data: bytes | str, source: str) -> Any:
    """JSON text as Python values; :class:`FormatError` for anything json cannot take
    (bad syntax or UTF-8, nesting deeper than Python's stack, integers of over 4300
    digits), never another exception.

    >>> parse_json(b"[" * 100000, "x")
    Traceback (most recent call last):
    ...
    sdnmpi.errors.FormatError: x: not valid JSON here: nested too deep
    """
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"{source}: not valid JSON: {exc}") from None
    except RecursionError:
        raise FormatError(f"{source}: not valid JSON here: nested too deep") from None
    except ValueError:  # what json.loads raises besides JSONDecodeError
        raise FormatError(
            f"{source}: not valid JSON here: an integer of over 4300 digits"
        ) from None


def load_json(path: str | Path) -> Topology | Pattern:
    """Read a topology or pattern JSON file (dispatch on its ``format`` field)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise FormatError(f"{p}: cannot read: {exc.strerror}") from None
    obj = parse_json(data, str(p))
    kind = obj.get("format") if isinstance(obj, dict) else None
    if kind == TOPOLOGY_FORMAT:
        return topology_from_dict(obj, str(p))
    if kind == PATTERN_FORMAT:
        return pattern_from_dict(obj, str(p))
    raise FormatError(
        f"{p}: unknown format {kind!r} (want {TOPOLOGY_FORMAT!r} or {PATTERN_FORMAT!r})"
    )


def dumps(obj: Topology | Pattern) -> str:
    """JSON text for a topology or a pattern."""
    data = topology_to_dict(obj) if isinstance(obj, Topology) else pattern_to_dict(obj)
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


class _Reader:
    """Typed field access that names the file and field in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, msg: str) -> FormatError:
        return FormatError(f"{self.source}: {msg}")

    def obj(self, value: Any, where: str, keys: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{where} must be an object")
        unknown = sorted(set(value) - keys)
        if unknown:
            raise self.fail(f"{where}: unknown key(s) {unknown}")
        return value

    def header(self, top: dict[str, Any], fmt: str) -> None:
        if top.get("format") != fmt:
            raise self.fail(f"format is {top.get('format')!r}, want {fmt!r}")
        if top.get("version") != VERSION:
            raise self.fail(
                f"unsupported {fmt} version {top.get('version')!r} (this sdnmpi reads {VERSION})"
            )

    def text(self, obj: dict[str, Any], key: str) -> str:
        value = obj.get(key)
        if not isinstance(value, str):
            raise self.fail(f"{key} must be a string, got {value!r}")
        return value

    def integer(self, obj: dict[str, Any], key: str, where: str) -> int:
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{where}.{key} must be an integer, got {str(value)[:60]}")
        if not -(2**63) <= value < 2**63:
            raise self.fail(f"{where}.{key} does not fit in 64 bits")
        return value

    def number(self, obj: dict[str, Any], key: str, where: str) -> float:
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"{where}.{key} must be a number, got {str(value)[:60]}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise self.fail(f"{where}.{key} must be a finite number")
        return number

    def flag(self, obj: dict[str, Any], key: str, where: str) -> bool:
        value = obj.get(key, True)
        if not isinstance(value, bool):
            raise self.fail(f"{where}.{key} must be true or false, got {value!r}")
        return value

    def optional(self, obj: dict[str, Any], key: str, typ: type, where: str) -> Any:
        value = obj.get(key)
        if value is not None and (not isinstance(value, typ) or isinstance(value, bool)):
            raise self.fail(f"{where}.{key} must be {typ.__name__} or null, got {value!r}")
        return value

    def items(self, obj: dict[str, Any], key: str) -> list[Any]:
        value = obj.get(key, [])
        if not isinstance(value, list):
            raise self.fail(f"{key} must be a list")
        return value

    def integers(self, obj: dict[str, Any], key: str, where: str) -> list[int]:
        value = obj.get(key)
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.fail(f"{where}.{key} must be a list of integers")
        return value

    def meta(self, obj: dict[str, Any]) -> dict[str, Any]:
        value = obj.get("meta", {})
        if not isinstance(value, dict):
            raise self.fail("meta must be an object")
        return value
