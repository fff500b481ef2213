"""sdnmpi PMPI traces (``sdnmpi-trace-<rank>.jsonl``, schema ``sdnmpi-trace/1``).

libsdnmpi.so (csrc/pmpi) in profile mode writes one JSON-lines file per rank: a
header line, then one line per MPI call (docs/trace-format.md describes every
field).  :func:`load_sdnmpi_trace` reads a directory of them into a rank-level
:class:`~sdnmpi.core.pattern.Pattern`:

* point-to-point traffic is taken as recorded on the sender side (``send`` and
  the send half of ``sendrecv`` events), one message per call;
* every collective call is expanded into the messages of the algorithm the
  library would use (:func:`sdnmpi.core.collectives.expand`, library chosen from
  the header's MPI version string), from the record of the communicator's rank 0
  only (every member records the call), translated to world ranks;
* collectives the expander does not know are approximated, and listed under
  ``meta["approximated"]``: ``scan``/``exscan`` as MPICH's recursive doubling
  (rank r exchanges ``count`` elements with r XOR 2^k), the v-variants as direct
  messages from each rank's own record (alltoallv: ``sendcounts[i]`` to rank i;
  allgatherv: its block ``recvcounts[me]`` to every other member; gatherv: its
  block to the root;
  scatterv: ``sendcounts[i]`` from the root to rank i), and ``reduce_scatter``
  with unequal counts as a pairwise exchange (``recvcounts[j]`` from every rank
  to rank j).  A call that cannot be expanded (a v-variant whose counts were not
  significant on the recording rank, an intercommunicator) is counted under
  ``meta["not_expanded"]``, never silently dropped.

Phases: the calls of all ranks are ordered by wall-clock start time (``t0_wall``
+ ``t_start``) and each maximal run of consecutive calls of the same kind (the
same collective call name, or point-to-point) becomes one phase whose matrix is
the sum of the run's messages: within a run ranks synchronize only pairwise (a
halo exchange's swaps overlap across ranks), so its flows are simulated at once.
If that gives more than ``max_phases`` phases, the trace's time structure is
rebuilt from what repeats (``"by_pairs"``): each point-to-point run is cut into
steps where a message answers one it got (:func:`_waves`: a ping-pong's ping and
pong, a ring timed one direction after the other), and the runs or steps of the
same kind over the same rank pairs become one phase, repeated once per step
(point-to-point) or per call (collectives), each occurrence their mean.  A
benchmark that times one ring or pair after another, with collectives in between
(HPCC's b_eff), thus keeps one phase per ring direction or pair with its own
collisions.  Beyond ``max_phases`` such groups, those that move the fewest bytes
are summed into one phase per kind; only a trace with ``max_phases`` call kinds
or more falls back to one phase per kind (``"by_call"``).  Phases are in order of
first use and ``meta["grouping"]`` says which rule applied.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sdnmpi.core.collectives import COLLECTIVES, ROOTED, expand
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.errors import FormatError, PatternError, quoted
from sdnmpi.formats.native import parse_json

SCHEMA = "sdnmpi-trace/1"
DEFAULT_MAX_PHASES = 256
MAX_LINE_BYTES = 16 * 2**20
#: The largest recorded integer (count, size, id) and the most bytes one call moves to
#: one peer (count x type_bytes): 256 TiB, far above any real call and far below where
#: the int64 sums of a phase could wrap.
MAX_VALUE = 2**48
_NAME_RE = re.compile(r"^sdnmpi-trace-(\d+)\.jsonl$")
_KINDS = frozenset(
    {"send", "recv", "sendrecv", "coll", "collv", "comm_new", "comm_free", "init"}
    | {"finalize", "completion"}
)
_P2P = "point-to-point"
Message = tuple[int, int, int]  # src world rank, dst world rank, bytes


@dataclass(frozen=True)
class RankTrace:
    """One rank's file: header values and its validated events."""

    path: Path
    rank: int
    nprocs: int
    host: str
    mpi_library: str
    job: str
    t0_wall: float
    comms: dict[int, tuple[int, ...]]
    events: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class _Item:
    """Messages of one recorded call, placed on the common timeline."""

    time: float
    key: str
    messages: tuple[Message, ...]
    seq: int = -1  # point-to-point: the sender's how-manieth message to this peer


#: Per (receiving world rank, sending world rank), when the receiver completed its
#: receives from the sender, in the order it posted them (the n-th is taken to be
#: the sender's n-th message: MPI does not let messages of a pair overtake).
Receipts = dict[tuple[int, int], list[float]]


def is_sdnmpi_trace(path: Path) -> bool:
    """Whether ``path`` is a directory of ``sdnmpi-trace-<rank>.jsonl`` files (or one)."""
    if path.is_dir():
        return any(_NAME_RE.match(p.name) for p in path.glob("sdnmpi-trace-*.jsonl"))
    return bool(_NAME_RE.match(path.name))


def library_of(mpi_library: str) -> str:
    """``"openmpi"`` or ``"mpich"`` from an MPI library version string.

    >>> library_of("Open MPI v4.1.4, package: Debian OpenMPI"), library_of("MPICH Version: 4")
    ('openmpi', 'mpich')
    """
    return "openmpi" if "open mpi" in mpi_library.lower() else "mpich"


def load_sdnmpi_trace(
    path: str | Path, *, name: str | None = None, max_phases: int = DEFAULT_MAX_PHASES
) -> Pattern:
    """Read a trace directory into a rank-level pattern (see the module docstring)."""
    p = Path(path)
    directory = p.parent if _NAME_RE.match(p.name) and p.is_file() else p
    traces = read_traces(directory)
    nprocs = traces[0].nprocs
    expander = _Expander(library_of(traces[0].mpi_library))
    items = sorted(
        (it for t in traces for it in expander.items(t)), key=lambda it: (it.time, it.key)
    )
    phases, grouping = _phases(items, max_phases, _receipts(traces))
    meta: dict[str, Any] = {
        "source": str(directory),
        "format": "sdnmpi-trace",
        "schema": SCHEMA,
        "library": expander.library,
        "mpi_library": traces[0].mpi_library,
        "job": traces[0].job,
        "processor_names": [t.host for t in traces],
        "calls": dict(sorted(Counter(e["call"] for t in traces for e in t.events).items())),
        "expanded": dict(sorted(expander.expanded.items())),
        "approximated": dict(sorted(expander.approximated.items())),
        "not_expanded": dict(sorted(expander.not_expanded.items())),
        "p2p_bytes": expander.p2p_bytes,
        "collective_bytes": expander.collective_bytes,
        "grouping": grouping,
    }
    return Pattern(name or directory.name, nprocs, tuple(phases), None, meta)


# -- reading and validation ----------------------------------------------------------


def read_traces(directory: Path) -> list[RankTrace]:
    """All rank files of a directory, checked for missing ranks and consistent nprocs."""
    if not directory.is_dir():
        raise FormatError(f"{directory}: not a directory of sdnmpi-trace-<rank>.jsonl files")
    files = sorted(p for p in directory.iterdir() if _NAME_RE.match(p.name))
    if not files:
        raise FormatError(f"{directory}: no sdnmpi-trace-<rank>.jsonl files")
    traces = {t.rank: t for t in (read_rank_trace(f) for f in files)}
    sizes = sorted({t.nprocs for t in traces.values()})
    if len(sizes) > 1:
        raise FormatError(f"{directory}: rank files disagree on nprocs: {sizes}")
    missing = sorted(set(range(sizes[0])) - set(traces))
    extra = sorted(set(traces) - set(range(sizes[0])))
    if missing or extra:
        raise FormatError(
            f"{directory}: nprocs={sizes[0]} but "
            + (f"ranks {missing[:10]} are missing" if missing else f"ranks {extra[:10]} extra")
        )
    return [traces[r] for r in range(sizes[0])]


def read_rank_trace(path: Path) -> RankTrace:
    """One rank file, every line validated; errors name the file and line."""
    lines = _json_lines(path)
    try:
        lineno, header = next(lines)
    except StopIteration:
        raise FormatError(f"{path}: empty file (no header line)") from None
    trace = _header(path, lineno, header)
    events = tuple(_event(trace, f"{path}:{n}", obj) for n, obj in lines)
    return RankTrace(
        trace.path,
        trace.rank,
        trace.nprocs,
        trace.host,
        trace.mpi_library,
        trace.job,
        trace.t0_wall,
        trace.comms,
        events,
    )


def _json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise FormatError(f"{path}: cannot read: {exc.strerror}") from None
    with fh:
        lineno = 0
        while raw := fh.readline(MAX_LINE_BYTES + 1):  # never more than a line's limit
            lineno += 1
            if len(raw) > MAX_LINE_BYTES:
                raise FormatError(f"{path}:{lineno}: line longer than {MAX_LINE_BYTES} bytes")
            if not raw.strip():
                continue
            obj = parse_json(raw, f"{path}:{lineno}")
            if not isinstance(obj, dict):
                raise FormatError(f"{path}:{lineno}: expected a JSON object")
            yield lineno, obj


def _int(obj: dict[str, Any], key: str, where: str, minimum: int = 0) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(f"{where}: {key} must be an integer, got {quoted(value)}")
    if value < minimum:
        raise FormatError(f"{where}: {key} must be >= {minimum}, got {value}")
    if value > MAX_VALUE:
        raise FormatError(f"{where}: {key} must be <= 2**48, got {quoted(value)}")
    return value


def _num(obj: dict[str, Any], key: str, where: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FormatError(f"{where}: {key} must be a finite number, got {quoted(value)}")
    return float(value)


def _str(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise FormatError(f"{where}: {key} must be a string, got {quoted(value)}")
    return value


def _header(path: Path, lineno: int, obj: dict[str, Any]) -> RankTrace:
    where = f"{path}:{lineno}"
    if obj.get("schema") != SCHEMA:
        raise FormatError(f"{where}: schema must be {SCHEMA!r}, got {quoted(obj.get('schema'))}")
    rank, nprocs = _int(obj, "rank", where), _int(obj, "nprocs", where, 1)
    match = _NAME_RE.match(path.name)
    if match and int(match.group(1)) != rank:
        raise FormatError(f"{where}: file name says rank {match.group(1)}, header says {rank}")
    if rank >= nprocs:
        raise FormatError(f"{where}: rank {rank} out of range for nprocs {nprocs}")
    return RankTrace(
        path,
        rank,
        nprocs,
        _str(obj, "host", where),
        _str(obj, "mpi_library", where),
        _str(obj, "job", where),
        _num(obj, "t0_wall", where),
        _comms(obj.get("communicators"), nprocs, where),
        (),
    )


def _comms(value: Any, nprocs: int, where: str) -> dict[int, tuple[int, ...]]:
    if not isinstance(value, list):
        raise FormatError(f"{where}: communicators must be a list")
    out: dict[int, tuple[int, ...]] = {}
    for c in value:
        if not isinstance(c, dict) or not isinstance(c.get("ranks"), list):
            raise FormatError(f"{where}: communicator entries need id and ranks, got {quoted(c)}")
        cid = _int(c, "id", where)
        ranks = c["ranks"]
        if not ranks or any(
            isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < nprocs for r in ranks
        ):
            raise FormatError(f"{where}: communicator {cid}: bad world ranks {quoted(ranks[:10])}")
        if len(set(ranks)) != len(ranks):
            raise FormatError(f"{where}: communicator {cid}: a world rank listed twice")
        if cid in out:
            raise FormatError(f"{where}: communicator id {cid} listed twice")
        out[cid] = tuple(ranks)
    return out


def _peer(trace: RankTrace, obj: dict[str, Any], key: str, where: str) -> None:
    value = obj.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < trace.nprocs:
        raise FormatError(f"{where}: {key} must be a world rank < {trace.nprocs} or null")


def _event(trace: RankTrace, where: str, obj: dict[str, Any]) -> dict[str, Any]:
    _str(obj, "call", where)
    kind = obj.get("kind")
    if kind not in _KINDS:
        raise FormatError(
            f"{where}: unknown kind {quoted(kind)} (valid: {', '.join(sorted(_KINDS))})"
        )
    _num(obj, "t_start", where)
    _num(obj, "t_end", where)
    if "comm" in obj and _int(obj, "comm", where) not in trace.comms:
        raise FormatError(f"{where}: communicator {obj['comm']} not in the header")
    if kind in ("send", "recv", "sendrecv", "coll", "collv"):
        if "comm" not in obj:
            raise FormatError(f"{where}: {kind} event without comm")
        _int(obj, "bytes", where)
        _int(obj, "type_bytes", where)
    if kind in ("send", "recv", "sendrecv"):
        _peer(trace, obj, "peer", where)
    if kind == "sendrecv":
        _peer(trace, obj, "recv_peer", where)
        _int(obj, "recv_bytes", where)
    if kind in ("coll", "collv"):
        _collective(trace, obj, where)
    return obj


def _collective(trace: RankTrace, obj: dict[str, Any], where: str) -> None:
    coll = _str(obj, "coll", where)
    _peer(trace, obj, "root", where)
    if obj.get("root") is not None and obj["root"] not in trace.comms[obj["comm"]]:
        raise FormatError(f"{where}: root {obj['root']} not in communicator {obj['comm']}")
    if obj["kind"] == "coll" and coll != "barrier":
        _int(obj, "count", where)
    if "count" in obj:
        _int(obj, "count", where)
    counts = obj.get("counts")
    if counts is not None and (
        not isinstance(counts, list)
        or len(counts) != len(trace.comms[obj["comm"]])
        or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts)
    ):
        raise FormatError(f"{where}: counts must be one non-negative integer per member")
    largest = max([obj.get("count") or 0, *(counts or [])])
    if largest * max(obj["type_bytes"], 1) > MAX_VALUE:
        raise FormatError(f"{where}: more than 2**48 bytes in one call (count x type_bytes)")


# -- expansion -----------------------------------------------------------------------


class _Expander:
    """Turns recorded calls into messages, caching one schedule per parameter set."""

    def __init__(self, library: str) -> None:
        self.library = library
        self.expanded: Counter[str] = Counter()
        self.approximated: Counter[str] = Counter()
        self.not_expanded: Counter[str] = Counter()
        self.p2p_bytes = 0
        self.collective_bytes = 0
        self._cache: dict[tuple[Any, ...], tuple[Message, ...]] = {}

    def items(self, trace: RankTrace) -> Iterator[_Item]:
        sent: Counter[int] = Counter()
        for e in trace.events:
            time = trace.t0_wall + float(e["t_start"])
            if e["kind"] in ("send", "sendrecv") and e.get("peer") is not None:
                peer = int(e["peer"])
                self.p2p_bytes += int(e["bytes"])
                msg = ((trace.rank, peer, int(e["bytes"])),)
                yield _Item(time, _P2P, msg, sent[peer])
                sent[peer] += 1
            elif e["kind"] in ("coll", "collv"):
                msgs = self._collective(trace, e)
                if msgs is not None:
                    self.collective_bytes += sum(m[2] for m in msgs)
                    yield _Item(time, str(e["call"]), msgs)

    def _collective(self, trace: RankTrace, e: dict[str, Any]) -> tuple[Message, ...] | None:
        members = trace.comms[int(e["comm"])]
        coll, call = str(e["coll"]), str(e["call"])
        me = members.index(trace.rank) if trace.rank in members else -1
        if me < 0:
            self.not_expanded[f"{call} (rank not in its communicator)"] += 1
            return None
        if e["kind"] == "collv" and coll != "reduce_scatter":
            return self._direct(call, coll, members, me, e)
        if me != 0:
            return None  # expanded once, from the communicator's rank 0
        root = members.index(e["root"]) if e.get("root") is not None else 0
        tb = max(int(e["type_bytes"]), 1)
        count = int(e.get("count", 0))
        if coll == "reduce_scatter" and e["kind"] == "collv":
            return self._reduce_scatter_v(call, members, e.get("counts"), tb)
        if coll in ("scan", "exscan"):
            self.approximated[call] += 1
            return _recursive_doubling(members, count * tb)
        self.expanded[call] += 1
        return self._schedule(coll, members, count, root, tb)

    def _schedule(
        self, coll: str, members: tuple[int, ...], count: int, root: int, tb: int
    ) -> tuple[Message, ...]:
        key = (coll, members, count, root, tb)
        if key not in self._cache:
            if coll not in COLLECTIVES:
                raise FormatError(f"collective {coll!r} is not known to the expander")
            n = len(members)
            try:
                s = expand(
                    coll,
                    n,
                    0 if coll == "barrier" else count,
                    root=root if coll in ROOTED else 0,
                    type_bytes=tb,
                    library=self.library,
                )
            except PatternError as exc:
                raise FormatError(f"cannot expand {coll} on {n} ranks: {exc}") from None
            self._cache[key] = tuple(
                (members[m.src], members[m.dst], m.size_bytes) for m in s.messages()
            )
        return self._cache[key]

    def _reduce_scatter_v(
        self, call: str, members: tuple[int, ...], counts: Any, tb: int
    ) -> tuple[Message, ...] | None:
        if not counts:
            self.not_expanded[f"{call} (no counts)"] += 1
            return None
        if len(set(counts)) == 1:
            self.expanded[call] += 1
            return self._schedule("reduce_scatter", members, int(counts[0]), 0, tb)
        self.approximated[call] += 1
        return tuple(
            (members[i], members[j], int(counts[j]) * tb)
            for i in range(len(members))
            for j in range(len(members))
            if i != j and counts[j]
        )

    def _direct(
        self, call: str, coll: str, members: tuple[int, ...], me: int, e: dict[str, Any]
    ) -> tuple[Message, ...] | None:
        tb = int(e["type_bytes"])
        counts: list[int] | None = e.get("counts")
        count: int | None = e.get("count")
        root = members.index(e["root"]) if e.get("root") is not None else None
        src = members[me]
        if coll == "alltoallv" and counts is not None:
            out = [(src, members[i], int(c) * tb) for i, c in enumerate(counts) if i != me and c]
        elif coll == "allgatherv" and (counts is not None or count is not None):
            block = counts[me] if counts is not None else int(count or 0)  # MPI_IN_PLACE-safe
            out = [(src, d, block * tb) for i, d in enumerate(members) if i != me and block]
        elif coll == "gatherv" and count is not None and root is not None:
            out = [(src, members[root], int(count) * tb)] if me != root and count else []
        elif coll == "scatterv" and root is not None:
            if me != root:
                return None  # the root's record carries the counts
            if counts is None:
                self.not_expanded[f"{call} (no counts at the root)"] += 1
                return None
            out = [(src, members[i], int(c) * tb) for i, c in enumerate(counts) if i != me and c]
        else:
            self.not_expanded[f"{call} (counts not recorded)"] += 1
            return None
        self.approximated[call] += 1
        return tuple(out)


def _receipts(traces: Iterable[RankTrace]) -> Receipts:
    """When each rank completed each receive, by sender, in posting order:
    ``MPI_Recv`` and the receive half of ``MPI_Sendrecv`` at their return,
    ``MPI_Irecv`` at the return of the rank's next completion call (``MPI_Wait*``,
    ``MPI_Test*``; the trace does not say which request a completion completed).

    >>> t = RankTrace(Path("x"), 1, 2, "h", "", "", 10.0, {}, (
    ...     {"kind": "recv", "call": "MPI_Irecv", "peer": 0, "t_start": 0.0, "t_end": 0.1},
    ...     {"kind": "send", "call": "MPI_Send", "peer": 0, "t_start": 0.2, "t_end": 0.3},
    ...     {"kind": "completion", "call": "MPI_Wait", "t_start": 0.3, "t_end": 0.9},
    ...     {"kind": "sendrecv", "call": "MPI_Sendrecv", "peer": 0, "recv_peer": 0,
    ...      "t_start": 1.0, "t_end": 1.5}))
    >>> _receipts([t])
    {(1, 0): [10.9, 11.5]}
    """
    out: Receipts = {}
    for trace in traces:
        pending: list[tuple[list[float], int]] = []
        for e in trace.events:
            kind, end = e["kind"], trace.t0_wall + float(e["t_end"])
            if kind == "completion":
                for times, i in pending:
                    times[i] = end
                pending = []
                continue
            src = e.get("peer") if kind == "recv" else e.get("recv_peer")
            if kind not in ("recv", "sendrecv") or src is None:
                continue
            times = out.setdefault((trace.rank, int(src)), [])
            times.append(end)
            if kind == "recv" and str(e["call"]).startswith("MPI_I"):
                times[-1] = math.inf  # until a completion call returns
                pending.append((times, len(times) - 1))
    return out


def _recursive_doubling(members: tuple[int, ...], size_bytes: int) -> tuple[Message, ...]:
    """MPICH's scan: in round k rank r exchanges its partial result with r XOR 2^k.

    >>> _recursive_doubling((0, 1, 2), 4)
    ((0, 1, 4), (1, 0, 4), (0, 2, 4), (2, 0, 4))
    """
    n, out, mask = len(members), [], 1
    while mask < n:
        out += [(members[r], members[r ^ mask], size_bytes) for r in range(n) if r ^ mask < n]
        mask <<= 1
    return tuple(out)


# -- phases --------------------------------------------------------------------------


def _phases(items: list[_Item], max_phases: int, got: Receipts) -> tuple[list[Phase], str]:
    runs: list[tuple[str, list[_Item]]] = []
    for it in items:
        if runs and runs[-1][0] == it.key:
            runs[-1][1].append(it)
        else:
            runs.append((it.key, [it]))
    if len(runs) <= max_phases:
        return [_phase(key, group) for key, group in runs], "runs"
    runs = [(key, wave) for key, run in runs for wave in _waves(key, run, got)]
    by_pairs: dict[tuple[str, frozenset[tuple[int, int]]], list[list[_Item]]] = {}
    for key, group in runs:
        pairs = frozenset((m[0], m[1]) for it in group for m in it.messages)
        by_pairs.setdefault((key, pairs), []).append(group)
    keys = list(dict.fromkeys(key for key, _ in runs))
    if len(keys) < max_phases:
        return _largest(by_pairs, max_phases, len(keys)), "by_pairs"
    by_key: dict[str, list[_Item]] = {}
    for it in items:
        by_key.setdefault(it.key, []).append(it)
    return [_phase(key, group) for key, group in by_key.items()], "by_call"


def _largest(
    groups: dict[tuple[str, frozenset[tuple[int, int]]], list[list[_Item]]],
    max_phases: int,
    nkeys: int,
) -> list[Phase]:
    """One phase per group of runs, in order of first use, repeated once per run
    (point-to-point) or per call (a collective), each occurrence the group's mean;
    beyond ``max_phases`` the groups that move the fewest bytes are summed into one
    last phase per kind."""
    keep = set(groups)
    if len(groups) > max_phases:
        weight = {
            g: sum(m[2] for r in runs for it in r for m in it.messages)
            for g, runs in groups.items()
        }
        keep = set(sorted(groups, key=lambda g: -weight[g])[: max_phases - nkeys])
    rest: dict[str, list[tuple[str, frozenset[tuple[int, int]]]]] = {}
    for g in groups:
        if g not in keep:
            rest.setdefault(g[0], []).append(g)
    keep |= {gs[0] for gs in rest.values() if len(gs) == 1}
    out = []
    for g, runs in groups.items():
        items = [it for r in runs for it in r]
        if g in keep:
            out.append(_phase(g[0], items, repeat=len(runs) if g[0] == _P2P else len(items)))
    for key, gs in rest.items():
        if len(gs) > 1:
            merged = [it for g in gs for r in groups[g] for it in r]
            out.append(_phase(key, merged, "other pairs, "))
    return out


def _waves(key: str, run: list[_Item], got: Receipts) -> list[list[_Item]]:
    """A run of point-to-point calls cut into steps: a message b->a starts a new step
    when the step holds a message a->b that b had received before sending this one
    (b answered a).  A phase's flows run at once in the simulator, and a pair in both
    directions of one phase is a full-duplex exchange: a ping-pong's ping and pong,
    or a ring timed one direction after the other, are not one; an exchange (both
    sides send, then wait for the receive) stays one step.

    >>> m = lambda a, b, t, n: _Item(t, _P2P, ((a, b, 1),), n)
    >>> ping_pong = [m(0, 1, 0, 0), m(1, 0, 1, 0), m(0, 1, 2, 1)]
    >>> [len(w) for w in _waves(_P2P, ping_pong, {(1, 0): [0.9, 2.9], (0, 1): [1.9]})]
    [1, 1, 1]
    >>> exchange = [m(0, 1, 0, 0), m(1, 0, 0.1, 0), m(0, 1, 2, 1), m(1, 0, 2.1, 1)]
    >>> [len(w) for w in _waves(_P2P, exchange, {(1, 0): [0.9, 2.9], (0, 1): [0.9, 2.9]})]
    [2, 2]
    """
    if key != _P2P:
        return [run]
    waves: list[list[_Item]] = [[]]
    last: dict[tuple[int, int], int] = {}  # the step's latest message per pair: its seq
    for it in run:
        src, dst, _ = it.messages[0]
        forth = last.get((dst, src))
        if forth is not None and _answers(got.get((src, dst), []), forth, it.time):
            waves.append([])
            last = {}
        waves[-1].append(it)
        last[(src, dst)] = it.seq
    return waves


def _answers(times: list[float], seq: int, time: float) -> bool:
    """Whether the receiver had message ``seq`` of the pair (receive completion
    ``times`` in posting order) by ``time``."""
    return 0 <= seq < len(times) and times[seq] <= time


def _phase(key: str, group: Iterable[_Item], note: str = "", repeat: int = 1) -> Phase:
    """The group's messages summed per rank pair; with ``repeat`` > 1, one occurrence
    of ``repeat`` holds each pair's mean (bytes rounded, at least 1 of a pair that sent
    any), so a step's latency is paid once per step."""
    items = list(group)
    msgs = [m for it in items for m in it.messages]
    arr = np.array(msgs, dtype=np.int64).reshape(-1, 3)
    n, unit = (len(msgs), "message") if key == _P2P else (len(items), "call")
    what = f"{n} {unit}{'' if n == 1 else 's'}"
    if key == _P2P and repeat > 1:
        what += f" in {repeat} steps"
    total = Phase.from_arrays(f"{key} ({note}{what})", arr[:, 0], arr[:, 1], arr[:, 2])
    if repeat == 1:
        return total
    size = np.where(total.size_bytes > 0, np.maximum(1, np.rint(total.size_bytes / repeat)), 0)
    count = np.maximum(1, np.rint(total.messages / repeat))
    return Phase.from_arrays(
        total.label,
        total.src,
        total.dst,
        size.astype(np.int64),
        count.astype(np.int64),
        repeat=repeat,
    )
