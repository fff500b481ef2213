"""A 1024-rank alltoall expands to the right size (timings: benchmarks/bench_core.py)."""

from __future__ import annotations

from sdnmpi.core.collectives import expand


def test_scattered_alltoall_1024_ranks():
    s = expand("alltoall", 1024, 1, algorithm="scattered")
    pattern = s.to_pattern()
    assert len(s.steps) == 32
    assert pattern.total_bytes == 1024 * 1023
    assert sum(len(p) for p in pattern.phases) == 1024 * 1023
