"""Mutation fuzzing of every parser an untrusted input reaches (issue 12).

Each :class:`Target` is a parser as users reach it (the manager's pattern decoder
for every upload format, the topology and host-file readers, the controller's API
request parser, the node agents' reports to the tag service, the PMPI trace and
replay readers) with a few valid seeds.  :func:`mutate` derives inputs from the
seeds (bit flips, cuts, repeats, and splices of tokens that broke parsers before:
numbers beyond 64 bits, ``1.0e999``, deep nesting, unknown XML encodings, invalid
UTF-8).  :func:`check` runs one input: the parser may accept it or refuse it with
the project's own error (:class:`~sdnmpi.errors.SdnMpiError`); anything else
(another exception, or more than ``limit_s`` of work) is a crash.

``tests/fuzz`` runs a bounded number of inputs per target in ``make test``;
``scripts/fuzz.py`` runs for a given time and reports the inputs tried per format.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import signal
import tarfile
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sdnmpi.errors import SdnMpiError

#: Tokens spliced into inputs: each once crashed or stalled a parser.
TOKENS: tuple[bytes, ...] = (
    b"1.0e999", b"-1", b"0", b"9223372036854775808", b"18446744073709551617",
    b"9" * 5000, b"[" * 5000, b"{\"a\":" * 3000, b"\xff\xfe\x00", b"\xc3\x28",
    b"NaN", b"Infinity", b"null", b"true", b"[]", b"{}", b'"x"',
    b'<?xml version="1.0" encoding="x-no-such-encoding"?>',
    b"<!DOCTYPE x [<!ENTITY a \"aaaa\">]>", b"slots=99999999999", b"\x00",
)  # fmt: skip


@dataclass(frozen=True)
class Target:
    """A parser (bytes in, anything out) and valid inputs to mutate."""

    name: str
    parse: Callable[[bytes], object]
    seeds: tuple[bytes, ...]


@dataclass
class Outcome:
    """What the inputs given to one target did."""

    target: str
    tried: int = 0
    accepted: int = 0
    refused: int = 0
    crashes: list[tuple[bytes, str]] = field(default_factory=list)


def mutate(seed: bytes, rng: random.Random, rounds: int = 3) -> bytes:
    """``seed`` changed by 1..``rounds`` random edits."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, rounds)):
        op = rng.randrange(6)
        at = rng.randint(0, len(data))
        if op == 0 and data:  # flip a bit
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:  # cut
            data = data[:at] + data[at + rng.randint(1, 64) :]
        elif op == 2:  # repeat a slice
            end = min(len(data), at + rng.randint(1, 64))
            data = data[:end] + data[at:end] * rng.randint(1, 8) + data[end:]
        elif op == 3:  # splice a token
            data = data[:at] + bytearray(rng.choice(TOKENS)) + data[at:]
        elif op == 4:  # replace a number with a token
            digits = [i for i, b in enumerate(data) if 48 <= b <= 57]
            if digits:
                i = rng.choice(digits)
                j = i
                while j < len(data) and 48 <= data[j] <= 57:
                    j += 1
                data = data[:i] + bytearray(rng.choice(TOKENS)) + data[j:]
        else:  # truncate
            data = data[:at]
    return bytes(data)


class _StalledError(Exception):
    pass


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_StalledError` after ``seconds`` (SIGALRM: the main thread only)."""

    def stop(signum: int, frame: object) -> None:
        raise _StalledError(f"more than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _parse(target: Target, data: bytes, limit_s: float) -> tuple[bool, str | None]:
    """(accepted, what went wrong): a clean refusal is (False, None)."""
    try:
        with _time_limit(limit_s):
            target.parse(data)
    except SdnMpiError:
        return False, None
    except _StalledError as exc:
        return False, f"stalled: {exc}"
    except Exception:
        return False, traceback.format_exc(limit=-6)
    return True, None


def check(target: Target, data: bytes, limit_s: float = 10.0) -> str | None:
    """None if ``target`` accepts ``data`` or refuses it cleanly; else what went wrong."""
    return _parse(target, data, limit_s)[1]


def run(
    target: Target,
    inputs: Iterable[bytes],
    limit_s: float = 10.0,
    until: float | None = None,
) -> Outcome:
    """Every input (until ``time.monotonic()`` passes ``until``, if given), counted."""
    out = Outcome(target.name)
    for data in inputs:
        if until is not None and time.monotonic() >= until:
            break
        out.tried += 1
        accepted, problem = _parse(target, data, limit_s)
        if problem is not None:
            out.crashes.append((data, problem))
        elif accepted:
            out.accepted += 1
        else:
            out.refused += 1
    return out


def mutations(target: Target, rng: random.Random) -> Iterator[bytes]:
    """Endless inputs derived from the target's seeds."""
    while True:
        yield mutate(rng.choice(target.seeds), rng)


# -- the targets ------------------------------------------------------------------------


def _upload(filename: str) -> Callable[[bytes], object]:
    """The manager's decoder for an uploaded file named ``filename``."""

    def parse(data: bytes) -> object:
        from sdnmpi.manager import patternfile

        return patternfile.decode(filename, data)

    return parse


def _topology(suffix: str) -> Callable[[bytes], object]:
    def parse(data: bytes) -> object:
        from sdnmpi import catalog

        with tempfile.TemporaryDirectory(prefix="sdnmpi-fuzz-") as tmp:
            path = Path(tmp) / f"t{suffix}"
            path.write_bytes(data)
            return catalog.load_topology(str(path))

    return parse


def _hostfile(data: bytes) -> object:
    from sdnmpi.core.generators import leaf_spine
    from sdnmpi.formats.hostfile import load_hostfile

    with tempfile.TemporaryDirectory(prefix="sdnmpi-fuzz-") as tmp:
        path = Path(tmp) / "hosts"
        path.write_bytes(data)
        return load_hostfile(path, leaf_spine(2, 2, 2), 8)


def _controller_api(data: bytes) -> object:
    from sdnmpi.controller import measure
    from sdnmpi.controller.api import parse_request, request_object

    req = request_object(data)
    if req is not None and str(req.get("op")).startswith("measure_"):
        return measure.parse(req)
    return parse_request(data)


def _tag_service(data: bytes) -> object:
    """Agents' reports, one JSON object per line, to a fresh tag service on a discovered
    fabric (the controller's dispatch: an object whose ``op`` is a tag op)."""
    from sdnmpi.controller import Planner, PlannerConfig
    from sdnmpi.controller.api import request_object
    from sdnmpi.controller.tagservice import TagService
    from sdnmpi.core.generators import leaf_spine
    from sdnmpi.testing.discovery import discover
    from sdnmpi.wire.controller_api import TAG_OPS

    topo = leaf_spine(2, 2, 2)
    planner = Planner(topo, PlannerConfig(router="dmodk"))
    discover(planner, topo)
    service = TagService(planner)
    replies = []
    for line in data.split(b"\n")[:64]:
        req = request_object(line)
        if req is None or not isinstance(req.get("op"), str) or req["op"] not in TAG_OPS:
            continue
        try:
            replies.append(service.handle(req)[0])
        except SdnMpiError:
            continue  # refused: the next report goes to the same service
    return replies


def _sdnmpi_trace(data: bytes) -> object:
    """A directory of PMPI rank files: the input's parts split at ``\\x1e`` (record
    separator), one ``sdnmpi-trace-<i>.jsonl`` each."""
    from sdnmpi.formats.sdnmpitrace import load_sdnmpi_trace

    with tempfile.TemporaryDirectory(prefix="sdnmpi-fuzz-") as tmp:
        for i, part in enumerate(data.split(b"\x1e")[:16]):
            (Path(tmp) / f"sdnmpi-trace-{i}.jsonl").write_bytes(part)
        return load_sdnmpi_trace(tmp)


def _replay(data: bytes) -> object:
    from sdnmpi.formats import replay

    return replay.loads(data)


def _tag_requests() -> bytes:
    coll = {"name": "bcast", "root": 0, "count": 1 << 20, "type_bytes": 1, "comm": None}
    reqs: list[dict[str, object]] = [
        {"op": "tag_collectives", "job": "42", "collectives": [coll]},
        *({"op": "tag_join", "job": "42", "rank": r, "nprocs": 4, "host": f"h{r + 1}"}
          for r in range(4)),
        {"op": "tag_conn", "job": "42", "rank": 0, "local": "10.0.0.1:5000",
         "remote": "10.0.0.2:6000"},
        {"op": "tag_push", "job": "42", "collective": {**coll, "name": "allreduce"}},
        *({"op": "tag_leave", "job": "42", "rank": r} for r in range(4)),
    ]  # fmt: skip
    return b"\n".join(json.dumps(r).encode() for r in reqs)


def _trace_files() -> bytes:
    """Two PMPI rank files (docs/trace-format.md): a send each way and an allreduce."""

    def rank(r: int) -> bytes:
        head = {
            "schema": "sdnmpi-trace/1", "rank": r, "nprocs": 2, "host": f"h{r + 1}",
            "pid": 100 + r, "mpi_library": "Open MPI v4.1.4", "job": "j", "t0_wall": 1000.0,
            "modes": "profile", "n_events": 2, "dropped_events": 0,
            "communicators": [{"id": 0, "ranks": [0, 1]}, {"id": 1, "ranks": [r]}],
        }  # fmt: skip
        send = {"call": "MPI_Send", "kind": "send", "t_start": 0.1, "t_end": 0.2, "comm": 0,
                "peer": 1 - r, "tag": 0, "count": 4096, "type_bytes": 1, "bytes": 4096}  # fmt: skip
        coll = {"call": "MPI_Allreduce", "kind": "coll", "t_start": 0.3, "t_end": 0.4,
                "comm": 0, "coll": "allreduce", "count": 1024, "type_bytes": 8,
                "bytes": 8192}  # fmt: skip
        return b"\n".join(json.dumps(o).encode() for o in (head, send, coll)) + b"\n"

    return rank(0) + b"\x1e" + rank(1)


def _replay_seed() -> bytes:
    from sdnmpi.core import workloads
    from sdnmpi.formats import replay

    return replay.dumps(workloads.build("allreduce:nprocs=4,bytes=1048576")).encode()


def _pattern_json() -> bytes:
    from sdnmpi.core import workloads
    from sdnmpi.formats import native

    return native.dumps(workloads.build("allreduce:nprocs=4,bytes=1048576")).encode()


def _netsa_xml() -> bytes:
    """One NetSA matrix (the seed paper's example, reduced)."""
    return b"""<?xml version="1.0" encoding="UTF-8"?>
<traffic_matrix>
  <matrix id="100" name="MPI_Allreduce">
    <src_host>h1
      <dst_host>h2<num_bytes>42752734</num_bytes><num_packets>35346</num_packets>
        <bandwidth intensive="true"></bandwidth></dst_host>
      <dst_host>h3<num_bytes>9394</num_bytes><num_packets>81</num_packets>
        <latency max_num_hops="2"></latency></dst_host>
    </src_host>
  </matrix>
</traffic_matrix>
"""


def _pfprof_rank(rank: int, peer_bytes: list[int]) -> str:
    n = len(peer_bytes)
    return json.dumps({
        "description": "fuzz seed", "n_events": 3, "n_procs": n, "rank": rank,
        "processor_name": f"h{rank + 1}", "tx_bytes": peer_bytes, "rx_bytes": peer_bytes,
        "tx_messages": [1 if b else 0 for b in peer_bytes],
        "rx_messages": [1 if b else 0 for b in peer_bytes],
        "tx_message_sizes": [{"message_size": 1000, "frequency": 1}],
        "rx_message_sizes": [{"message_size": 1000, "frequency": 1}],
    })  # fmt: skip


def _pfprof_tar() -> bytes:
    """A small pfprof archive (the format of ../shared/workloads), written here."""
    members = {
        "app/oxton-result0.json": _pfprof_rank(0, [0, 1000]),
        "app/oxton-result1.json": _pfprof_rank(1, [1000, 0]),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in members.items():
            raw = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def targets() -> list[Target]:
    """Every fuzzed parser with its seeds."""
    from sdnmpi.core.generators import leaf_spine
    from sdnmpi.formats import graphml, native

    topo = leaf_spine(2, 2, 2)
    api = (
        b'{"op": "install_job", "job_id": 7, "pairs": {"h1>h3": ["h1", "leaf1", "spine1", '
        b'"leaf2", "h3"]}}',
        b'{"op": "remove_job", "job_id": 7}',
        b'{"op": "measure_start", "job_id": 1099511627776, "hosts": ["h1", "h3"]}',
    )
    return [
        Target("pattern-json", _upload("p.json"), (_pattern_json(),)),
        Target("netsa-xml", _upload("p.xml"), (_netsa_xml(),)),
        Target("pfprof-tar.gz", _upload("p.tar.gz"), (_pfprof_tar(), gzip.compress(b"x" * 10))),
        Target("topology-json", _topology(".json"), (native.dumps(topo).encode(),)),
        Target("topology-graphml", _topology(".graphml"), (graphml.dump_graphml(topo).encode(),)),
        Target("hostfile", _hostfile, (b"h1 slots=2\nh2 slots=2\n# c\nh3\nh4 slots=4\n",)),
        Target("controller-api", _controller_api, api),
        Target("tag-service", _tag_service, (_tag_requests(),)),
        Target("sdnmpi-trace", _sdnmpi_trace, (_trace_files(),)),
        Target("replay", _replay, (_replay_seed(),)),
    ]


def summary(outcomes: list[Outcome]) -> str:
    """One line per target: inputs tried, accepted, refused, crashes."""
    lines = [f"{'format':<18} {'tried':>8} {'accepted':>9} {'refused':>8} {'crashes':>8}"]
    for o in outcomes:
        lines.append(f"{o.target:<18} {o.tried:>8} {o.accepted:>9} {o.refused:>8} "
                     f"{len(o.crashes):>8}")  # fmt: skip
    return "\n".join(lines)


__all__ = ["TOKENS", "Outcome", "Target", "check", "mutate", "mutations", "run", "summary",
           "targets"]  # fmt: skip
