"""The job-level sharing model against the flow simulator, and by hand."""

from __future__ import annotations

import numpy as np
import pytest

from sdnmpi.cluster import sharing
from sdnmpi.core import workloads
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.manager import planning
from sdnmpi.sim import simulate


@pytest.mark.parametrize("spec", ["cg:nprocs=16", "alltoall:nprocs=16,bytes=65536"])
@pytest.mark.parametrize("router", ["dmodk", "ours"])
def test_alone_time_matches_the_flow_simulator(spec: str, router: str) -> None:
    fab = Fabric(fat_tree(4))
    hosts = [h.name for h in fab.topology.hosts]
    order = np.random.default_rng(3).permutation(len(hosts))
    placement = Placement(tuple(hosts[i] for i in order))
    dem = Demands.from_pattern(fab, workloads.build(spec), placement).per_host_pair()
    routing = route(router, fab, dem)
    traffic = sharing.job_traffic(fab, dem, planning.pair_routes(fab, dem, routing))
    assert simulate(fab, dem, routing).total_s == pytest.approx(traffic.alone_s, rel=0.03)
    assert traffic.ideal_s <= traffic.alone_s * (1 + 1e-12)


def test_three_jobs_max_min_by_hand() -> None:
    # One link of capacity c (arc 0).  At its alone rate job 1 puts c on it, job 2
    # c/2, job 3 uses another arc only.  Filling raises the fractions x of jobs 1 and
    # 2 together until c*x + c/2*x = c: x = 2/3; job 3 stops at its cap, x = 1.  Job
    # 2's alone time is twice its ideal, so its speed is 2/3 * 1/2 = 1/3.
    fab = Fabric(leaf_spine(1, 1, 2))
    c = float(fab.capacity_bps[0]) / 8.0
    one = np.zeros(fab.narcs)
    one[0] = c
    half = np.zeros(fab.narcs)
    half[0] = c / 2
    other = np.zeros(fab.narcs)
    other[1] = c
    got = sharing.speeds(
        fab,
        {
            1: sharing.JobTraffic(one, 1.0, 1.0),
            2: sharing.JobTraffic(half, 0.5, 1.0),
            3: sharing.JobTraffic(other, 1.0, 1.0),
        },
    )
    assert got[1] == pytest.approx(2 / 3) and got[2] == pytest.approx(1 / 3)
    assert got[3] == pytest.approx(1.0)
