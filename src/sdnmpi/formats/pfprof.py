"""pfprof per-rank JSON traces (pfsim's ``oxton-result<rank>.json``).

A trace is one JSON object per rank with ``description``, ``n_events``,
``n_procs``, ``processor_name``, ``rank`` and per-peer arrays of length
``n_procs``: ``tx_bytes``, ``rx_bytes``, ``tx_messages``, ``rx_messages``; plus
``tx_message_sizes`` / ``rx_message_sizes`` as lists of
``{"message_size": s, "frequency": f}``.  Traces come as a ``.tar.gz`` (or
``.tar``) of those files, or a directory of them.

Reading gives a one-phase rank-level :class:`Pattern`.  By default the matrix is
the senders' view (``tx``: cell i->j is ``tx_bytes[j]`` of rank i); ``rx`` builds
it from the receivers' arrays instead (cell i->j is ``rx_bytes[i]`` of rank j),
which matters for tracers that miscount one side (the NPB CG trace's tx side
misses small reduction messages its rx side has).  The ranks' hosts
(``processor_name``) and per-rank message-size histograms go to ``meta``.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sdnmpi.core.pattern import MAX_NPROCS, MAX_TOTAL, Pattern, Phase, reserve_cells
from sdnmpi.core.placement import Placement
from sdnmpi.errors import FormatError
from sdnmpi.formats.native import parse_json

Side = Literal["tx", "rx"]
MAX_MEMBER_BYTES = 256 * 2**20
#: What all of an archive's rank files may inflate to, and how many it may have: a
#: 2.4 MB gzip bomb once made the reader hold 2.9 GB.
MAX_TOTAL_BYTES = 1024 * 2**20
MAX_MEMBERS = MAX_NPROCS
_NAME_RE = re.compile(r"(?:^|/)([A-Za-z0-9_.-]*?)(\d+)\.json$")
_ARRAYS = ("tx_bytes", "rx_bytes", "tx_messages", "rx_messages")
_REQUIRED = ("n_procs", "rank", *_ARRAYS)


def is_pfprof(path: Path) -> bool:
    """Whether ``path`` looks like a pfprof trace (tarball or directory of rank files)."""
    name = path.name.lower()
    if path.is_dir():
        return any(_NAME_RE.search(p.name) for p in path.glob("*.json"))
    return name.endswith((".tar.gz", ".tgz", ".tar"))


def load_pfprof(path: str | Path, *, side: Side = "tx", name: str | None = None) -> Pattern:
    """Read a trace into a one-phase rank-level pattern (see module docstring)."""
    p = Path(path)
    records = dict(_validated(p, _read_members(p)))
    n = _check_ranks(p, records)
    reserve_cells(n * n)  # the dense matrices below (a service's cell budget bounds them)
    matrix = _matrix(records, n, side)
    src, dst = np.nonzero(matrix[0] + matrix[1])
    phase = Phase.from_arrays("whole run", src, dst, matrix[0][src, dst], matrix[1][src, dst])
    first = records[0]
    meta: dict[str, Any] = {
        "source": str(p),
        "format": "pfprof",
        "side": side,
        "description": str(first.get("description", "")),
        "n_events": sum(
            _int(r.get("n_events", 0), f"{p}: rank {k}", "n_events") for k, r in records.items()
        ),
        "processor_names": [str(records[r].get("processor_name", "")) for r in range(n)],
        "tx_message_sizes": [_histogram(records[r].get("tx_message_sizes")) for r in range(n)],
        "rx_message_sizes": [_histogram(records[r].get("rx_message_sizes")) for r in range(n)],
    }
    return Pattern(name or _stem(p), n, (phase,), None, meta)


def recorded_placement(pattern: Pattern) -> Placement | None:
    """The hosts the traced ranks ran on, if the trace recorded them."""
    names = pattern.meta.get("processor_names")
    if not names or not all(names) or len(names) != pattern.nprocs:
        return None
    return Placement(tuple(names), "recorded")


def _stem(p: Path) -> str:
    name = p.name
    for ext in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def _read_members(p: Path) -> Iterator[tuple[str, bytes]]:
    if p.is_dir():
        for f in sorted(p.glob("*.json")):
            yield f.name, f.read_bytes()
        return
    if not p.exists():
        raise FormatError(f"{p}: no such file or directory")
    try:
        with tarfile.open(p, "r:*") as tar:
            total, count = 0, 0
            for member in tar:
                if not member.isfile() or not member.name.endswith(".json"):
                    continue
                if member.size > MAX_MEMBER_BYTES:
                    raise FormatError(
                        f"{p}: member {member.name} is {member.size} bytes, too large"
                    )
                total, count = total + member.size, count + 1
                if total > MAX_TOTAL_BYTES or count > MAX_MEMBERS:
                    raise FormatError(
                        f"{p}: the rank files inflate to more than {MAX_TOTAL_BYTES} bytes "
                        f"or number more than {MAX_MEMBERS}"
                    )
                fh = tar.extractfile(member)
                assert fh is not None
                yield member.name, fh.read()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise FormatError(f"{p}: truncated or corrupt archive: {exc}") from None


def _validated(
    p: Path, members: Iterator[tuple[str, bytes]]
) -> Iterator[tuple[int, dict[str, Any]]]:
    seen: dict[int, str] = {}
    for member, data in members:
        where = f"{p}: {member}"
        rec = parse_json(data, where)
        if not isinstance(rec, dict):
            raise FormatError(f"{where}: expected a JSON object")
        missing = [k for k in _REQUIRED if k not in rec]
        if missing:
            raise FormatError(f"{where}: missing key(s) {missing}")
        rank = _int(rec["rank"], where, "rank")
        if rank in seen:
            raise FormatError(f"{where}: rank {rank} also in {seen[rank]}")
        match = _NAME_RE.search(member)
        if match and int(match.group(2)) != rank:
            raise FormatError(f"{where}: file name says rank {match.group(2)}, content says {rank}")
        seen[rank] = member
        yield rank, rec


def _int(value: Any, where: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(f"{where}: {what} must be an integer, got {value!r}")
    if value < 0:
        raise FormatError(f"{where}: negative {what} {value}")
    if value > MAX_TOTAL:
        raise FormatError(f"{where}: {what} {value} does not fit in 64 bits")
    return value


def _check_ranks(p: Path, records: dict[int, dict[str, Any]]) -> int:
    if not records:
        raise FormatError(f"{p}: no rank files (*.json) found")
    sizes = {_int(r["n_procs"], f"{p}: rank {k}", "n_procs") for k, r in records.items()}
    if len(sizes) > 1:
        raise FormatError(f"{p}: ranks disagree on n_procs: {sorted(sizes)}")
    n = sizes.pop()
    if n > MAX_NPROCS:
        raise FormatError(f"{p}: n_procs {n} is more than {MAX_NPROCS}")
    # n is declared: compare it with the files present without a set of n entries
    missing = [r for r in range(min(n, len(records) + 10)) if r not in records][:10]
    extra = sorted(r for r in records if r >= n)
    if missing or extra:
        raise FormatError(
            f"{p}: rank count mismatch: n_procs={n} but {len(records)} rank files"
            + (f"; missing ranks {missing[:10]}" if missing else "")
            + (f"; ranks out of range {extra[:10]}" if extra else "")
        )
    for rank, rec in records.items():
        for key in _ARRAYS:
            arr = rec[key]
            where = f"{p}: rank {rank}"
            if not isinstance(arr, list) or len(arr) != n:
                got = len(arr) if isinstance(arr, list) else type(arr).__name__
                raise FormatError(f"{where}: {key} must have {n} entries, has {got}")
            for peer, v in enumerate(arr):
                _int(v, where, f"{key}[{peer}]")
    return n


def _matrix(
    records: dict[int, dict[str, Any]], n: int, side: Side
) -> tuple[np.ndarray, np.ndarray]:
    nbytes = np.array([records[r][f"{side}_bytes"] for r in range(n)], dtype=np.int64)
    nmsgs = np.array([records[r][f"{side}_messages"] for r in range(n)], dtype=np.int64)
    if side == "rx":  # row r of rx arrays is what r received: transpose to src -> dst
        return nbytes.T.copy(), nmsgs.T.copy()
    return nbytes, nmsgs


def _histogram(value: Any) -> list[list[int]]:
    if not isinstance(value, list):
        return []
    out = []
    for item in value:
        if isinstance(item, dict) and "message_size" in item and "frequency" in item:
            size, freq = item["message_size"], item["frequency"]
            if all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_TOTAL
                   for v in (size, freq)):  # fmt: skip
                out.append([size, freq])
    return sorted(out)


# -- writing ------------------------------------------------------------------------


def dump_pfprof(
    pattern: Pattern, path: str | Path, processor_names: list[str] | None = None
) -> None:
    """Write a rank-level pattern as a pfprof trace: ``.tar.gz`` or a directory."""
    if pattern.hosts is not None:
        raise FormatError(f"{path}: pfprof traces are per rank; {pattern.name!r} is host-level")
    n = pattern.nprocs
    names = processor_names or list(pattern.meta.get("processor_names") or [""] * n)
    records = _records(pattern, names)
    p = Path(path)
    if p.name.endswith((".tar.gz", ".tgz", ".tar")):
        plain = p.name.endswith(".tar")
        with tarfile.open(p, "w") if plain else tarfile.open(p, "w:gz") as tar:
            for rank, rec in enumerate(records):
                data = json.dumps(rec, sort_keys=True).encode()
                info = tarfile.TarInfo(f"oxton-result{rank}.json")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    else:
        p.mkdir(parents=True, exist_ok=True)
        for rank, rec in enumerate(records):
            (p / f"oxton-result{rank}.json").write_text(json.dumps(rec, sort_keys=True))


def _records(pattern: Pattern, names: list[str]) -> list[dict[str, Any]]:
    n = pattern.nprocs
    total = pattern.total_matrix()
    nbytes = np.zeros((n, n), dtype=np.int64)
    nmsgs = np.zeros((n, n), dtype=np.int64)
    nbytes[total.src, total.dst] = total.size_bytes
    nmsgs[total.src, total.dst] = total.messages
    tx_h, rx_h = _size_histograms(pattern)
    return [
        {
            "description": f"Generated by sdnmpi from {pattern.name}",
            "n_events": int(nmsgs[r].sum() + nmsgs[:, r].sum()),
            "n_procs": n,
            "processor_name": names[r] if r < len(names) else "",
            "rank": r,
            "tx_bytes": nbytes[r].tolist(),
            "rx_bytes": nbytes[:, r].tolist(),
            "tx_messages": nmsgs[r].tolist(),
            "rx_messages": nmsgs[:, r].tolist(),
            "tx_message_sizes": [
                {"message_size": s, "frequency": f} for s, f in sorted(tx_h[r].items())
            ],
            "rx_message_sizes": [
                {"message_size": s, "frequency": f} for s, f in sorted(rx_h[r].items())
            ],
        }
        for r in range(n)
    ]


def _size_histograms(pattern: Pattern) -> tuple[list[dict[int, int]], list[dict[int, int]]]:
    """Per-rank message-size histograms: cell histograms, else the cell's mean size."""
    tx: list[dict[int, int]] = [{} for _ in range(pattern.nprocs)]
    rx: list[dict[int, int]] = [{} for _ in range(pattern.nprocs)]
    for phase in pattern.phases:
        for cell in phase.cells():
            hist = cell.sizes or ((cell.size_bytes // max(cell.messages, 1), cell.messages),)
            for size, count in hist:
                if count:
                    tx[cell.src][size] = tx[cell.src].get(size, 0) + count * phase.repeat
                    rx[cell.dst][size] = rx[cell.dst].get(size, 0) + count * phase.repeat
    return tx, rx
