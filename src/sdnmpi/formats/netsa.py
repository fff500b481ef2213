"""NetSA's XML traffic-matrix database (Communication Pattern Database).

::

    <traffic_matrix>
      <matrix id="100" name="MPI_Allreduce">
        <src_host>i9
          <dst_host>i1
            <num_bytes>42752734</num_bytes>
            <num_packets>35346</num_packets>
            <bandwidth intensive="true"></bandwidth>
          </dst_host>
          <dst_host>i2
            <num_bytes>9394</num_bytes>
            <num_packets>81</num_packets>
            <latency max_num_hops="2"></latency>
          </dst_host>
        </src_host>
      </matrix>
    </traffic_matrix>

Host names are the text before the first child element.  A file holds one or
more matrices; each reads as a one-phase host-level :class:`Pattern` whose
``meta["netsa_id"]`` is the matrix id.  Parsing uses defusedxml (no DTDs, no
entities) and rejects unknown elements and attributes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from xml.etree.ElementTree import Element, SubElement, indent, tostring

from sdnmpi.core.pattern import MAX_TOTAL, Cell, Pattern, Phase
from sdnmpi.errors import FormatError, SdnMpiError
from sdnmpi.formats import safexml

_CELL_TAGS = {"num_bytes", "num_packets", "bandwidth", "latency"}
#: ASCII digits only ("²".isdigit() is true, int("²") fails), at most 400 of them
#: (no conversion near Python's 4300-digit limit; MAX_TOTAL is checked after).
_DIGITS = re.compile(r"[0-9]{1,400}")


def load_netsa(path: str | Path) -> list[Pattern]:
    """Read every matrix of a NetSA XML file."""
    p = Path(path)
    text = safexml.read(p)
    return parse_netsa(text, source=str(p))


def parse_netsa(text: str | bytes, *, source: str = "<netsa>") -> list[Pattern]:
    """Parse NetSA XML text into host-level patterns, one per ``<matrix>``."""
    root = safexml.parse(text, source)
    if root.tag != "traffic_matrix":
        raise FormatError(f"{source}: root element is <{root.tag}>, not <traffic_matrix>")
    patterns: list[Pattern] = []
    ids: set[str] = set()
    for child in root:
        _expect(child, "matrix", f"{source}: <traffic_matrix>")
        try:
            pattern = _matrix(child, source)
        except FormatError:
            raise
        except SdnMpiError as exc:
            raise FormatError(f"{source}: {exc}") from None
        if pattern.meta["netsa_id"] in ids:
            raise FormatError(f"{source}: duplicate matrix id {pattern.meta['netsa_id']!r}")
        ids.add(pattern.meta["netsa_id"])
        patterns.append(pattern)
    if not patterns:
        raise FormatError(f"{source}: no <matrix> in <traffic_matrix>")
    return patterns


def _expect(elem: Element, tag: str, where: str) -> None:
    if elem.tag != tag:
        raise FormatError(f"{where}: unexpected element <{elem.tag}> (want <{tag}>)")


def _attrs(elem: Element, allowed: set[str], where: str) -> None:
    extra = sorted(set(elem.attrib) - allowed)
    if extra:
        raise FormatError(f"{where}: unknown attribute(s) {extra} on <{elem.tag}>")


def _matrix(elem: Element, source: str) -> Pattern:
    mid = elem.get("id")
    where = f"{source}: matrix {mid!r}"
    _attrs(elem, {"id", "name"}, where)
    if not mid:
        raise FormatError(f"{source}: <matrix> without id")
    hosts: dict[str, int] = {}
    cells: list[Cell] = []
    seen: set[tuple[str, str]] = set()
    for src_elem in elem:
        _expect(src_elem, "src_host", where)
        src = _host_name(src_elem, where)
        for dst_elem in src_elem:
            _expect(dst_elem, "dst_host", f"{where}, src_host {src!r}")
            dst = _host_name(dst_elem, f"{where}, src_host {src!r}")
            if (src, dst) in seen:
                raise FormatError(f"{where}: duplicate cell {src} -> {dst}")
            seen.add((src, dst))
            for h in (src, dst):
                hosts.setdefault(h, len(hosts))
            cells.append(_cell(dst_elem, hosts[src], hosts[dst], f"{where}, cell {src} -> {dst}"))
    names = tuple(hosts)
    if not names:
        raise FormatError(f"{where}: empty matrix")
    phase = Phase.from_cells("traffic matrix", cells)
    name = elem.get("name") or f"netsa-{mid}"
    return Pattern(name, len(names), (phase,), names, {"netsa_id": mid, "format": "netsa"})


def _host_name(elem: Element, where: str) -> str:
    _attrs(elem, set(), where)
    name = (elem.text or "").strip()
    if not name:
        raise FormatError(f"{where}: <{elem.tag}> without a host name")
    return name


def _cell(elem: Element, src: int, dst: int, where: str) -> Cell:
    values: dict[str, Element] = {}
    for child in elem:
        if child.tag not in _CELL_TAGS:
            raise FormatError(f"{where}: unexpected element <{child.tag}>")
        if child.tag in values:
            raise FormatError(f"{where}: <{child.tag}> given twice")
        values[child.tag] = child
    for tag in ("num_bytes", "num_packets"):
        if tag not in values:
            raise FormatError(f"{where}: missing <{tag}>")
    nbytes = _count(values["num_bytes"], where)
    npackets = _count(values["num_packets"], where)
    kind, hops = _annotation(values, where)
    return Cell(src, dst, nbytes, npackets, kind, hops)


def _count(elem: Element, where: str) -> int:
    _attrs(elem, set(), where)
    text = (elem.text or "").strip()
    if text.startswith("-") and _DIGITS.fullmatch(text[1:]):
        raise FormatError(f"{where}: negative <{elem.tag}> {text[:40]}")
    if not _DIGITS.fullmatch(text):
        raise FormatError(f"{where}: <{elem.tag}> is {text[:40]!r}, not an integer")
    value = int(text)
    if value > MAX_TOTAL:
        raise FormatError(f"{where}: <{elem.tag}> {text[:40]} does not fit in 64 bits")
    return value


def _annotation(values: dict[str, Element], where: str) -> tuple[Any, int]:
    bw, lat = values.get("bandwidth"), values.get("latency")
    if bw is not None and lat is not None:
        raise FormatError(f"{where}: both <bandwidth> and <latency> annotations")
    if bw is not None:
        _attrs(bw, {"intensive"}, where)
        flag = bw.get("intensive", "true").strip().lower()
        if flag not in ("true", "false"):
            raise FormatError(f"{where}: <bandwidth intensive={flag!r}> (want true or false)")
        return ("bandwidth" if flag == "true" else None), 0
    if lat is not None:
        _attrs(lat, {"max_num_hops"}, where)
        text = lat.get("max_num_hops", "0")
        if not _DIGITS.fullmatch(text) or len(text) > 6:
            raise FormatError(f"{where}: max_num_hops={text!r} is not a non-negative integer")
        return "latency", int(text)
    return None, 0


# -- writing ------------------------------------------------------------------------


def dump_netsa(patterns: list[Pattern]) -> str:
    """NetSA XML for host-level patterns (each pattern's total matrix, one ``<matrix>``)."""
    root = Element("traffic_matrix")
    for i, pattern in enumerate(patterns):
        if pattern.hosts is None:
            raise FormatError(
                f"pattern {pattern.name!r} is rank-level: "
                "aggregate it to hosts with a placement first"
            )
        mid = str(pattern.meta.get("netsa_id", 100 + i))
        matrix = SubElement(root, "matrix", {"id": mid, "name": pattern.name})
        _write_cells(matrix, pattern)
    indent(root)
    for depth, tag in ((3, "src_host"), (4, "dst_host")):
        for elem in root.iter(tag):
            elem.text = f"{(elem.text or '').strip()}\n{'  ' * depth}"
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + tostring(root, encoding="unicode") + "\n"


def _write_cells(matrix: Element, pattern: Pattern) -> None:
    assert pattern.hosts is not None
    current: Element | None = None
    current_src = -1
    for cell in pattern.total_matrix().cells():
        if cell.src != current_src:
            current = SubElement(matrix, "src_host")
            current.text = pattern.hosts[cell.src]
            current_src = cell.src
        assert current is not None
        dst = SubElement(current, "dst_host")
        dst.text = pattern.hosts[cell.dst]
        SubElement(dst, "num_bytes").text = str(cell.size_bytes)
        SubElement(dst, "num_packets").text = str(cell.messages)
        if cell.kind == "bandwidth":
            SubElement(dst, "bandwidth", {"intensive": "true"})
        elif cell.kind == "latency":
            SubElement(dst, "latency", {"max_num_hops": str(cell.max_hops)})
