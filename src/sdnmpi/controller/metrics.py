"""The controller's Prometheus metrics (docs/METRICS.md), in a registry of its own.

The os-ken shim counts events as they happen (a labelled child's ``inc`` is a dict
look-up and a lock of its own, never the app's lock) and, every port-statistics round,
publishes a :class:`Snapshot` of the state it holds under its lock (ports, rules per
switch, jobs); :class:`_SnapshotCollector` renders the last snapshot at scrape time,
so a scrape never waits for the controller and the controller never waits for a
scrape.  Served by :class:`~sdnmpi.metrics.server.MetricsServer`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sdnmpi.controller.portstats import PortSample

#: Seconds buckets of install and planning times (1 ms .. 60 s).
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

#: Error kinds counted by ``sdnmpi_controller_errors_total``.
ERROR_KINDS = (
    "switch_refused",  # OFPT_ERROR from a switch
    "api_refused",  # an API request answered ok: false (bad input, not discovered, ...)
    "api_internal",  # an API request crashed
    "unconfirmed",  # a request's barriers not answered in time
    "recheck",  # a switch's barrier unanswered for recheck_s: its rules read again
    "stats_write",  # --stats-out could not be written
)


def dpid_label(dpid: int) -> str:
    """The ``dpid`` label: hexadecimal, as the logs print it.

    >>> dpid_label(26)
    '0x1a'
    """
    return f"{dpid:#x}"


@dataclass(frozen=True)
class Snapshot:
    """What the shim publishes every statistics round (taken under its lock)."""

    ports: tuple[PortSample, ...] = ()
    rules: dict[int, int] = field(default_factory=dict)  # dpid -> rules installed
    switches: int = 0
    jobs: int = 0  # jobs with routes (install_job)
    tagged_jobs: int = 0


class _SnapshotCollector(Collector):
    def __init__(self) -> None:
        self.snapshot = Snapshot()

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot  # one reference read: the shim replaces it whole
        port_labels = ["dpid", "port", "peer", "direction"]
        nbytes = CounterMetricFamily(
            "sdnmpi_port_bytes",
            "Bytes through a switch port, from its counters.",
            labels=port_labels,
        )
        rate = GaugeMetricFamily(
            "sdnmpi_port_rate_bps",
            "Bits per second through a switch port over the last statistics interval.",
            labels=port_labels,
        )
        util = GaugeMetricFamily(
            "sdnmpi_port_utilization_ratio",
            "Rate over the link's capacity (0..1; ports of links the topology knows).",
            labels=port_labels,
        )
        for p in snap.ports:
            base = [dpid_label(p.dpid), str(p.port_no), p.peer]
            for direction, n, bps, ratio in (
                ("rx", p.rx_bytes, p.rx_bps, p.rx_utilization),
                ("tx", p.tx_bytes, p.tx_bps, p.tx_utilization),
            ):
                nbytes.add_metric([*base, direction], n)
                rate.add_metric([*base, direction], bps)
                if ratio is not None:
                    util.add_metric([*base, direction], ratio)
        rules = GaugeMetricFamily(
            "sdnmpi_switch_rules", "sdnmpi rules the controller has installed on a switch.",
            labels=["dpid"],
        )  # fmt: skip
        for dpid, n in sorted(snap.rules.items()):
            rules.add_metric([dpid_label(dpid)], n)
        switches = GaugeMetricFamily("sdnmpi_controller_switches", "Switches connected.")
        switches.add_metric([], snap.switches)
        jobs = GaugeMetricFamily(
            "sdnmpi_controller_jobs", "Jobs the controller holds routes for, by kind.",
            labels=["kind"],
        )  # fmt: skip
        jobs.add_metric(["routed"], snap.jobs)
        jobs.add_metric(["tagged"], snap.tagged_jobs)
        yield from (nbytes, rate, util, rules, switches, jobs)


class ControllerMetrics:
    """The controller's metric objects and their registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.flow_mods = Counter(
            "sdnmpi_controller_flow_mods", "Flow-mods sent, by switch.", ["dpid"], registry=r
        )
        self.group_mods = Counter(
            "sdnmpi_controller_group_mods", "Group-mods sent, by switch.", ["dpid"], registry=r
        )
        self.packet_ins = Counter(
            "sdnmpi_controller_packet_ins",
            "Packet-ins received, by switch and kind (lldp: discovery; other).",
            ["dpid", "kind"],
            registry=r,
        )
        self.errors = Counter(
            "sdnmpi_controller_errors", "Errors, by kind (docs/METRICS.md).", ["kind"], registry=r
        )
        for kind in ERROR_KINDS:
            self.errors.labels(kind)
        self.install_seconds = Histogram(
            "sdnmpi_controller_install_seconds",
            "API requests that change rules (install_job, remove_job, tag_*, bcast_*): "
            "seconds from the request to the last barrier reply.",
            ["op"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.sync_plan_seconds = Histogram(
            "sdnmpi_controller_sync_plan_seconds",
            "Seconds the planner took to compute a sync (default routes and every job's).",
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self._snapshot = _SnapshotCollector()
        r.register(self._snapshot)
        self._children: dict[tuple[int, str], Any] = {}
        self._lock = threading.Lock()

    def publish(self, snapshot: Snapshot) -> None:
        """Replace what the next scrape shows of the controller's state."""
        self._snapshot.snapshot = snapshot

    def packet_in(self, dpid: int, lldp: bool) -> None:
        """Count one packet-in (a cached child: no label formatting per packet)."""
        key = (dpid, "lldp" if lldp else "other")
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self.packet_ins.labels(dpid_label(dpid), key[1])
                self._children[key] = child
        child.inc()

    def sent(self, dpid: int, flow_mods: int, group_mods: int) -> None:
        """Count the flow- and group-mods of one send to a switch."""
        label = dpid_label(dpid)
        if flow_mods:
            self.flow_mods.labels(label).inc(flow_mods)
        if group_mods:
            self.group_mods.labels(label).inc(group_mods)

    def error(self, kind: str) -> None:
        self.errors.labels(kind).inc()
