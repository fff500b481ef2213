"""The manager's metrics follow a real job through the gRPC server: jobs by state,
planning and install histograms, finished jobs, errors by status code."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.manager.client import ManagerClient
from sdnmpi.manager.fake import FakeController
from sdnmpi.manager.metrics import ManagerMetrics
from sdnmpi.manager.model import ManagerError
from sdnmpi.manager.server import ManagerServer
from sdnmpi.manager.service import ManagerService
from sdnmpi.manager.sqlite import SqliteStore
from sdnmpi.wire import manager_pb2 as pb
from tests.manager.conftest import pairs_pattern, pattern_bytes
from tests.metrics.support import scrape, total


@pytest.fixture
def manager(sock_dir: Path, controller: FakeController) -> Iterator[ManagerServer]:
    store = SqliteStore(sock_dir / "m.db")
    service = ManagerService(store, controller, time.time)
    server = ManagerServer(
        service,
        sock_dir / "root.sock",
        reconcile_interval_s=0,
        metrics=ManagerMetrics(),
        metrics_listen=("127.0.0.1", 0),
    )
    server.start()
    yield server
    server.stop(0.5)
    store.close()
    assert server.metrics_server is None


def jobs_by_state(port: int) -> dict[str, float]:
    time.sleep(1.05)  # the count is refreshed at most once a second
    samples = scrape(port)
    return {dict(ls)["state"]: v for (n, ls), v in samples.items() if n == "sdnmpi_manager_jobs"}


@pytest.mark.root  # acts as the scheduler (root): Slurm job ids
def test_a_job_moves_the_metrics(manager: ManagerServer, sock_dir: Path):
    assert manager.metrics_server is not None
    port = manager.metrics_server.port
    before = scrape(port)
    assert total(before, "sdnmpi_manager_job_install_seconds_count") == 0
    assert jobs_by_state(port) == {"created": 0, "starting": 0, "routed": 0, "default": 0}
    pat = sock_dir / "p.json"
    pat.write_bytes(pattern_bytes(pairs_pattern(2)))
    with ManagerClient(str(sock_dir / "root.sock"), timeout_s=10) as c:
        c.create_job(7, "cg", 1000, 2, pattern_file=pat)
        assert jobs_by_state(port)["created"] == 1
        c.start_job(7)
        assert jobs_by_state(port)["starting"] == 1
        c.register_process(7, 0, "h1", 11)
        c.register_process(7, 1, "h5", 12)
        status = c.wait_routes(7, 1000)
        assert status.state == pb.JOB_STATE_ROUTED
        assert jobs_by_state(port) == {"created": 0, "starting": 0, "routed": 1, "default": 0}
        routed = scrape(port)
        assert total(routed, "sdnmpi_manager_job_install_seconds_count") == 1
        assert total(routed, "sdnmpi_manager_plan_seconds_count") >= 1
        assert total(routed, "sdnmpi_manager_jobs_routed_total") == 1
        assert total(routed, "sdnmpi_manager_job_flow_mods_total") == status.flow_mods > 0
        c.finish_job(7)
        with pytest.raises(ManagerError):
            c.finish_job(404)  # NOT_FOUND
        with pytest.raises(ManagerError):
            c.create_job(0, "x", 1, 2)  # INVALID_ARGUMENT
    assert jobs_by_state(port)["routed"] == 0
    after = scrape(port)
    assert total(after, "sdnmpi_manager_jobs_finished_total") == 1
    assert total(after, "sdnmpi_manager_errors_total", kind="not_found") == 1
    assert total(after, "sdnmpi_manager_errors_total", kind="invalid_argument") == 1
    assert total(after, "sdnmpi_manager_errors_total", kind="routing_failed") == 0
