"""Patterns that arrive as bytes: parse, canonicalize, fingerprint.

A request carries a pattern file's name and contents; the name's suffix picks
the parser (sdnmpi JSON ``.json``, NetSA XML ``.xml`` with an optional
``#ID``, pfprof ``.tar.gz``/``.tgz``/``.tar``).  JSON is parsed from memory; the
other parsers read files, so the bytes go to a private temporary directory
first.  Whatever the input, the stored form is canonical sdnmpi JSON
(:func:`sdnmpi.formats.native.dumps`) and its SHA-256.  A pattern given by name
that is not stored is built from a spec (``cg:nprocs=8``) and never read from
the manager's file system.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sdnmpi import catalog
from sdnmpi.core import collectives, workloads
from sdnmpi.core.miniapps import MINIAPPS
from sdnmpi.core.pattern import CellBudgetError, Pattern, cell_budget
from sdnmpi.errors import SdnMpiError
from sdnmpi.formats import native
from sdnmpi.manager.model import MAX_PATTERN_BYTES, Kind, ManagerError, invalid, not_found

#: Cells (sender-receiver pairs, summed over the phases) of one pattern the manager
#: builds, parses or stores.  Building a pattern holds the manager's lock, and time
#: and memory grow with its cells: an all-to-all of 1536 ranks (2.4 million cells)
#: held the lock 7.3 s, one of 4096 needed over 3 GiB.  2^19 cells is an
#: all-to-all of 724 ranks, or a stencil or CG job of tens of thousands.
MAX_PATTERN_CELLS = 1 << 19
#: Ranks of a built-in spec the manager expands (some expansions hold a phase of
#: nprocs^2 cells in memory before the cell budget sees it).
MAX_SPEC_NPROCS = 4096

_SUFFIXES = (".json", ".xml", ".tar.gz", ".tgz", ".tar")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def canonical(pattern: Pattern) -> bytes:
    """The stored form of a pattern: sdnmpi JSON bytes (RESOURCE_EXHAUSTED beyond
    :data:`MAX_PATTERN_BYTES`)."""
    data = native.dumps(pattern).encode()
    if len(data) > MAX_PATTERN_BYTES:
        raise ManagerError(
            Kind.RESOURCE_EXHAUSTED,
            f"pattern {pattern.name!r}: {len(data)} bytes stored, more than {MAX_PATTERN_BYTES}",
        )
    return data


@contextmanager
def bounded(what: str) -> Iterator[None]:
    """Build or parse under :data:`MAX_PATTERN_CELLS`; RESOURCE_EXHAUSTED past it."""
    with cell_budget(MAX_PATTERN_CELLS) as budget:
        try:
            yield
        except SdnMpiError as exc:
            if not budget.exceeded:
                raise
            raise ManagerError(
                Kind.RESOURCE_EXHAUSTED, f"{what}: {CellBudgetError(budget.limit)}"
            ) from exc


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``.

    >>> sha256(b"")[:12]
    'e3b0c44298fc'
    """
    return hashlib.sha256(data).hexdigest()


def from_json(data: bytes, source: str) -> Pattern:
    """A pattern from stored sdnmpi JSON bytes."""
    try:
        with bounded(source):
            return native.pattern_from_dict(native.parse_json(data, source), source)
    except ManagerError:
        raise
    except SdnMpiError as exc:
        raise invalid(str(exc)) from None


def decode(filename: str, data: bytes) -> Pattern:
    """Parse a pattern file's bytes; INVALID_ARGUMENT with the parser's message if bad."""
    base, _, fragment = filename.partition("#")
    name = _safe_name(base)
    if len(data) > MAX_PATTERN_BYTES:
        raise invalid(f"pattern file {name}: {len(data)} bytes, more than {MAX_PATTERN_BYTES}")
    if name.lower().endswith(".json"):
        return from_json(data, name)
    with tempfile.TemporaryDirectory(prefix="sdnmpi-pattern-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        spec = f"{path}#{fragment}" if fragment else str(path)
        try:
            with bounded(f"pattern file {name}"):
                return catalog.load_pattern(spec)
        except ManagerError:
            raise
        except SdnMpiError as exc:
            raise invalid(one_line(str(exc).replace(str(path), name))) from None


def one_line(text: str) -> str:
    """A parser's message on one line.

    >>> one_line("bad file:\\n- reason one\\n- reason two")
    'bad file: - reason one; - reason two'
    """
    head, *rest = [t.strip() for t in text.splitlines() if t.strip()] or [""]
    return " ".join([head, "; ".join(rest)]).strip()


def _safe_name(filename: str) -> str:
    """The file's base name with unsafe characters replaced; its suffix must be known."""
    name = _UNSAFE.sub("_", Path(filename).name)[:200]
    if not name or name.startswith(".") or not name.lower().endswith(_SUFFIXES):
        raise invalid(
            f"pattern file name {filename!r}: want a name ending in {', '.join(_SUFFIXES)}"
        )
    return name


def build_spec(spec: str, max_nprocs: int) -> Pattern:
    """A built-in pattern (collective or mini-app spec) of at most ``max_nprocs`` ranks.

    NOT_FOUND if ``spec`` names no collective or mini-app; INVALID_ARGUMENT if its
    parameters are wrong (checked before anything is built: a spec is untrusted).
    """
    try:
        name, values = workloads.parse_spec(spec)
    except SdnMpiError as exc:
        raise not_found(f"unknown pattern {spec!r}: not stored, and not a spec ({exc})") from None
    if name not in collectives.COLLECTIVES and name not in MINIAPPS:
        raise not_found(f"unknown pattern {spec!r}: not stored, and not a collective or mini-app")
    nprocs = values.get("nprocs", "")
    if not nprocs.isdigit() or int(nprocs) > max_nprocs:
        raise invalid(f"pattern spec {spec!r}: nprocs must be given and at most {max_nprocs}")
    if int(nprocs) > MAX_SPEC_NPROCS:
        raise ManagerError(
            Kind.RESOURCE_EXHAUSTED,
            f"pattern spec {spec!r}: the manager expands specs of at most {MAX_SPEC_NPROCS} "
            "ranks; give the job a recorded pattern file (sdnmpi pattern record)",
        )
    try:
        with bounded(f"pattern spec {spec!r}"):
            return workloads.build(spec)
    except ManagerError:
        raise
    except SdnMpiError as exc:
        raise invalid(f"pattern spec {spec!r}: {exc}") from None
