"""The ``sdnmpi-replay`` text format (version 1): patterns for the MPI replayer.

``sdnmpi-replay`` (csrc/replay) executes a rank-level pattern phase by phase with
real MPI calls.  Its input is a line-oriented text that C parses without a JSON
library; docs/replay-format.md defines it once, and csrc/replay/format.c is the
C parser.  Both are tested against the same vectors (tests/vectors/replay)::

    sdnmpi-replay 1
    pattern NPROCS NPHASES NAME
    phase REPEAT NCELLS LABEL
    SRC DST SIZE_BYTES MESSAGES          (NCELLS lines, sorted by SRC, DST)

Texts are percent-encoded UTF-8 (``-`` is the empty text).  The format keeps the
name, ``nprocs`` and per phase the label, ``repeat`` and the cells; it drops
``meta``, NetSA annotations and message-size histograms (:func:`replayable`).
Host-level patterns cannot be replayed.  The reader checks everything and names
the file and line of the first problem, with the same messages as the C parser.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.errors import FormatError, PatternError

FORMAT = "sdnmpi-replay"
VERSION = 1
SUFFIX = ".replay"
MAX_LINE_BYTES = 4096
MAX_FILE_BYTES = 1 << 30
MAX_TEXT_BYTES = 1024
MAX_NPROCS = 1 << 20
MAX_PHASES = 1 << 20
MAX_REPEAT = 2**31 - 1
MAX_MESSAGES = 2**31 - 1
MAX_SIZE_BYTES = 2**63 - 1
MAX_SHOWN = 32  # characters of a bad number quoted in an error

_HEADER = f"{FORMAT} {VERSION}"
_PLAIN = frozenset(range(0x21, 0x7F)) - {ord("%")}
_DIGITS = re.compile(r"0|[1-9][0-9]*")
_HEX = frozenset(b"0123456789abcdefABCDEF")


# -- texts ----------------------------------------------------------------------------


def encode_text(text: str) -> str:
    """The field for a text: percent-encoded UTF-8, ``-`` for the empty text.

    >>> encode_text("step 1/4: 100%"), encode_text(""), encode_text("-")
    ('step%201/4:%20100%25', '-', '%2D')
    """
    if not text:
        return "-"
    raw = text.encode()
    field = "".join(chr(b) if b in _PLAIN else f"%{b:02X}" for b in raw)
    return "%2D" if field == "-" else field


def decode_text(field: str, what: str = "text") -> str:
    """The text of a field; :class:`ValueError` names ``what`` and the problem.

    >>> decode_text("step%201/4"), decode_text("-"), decode_text("%2d")
    ('step 1/4', '', '-')
    """
    if field == "-":
        return ""
    out = bytearray()
    data = field.encode("ascii")
    i = 0
    while i < len(data):
        if data[i] != ord("%"):
            out.append(data[i])
            i += 1
            continue
        if i + 2 >= len(data) or data[i + 1] not in _HEX or data[i + 2] not in _HEX:
            raise ValueError(f"{what}: bad percent escape")
        out.append(int(data[i + 1 : i + 3], 16))
        i += 3
    return _checked_text(bytes(out), what)


def _checked_text(raw: bytes, what: str) -> str:
    if len(raw) > MAX_TEXT_BYTES:
        raise ValueError(f"{what}: longer than {MAX_TEXT_BYTES} bytes")
    if 0 in raw:
        raise ValueError(f"{what}: contains NUL")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what}: not valid UTF-8") from None


def shorten(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes at a character boundary.

    >>> shorten("aé", 2)
    'a'
    """
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", errors="ignore")


# -- writing --------------------------------------------------------------------------


def replayable(pattern: Pattern) -> Pattern:
    """The pattern as the format keeps it (what :func:`loads` of :func:`dumps` gives).

    Raises :class:`PatternError` for a pattern that cannot be replayed: host-level,
    or beyond the format's limits.
    """
    _check_replayable(pattern)
    return Pattern(
        shorten(pattern.name),
        pattern.nprocs,
        tuple(_replayable_phase(pattern.name, ph) for ph in pattern.phases),
    )


def _check_replayable(pattern: Pattern) -> None:
    where = f"pattern {pattern.name!r}"
    if pattern.hosts is not None:
        raise PatternError(
            f"{where} is host-level ({pattern.nprocs} hosts): sdnmpi-replay runs MPI ranks, "
            "so write the rank-level pattern (convert without --topology)"
        )
    if "\0" in pattern.name:
        raise PatternError(f"{where}: a NUL character in a name cannot be replayed")
    if pattern.nprocs > MAX_NPROCS:
        raise PatternError(
            f"{where}: {pattern.nprocs} ranks, the replay format allows {MAX_NPROCS}"
        )
    if len(pattern.phases) > MAX_PHASES:
        raise PatternError(
            f"{where}: {len(pattern.phases)} phases, the replay format allows {MAX_PHASES}"
        )


def _replayable_phase(name: str, phase: Phase) -> Phase:
    where = f"pattern {name!r}, phase {phase.label!r}"
    if "\0" in phase.label:
        raise PatternError(f"{where}: a NUL character in a label cannot be replayed")
    if phase.repeat > MAX_REPEAT:
        raise PatternError(f"{where}: repeat {phase.repeat} exceeds {MAX_REPEAT}")
    keep = (phase.messages > 0) | (phase.size_bytes > 0)
    messages = np.maximum(phase.messages[keep], 1)
    if messages.size and int(messages.max()) > MAX_MESSAGES:
        raise PatternError(
            f"{where}: a cell of {int(messages.max())} messages exceeds {MAX_MESSAGES}"
        )
    if sum(phase.size_bytes[keep].tolist()) > MAX_SIZE_BYTES:
        raise PatternError(f"{where}: total size_bytes exceeds {MAX_SIZE_BYTES}")
    return Phase.from_arrays(
        shorten(phase.label),
        phase.src[keep],
        phase.dst[keep],
        phase.size_bytes[keep],
        messages,
        repeat=phase.repeat,
    )


def dumps(pattern: Pattern) -> str:
    """The replay text of a rank-level pattern (see :func:`replayable`)."""
    return "".join(_lines(replayable(pattern)))


def _lines(pattern: Pattern) -> Iterator[str]:
    yield f"{_HEADER}\n"
    yield f"pattern {pattern.nprocs} {len(pattern.phases)} {encode_text(pattern.name)}\n"
    for ph in pattern.phases:
        yield f"phase {ph.repeat} {len(ph)} {encode_text(ph.label)}\n"
        cols = zip(
            ph.src.tolist(),
            ph.dst.tolist(),
            ph.size_bytes.tolist(),
            ph.messages.tolist(),
            strict=True,
        )
        yield "".join(f"{s} {d} {b} {m}\n" for s, d, b, m in cols)


def save_replay(pattern: Pattern, path: str | Path) -> None:
    """Write a rank-level pattern as a replay file."""
    text = dumps(pattern)
    try:
        Path(path).write_text(text, encoding="ascii")
    except OSError as exc:
        raise FormatError(f"{path}: cannot write: {exc.strerror}") from None


# -- reading --------------------------------------------------------------------------


def load_replay(path: str | Path) -> Pattern:
    """Read a replay file; errors name the file and line."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise FormatError(f"{p}: cannot read: {exc.strerror}") from None
    pattern = loads(data, str(p))
    return pattern.replace(meta={"format": FORMAT, "source": str(p)})


def loads(data: bytes | str, source: str = "<replay>") -> Pattern:
    """Parse replay text (bytes, or a str of ASCII); errors name ``source`` and the line."""
    raw = data.encode("utf-8", errors="surrogateescape") if isinstance(data, str) else data
    if len(raw) > MAX_FILE_BYTES:
        raise FormatError(f"{source}:1: larger than {MAX_FILE_BYTES} bytes")
    return _Parser(raw, source).parse()


class _Parser:
    """One pass over the lines, in the order docs/replay-format.md gives the checks."""

    def __init__(self, raw: bytes, source: str) -> None:
        self.source = source
        self.lines = raw.split(b"\n")
        self.complete = self.lines[-1] == b""  # the text ended with LF (or was empty)
        if self.complete:
            self.lines.pop()
        self.lineno = 0

    def fail(self, msg: str, line: int | None = None) -> FormatError:
        return FormatError(f"{self.source}:{self.lineno if line is None else line}: {msg}")

    def next_fields(self, want: str) -> list[str]:
        """The fields of the next line, checked for bytes and spacing."""
        if self.lineno >= len(self.lines):
            raise self.fail(f"unexpected end of file: {want}", len(self.lines) + 1)
        line = self.lines[self.lineno]
        self.lineno += 1
        if self.lineno == len(self.lines) and not self.complete:
            raise self.fail("line does not end with a newline")
        if len(line) > MAX_LINE_BYTES:
            raise self.fail(f"line longer than {MAX_LINE_BYTES} bytes")
        for b in line:
            if not 0x20 <= b <= 0x7E:
                raise self.fail(
                    f"byte 0x{b:02x} not allowed (printable ASCII and single spaces only)"
                )
        fields = line.decode("ascii").split(" ")
        if "" in fields:
            raise self.fail("empty field (fields are separated by single spaces)")
        return fields

    def integer(self, name: str, text: str, lo: int, hi: int) -> int:
        if not _DIGITS.fullmatch(text):
            raise self.fail(f"{name}: '{_shown(text)}' is not a decimal integer")
        value = int(text) if len(text) <= 20 else hi + 1
        if not lo <= value <= hi:
            raise self.fail(f"{name}: {_shown(text)} is out of range [{lo}, {hi}]")
        return value

    def text(self, name: str, field: str) -> str:
        try:
            return decode_text(field, name)
        except ValueError as exc:
            raise self.fail(str(exc)) from None

    def parse(self) -> Pattern:
        self.header()
        f = self.next_fields("want the pattern line")
        if len(f) != 4 or f[0] != "pattern":
            raise self.fail('want "pattern NPROCS NPHASES NAME"')
        nprocs = self.integer("nprocs", f[1], 1, MAX_NPROCS)
        nphases = self.integer("nphases", f[2], 0, MAX_PHASES)
        name = self.text("name", f[3])
        phases = tuple(self.phase(nprocs, i, nphases) for i in range(nphases))
        if self.lineno < len(self.lines):
            self.lineno += 1
            raise self.fail("trailing data after the last phase")
        try:
            return Pattern(name, nprocs, phases)
        except PatternError as exc:  # pragma: no cover - the checks above cover Pattern's
            raise FormatError(f"{self.source}: {exc}") from None

    def header(self) -> None:
        f = self.next_fields("want the header")
        if f == [FORMAT, str(VERSION)]:
            return
        if len(f) == 2 and f[0] == FORMAT and _DIGITS.fullmatch(f[1]):
            raise self.fail(f"unsupported version {_shown(f[1])} (this reader reads {VERSION})")
        raise self.fail(f'not an sdnmpi-replay file (want "{_HEADER}")')

    def phase(self, nprocs: int, index: int, nphases: int) -> Phase:
        f = self.next_fields(f"want phase {index + 1} of {nphases}")
        if len(f) != 4 or f[0] != "phase":
            raise self.fail('want "phase REPEAT NCELLS LABEL"')
        repeat = self.integer("repeat", f[1], 1, MAX_REPEAT)
        ncells = self.integer("ncells", f[2], 0, nprocs * nprocs)
        label = self.text("label", f[3])
        cells: list[tuple[int, int, int, int]] = []
        previous = (-1, -1)
        total = 0
        for j in range(ncells):
            f = self.next_fields(f"phase {index + 1} declares {ncells} cells, got {j}")
            if len(f) != 4:
                raise self.fail('want "SRC DST SIZE_BYTES MESSAGES"')
            cell = (
                self.integer("src", f[0], 0, nprocs - 1),
                self.integer("dst", f[1], 0, nprocs - 1),
                self.integer("size_bytes", f[2], 0, MAX_SIZE_BYTES),
                self.integer("messages", f[3], 1, MAX_MESSAGES),
            )
            if cell[:2] <= previous:
                raise self.fail(
                    f"cell ({cell[0]}, {cell[1]}) is not after ({previous[0]}, {previous[1]}) "
                    "(cells are sorted by src, then dst, each pair once)"
                )
            total += cell[2]
            if total > MAX_SIZE_BYTES:
                raise self.fail(f"phase total size_bytes exceeds {MAX_SIZE_BYTES}")
            previous = cell[:2]
            cells.append(cell)
        cols = np.array(cells, dtype=np.int64).reshape(-1, 4).T
        return Phase.from_arrays(label, cols[0], cols[1], cols[2], cols[3], repeat=repeat)


def _shown(text: str) -> str:
    """A number's text as errors quote it: at most 32 characters, then ``...``."""
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."
