"""Pattern specs: bad values are named in the error (sdnmpi.core.workloads)."""

from __future__ import annotations

import pytest

from sdnmpi.core import workloads
from sdnmpi.errors import PatternError


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("allreduce:nprocs=4,bytes=-5", "allreduce: bytes must be >= 0, got -5"),
        ("bcast:nprocs=4,count=-1", "bcast: count must be >= 0, got -1"),
        ("allreduce:nprocs=4", "allreduce: a message size (bytes or count) is required"),
        ("allreduce:nprocs=4,bytes=8,count=1", "allreduce: give bytes or count, not both"),
    ],
)
def test_a_bad_size_is_named(spec: str, message: str) -> None:
    with pytest.raises(PatternError) as exc:
        workloads.build(spec)
    assert str(exc.value) == message


def test_a_zero_byte_collective_is_fine() -> None:
    assert workloads.build("allreduce:nprocs=4,bytes=0").total_bytes == 0


def test_patterns_stay_inside_64_bits_and_the_endpoint_limit() -> None:
    from sdnmpi.core.pattern import MAX_NPROCS, Pattern, Phase

    too_many = rf"nprocs must be 1\.\.{MAX_NPROCS}, got {MAX_NPROCS + 1}"
    with pytest.raises(PatternError, match=too_many):
        Pattern("big", MAX_NPROCS + 1, ())
    with pytest.raises(PatternError, match=r"bytes add up to .*more than 2\^63-1"):
        Phase.from_cells("p", [(0, 1, 2**63 - 1), (0, 1, 1)])  # merged: would wrap
    assert Phase.from_cells("p", [(0, 1, 2**62), (0, 1, 2**62 - 1)]).total_bytes == 2**63 - 1
    with pytest.raises(PatternError, match="does not fit in a 64-bit integer"):
        Phase.from_cells("p", [(0, 1, 2**64)])
    many = Phase.from_cells("p", [(0, 1, 2**62)], repeat=2**31 - 1)
    assert Pattern("many", 2, (many, many)).total_bytes == 2 * 2**62 * (2**31 - 1)  # exact
    with pytest.raises(PatternError, match=r"allreduce: nprocs must be 1\.\.1048576, got 10000000"):
        workloads.build("allreduce:nprocs=10000000,bytes=8")
