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


def test_ranks_fill_lines_then_cycle(tmp_path: Path, caplog):
    t = leaf_spine(1, 2, 2, cores=4)
    hf = tmp_path / "hf"
    hf.write_text("h1:2\nh3\n")
    assert load_hostfile(hf, t, 3).hosts == ("h1", "h1", "h3")
    assert not caplog.records
    assert load_hostfile(hf, t, 5).hosts == ("h1", "h1", "h3", "h1", "h1")
    assert "3 slots for 5 ranks: cycled through the file" in caplog.text
    assert "so h1 carry more ranks than slots" in caplog.text
    assert load_hostfile(hf, t, 7).hosts.count("h1") == 5  # the file decides the slots
    hf.write_text("h1\nh9\n")
    with pytest.raises(FormatError, match="unknown host\\(s\\) \\['h9'\\]"):
        load_hostfile(hf, t, 2)


def test_huge_slot_counts_and_binary_files_are_errors_not_hangs(tmp_path: Path):
    t = leaf_spine(1, 2, 2, cores=4)
    hf = tmp_path / "hf"
    hf.write_text("h1 slots=99999999999\n")
    with pytest.raises(FormatError, match="99999999999 slots, more than 1048576"):
        load_hostfile(hf, t, 2)
    hf.write_text(f"h1:{1 << 20}\nh3\n")  # the most one line may give: not expanded
    assert load_hostfile(hf, t, 2).hosts == ("h1", "h1")
    hf.write_bytes(b"h1\n\xff\xfe\n")
    with pytest.raises(FormatError, match="not a text file"):
        load_hostfile(hf, t, 2)
