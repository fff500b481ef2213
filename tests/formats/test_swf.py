"""The SWF parser: fields, header, and malformed lines named by number."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdnmpi.errors import FormatError
from sdnmpi.formats.swf import load_swf, parse_swf

LOG = """\
; Version: 2.2
; Computer: test cluster
; MaxProcs: 128
;
; a comment: not a header field because the key has spaces
1 0 10 3600 64 -1 -1 64 7200 -1 1 5 2 3 1 -1 -1 -1
2 30.5 0 125.25 -1 12.5 -1 8 600 -1 0 6 2 -1 1 -1 1 20

3 60 5 -1 16 -1 -1 16 900 -1 5 7 2 -1 1 -1 -1 -1
"""


def test_fields_and_header() -> None:
    log = parse_swf(LOG)
    assert log.header == {"Version": "2.2", "Computer": "test cluster", "MaxProcs": "128"}
    a, b, c = log.records
    assert (a.job_id, a.submit_s, a.wait_s, a.run_s, a.alloc_procs) == (1, 0.0, 10.0, 3600.0, 64)
    assert (a.req_time_s, a.status, a.user, a.group, a.app) == (7200.0, 1, 5, 2, 3)
    # allocated unknown (-1): the size is the requested one
    assert (b.alloc_procs, b.req_procs, b.procs) == (-1, 8, 8)
    assert (b.submit_s, b.run_s, b.avg_cpu_s, b.preceding_job, b.think_s) == (
        30.5,
        125.25,
        12.5,
        1,
        20.0,
    )
    assert c.run_s == -1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1 0 10 3600 64", "5 fields, an SWF job line has 18"),
        ("1 0 10 3600 64 -1 -1 64 7200 -1 1 5 2 3 1 -1 -1 -1 7", "19 fields"),
        ("1 0 10 abc 64 -1 -1 64 7200 -1 1 5 2 3 1 -1 -1 -1", "field run_s is 'abc'"),
        ("1 0 10 36 6.5 -1 -1 64 7200 -1 1 5 2 3 1 -1 -1 -1", "alloc_procs is 6.5, not an integer"),
        ("1 0 10 36 64 -1 -1 64 7200 -1 1 -7 2 3 1 -1 -1 -1", "field user is -7"),
        ("1 0 10 nan 64 -1 -1 64 7200 -1 1 5 2 3 1 -1 -1 -1", "field run_s is nan"),
        ("0 0 10 36 64 -1 -1 64 7200 -1 1 5 2 3 1 -1 -1 -1", "job number 0"),
        ("4 -1 10 36 64 -1 -1 64 7200 -1 1 5 2 3 1 -1 -1 -1", "job 4 has no submit time"),
        ("1 9 10 36 64 -1 -1 64 7200 -1 1 5 2 3 1 -1 -1 -1", "job 1 already on line 6"),
    ],
)
def test_malformed_line_is_named(line: str, message: str) -> None:
    text = LOG.replace("3 60 5 -1", line + "\n3 60 5 -1", 1)
    lineno = text.splitlines().index(line) + 1
    with pytest.raises(FormatError) as err:
        parse_swf(text, source="log.swf")
    assert f"log.swf:{lineno}:" in str(err.value)
    assert message in str(err.value)


def test_no_job_lines() -> None:
    with pytest.raises(FormatError, match="no job lines"):
        parse_swf("; only: comments\n\n")


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="cannot read"):
        load_swf(tmp_path / "missing.swf")
    bad = tmp_path / "bad.swf"
    bad.write_bytes(b"1 0 \xff\n")
    with pytest.raises(FormatError, match="not UTF-8"):
        load_swf(bad)
    good = tmp_path / "good.swf"
    good.write_text(LOG)
    assert len(load_swf(good).records) == 3
