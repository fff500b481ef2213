"""What the Bcast experiment should measure: the library's ``MPI_Bcast`` against the
switch-replicated one on an emulated fabric, as the other experiments predict.

:func:`predict_bcasts` is what ``scripts/exp_bcast.py`` calls: for a topology, the
hosts (one rank each, rank ``i`` on ``hosts[i]``), message sizes and an MPI library,
it predicts

* the library's own Bcast: its algorithm for the size and rank count as
  :func:`sdnmpi.core.collectives.expand` picks it (Open MPI's or MPICH's decision), on
  the default D-mod-K routes, simulated rank by rank (``ranks`` mode, like
  ``exp_allreduce``) with the library's point-to-point protocol and the calibration's
  rates, latencies, eager limits and exchange efficiency
  (:meth:`~sdnmpi.sim.calibration.Calibration.prepared`);
* the replicated Bcast: one transfer on a tree grown by
  :func:`~sdnmpi.core.routing.multicast.build_tree` over the competing job's load, as
  the data path will send it (:class:`DataPath`).

The data path (issue 14's UDP sender): the buffer goes in packets of
``payload_bytes`` (1400) behind ``header_bytes`` (42: Ethernet 14, IPv4 20, UDP 8;
add the data path's own header) that the shaped links carry too, so the transfer puts
``nbytes + packets * header_bytes`` on every tree link.  It runs in credit windows of
``window_packets`` packets; the root waits for every receiver's acknowledgement before
the next window, one round trip per window (twice the tree's farthest one-way latency
with the calibration's per-arc latency and host stacks, ``base_latency_s``).  This
counts a window's round trip in full, as a sender that stops at each window does; a
sliding window that covers the bandwidth-delay product would hide it (an upper bound
on that data path's time).  Calibrated capacities are TCP goodput (``link_scale *
goodput``); the replicated flow's wire bytes are multiplied by ``goodput`` so that it
moves them at the line rate (its share of it beside competing TCP flows), not at TCP's
payload rate.

Competing traffic (``competing``): host pairs of another job that stream for the
whole Bcast on their D-mod-K routes (a long TCP stream each, sharing max-min with the
Bcast's flows, never waiting for anything).  The tree is grown with every link they
cross counted as loaded, as the controller will see in its port statistics.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from sdnmpi.core import collectives
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import route
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.core.routing.multicast import ReplicationTree, build_tree
from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError
from sdnmpi.sim.calibration import Calibration
from sdnmpi.sim.engine import run, run_ranks
from sdnmpi.sim.flowset import FlowSet, with_partial_exchanges
from sdnmpi.sim.maxmin import incidence_matrix
from sdnmpi.sim.platform import Platform
from sdnmpi.sim.protocol import IDEAL

#: The experiment's sizes: 4 KiB to 16 MiB, doubling.
SIZES: tuple[int, ...] = tuple(4096 << i for i in range(13))
LIBRARIES: tuple[str, ...] = ("openmpi", "mpich")
#: A competing stream's bytes: more than any Bcast lasts (it never completes first).
_ENDLESS_BYTES = 1e15
_MAX_FLOWS = 1_000_000


@dataclass(frozen=True)
class DataPath:
    """The replicated data path's packets and credit window (see the module text).

    >>> d = DataPath()
    >>> d.packets(1 << 20), d.wire_bytes(1 << 20), d.windows(1 << 20)
    (749, 1080034, 12)
    """

    payload_bytes: int = 1400
    header_bytes: int = 42
    window_packets: int = 64

    def __post_init__(self) -> None:
        for name in ("payload_bytes", "window_packets"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"data path: {name} must be an integer >= 1, got {value!r}")
        h = self.header_bytes
        if isinstance(h, bool) or not isinstance(h, int) or h < 0:
            raise ConfigError(f"data path: header_bytes must be an integer >= 0, got {h!r}")

    def packets(self, nbytes: int) -> int:
        """Packets of a buffer of ``nbytes`` (at least one)."""
        return max(1, math.ceil(nbytes / self.payload_bytes))

    def wire_bytes(self, nbytes: int) -> int:
        """What every tree link carries: the buffer and every packet's headers."""
        return nbytes + self.packets(nbytes) * self.header_bytes

    def windows(self, nbytes: int) -> int:
        """Credit windows, each ending with an acknowledgement round trip."""
        return math.ceil(self.packets(nbytes) / self.window_packets)


@dataclass(frozen=True)
class BcastPoint:
    """One size's prediction (seconds): the library's Bcast and the replicated one."""

    nbytes: int
    library: str
    algorithm: str
    library_s: float
    replicated_s: float
    tree_links: int
    windows: int
    round_trip_s: float

    @property
    def gain(self) -> float:
        """How many times faster the replicated Bcast is (1.0 when neither sends)."""
        return self.library_s / self.replicated_s if self.replicated_s > 0 else 1.0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready, ``gain`` included."""
        return {**dataclasses.asdict(self), "gain": self.gain}


def predict_bcasts(
    topology: Topology,
    hosts: Sequence[str],
    sizes: Sequence[int] = SIZES,
    *,
    library: str = "openmpi",
    calibration: Calibration | None = None,
    root: int = 0,
    competing: Sequence[tuple[str, str]] = (),
    data_path: DataPath | None = None,
) -> list[BcastPoint]:
    """The library's Bcast and the replicated one from rank ``root``, for each size.

    ``hosts``: one rank per host, in rank order; ``calibration``: the fabric's
    measured figures (None: the topology as written, :meth:`Calibration.nominal`);
    ``competing``: another job's streams as ``(src host, dst host)``.
    :class:`ConfigError` for an unknown library, a bad root, a repeated host or a
    size below one byte; :class:`~sdnmpi.errors.RoutingError` for an unknown host.
    """
    cal = calibration or Calibration.nominal()
    path = data_path or DataPath()
    fabric = Fabric(topology)
    _check(hosts, sizes, library, root)
    place = Placement(tuple(hosts))
    index = [fabric.host_index(h) for h in hosts]
    streams = [route_pair(fabric, s, d) for s, d in competing]
    load = np.zeros(fabric.narcs)
    for p in streams:
        load[list(p)] += fabric.capacity_bps[list(p)]
    tree = build_tree(fabric, index[root], index, load if streams else None)
    rtt = _round_trip(fabric, tree, cal)
    out = []
    for n in sizes:
        algorithm, library_s = _library(fabric, place, n, root, library, cal, streams)
        replicated_s = _replicated(fabric, tree, n, cal, path, streams)
        out.append(
            BcastPoint(
                n, library, algorithm, library_s, replicated_s, tree.nlinks, path.windows(n), rtt
            )
        )
    return out


def _check(hosts: Sequence[str], sizes: Sequence[int], library: str, root: int) -> None:
    if library not in LIBRARIES:
        raise ConfigError(f"library must be one of {', '.join(LIBRARIES)}, got {library!r}")
    if len(set(hosts)) != len(hosts) or len(hosts) < 2:
        raise ConfigError(f"want two or more distinct hosts, one rank each, got {list(hosts)}")
    if not 0 <= root < len(hosts):
        raise ConfigError(f"root {root} out of range for {len(hosts)} ranks")
    bad = [n for n in sizes if isinstance(n, bool) or not isinstance(n, int) or n < 1]
    if bad:
        raise ConfigError(f"sizes must be integers >= 1 byte, got {bad[0]!r}")


def route_pair(fabric: Fabric, src: str, dst: str) -> tuple[int, ...]:
    """The D-mod-K route from host ``src`` to host ``dst`` (the default routes)."""
    a, b = fabric.host_index(src), fabric.host_index(dst)
    if a == b:
        raise ConfigError(f"a competing stream from {src} to itself")
    demands = Demands.all_pairs(fabric, hosts=[src, dst])
    routing = route("dmodk", fabric, demands)
    return routing.path(0 if int(demands.src[0]) == a else 1)


def _with_streams(flows: FlowSet, platform: Platform, streams: list[tuple[int, ...]]) -> FlowSet:
    """``flows`` and the competing streams (rank -1: they wait for nothing), in a phase
    of their own."""
    if not streams:
        return flows
    k = len(streams)
    extra = incidence_matrix(_padded(streams), platform.narcs)
    latency = np.array([float(platform.latency_s[list(p)].sum()) for p in streams])
    minus = np.full(k, -1, dtype=np.int64)
    messages = (
        None if flows.messages is None else np.concatenate([flows.messages, np.ones(k, np.int64)])
    )
    return dataclasses.replace(
        flows,
        incidence=sparse.vstack([flows.incidence, extra], format="csr"),
        size_bytes=np.concatenate([flows.size_bytes, np.full(k, _ENDLESS_BYTES)]),
        latency_s=np.concatenate([flows.latency_s, latency]),
        phase=np.concatenate([flows.phase, np.full(k, flows.nphases, dtype=np.int64)]),
        src_rank=np.concatenate([flows.src_rank, minus]),
        dst_rank=np.concatenate([flows.dst_rank, minus]),
        phase_labels=(*flows.phase_labels, "competing job"),
        phase_repeat=np.append(flows.phase_repeat, 1),
        messages=messages,
    )


def _padded(rows: list[tuple[int, ...]]) -> np.ndarray:
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _library(
    fabric: Fabric,
    place: Placement,
    nbytes: int,
    root: int,
    library: str,
    cal: Calibration,
    streams: list[tuple[int, ...]],
) -> tuple[str, float]:
    """``(algorithm, seconds)`` of the library's Bcast on D-mod-K routes."""
    schedule = collectives.expand("bcast", place.nprocs, nbytes, root=root, library=library)
    demands = Demands.from_pattern(fabric, schedule.to_pattern(), place)
    if not len(demands):
        return schedule.algorithm, 0.0
    routing = route("dmodk", fabric, demands)
    platform, flows, proto = cal.prepared(fabric, demands, routing, library)
    flows, _ = with_partial_exchanges(flows, proto or IDEAL)
    n = len(flows)
    flows = _with_streams(flows, platform, streams)
    steps, trace = run_ranks(platform, flows, max_flows=_MAX_FLOWS, protocol=proto or IDEAL)
    mine = steps.flow < n
    return schedule.algorithm, float(trace.finish_s[mine].max(initial=0.0))


def _round_trip(fabric: Fabric, tree: ReplicationTree, cal: Calibration) -> float:
    """Data to the farthest receiver and its acknowledgement back (host stacks included)."""
    one_way = tree.farthest(fabric, cal.platform(fabric).latency_s) + cal.base_latency_s
    return 2.0 * one_way


def _replicated(
    fabric: Fabric,
    tree: ReplicationTree,
    nbytes: int,
    cal: Calibration,
    path: DataPath,
    streams: list[tuple[int, ...]],
) -> float:
    """Seconds of the replicated transfer: wire bytes at the tree's max-min rate, one
    acknowledgement round trip per window."""
    platform = cal.platform(fabric)
    rows = [tree.arcs, *streams]
    size = [path.wire_bytes(nbytes) * cal.goodput] + [_ENDLESS_BYTES] * len(streams)
    latency = [path.windows(nbytes) * _round_trip(fabric, tree, cal)]
    latency += [float(platform.latency_s[list(p)].sum()) for p in streams]
    trace = run(
        platform,
        incidence_matrix(_padded(rows), platform.narcs),
        np.array(size) * 8.0,
        np.array(latency),
    )
    return float(trace.finish_s[0])
