"""The manager's Prometheus metrics (docs/METRICS.md), in a registry of its own.

:class:`ManagerMetrics` is the :class:`~sdnmpi.manager.jobrouting.RoutingEvents` the
service reports planning, installs, failures and finished jobs to, counts the gRPC
calls' errors (:class:`~sdnmpi.manager.grpcapi.Servicer`), and reads the jobs by state
from the store when scraped (under the server's lock, given up after
:data:`LOCK_WAIT_S`: a busy manager answers the previous count instead; at most once per
:data:`JOBS_EVERY_S`).  Served by :class:`~sdnmpi.metrics.server.MetricsServer`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sdnmpi.manager.model import Job, JobState

#: Seconds buckets of planning and install times (1 ms .. 2 min).
SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
#: How long a scrape waits for the server's lock to count the jobs.
LOCK_WAIT_S = 0.5
#: Jobs are counted at most this often (seconds); scrapes in between see the last count.
JOBS_EVERY_S = 1.0

#: Error kinds counted besides the gRPC status codes (lower case: ``invalid_argument``).
ROUTING_FAILED = "routing_failed"

#: The states ``sdnmpi_manager_jobs`` shows (finished jobs are a counter).
LIVE_STATES = (JobState.CREATED, JobState.STARTING, JobState.ROUTED, JobState.DEFAULT)


class _JobsCollector(Collector):
    def __init__(self) -> None:
        self.count: Callable[[], dict[JobState, int] | None] = lambda: None
        self._last: dict[JobState, int] = {}
        self._at = -1e9

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        if now - self._at >= JOBS_EVERY_S:
            counted = self.count()
            if counted is not None:
                self._last, self._at = counted, now
        jobs = GaugeMetricFamily(
            "sdnmpi_manager_jobs", "Jobs not finished, by state.", labels=["state"]
        )
        for state in LIVE_STATES:
            jobs.add_metric([state.name.lower()], self._last.get(state, 0))
        yield jobs


class ManagerMetrics:
    """The manager's metric objects and their registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.plan_seconds = Histogram(
            "sdnmpi_manager_plan_seconds",
            "Seconds a job's routes took to compute (one planning attempt).",
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.install_seconds = Histogram(
            "sdnmpi_manager_job_install_seconds",
            "Seconds from a job's routing start to its routes confirmed on the switches.",
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.install_flow_mods = Counter(
            "sdnmpi_manager_job_flow_mods", "Flow-mods the controller sent for jobs' routes.",
            registry=r,
        )  # fmt: skip
        self.routed = Counter(
            "sdnmpi_manager_jobs_routed", "Jobs whose routes were installed.", registry=r
        )
        self.finished_jobs = Counter(
            "sdnmpi_manager_jobs_finished", "Jobs that finished.", registry=r
        )
        self.errors = Counter(
            "sdnmpi_manager_errors",
            "Errors, by kind: a gRPC status code of a refused call, or routing_failed.",
            ["kind"],
            registry=r,
        )
        for kind in (ROUTING_FAILED, "invalid_argument", "permission_denied", "internal"):
            self.errors.labels(kind)
        self._jobs = _JobsCollector()
        r.register(self._jobs)

    def count_jobs_from(
        self, list_jobs: Callable[[], list[Job]], lock: threading.Condition
    ) -> None:
        """Count the jobs by state with ``list_jobs`` (the store's unfinished jobs) under
        ``lock`` when scraped."""

        def count() -> dict[JobState, int] | None:
            if not lock.acquire(timeout=LOCK_WAIT_S):
                return None
            try:
                jobs = list_jobs()
            finally:
                lock.release()
            out: dict[JobState, int] = {}
            for job in jobs:
                out[job.state] = out.get(job.state, 0) + 1
            return out

        self._jobs.count = count

    # -- RoutingEvents ------------------------------------------------------------------
    def planned(self, seconds: float) -> None:
        self.plan_seconds.observe(max(0.0, seconds))

    def routed_job(self, job: Job) -> None:
        self.routed.inc()
        self.install_seconds.observe(max(0.0, job.install.install_s))
        self.install_flow_mods.inc(job.install.flow_mods)

    def routing_failed(self) -> None:
        self.errors.labels(ROUTING_FAILED).inc()

    def finished(self) -> None:
        self.finished_jobs.inc()

    # -- the gRPC adapter ---------------------------------------------------------------
    def refused(self, code_name: str) -> None:
        """A call ended with gRPC status ``code_name`` (``INVALID_ARGUMENT``, ...)."""
        self.errors.labels(code_name.lower()).inc()
