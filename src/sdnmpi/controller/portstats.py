"""Per-port byte counters and throughput time series, pure: samples in, rates out.

The os-ken shim polls ``OFPPortStatsRequest`` and hands every counter sample to
:meth:`PortStats.add` with the time it was taken (``now``); the rate over the
interval since the previous sample of the same (dpid, port) is recorded.  A
counter that went backwards (a switch restart) starts the series over without
a rate.  Only :meth:`PortStats.write` touches a file.

>>> s = PortStats()
>>> s.add(1, 2, rx_bytes=0, tx_bytes=0, now=10.0)
>>> s.add(1, 2, rx_bytes=1000, tx_bytes=500, now=12.0)
PortRate(dpid=1, port_no=2, time_s=12.0, rx_bps=4000.0, tx_bps=2000.0)
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError

#: Rate samples kept per port (one hour at the default 2 s interval).
DEFAULT_HISTORY = 1800

#: How long after the last read of the port rates (the API's ``port_stats``, which the
#: console polls) the controller keeps polling at its live interval.
LIVE_WINDOW_S = 10.0


def poll_interval(
    now: float, last_read: float | None, interval_s: float, live_interval_s: float
) -> float:
    """Seconds until the next port-statistics poll: ``live_interval_s`` while somebody
    watches (read the rates within :data:`LIVE_WINDOW_S`), else ``interval_s``.

    Polling every switch twice a second costs the controller CPU on a large fabric for
    nothing while nobody looks; a console needs it to show loads within a second.

    >>> poll_interval(100.0, None, 2.0, 0.5)
    2.0
    >>> poll_interval(100.0, 95.0, 2.0, 0.5)
    0.5
    >>> poll_interval(100.0, 80.0, 2.0, 0.5)
    2.0
    """
    if last_read is not None and now - last_read < LIVE_WINDOW_S:
        return min(interval_s, live_interval_s)
    return interval_s


@dataclass(frozen=True)
class PortRate:
    """Throughput of one port over the interval ending at ``time_s``, in bit/s."""

    dpid: int
    port_no: int
    time_s: float
    rx_bps: float
    tx_bps: float


@dataclass(frozen=True)
class _Sample:
    time_s: float
    rx_bytes: int
    tx_bytes: int


class PortStats:
    """Last counter sample and the rate series of every (dpid, port)."""

    def __init__(self, history: int = DEFAULT_HISTORY) -> None:
        if history < 1:
            raise ConfigError(f"port-stats history must be >= 1, got {history}")
        self._last: dict[tuple[int, int], _Sample] = {}
        self._series: dict[tuple[int, int], deque[PortRate]] = {}
        self._history = history

    def add(
        self, dpid: int, port_no: int, *, rx_bytes: int, tx_bytes: int, now: float
    ) -> PortRate | None:
        """Record one counter sample; the rate since the previous one (``None`` if none)."""
        key = (dpid, port_no)
        prev = self._last.get(key)
        self._last[key] = _Sample(now, rx_bytes, tx_bytes)
        if prev is None or now <= prev.time_s:
            return None
        if rx_bytes < prev.rx_bytes or tx_bytes < prev.tx_bytes:
            return None  # counters reset
        dt = now - prev.time_s
        rate = PortRate(
            dpid,
            port_no,
            now,
            (rx_bytes - prev.rx_bytes) * 8 / dt,
            (tx_bytes - prev.tx_bytes) * 8 / dt,
        )
        self._series.setdefault(key, deque(maxlen=self._history)).append(rate)
        return rate

    def forget_switch(self, dpid: int) -> None:
        """Drop the last samples of ``dpid`` (it disconnected); its series stay."""
        for key in [k for k in self._last if k[0] == dpid]:
            del self._last[key]

    def counters(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(dpid, port) -> (rx bytes, tx bytes) of the last sample."""
        return {k: (s.rx_bytes, s.tx_bytes) for k, s in sorted(self._last.items())}

    def tx_load(self) -> dict[tuple[int, int], float]:
        """(dpid, port) -> the last measured transmit rate, bit/s, of connected switches'
        ports (what a broadcast tree weighs its links by).

        >>> s = PortStats()
        >>> _ = s.add(1, 2, rx_bytes=0, tx_bytes=0, now=0.0)
        >>> _ = s.add(1, 2, rx_bytes=0, tx_bytes=125, now=1.0)
        >>> s.tx_load()
        {(1, 2): 1000.0}
        """
        return {k: self._series[k][-1].tx_bps for k in self._last if self._series.get(k)}

    def latest(self) -> list[PortRate]:
        """The last rate of every port of a connected switch, by port (what the live
        console shows).

        >>> s = PortStats()
        >>> _ = s.add(1, 2, rx_bytes=0, tx_bytes=0, now=0.0)
        >>> s.add(1, 2, rx_bytes=250, tx_bytes=0, now=2.0) == s.latest()[0]
        True
        """
        return [self._series[k][-1] for k in sorted(self._last) if self._series.get(k)]

    def last_rates(self) -> dict[tuple[int, int], PortRate]:
        """(dpid, port) -> the last measured rates of connected switches' ports."""
        return {k: self._series[k][-1] for k in self._last if self._series.get(k)}

    def series(self) -> list[PortRate]:
        """Every recorded rate, by port then time."""
        return [r for _, rates in sorted(self._series.items()) for r in rates]

    def to_json(self) -> str:
        """The counters and the series as JSON (schema ``sdnmpi.port-stats/1``)."""
        obj = {
            "schema": "sdnmpi.port-stats/1",
            "counters": [
                {"dpid": d, "port_no": p, "rx_bytes": rx, "tx_bytes": tx}
                for (d, p), (rx, tx) in self.counters().items()
            ],
            "series": [asdict(r) for r in self.series()],
        }
        return json.dumps(obj, indent=1) + "\n"

    def to_csv(self) -> str:
        """The series as CSV: ``dpid,port_no,time_s,rx_bps,tx_bps``."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["dpid", "port_no", "time_s", "rx_bps", "tx_bps"])
        for r in self.series():
            writer.writerow(
                [r.dpid, r.port_no, f"{r.time_s:.3f}", f"{r.rx_bps:.1f}", f"{r.tx_bps:.1f}"]
            )
        return buf.getvalue()

    @staticmethod
    def read_series(path: Path) -> list[PortRate]:
        """The rate series of a file written by :meth:`write` (CSV or JSON)."""
        try:
            text = path.read_text()
            if path.suffix.lower() == ".csv":
                rows: list[dict[str, str]] = list(csv.DictReader(io.StringIO(text)))
            else:
                rows = json.loads(text)["series"]
            return [
                PortRate(
                    int(r["dpid"]),
                    int(r["port_no"]),
                    float(r["time_s"]),
                    float(r["rx_bps"]),
                    float(r["tx_bps"]),
                )
                for r in rows
            ]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path}: not a port-statistics file: {exc}") from None

    def write(self, path: Path) -> None:
        """Write CSV (``.csv``) or JSON (anything else) atomically."""
        text = self.to_csv() if path.suffix.lower() == ".csv" else self.to_json()
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


@dataclass(frozen=True)
class PortPeer:
    """What a switch port is cabled to (``peer``: ``"spine1:3"`` or a host name) and
    the link's capacity in bit/s per direction."""

    peer: str
    capacity_bps: float


def port_peers(topo: Topology | None) -> dict[tuple[int, int], PortPeer]:
    """(dpid, port) -> its peer and capacity, for every switch port of ``topo``.

    >>> from sdnmpi.core.generators import leaf_spine
    >>> peers = port_peers(leaf_spine(2, 2, 1))
    >>> sorted(p.peer for p in peers.values())[:2], len(peers)
    (['h1', 'h2'], 10)
    """
    if topo is None:
        return {}
    out: dict[tuple[int, int], PortPeer] = {}
    for ln in topo.links:
        ends = (
            (ln.src, ln.src_port, ln.dst, ln.dst_port),
            (ln.dst, ln.dst_port, ln.src, ln.src_port),
        )
        for name, port, other, other_port in ends:
            if topo.is_host(name):
                continue
            peer = other if topo.is_host(other) else f"{other}:{other_port}"
            out[(topo.switch(name).dpid, port)] = PortPeer(peer, ln.capacity_bps)
    return out


@dataclass(frozen=True)
class PortSample:
    """One switch port as the metrics show it: counters, last rates, utilisation
    (``None`` where the link's capacity is not known)."""

    dpid: int
    port_no: int
    peer: str
    rx_bytes: int
    tx_bytes: int
    rx_bps: float
    tx_bps: float
    rx_utilization: float | None
    tx_utilization: float | None


def port_samples(stats: PortStats, peers: dict[tuple[int, int], PortPeer]) -> list[PortSample]:
    """Every connected port's counters and rates, with its peer and utilisation.

    >>> s = PortStats()
    >>> _ = s.add(1, 2, rx_bytes=0, tx_bytes=0, now=0.0)
    >>> _ = s.add(1, 2, rx_bytes=125, tx_bytes=250, now=1.0)
    >>> port_samples(s, {(1, 2): PortPeer("h1", 4000.0)})[0].tx_utilization
    0.5
    """
    rates = stats.last_rates()
    out = []
    for key, (rx, tx) in stats.counters().items():
        rate = rates.get(key)
        rx_bps, tx_bps = (rate.rx_bps, rate.tx_bps) if rate is not None else (0.0, 0.0)
        peer = peers.get(key)
        cap = peer.capacity_bps if peer is not None and peer.capacity_bps > 0 else None
        out.append(
            PortSample(
                key[0], key[1], peer.peer if peer is not None else "", rx, tx, rx_bps, tx_bps,
                rx_bps / cap if cap else None, tx_bps / cap if cap else None,
            )
        )  # fmt: skip
    return out
