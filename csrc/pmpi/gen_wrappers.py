#!/usr/bin/env python3
"""Generate the PMPI wrappers of libsdnmpi.so from mpi_calls.spec.

Usage: gen_wrappers.py SPEC OUTPUT.c

Each wrapper is thin (the approach of LLNL's wrap.py and mpiP): under the
re-entry guard (a thread-local depth counter, so MPI calls made by the MPI
library or by the core inside a wrapper are not recorded twice) it fills a
``struct sdn_call`` with the arguments the spec classifies, calls the core's
``sdn_enter``, the ``PMPI_`` function and ``sdn_leave``.  The spec grammar is
described at the top of mpi_calls.spec.  Errors name the spec file and line and
exit with status 1.  Python 3 standard library only.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

CLASSES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # class: (required keys, optional keys)
    "send": (frozenset({"peer", "count", "type", "tag", "comm"}), frozenset({"request"})),
    "recv": (
        frozenset({"peer", "count", "type", "tag", "comm"}),
        frozenset({"request", "status"}),
    ),
    "sendrecv": (
        frozenset({"peer", "count", "type", "tag", "comm", "recv_peer", "recv_count", "recv_type"}),
        frozenset({"status"}),
    ),
    "coll": (
        frozenset({"comm"}),
        frozenset({"count", "type", "root", "inplace", "alt_count", "alt_type", "request"}),
    ),
    "collv": (
        frozenset({"comm", "counts", "type"}),
        frozenset({"count", "root", "request"}),
    ),
    "comm_new": (frozenset({"comm", "newcomm"}), frozenset()),
    "comm_free": (frozenset({"comm"}), frozenset()),
    "init": (frozenset(), frozenset()),
    "finalize": (frozenset(), frozenset()),
    "completion": (
        frozenset(),
        frozenset(
            {"flag", "requests", "nreq", "status", "statuses", "index", "outcount", "indices"}
        ),
    ),
}
COLLECTIVES = {
    "coll": frozenset(
        {
            "barrier",
            "bcast",
            "reduce",
            "allreduce",
            "allgather",
            "alltoall",
            "gather",
            "scatter",
            "reduce_scatter",
            "scan",
            "exscan",
        }
    ),
    "collv": frozenset({"alltoallv", "allgatherv", "gatherv", "scatterv", "reduce_scatter"}),
}
KIND_MACROS = {
    "send": "SDN_KIND_SEND",
    "recv": "SDN_KIND_RECV",
    "sendrecv": "SDN_KIND_SENDRECV",
    "coll": "SDN_KIND_COLL",
    "collv": "SDN_KIND_COLLV",
    "comm_new": "SDN_KIND_COMM_NEW",
    "comm_free": "SDN_KIND_COMM_FREE",
    "init": "SDN_KIND_INIT",
    "finalize": "SDN_KIND_FINALIZE",
    "completion": "SDN_KIND_COMPLETION",
}
# key -> C statement template filling struct sdn_call c ({} is the argument)
ASSIGN = {
    "peer": "c.peer = {};",
    "count": "c.count = {};",
    "type": "c.type = {};",
    "tag": "c.tag = {};",
    "comm": "c.comm = {};",
    "request": "c.request = {};",
    "root": "c.root = {}; c.has_root = 1;",
    "counts": "c.counts = {};",
    "recv_peer": "c.recv_peer = {};",
    "recv_count": "c.recv_count = {};",
    "recv_type": "c.recv_type = {};",
    "newcomm": "c.newcomm = {};",
    "flag": "c.flag = {};",
    "index": "c.index = {};",
    "outcount": "c.outcount = {};",
    "indices": "c.indices = {};",
}
_PROTO_RE = re.compile(r"^(MPI_[A-Za-z0-9_]+)\s*\((.*)\)\s*$")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARAM_RE = re.compile(r"^(?P<type>.*?)(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<arr>\[\])?$")


class SpecError(Exception):
    """A problem in the spec file; the message names the file and line."""


@dataclass(frozen=True)
class Param:
    ctype: str  # type without the name, arrays written as pointers
    name: str

    def decl(self) -> str:
        sep = "" if self.ctype.endswith("*") else " "
        return f"{self.ctype}{sep}{self.name}"


@dataclass
class Entry:
    name: str
    params: list[Param]
    line: int
    klass: str = ""
    collective: str = ""
    keys: dict[str, str] = field(default_factory=dict)
    via: str = ""  # a core function called instead of the PMPI_ one (same arguments)


def parse_params(text: str, where: str) -> list[Param]:
    """Parse a C parameter list (``void`` or comma separated ``type name``)."""
    text = text.strip()
    if text in ("", "void"):
        return []
    params = []
    for raw in text.split(","):
        m = _PARAM_RE.match(raw.strip())
        if not m or not m.group("type").strip():
            raise SpecError(f"{where}: cannot parse parameter {raw.strip()!r}")
        ctype = " ".join(m.group("type").split())
        if m.group("arr"):
            ctype += " *"
        params.append(Param(ctype.replace(" *", " *").rstrip(), m.group("name")))
    names = [p.name for p in params]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SpecError(f"{where}: duplicate parameter name(s) {sorted(dup)}")
    return params


def parse_spec(text: str, filename: str = "mpi_calls.spec") -> list[Entry]:
    """Parse the spec text into entries; raise :class:`SpecError` on any problem."""
    entries: list[Entry] = []
    pending: Entry | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        where = f"{filename}:{lineno}"
        if not line.strip():
            continue
        if not line[0].isspace():
            if pending is not None:
                raise SpecError(f"{filename}:{pending.line}: {pending.name} has no class line")
            pending = _prototype(line, where)
            if any(e.name == pending.name for e in entries):
                raise SpecError(f"{where}: {pending.name} is listed twice")
            continue
        if pending is None:
            raise SpecError(f"{where}: class line without a prototype before it")
        _classify(pending, line.split(), where)
        entries.append(pending)
        pending = None
    if pending is not None:
        raise SpecError(f"{filename}:{pending.line}: {pending.name} has no class line")
    if not entries:
        raise SpecError(f"{filename}: no functions")
    return entries


def _prototype(line: str, where: str) -> Entry:
    m = _PROTO_RE.match(line.strip())
    if not m:
        raise SpecError(f"{where}: expected a prototype 'MPI_Name(type arg, ...)', got {line!r}")
    lineno = int(where.rsplit(":", 1)[1])
    return Entry(m.group(1), parse_params(m.group(2), where), lineno)


def _classify(entry: Entry, words: list[str], where: str) -> None:
    klass = words[0]
    if klass not in CLASSES:
        raise SpecError(f"{where}: unknown class {klass!r} (valid: {', '.join(CLASSES)})")
    entry.klass = klass
    rest = words[1:]
    if klass in COLLECTIVES:
        if not rest or "=" in rest[0]:
            raise SpecError(f"{where}: class {klass} needs a collective name")
        if rest[0] not in COLLECTIVES[klass]:
            valid = ", ".join(sorted(COLLECTIVES[klass]))
            raise SpecError(f"{where}: unknown {klass} collective {rest[0]!r} (valid: {valid})")
        entry.collective, rest = rest[0], rest[1:]
    names = {p.name for p in entry.params}
    for word in rest:
        key, eq, arg = word.partition("=")
        if key == "via":
            if not _IDENT_RE.fullmatch(arg) or entry.via:
                raise SpecError(f"{where}: via needs one C function name, got {word!r}")
            entry.via = arg
            continue
        if not eq or not arg:
            raise SpecError(f"{where}: expected key=arg, got {word!r}")
        required, optional = CLASSES[klass]
        if key not in required | optional:
            valid = ", ".join(sorted(required | optional)) or "none"
            raise SpecError(f"{where}: key {key!r} not valid for class {klass} (valid: {valid})")
        if arg.lstrip("*") not in names:
            raise SpecError(f"{where}: {key}={arg}: {entry.name} has no parameter {arg!r}")
        if key in entry.keys:
            raise SpecError(f"{where}: key {key!r} given twice")
        entry.keys[key] = arg
    missing = sorted(CLASSES[klass][0] - set(entry.keys))
    if missing:
        raise SpecError(f"{where}: class {klass} needs key(s) {missing}")
    if "inplace" in entry.keys and not {"alt_count", "alt_type"} <= set(entry.keys):
        raise SpecError(f"{where}: inplace needs alt_count and alt_type")


# -- code generation ----------------------------------------------------------------

HEADER = """\
/* Generated by csrc/pmpi/gen_wrappers.py from {spec}: do not edit. */
#include <stddef.h>
#include <mpi.h>
#include "core.h"

#define SDN_EXPORT __attribute__((visibility("default")))
"""


def wrapper(e: Entry) -> str:
    """The C text of one wrapper."""
    decl = ", ".join(p.decl() for p in e.params) or "void"
    args = ", ".join(p.name for p in e.params)
    coll = f'"{e.collective}"' if e.collective else "NULL"
    body = [f'    sdn_call_init(&c, "{e.name}", {KIND_MACROS[e.klass]}, {coll});']
    if "status" in e.keys:
        st = e.keys["status"]
        body.append(f"    if ({st} == MPI_STATUS_IGNORE)")
        body.append(f"        {st} = &c.local_status;")
        body.append(f"    c.status = {st};")
    if "requests" in e.keys:
        body.append(f"    c.requests = {e.keys['requests']};")
        body.append(f"    c.nreq = {e.keys.get('nreq', '1')};")
    if "statuses" in e.keys:
        st, n = e.keys["statuses"], e.keys.get("nreq", "1")
        body.append(f"    if ({st} == MPI_STATUSES_IGNORE) {{")
        body.append(f"        MPI_Status *sdn_scratch = sdn_status_scratch({n});")
        body.append("        if (sdn_scratch)")
        body.append(f"            {st} = sdn_scratch;")
        body.append("    }")
        body.append(f"    c.statuses = {st} == MPI_STATUSES_IGNORE ? NULL : {st};")
    for key, arg in e.keys.items():
        if key in ASSIGN and not (key in ("count", "type") and "inplace" in e.keys):
            body.append("    " + ASSIGN[key].format(arg))
    if "inplace" in e.keys:
        k = e.keys
        body.append(f"    if ({k['inplace']} == MPI_IN_PLACE) {{")
        body.append(f"        c.count = {k['alt_count']}; c.type = {k['alt_type']};")
        body.append("    } else {")
        body.append(f"        c.count = {k['count']}; c.type = {k['type']};")
        body.append("    }")
    if e.klass == "comm_free":
        body = [body[0], f"    c.comm = *{e.keys['comm']};"]
    lines = [
        f"SDN_EXPORT int {e.name}({decl})",
        "{",
        "    struct sdn_call c;",
        "    int rc;",
        "",
        "    if (sdn_depth > 0)",
        f"        return P{e.name}({args});",
        "    sdn_depth++;",
        *body,
        "    sdn_enter(&c);",
        f"    rc = {e.via or 'P' + e.name}({args});",
        "    sdn_leave(&c, rc);",
        "    sdn_depth--;",
        "    return rc;",
        "}",
        "",
    ]
    return "\n".join(lines)


def generate(entries: list[Entry], spec_name: str) -> str:
    """The whole wrappers.c text."""
    parts = [HEADER.format(spec=spec_name)]
    parts += [wrapper(e) for e in entries]
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: gen_wrappers.py SPEC OUTPUT.c", file=sys.stderr)
        return 2
    spec, out = Path(argv[1]), Path(argv[2])
    try:
        text = spec.read_text(encoding="utf-8")
        entries = parse_spec(text, spec.name)
    except OSError as exc:
        print(f"gen_wrappers: {spec}: {exc.strerror}", file=sys.stderr)
        return 1
    except SpecError as exc:
        print(f"gen_wrappers: {exc}", file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(generate(entries, spec.name), encoding="utf-8")
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
