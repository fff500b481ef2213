"""The job stream's sources: the synthetic generator and SWF logs."""

from __future__ import annotations

import numpy as np
import pytest

from sdnmpi.cluster.jobs import Mix, MixEntry, StreamJob, Synthetic, from_swf, synthetic
from sdnmpi.core import workloads
from sdnmpi.errors import ConfigError, FormatError
from sdnmpi.formats.swf import parse_swf


def test_same_seed_same_stream_other_seed_other() -> None:
    params = Synthetic(njobs=50, max_size=64)
    a, b = synthetic(params, 256, seed=3), synthetic(params, 256, seed=3)
    assert a == b
    assert synthetic(params, 256, seed=4) != a


def test_synthetic_shape() -> None:
    params = Synthetic(njobs=2000, load=0.8, min_size=2, max_size=64)
    jobs = synthetic(params, 128, seed=1)
    sizes = np.array([j.nprocs for j in jobs])
    assert sizes.min() >= 2 and sizes.max() <= 64
    pow2 = np.mean([(n & (n - 1)) == 0 for n in sizes])
    assert 0.75 <= pow2 <= 0.85  # 0.75 drawn as powers of two, plus uniform ones that are
    durations = np.array([j.duration_s for j in jobs])
    assert durations.min() >= 60.0 and durations.max() <= 3600.0
    # log-uniform: the median is near the geometric mean of the bounds (~465 s)
    assert 380 < float(np.median(durations)) < 560
    arrivals = np.array([j.arrival_s for j in jobs])
    assert arrivals[0] == 0.0 and (np.diff(arrivals) >= 0).all()
    offered = float((sizes * durations).sum()) / (128 * arrivals[-1])
    assert offered == pytest.approx(0.8, rel=0.1)
    shares = np.array([j.comm_share for j in jobs])
    assert shares.min() >= 0.3 and shares.max() <= 0.7


def test_mix_respects_power_of_two_and_builds() -> None:
    jobs = synthetic(Synthetic(njobs=200, max_size=48), 64, seed=2)
    for j in jobs:
        name = j.pattern.partition(":")[0]
        if j.nprocs & (j.nprocs - 1):
            assert name not in ("cg", "ft"), j
    for spec in {j.pattern for j in jobs[:30]}:
        assert workloads.build(spec).nprocs == int(spec.split("nprocs=")[1].split(",")[0])


def test_bad_parameters() -> None:
    with pytest.raises(ConfigError, match="more than the 16 hosts"):
        synthetic(Synthetic(max_size=32), 16, seed=0)
    with pytest.raises(ConfigError, match="comm_share"):
        Mix(comm_share=(0.5, 1.0))
    with pytest.raises(ConfigError, match="any size"):
        Mix(entries=(MixEntry("cg:nprocs={n}", 1.0, pow2_only=True),))
    with pytest.raises(ConfigError, match="must be positive"):
        StreamJob(1, 0.0, 0, 10.0, 0.5, "")


SWF = """\
; MaxProcs: 64
10 100 5 50 8 -1 -1 8 -1 -1 1 1 1 -1 1 -1 -1 -1
11 130 5 -1 8 -1 -1 8 -1 -1 5 1 1 -1 1 -1 -1 -1
12 160 5 40 -1 -1 -1 -1 -1 -1 1 1 1 -1 1 -1 -1 -1
13 170 5 40 128 -1 -1 128 -1 -1 1 1 1 -1 1 -1 -1 -1
14 200 5 70 -1 -1 -1 3 -1 -1 1 1 1 -1 1 -1 -1 -1
"""


def test_from_swf() -> None:
    jobs, skipped = from_swf(parse_swf(SWF), hosts=64, seed=0)
    assert skipped == {"no_run_time": 1, "no_size": 1, "too_large": 1}
    assert [(j.job_id, j.arrival_s, j.nprocs, j.duration_s) for j in jobs] == [
        (10, 0.0, 8, 50.0),
        (14, 100.0, 3, 70.0),
    ]
    assert from_swf(parse_swf(SWF), 64, seed=0) == (jobs, skipped)
    with pytest.raises(FormatError, match="no job of the log fits"):
        from_swf(parse_swf(SWF), hosts=2, seed=0)
