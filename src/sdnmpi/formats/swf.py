"""The Standard Workload Format (SWF) of the Parallel Workloads Archive.

An SWF log is a text file with one job per line and 18 whitespace-separated
numeric fields (Chapin et al., Benchmarks and standards for the evaluation of
parallel job schedulers, JSSPP 1999; Feitelson, Tsafrir and Krakov, Experience
with using the Parallel Workloads Archive, JPDC 2014).  ``-1`` marks a value the
log does not have.  Lines starting with ``;`` are comments; a comment of the form
``; Key: value`` is a header field (``MaxNodes``, ``MaxProcs``, ``UnixStartTime``...).

The fields, in order: job number, submit time (s), wait time (s), run time (s),
allocated processors, average CPU time used (s), used memory (KB), requested
processors, requested time (s), requested memory (KB), status, user, group,
executable (application) number, queue, partition, preceding job, think time (s).

>>> log = parse_swf("; MaxProcs: 64\\n1 0 5 100 8 -1 -1 8 200 -1 1 3 1 -1 1 -1 -1 -1\\n")
>>> log.header["MaxProcs"], log.records[0].run_s, log.records[0].procs
('64', 100.0, 8)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from sdnmpi.errors import FormatError

#: Fields per job line.
NFIELDS = 18
#: Job lines read from one log at most (the largest archive logs hold a few million).
MAX_RECORDS = 10_000_000


@dataclass(frozen=True)
class SwfRecord:
    """One job line; ``-1`` where the log does not know the value."""

    job_id: int
    submit_s: float
    wait_s: float
    run_s: float
    alloc_procs: int
    avg_cpu_s: float
    used_mem_kb: float
    req_procs: int
    req_time_s: float
    req_mem_kb: float
    status: int
    user: int
    group: int
    app: int
    queue: int
    partition: int
    preceding_job: int
    think_s: float

    @property
    def procs(self) -> int:
        """Processors the job ran on: allocated, else requested (-1 if neither)."""
        return self.alloc_procs if self.alloc_procs > 0 else self.req_procs


#: Which fields are integers (the others may carry a fraction).
_INT_FIELDS = frozenset(f.name for f in fields(SwfRecord) if f.type in ("int", int))
_NAMES = tuple(f.name for f in fields(SwfRecord))


@dataclass(frozen=True)
class SwfLog:
    """A parsed log: its header fields (``; Key: value``) and its job lines in order."""

    header: dict[str, str]
    records: tuple[SwfRecord, ...]


def parse_swf(text: str, *, source: str = "<swf>") -> SwfLog:
    """Parse SWF text; a malformed line is a :class:`FormatError` naming its line."""
    header: dict[str, str] = {}
    records: list[SwfRecord] = []
    seen: dict[int, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(";"):
            key, colon, value = line[1:].partition(":")
            if colon and key.strip() and " " not in key.strip():
                header[key.strip()] = value.strip()
            continue
        rec = _record(line, source, lineno)
        if rec.job_id in seen:
            raise FormatError(
                f"{source}:{lineno}: job {rec.job_id} already on line {seen[rec.job_id]}"
            )
        seen[rec.job_id] = lineno
        records.append(rec)
        if len(records) > MAX_RECORDS:
            raise FormatError(f"{source}:{lineno}: more than {MAX_RECORDS} jobs")
    if not records:
        raise FormatError(f"{source}: no job lines")
    return SwfLog(header, tuple(records))


def load_swf(path: str | Path) -> SwfLog:
    """Read and parse an SWF file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="strict")
    except OSError as exc:
        raise FormatError(f"{p}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise FormatError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_swf(text, source=str(p))


def _record(line: str, source: str, lineno: int) -> SwfRecord:
    parts = line.split()
    if len(parts) != NFIELDS:
        raise FormatError(f"{source}:{lineno}: {len(parts)} fields, an SWF job line has {NFIELDS}")
    values: dict[str, int | float] = {}
    for name, text in zip(_NAMES, parts, strict=True):
        values[name] = _number(name, text, source, lineno)
    rec = SwfRecord(**values)  # type: ignore[arg-type]
    _check(rec, source, lineno)
    return rec


def _number(name: str, text: str, source: str, lineno: int) -> int | float:
    try:
        value = float(text)
    except ValueError:
        raise FormatError(f"{source}:{lineno}: field {name} is {text!r}, not a number") from None
    if not math.isfinite(value) or (value < 0 and value != -1):
        raise FormatError(f"{source}:{lineno}: field {name} is {text}, want >= 0 or -1")
    if name in _INT_FIELDS:
        if value != int(value):
            raise FormatError(f"{source}:{lineno}: field {name} is {text}, not an integer")
        return int(value)
    return value


def _check(rec: SwfRecord, source: str, lineno: int) -> None:
    if rec.job_id < 1:
        raise FormatError(f"{source}:{lineno}: job number {rec.job_id}, want >= 1")
    if rec.submit_s < 0:
        raise FormatError(f"{source}:{lineno}: job {rec.job_id} has no submit time")
