"""Uploads decoded in a child with hard limits (issue 12's memory-bounded runs): the
child's address space is limited by the test, the manager's memory does not grow."""

from __future__ import annotations

import gzip
import io
import resource
import tarfile
from collections.abc import Iterator

import pytest

from sdnmpi.core.pattern import Pattern
from sdnmpi.formats.native import pattern_to_dict
from sdnmpi.manager import patternfile, sandbox
from sdnmpi.manager.model import Kind, ManagerError
from sdnmpi.testing import fuzz
from tests.manager.conftest import pairs_pattern, pattern_bytes


def test_the_child_decodes_as_the_manager_would(monkeypatch):
    monkeypatch.setattr(sandbox, "IN_PROCESS_JSON_BYTES", 0)  # JSON through the child too
    for name, data in (("p.json", pattern_bytes(pairs_pattern(4))),
                       ("t.tar.gz", fuzz._pfprof_tar()), ("n.xml", fuzz._netsa_xml())):  # fmt: skip
        inside, child = patternfile.decode(name, data), sandbox.decode(name, data)
        assert _comparable(child) == _comparable(inside), name


def _comparable(pattern: Pattern) -> dict[str, object]:
    """The pattern as stored, without where it was read from (a temporary path)."""
    doc = pattern_to_dict(pattern)
    doc.get("meta", {}).pop("source", None)
    return doc


def test_a_refusal_comes_back_with_its_kind_and_message():
    with pytest.raises(ManagerError) as exc:
        sandbox.decode("bad.xml", b"<traffic_matrix><matrix")
    assert exc.value.kind is Kind.INVALID_ARGUMENT and "malformed XML" in str(exc.value)
    with pytest.raises(ManagerError) as exc:
        sandbox.decode(
            "big.json",
            pattern_bytes(pairs_pattern(4)).replace(b'"nprocs": 4', b'"nprocs": ' + b"9" * 30),
        )
    assert exc.value.kind in (Kind.INVALID_ARGUMENT, Kind.RESOURCE_EXHAUSTED)


HEAD = b'{"description": "", "n_events": 0, "n_procs": 1, "rank": 0, "tx_bytes": ['
TAIL = b'0], "rx_bytes": [0], "tx_messages": [0], "rx_messages": [0]}'
CHUNK = b"0," * 1_000_000


def _parts(millions: int) -> Iterator[bytes]:
    yield HEAD
    for _ in range(millions):
        yield CHUNK
    yield TAIL


class _Body(io.RawIOBase):
    """The rank file's bytes, made as they are read (the test keeps none of it)."""

    def __init__(self, millions: int) -> None:
        self.parts = _parts(millions)
        self.left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while not self.left:
            self.left = next(self.parts, b"")
            if not self.left:
                return 0
        n = min(len(buf), len(self.left))
        buf[:n] = self.left[:n]
        self.left = self.left[n:]
        return n


def _inflating_archive(millions: int) -> bytes:
    """A pfprof archive whose one rank file is a JSON array of ``millions`` million
    zeros: a few hundred kB compressed, gigabytes as Python objects."""
    out = io.BytesIO()
    info = tarfile.TarInfo("a/oxton-result0.json")
    info.size = len(HEAD) + len(CHUNK) * millions + len(TAIL)
    with (
        gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        tar.addfile(info, io.BufferedReader(_Body(millions)))
    return out.getvalue()


def test_an_inflating_upload_hits_the_childs_memory_limit_not_the_managers(monkeypatch):
    monkeypatch.setattr(sandbox, "MEMORY_BYTES", 768 << 20)  # the test's hard limit
    data = _inflating_archive(120)  # 240 MB of text, ~1 GB of Python objects
    assert len(data) < 4 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ManagerError) as exc:
        sandbox.decode("bomb.tar.gz", data)
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert exc.value.kind is Kind.RESOURCE_EXHAUSTED, exc.value
    assert "768 MiB" in str(exc.value)
    assert grew_kib < 100 * 1024  # the manager's own high-water mark barely moved


def test_a_decoder_that_takes_too_long_is_stopped(monkeypatch):
    monkeypatch.setattr(sandbox, "WALL_SECONDS", 0.01)
    with pytest.raises(ManagerError) as exc:
        sandbox.decode("t.tar.gz", fuzz._pfprof_tar())
    assert exc.value.kind is Kind.RESOURCE_EXHAUSTED and "took more than" in str(exc.value)
