"""The Python side of the replay format (sdnmpi.formats.replay) and ``pattern convert``."""

from __future__ import annotations

import doctest
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.core import workloads
from sdnmpi.core.pattern import Cell, Pattern, Phase
from sdnmpi.errors import FormatError, PatternError
from sdnmpi.formats import replay
from tests.cliutil import run_cli

CHARS = st.characters(codec="utf-8", exclude_characters="\0")  # no surrogates, no NUL
texts = st.text(CHARS, max_size=24)


@st.composite
def patterns(draw: st.DrawFn) -> Pattern:
    """Rank-level patterns, with the cases the writer must normalize (0 messages)."""
    nprocs = draw(st.integers(1, 6))
    ranks = st.integers(0, nprocs - 1)
    phases = []
    for _ in range(draw(st.integers(0, 4))):
        repeat = draw(st.one_of(st.integers(1, 5), st.just(replay.MAX_REPEAT)))
        # a pattern's bytes add up within 2^63-1 (sdnmpi.core.pattern.MAX_TOTAL)
        big = st.integers(0, 2**40 if repeat <= 5 else 2**20)
        cells = draw(
            st.lists(
                st.builds(
                    Cell,
                    src=ranks,
                    dst=ranks,
                    size_bytes=st.one_of(st.integers(0, 5000), big),
                    messages=st.integers(0, 7),
                ),
                max_size=12,
            )
        )
        phases.append(Phase.from_cells(draw(texts), cells, repeat=repeat))
    return Pattern(draw(texts), nprocs, tuple(phases), meta={"dropped": True})


@settings(max_examples=200, deadline=None)
@given(patterns())
def test_round_trip(pattern: Pattern) -> None:
    text = replay.dumps(pattern)
    back = replay.loads(text)
    assert back == replay.replayable(pattern)
    assert replay.dumps(back) == text
    assert back.total_bytes == pattern.total_bytes  # no byte is lost
    assert all(int(ph.messages.min()) >= 1 for ph in back.phases if len(ph))


@given(st.text(CHARS))
def test_text_round_trip(text: str) -> None:
    field = replay.encode_text(text)
    assert field and " " not in field and field.isascii() and field.isprintable()
    if len(text.encode()) <= replay.MAX_TEXT_BYTES:
        assert replay.decode_text(field) == text
    else:
        with pytest.raises(ValueError, match="longer than 1024 bytes"):
            replay.decode_text(field)


def test_doctests() -> None:
    assert doctest.testmod(replay).failed == 0


def test_replayable_normalizes_cells_and_drops_annotations() -> None:
    phase = Phase.from_cells(
        "p",
        [
            Cell(0, 1, 0, 0),  # nothing at all: left out
            Cell(1, 0, 100, 0),  # bytes without a message count: one message
            Cell(1, 1, 8, 2, kind="latency", max_hops=2, sizes=((4, 2),)),
        ],
        repeat=3,
    )
    p = Pattern("n", 2, (phase,), meta={"source": "x"})
    r = replay.replayable(p)
    assert r.meta == {} and r.hosts is None
    (ph,) = r.phases
    assert [(c.src, c.dst, c.size_bytes, c.messages) for c in ph.cells()] == [
        (1, 0, 100, 1),
        (1, 1, 8, 2),
    ]
    assert ph.kind is None and ph.max_hops is None and not ph.sizes and ph.repeat == 3


def test_long_texts_are_shortened_at_a_character_boundary() -> None:
    p = Pattern("é" * 600, 1, (Phase.from_cells("€" * 400, []),))
    back = replay.loads(replay.dumps(p))
    assert back.name == "é" * 512
    assert back.phases[0].label == "€" * 341  # 1023 bytes: a 342nd would need 1026


def test_host_level_patterns_are_refused() -> None:
    p = Pattern("hosts", 2, (Phase.from_cells("p", [(0, 1, 10)]),), hosts=("h1", "h2"))
    with pytest.raises(PatternError, match=r"host-level .*\(convert without --topology\)"):
        replay.dumps(p)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (Pattern("r", 2, (Phase.from_cells("p", [(0, 1, 1)], repeat=2**31),)), "repeat 2147483648"),
        (Pattern("a\0b", 1, ()), "NUL character in a name"),
        (Pattern("n", 1, (Phase.from_cells("a\0", []),)), "NUL character in a label"),
        (
            Pattern("m", 2, (Phase.from_cells("p", [Cell(0, 1, 1, 2**31)]),)),
            "2147483648 messages exceeds",
        ),
    ],
)
def test_limits_of_the_format(pattern: Pattern, message: str) -> None:
    """(More ranks than the format allows, or bytes that add up past 64 bits: the
    core refuses such patterns before a writer sees them, tests/core.)"""
    with pytest.raises(PatternError, match=message):
        replay.dumps(pattern)


def test_load_names_the_file_and_keeps_the_source(tmp_path: Path) -> None:
    path = tmp_path / "p.replay"
    replay.save_replay(workloads.build("allreduce:nprocs=4,bytes=64"), path)
    p = replay.load_replay(path)
    assert p.meta == {"format": "sdnmpi-replay", "source": str(path)}
    with pytest.raises(FormatError, match=r"nope\.replay: cannot read"):
        replay.load_replay(tmp_path / "nope.replay")
    path.write_bytes(path.read_bytes() + b"x\n")
    with pytest.raises(FormatError, match=rf"^{path}:\d+: trailing data after the last phase$"):
        replay.load_replay(path)


def test_loads_accepts_str_and_bytes() -> None:
    text = "sdnmpi-replay 1\npattern 2 1 -\nphase 1 1 -\n0 1 5 2\n"
    assert replay.loads(text) == replay.loads(text.encode())
    with pytest.raises(FormatError, match=r"^<replay>:2: byte 0xc3 not allowed"):
        replay.loads("sdnmpi-replay 1\npattern 2 0 é\n")


def test_reader_collects_large_phases_as_int64() -> None:
    cells = [(s, d, 2**62 // 64, 1) for s in range(8) for d in range(8)]
    p = Pattern("dense", 8, (Phase.from_cells("all", [Cell(*c) for c in cells]),))
    back = replay.loads(replay.dumps(p))
    assert back.phases[0].size_bytes.dtype == np.int64
    assert back.phases[0].total_bytes == 2**62


# -- sdnmpi pattern convert -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "extra"), [("cg.replay", []), ("cg.REPLAY", []), ("cg.txt", ["--format", "replay"])]
)
def test_convert_writes_replay(capsys, tmp_path: Path, name: str, extra: list[str]) -> None:
    spec = "cg:nprocs=8,klass=S"
    out = tmp_path / name
    code, stdout, err = run_cli(capsys, "pattern", "convert", spec, str(out), *extra)
    assert code == 0, err
    assert "8 endpoints" in stdout
    assert replay.load_replay(out).phases == replay.replayable(workloads.build(spec)).phases


def test_convert_from_json_to_replay(capsys, tmp_path: Path) -> None:
    spec = "butterfly:nprocs=12,size_bytes=4096,iterations=3"
    assert run_cli(capsys, "pattern", "convert", spec, str(tmp_path / "b.json"))[0] == 0
    code, _, err = run_cli(
        capsys, "pattern", "convert", str(tmp_path / "b.json"), str(tmp_path / "b.replay")
    )
    assert code == 0, err
    back = replay.load_replay(tmp_path / "b.replay")
    assert back.total_bytes == workloads.build(spec).total_bytes


def test_convert_refuses_host_level_replay(capsys, tmp_path: Path) -> None:
    code, _, err = run_cli(
        capsys, "pattern", "convert", "cg:nprocs=16,klass=S", str(tmp_path / "h.replay"),
        "--topology", "milk",
    )  # fmt: skip
    assert code == 2
    assert err.count("\n") == 1 and "host-level" in err and "Traceback" not in err
    assert not (tmp_path / "h.replay").exists()


def test_convert_unknown_format(capsys, tmp_path: Path) -> None:
    code, _, err = run_cli(
        capsys, "pattern", "convert", "cg:nprocs=4,klass=S", str(tmp_path / "x"), "-f", "yaml"
    )
    assert code == 2
    assert "unknown pattern format 'yaml' (want json, netsa, pfprof, replay)" in err
