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
