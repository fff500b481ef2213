"""The pure parts of ``exp_netsa`` (seed 003, NetSA): fabrics, patterns, routes, predictions.

No fabric, no MPI, no clock here: :mod:`exp_netsa` runs the cases on the emulated
cluster and this module says what each run is (topology, placement, the routes
each way installs) and what the models predict for it.

The ways of the paper's Figs. 10-11, on the seed's testbed (16 hosts, 1 Gbit/s):

- **single**: all 16 hosts on one switch, the paper's baseline (:func:`single_switch`);
- **lacp**: the ``netsa`` preset with each ToR's four spine uplinks as one aggregated
  link and without the ToR-ToR latency link (an L2 LACP fabric cannot use it: it
  would close a loop; :func:`lacp`), routed by the controller's ``ecmp`` router,
  which hashes each host pair onto one member of the LAG (:mod:`sdnmpi.core.routing.ecmp`);
- **netsa**: the ``netsa`` preset, NetSA's low-priority shortest paths as default
  routes and the pattern's classified cells routed by the core's ``netsa`` router,
  installed as job routes (:func:`job_pairs`).

The hop-count study (Figs. 5-6) uses :func:`chain`: one source host and a chain of
switches with a host on each, so one fabric gives paths of 1 to N switches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from sdnmpi import catalog
from sdnmpi.core.classify import classify
from sdnmpi.core.generators import GBPS, host_ip, host_mac
from sdnmpi.core.pattern import Pattern
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import bound as lp
from sdnmpi.core.routing import route
from sdnmpi.core.routing.model import Demands, Fabric, IntArray, Routing
from sdnmpi.core.routing.paths import routing as make_routing
from sdnmpi.core.topology import DEFAULT_LATENCY_S, Arc, Host, Link, Switch, Topology
from sdnmpi.sim import Mode
from sdnmpi.sim.calibration import Calibration

NPROCS = 16
#: A flow's path: arc indices of the fabric; a host pair: (source, destination) node indices.
ArcPath = tuple[int, ...]
Pair = tuple[int, int]
#: way -> (the controller's default router, whether the pattern gets NetSA job routes)
WAYS: dict[str, tuple[str, bool]] = {
    "single": ("minhop", False),
    "lacp": ("ecmp", False),
    "netsa": ("netsa", True),
}
#: The seed shuffles Allgather's host order "for increasing the traffic through the
#: spine" (Sec. V-B); ours is a seeded permutation.
RANDOM_ORDER = {"allgather"}
PLACEMENT_SEED = 3
#: Bytes of one Ethernet frame around a TCP segment: Ethernet 14 + FCS 4 + IP 20 +
#: TCP 32 (timestamps); the payload of a full frame is the MSS.
FRAME_OVERHEAD_BYTES = 70
MSS_BYTES = 1448
#: Open MPI ob1's match header in front of an eager message.
MPI_HEADER_BYTES = 14


# -- fabrics ------------------------------------------------------------------------------


def chain(switches: int, *, bps: float = GBPS) -> Topology:
    """``src`` on ``s1``, switches ``s1 - s2 - ... - sN`` in a line, host ``dK`` on ``sK``.

    ``src`` to ``dK`` crosses K switches (K + 1 links): the paper's 1 to N hops
    between two hosts, all on one fabric.

    >>> t = chain(3)
    >>> [h.name for h in t.hosts], len(t.links)
    (['src', 'd1', 'd2', 'd3'], 6)
    """
    names = ["src", *(f"d{k}" for k in range(1, switches + 1))]
    hosts = tuple(Host(n, host_mac(i), host_ip(i)) for i, n in enumerate(names))
    sws = tuple(Switch(f"s{k}", k) for k in range(1, switches + 1))
    links = [Link("src", "s1", 1, 1, bps)]
    links += [Link(f"d{k}", f"s{k}", 1, 2, bps) for k in range(1, switches + 1)]
    links += [Link(f"s{k}", f"s{k + 1}", 3, 4, bps) for k in range(1, switches)]
    return Topology(f"chain-{switches}", hosts, sws, tuple(links), {"kind": "chain"})


def single_switch(base: Topology | None = None) -> Topology:
    """The hosts of ``base`` (the ``netsa`` preset) all on one switch ``sw1``.

    >>> t = single_switch()
    >>> len(t.hosts), [s.name for s in t.switches], t.attachment("i16")
    (16, ['sw1'], ('sw1', 16))
    """
    base = base or catalog.load_topology("netsa")
    links = tuple(Link(h.name, "sw1", 1, i + 1, GBPS) for i, h in enumerate(base.hosts))
    return Topology("netsa-single", base.hosts, (Switch("sw1", 1, 1),), links, {"kind": "single"})


def lacp(base: Topology | None = None) -> Topology:
    """The ``netsa`` preset as an LACP fabric: each ToR's uplinks one LAG, no latency link.

    >>> t = lacp()
    >>> sorted({ln.lag for ln in t.links if ln.lag}), any("latency" in ln.annotations
    ...                                                   for ln in t.links)
    (['tor1-spine1', 'tor2-spine1'], False)
    """
    base = base or catalog.load_topology("netsa")
    links = [
        replace(ln, lag=f"{ln.src}-{ln.dst}") if ln.dst == "spine1" else ln
        for ln in base.links
        if "latency" not in ln.annotations
    ]
    return Topology("netsa-lacp", base.hosts, base.switches, tuple(links), {"kind": "lacp"})


def fabric_of(way: str) -> Topology:
    """The topology each way runs on."""
    if way == "single":
        return single_switch()
    return lacp() if way == "lacp" else catalog.load_topology("netsa")


# -- patterns and placements ----------------------------------------------------------------


def hosts_of(op: str, topo: Topology | None = None) -> tuple[str, ...]:
    """Rank r's host: i1..i16 in order, in a seeded random order for Allgather.

    >>> hosts_of("allreduce")[:3], hosts_of("allgather") != hosts_of("allreduce")
    (('i1', 'i2', 'i3'), True)
    """
    names = [h.name for h in (topo or catalog.load_topology("netsa")).hosts][:NPROCS]
    if op not in RANDOM_ORDER:
        return tuple(names)
    order = np.random.default_rng(PLACEMENT_SEED).permutation(len(names))
    return tuple(names[i] for i in order)


def coll_pattern(op: str, size: int) -> Pattern:
    """One call of ``sdnmpi-bench coll --op OP --size SIZE`` on 16 ranks, as Open MPI 4.1's
    default algorithm runs it (``size`` per rank for Allgather, as OSU counts it)."""
    return catalog.load_pattern(f"{op}:nprocs={NPROCS},bytes={size},library=openmpi")


def benchmark_pattern(parts: Sequence[Pattern], name: str) -> Pattern:
    """A whole benchmark run (several sizes, or a kernel) as one pattern: what NetSA
    records for it and routes by (the phases of every part, in order)."""
    phases = tuple(ph for p in parts for ph in p.phases)
    return Pattern(name, parts[0].nprocs, phases, meta={"parts": [p.name for p in parts]})


def kernel_spec(kernel: str, klass: str, niter: int) -> str:
    """The core's NPB pattern spec for 16 ranks (Open MPI's Alltoall for FT).

    >>> kernel_spec("ft", "S", 2)
    'ft:nprocs=16,klass=S,niter=2,library=openmpi'
    """
    extra = ",library=openmpi" if kernel == "ft" else ""
    return f"{kernel}:nprocs={NPROCS},klass={klass},niter={niter}{extra}"


# -- routes --------------------------------------------------------------------------------


def demands_of(fabric: Fabric, pattern: Pattern, hosts: Sequence[str]) -> Demands:
    """The pattern's flows on the hosts, cells classified with NetSA's thresholds
    (bytes per message: above 1100 bandwidth-intensive, below 120 latency-sensitive)."""
    return Demands.from_pattern(fabric, classify(pattern), Placement(tuple(hosts)))


def pair_paths(fabric: Fabric, demands: Demands, routing: Routing) -> dict[Pair, ArcPath]:
    """One arc path per host pair: its heaviest flow's, as the controller installs one
    path per pair (:func:`sdnmpi.controller.routes.routes_from_routing`)."""
    weight = demands.size_bytes * demands.phase_repeat[demands.phase]
    best: dict[Pair, int] = {}
    for flow, key in enumerate(zip(demands.src.tolist(), demands.dst.tolist(), strict=True)):
        if key not in best or weight[flow] > weight[best[key]]:
            best[key] = flow
    return {key: routing.path(flow) for key, flow in best.items()}


def default_paths(fabric: Fabric, router: str) -> dict[Pair, ArcPath]:
    """The controller's default routes: ``router`` over all host pairs (seed 0)."""
    demands = Demands.all_pairs(fabric)
    return pair_paths(fabric, demands, route(router, fabric, demands))


def netsa_paths(fabric: Fabric, demands: Demands) -> dict[Pair, ArcPath]:
    """NetSA's job routes for a classified pattern: its annotated cells' pairs, routed by
    the path processor (:mod:`sdnmpi.core.routing.netsa`)."""
    routing = route("netsa", fabric, demands)
    annotated = demands.kind if demands.kind is not None else np.zeros(len(demands), np.int64)
    keep = np.flatnonzero(annotated != 0)
    sub = _subset(demands, keep)
    return pair_paths(fabric, sub, _rows(routing, keep))


def _subset(demands: Demands, flows: IntArray) -> Demands:
    def pick(values: IntArray | None) -> IntArray | None:
        return None if values is None else values[flows]

    return Demands(
        demands.src[flows], demands.dst[flows], demands.size_bytes[flows],
        demands.phase[flows], demands.src_rank[flows], demands.dst_rank[flows],
        demands.phase_labels, demands.phase_repeat, pick(demands.kind),
        pick(demands.max_hops), dict(demands.meta), pick(demands.messages),
    )  # fmt: skip


def _rows(routing: Routing, flows: IntArray) -> Routing:
    return make_routing(routing.router, routing.arcs[flows], routing.meta)


def way_routing(
    way: str, fabric: Fabric, demands: Demands, job: Mapping[Pair, ArcPath] | None = None
) -> Routing:
    """What the flows of ``demands`` take under ``way``: the job's path for its pairs
    (``job``, NetSA's by default for the netsa way), the default route otherwise."""
    router, netsa = WAYS[way]
    if job is None:
        job = netsa_paths(fabric, demands) if netsa else {}
    default = default_paths(fabric, router)
    rows = [
        job.get(key, default[key])
        for key in zip(demands.src.tolist(), demands.dst.tolist(), strict=True)
    ]
    width = max((len(r) for r in rows), default=1)
    arcs = np.full((len(rows), width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        arcs[i, : len(r)] = r
    return make_routing(f"{way}:{router}", arcs, {"job_pairs": len(job)})


def job_request(fabric: Fabric, job: Mapping[Pair, ArcPath]) -> dict[str, list[str]]:
    """The controller API's ``pairs`` for a job: ``"src>dst"`` -> node names, a switch left
    by one of several parallel links written ``name:port``."""
    topo, names = fabric.topology, fabric.names
    return {
        f"{names[s]}>{names[d]}": topo.path_names([topo.arcs[a] for a in path])
        for (s, d), path in sorted(job.items())
    }


def uplink_arcs(topology: Topology) -> list[Arc]:
    """The arcs between the ToRs and the spine (both directions), in arc order."""
    return [a for a in topology.arcs if "spine1" in (a.src, a.dst)]


def uplink_bytes(fabric: Fabric, demands: Demands, routing: Routing) -> dict[str, float]:
    """``"tor1:9 tx"`` -> payload bytes the routing sends out of each ToR-spine port, to
    set beside the switches' counters."""
    loads = routing.arc_bytes(demands, fabric)
    return {f"{a.src}:{a.src_port} tx": float(loads[a.index]) for a in uplink_arcs(fabric.topology)}


def lag_shares(by_port: Mapping[str, float], topology: Topology) -> dict[str, list[float]]:
    """Each bundle of parallel uplinks (``"tor1>spine1"``, ``"spine1>tor1"``, ...): the
    share of its bytes each member carried, in port order (empty if it carried none).

    >>> t = lacp()
    >>> ports = {f"tor1:{p} tx": b for p, b in zip((9, 10, 11, 12), (3, 1, 0, 0))}
    >>> lag_shares(ports, t)["tor1>spine1"]
    [0.75, 0.25, 0.0, 0.0]
    """
    groups: dict[str, list[float]] = {}
    for arc in uplink_arcs(topology):
        groups.setdefault(f"{arc.src}>{arc.dst}", []).append(
            float(by_port.get(f"{arc.src}:{arc.src_port} tx", 0.0))
        )
    return {g: [b / sum(v) for b in v] if sum(v) > 0 else [] for g, v in groups.items()}


# -- predictions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One measured case: a way, the fabric's topology, a pattern on hosts, and the
    NetSA job routes installed for the benchmark it belongs to (empty for the others)."""

    way: str
    topology: Topology
    pattern: Pattern
    hosts: tuple[str, ...]
    job: Mapping[Pair, ArcPath]


def routed(run: Run) -> tuple[Fabric, Demands, Routing]:
    """The run's fabric, flows and the paths they take."""
    fabric = Fabric(run.topology)
    demands = demands_of(fabric, run.pattern, run.hosts)
    return fabric, demands, way_routing(run.way, fabric, demands, run.job)


def predicted_s(run: Run, cal: Calibration, mode: Mode = "phases") -> float:
    """Seconds the simulator gives one pass of the pattern, Open MPI's default protocol,
    on the calibrated links, with the routes the way installs.  ``mode="ranks"`` for an
    MPI collective (each rank starts its next step when its own messages are done),
    ``"phases"`` for ``sdnmpi-replay --barrier``."""
    fabric, demands, routing = routed(run)
    protocol = cal.protocol("openmpi")
    return cal.simulate(fabric, demands, routing, protocol, mode=mode).total_s


def bound_s(topology: Topology, pattern: Pattern, hosts: Sequence[str]) -> float:
    """The LP lower bound on the pattern's time on ``topology`` (nominal rates): no
    routing does better (:mod:`sdnmpi.core.routing.bound`)."""
    fabric = Fabric(topology)
    demands = demands_of(fabric, pattern, hosts)
    return lp.pattern_bound(fabric, demands, single_path=False).lower_bound_s


def increase_pct(time_s: float, baseline_s: float) -> float:
    """How much longer than the baseline, in percent.

    >>> increase_pct(1.25, 1.0)
    25.0
    """
    return 100.0 * (time_s / baseline_s - 1.0)


def wire_bytes(size: int) -> int:
    """Bytes a message of ``size`` puts on the wire: Open MPI's header, TCP segments of
    at most :data:`MSS_BYTES`, each in a frame of :data:`FRAME_OVERHEAD_BYTES` more.

    >>> wire_bytes(512), wire_bytes(4096)
    (596, 4320)
    """
    payload = size + MPI_HEADER_BYTES
    return payload + max(1, math.ceil(payload / MSS_BYTES)) * FRAME_OVERHEAD_BYTES


def frame_bytes(size: int) -> int:
    """The largest frame of a message of ``size`` bytes.

    >>> frame_bytes(1), frame_bytes(1 << 20)
    (85, 1518)
    """
    return min(size + MPI_HEADER_BYTES, MSS_BYTES) + FRAME_OVERHEAD_BYTES


def latency_s(size: int, switches: int, rate_bps: float, cal: Calibration) -> float:
    """One-way latency of a ``size``-byte message across ``switches`` store-and-forward
    switches (``switches + 1`` links of ``rate_bps``), as a real network has it.

    The calibration's host latency (``base_latency_s``, once) and per-link latency
    (``arc_latency_s``, each link: the switch's forwarding time), the message's
    serialization once (its frames pipeline), and each switch's wait for the whole
    of a frame before it forwards it: ``switches`` times the largest frame.

    >>> cal = Calibration(base_latency_s=1e-4, arc_latency_s=1e-5)
    >>> round(latency_s(512, 1, 1e9, cal) * 1e6, 2), round(latency_s(512, 6, 1e7, cal) * 1e6)
    (129.54, 3508)
    """
    per_arc = cal.arc_latency_s if cal.arc_latency_s is not None else DEFAULT_LATENCY_S
    serialize = 8 * wire_bytes(size) / rate_bps
    store_forward = switches * 8 * frame_bytes(size) / rate_bps
    return cal.base_latency_s + (switches + 1) * per_arc + serialize + store_forward


def window_s(size: int, window: int, switches: int, rate_bps: float, cal: Calibration) -> float:
    """Time of one ``sdnmpi-bench bw`` window: ``window`` messages streamed (the link's
    rate, the first frame's path latency), then the receiver's small acknowledgement."""
    first = latency_s(size, switches, rate_bps, cal) - 8 * wire_bytes(size) / rate_bps
    return first + 8 * window * wire_bytes(size) / rate_bps + latency_s(4, switches, rate_bps, cal)
