"""Measurement jobs (NetSA-style pattern recording from switch counters): requests,
which routes are installed, and per-pair bytes from the first switch's counters."""

from __future__ import annotations

import pytest

from sdnmpi.controller import measure
from sdnmpi.core.generators import leaf_spine
from sdnmpi.errors import ConfigError
from tests.controller.conftest import steady


@pytest.mark.parametrize(
    ("req", "needle"),
    [
        ({"op": "measure_read", "job_id": 5}, "job_id must be"),
        ({"op": "measure_read", "job_id": True}, "job_id must be"),
        ({"op": "measure_start", "job_id": measure.FIRST_ID, "hosts": ["h1"]}, "2..4096"),
        ({"op": "measure_start", "job_id": measure.FIRST_ID, "hosts": ["h1", "h1"]}, "distinct"),
        ({"op": "measure_start", "job_id": measure.FIRST_ID, "hosts": "h1,h2"}, "list of host"),
        ({"op": "measure_stop", "job_id": measure.FIRST_ID, "x": 1}, "takes keys"),
        ({"op": "measure_go", "job_id": measure.FIRST_ID}, "unknown measurement op"),
    ],
)
def test_bad_requests(req, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        measure.parse(req)


def test_routes_follow_the_default_paths_and_skip_job_pairs() -> None:
    setup = steady(leaf_spine(2, 2, 2))
    topo = setup.planner.live_topology()
    assert topo is not None
    defaults = setup.planner.default_routes()
    mac = {h.name: h.mac for h in topo.hosts}
    taken = {(mac["h1"], mac["h3"])}
    routes, skipped = measure.routes_for(topo, defaults, ["h1", "h3", "h4"], taken)
    assert skipped == ["h1>h3"]
    assert len(routes) == 5  # 3 x 2 ordered pairs, one held by a job
    by_key = {r.key: r for r in defaults}
    assert all(by_key[r.key] == r for r in routes)  # nothing moves
    with pytest.raises(ConfigError, match="h9"):
        measure.routes_for(topo, defaults, ["h1", "h9"], set())
    # installing them as a job is accepted by the planner
    setup.send(setup.planner.install_job(measure.FIRST_ID, routes))
    assert measure.FIRST_ID in setup.planner.jobs
