"""MPI host files."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.errors import FormatError
from sdnmpi.formats.hostfile import load_hostfile, parse_hostfile


def test_mpich_and_openmpi_forms():
    assert parse_hostfile("a\nb:3\nc slots=2 max_slots=4  # comment\n\n") == [
        ("a", 1),
        ("b", 3),
        ("c", 2),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no hosts"),
        ("a b c", "cannot parse"),
        ("a:0", "slots must be >= 1"),
        ("a colour=2", "unknown option"),
    ],
)
def test_bad_host_files(text, message):
    with pytest.raises(FormatError, match=message):
        parse_hostfile(text, source="hf")


def test_ranks_fill_lines_then_cycle(tmp_path: Path):
    t = leaf_spine(1, 2, 2, cores=4)
    hf = tmp_path / "hf"
    hf.write_text("h1:2\nh3\n")
    assert load_hostfile(hf, t, 5).hosts == ("h1", "h1", "h3", "h1", "h1")
    assert load_hostfile(hf, t, 7).hosts.count("h1") == 5  # the file decides the slots
    hf.write_text("h1\nh9\n")
    with pytest.raises(FormatError, match="unknown host\\(s\\) \\['h9'\\]"):
        load_hostfile(hf, t, 2)
