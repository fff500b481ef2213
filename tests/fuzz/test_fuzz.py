"""Every parser an untrusted input reaches, fuzzed (issue 12): mutated inputs are
accepted or refused with the project's own error, never a traceback or a stall.

Property-based (hypothesis draws the mutation seeds, so a failure shrinks to a
reproducible seed), bounded for ``make test``; ``scripts/fuzz.py --seconds N`` runs
longer and reports the inputs tried per format.  The inputs that broke a parser
before are fixed regression cases below.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import re
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdnmpi.testing import fuzz

TARGETS = {t.name: t for t in fuzz.targets()}


def test_seeds_are_accepted():
    """A mutation of a valid input tests the parser's depths, not its first check."""
    for target in TARGETS.values():
        for seed in target.seeds[:1]:
            out = fuzz.run(target, [seed])
            assert (out.accepted, out.crashes) == (1, []), (target.name, out.crashes)


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_mutated_inputs_never_crash(name: str, seed: int):
    target = TARGETS[name]
    rng = random.Random(seed)
    data = fuzz.mutate(rng.choice(target.seeds), rng, rounds=4)
    problem = fuzz.check(target, data)
    assert problem is None, f"{name} seed {seed}: {problem}"


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, raw in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def _rank(**over: object) -> bytes:
    doc: dict[str, object] = {
        "description": "x", "n_events": 1, "n_procs": 2, "rank": 0, "processor_name": "h1",
        "tx_bytes": [0, 10], "rx_bytes": [0, 10], "tx_messages": [0, 1], "rx_messages": [0, 1],
        "tx_message_sizes": [], "rx_message_sizes": [],
    }  # fmt: skip
    doc.update(over)
    return json.dumps(doc).encode()


def _graphml_dpid(value: bytes) -> bytes:
    """The GraphML seed with its first switch's dpid replaced by ``value``."""
    seed = TARGETS["topology-graphml"].seeds[0]
    out, n = re.subn(rb'(<data key="d4">)[^<]*(</data>)', rb"\g<1>" + value + rb"\g<2>", seed,
                     count=1)  # fmt: skip
    assert n == 1
    return out


def _trace(old: bytes, new: bytes) -> bytes:
    """The PMPI trace seed with ``old`` replaced by ``new`` everywhere."""
    seed = TARGETS["sdnmpi-trace"].seeds[0]
    assert old in seed
    return seed.replace(old, new)


def _tag(old: bytes, new: bytes) -> bytes:
    """The tag-service seed (agents' reports) with ``old`` replaced by ``new``."""
    seed = TARGETS["tag-service"].seeds[0]
    assert old in seed
    return seed.replace(old, new)


#: (format, input) pairs that once raised OverflowError, LookupError, RecursionError,
#: TypeError or ValueError, hung, or took gigabytes (the issue's list).
REGRESSIONS = [
    ("pattern-json", b'{"format": "sdnmpi-pattern/1", "nprocs": 2, "phases": ' + b"[" * 100000),
    (
        "pattern-json",
        b'{"format": "sdnmpi-pattern/1", "name": "x", "nprocs": ' + b"9" * 5000 + b"}",
    ),
    ("pattern-json", b'{"format": "sdnmpi-pattern/1", "name": {"a": [1]}, "nprocs": [2]}'),
    (
        "pattern-json",
        b'{"format": "sdnmpi-pattern/1", "name": "x", "nprocs": 2, "phases": '
        b'[{"label": "p", "src": [0, 0], "dst": [1, 1], "size_bytes": '
        b"[9223372036854775807, 9223372036854775807]}]}",
    ),
    ("netsa-xml", b'<?xml version="1.0" encoding="x-no-such-encoding"?><traffic_matrix/>'),
    (
        "netsa-xml",
        b'<traffic_matrix><matrix id="1"><src_host>a<dst_host>b<num_bytes>'
        b"99999999999999999999999</num_bytes><num_packets>1</num_packets>"
        b"</dst_host></src_host></matrix></traffic_matrix>",
    ),
    (
        "topology-json",
        b'{"format": "sdnmpi-topology/1", "name": "t", "hosts": [], '
        b'"switches": [{"name": "s", "dpid": 1.0e999}], "links": []}',
    ),
    ("topology-graphml", _graphml_dpid(b"1.0e999")),
    ("topology-graphml", _graphml_dpid(b"9" * 5000)),
    ("hostfile", b"h1 slots=99999999999\n"),
    ("hostfile", b"h1 slots=" + b"9" * 5000 + b"\n"),
    ("hostfile", b"h1 slots=2\n\xff\xfe\x00 slots=1\n"),
    ("pfprof-tar.gz", _tar_gz({"a/oxton-result0.json": _rank(n_procs=10**9)})),
    ("pfprof-tar.gz", _tar_gz({"a/oxton-result0.json": _rank(tx_bytes=[0, 2**64])})),
    ("pfprof-tar.gz", _tar_gz({"a/oxton-result0.json": _rank(tx_bytes="many", rank=[0])})),
    ("pfprof-tar.gz", gzip.compress(b"\0" * (64 << 20))),  # 64 KiB that inflates to 64 MiB
    ("controller-api", b'{"op": ' + b"[" * 100000),
    ("controller-api", b'{"op": ["install_job"], "job_id": 1}'),
    ("controller-api", b'{"op": {"a": 1}, "job_id": 1}'),
    ("controller-api", b'{"op": "install_job", "job_id": ' + b"9" * 5000 + b', "pairs": {}}'),
    ("controller-api", b'{"op": "measure_start", "job_id": 1.0e999, "hosts": []}'),
    ("sdnmpi-trace", _trace(b'"bytes": 4096', b'"bytes": ' + str(2**70).encode())),
    ("sdnmpi-trace", _trace(b'"count": 1024', b'"count": ' + str(2**40).encode())),
    ("sdnmpi-trace", _trace(b'"ranks": [0, 1]', b'"ranks": [' + b"0, 1, " * 50000 + b"0]")),
    ("sdnmpi-trace", _trace(b'"nprocs": 2', b'"nprocs": ' + b"9" * 4000)),
    ("sdnmpi-trace", b"\x1e".join([b"{}"] * 16)),
    ("tag-service", _tag(b'"count": 1048576', b'"count": ' + str(2**70).encode())),
    ("tag-service", _tag(b'"nprocs": 4', b'"nprocs": 1000000000000')),
    ("tag-service", _tag(b'"rank": 0', b'"rank": -1')),
    ("tag-service", _tag(b'"comm": null', b'"comm": [0, 0, 0, 99999999999999999999]')),
    ("tag-service", _tag(b'"job": "42"', b'"job": ["42"]')),
    ("replay", TARGETS["replay"].seeds[0].replace(b"1048576", str(2**64).encode())),
]


@pytest.mark.parametrize(("name", "data"), REGRESSIONS, ids=[f"{n}-{i}" for i, (n, _) in
                                                             enumerate(REGRESSIONS)])  # fmt: skip
def test_inputs_that_broke_a_parser_are_refused_cleanly(name: str, data: bytes):
    problem = fuzz.check(TARGETS[name], data)
    assert problem is None, problem


def test_mutate_changes_inputs_and_is_reproducible():
    seed = b'{"a": [1, 2, 3]}'
    first = [fuzz.mutate(seed, random.Random(s)) for s in range(50)]
    assert first == [fuzz.mutate(seed, random.Random(s)) for s in range(50)]
    assert sum(m != seed for m in first) >= 45


def test_a_crash_and_a_stall_are_reported():
    def boom(data: bytes) -> object:
        if data == b"stall":
            while True:
                pass
        raise KeyError(data)

    target = fuzz.Target("boom", boom, (b"x",))
    assert "KeyError" in (fuzz.check(target, b"x") or "")
    assert (fuzz.check(target, b"stall", limit_s=0.2) or "").startswith("stalled")
    out = fuzz.run(target, [b"x", b"y"])
    assert (out.tried, len(out.crashes)) == (2, 2)
