"""The seed papers' testbeds as topologies.

``milk`` (the pfsim cluster) is read from its GraphML file by
:mod:`sdnmpi.catalog`; the others are generated here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sdnmpi.core.generators import GBPS, leaf_spine
from sdnmpi.core.topology import DEFAULT_LATENCY_S, Link, Topology


def _rename_hosts(topo: Topology, prefix: str, width: int, name: str) -> Topology:
    mapping = {h.name: f"{prefix}{i + 1:0{width}d}" for i, h in enumerate(topo.hosts)}
    out = topo.renamed(mapping, name)
    return Topology(out.name, out.hosts, out.switches, out.links, {**topo.meta, "preset": name})


def unisonflow() -> Topology:
    """UnisonFlow's testbed: 2 spines, 4 leaves, 6 hosts per leaf (node01..node24).

    Hosts on 1 Gbit/s; each leaf-spine pair is a 4 Gbit/s aggregated link of four
    1 GbE members (UnisonFlow paper, experimental setup).
    """
    topo = leaf_spine(2, 4, 6, host_bps=GBPS, uplink_bps=GBPS, uplinks_per_pair=4, lag=True)
    return _rename_hosts(topo, "node", 2, "unisonflow")


def allreduce28() -> Topology:
    """The SDN-enhanced MPI_Allreduce testbed: 28 hosts, 2-tier fat-tree of 6 switches.

    2 spines and 4 leaves with 7 hosts each, every link 1 Gbit/s, hence
    oversubscribed 7:2 at the leaves.
    """
    topo = leaf_spine(2, 4, 7, host_bps=GBPS, uplink_bps=GBPS)
    return _rename_hosts(topo, "node", 2, "allreduce28")


def netsa() -> Topology:
    """NetSA's testbed: 1 spine, 2 ToR switches with 8 hosts each (i1..i16).

    Each ToR has four 1 Gbit/s spine uplinks annotated bandwidth-class and the
    two ToRs share one direct link annotated latency-class (NetSA, Fig. 8).
    """
    base = leaf_spine(1, 2, 8, host_bps=GBPS, uplink_bps=GBPS, uplinks_per_pair=4)
    bandwidth = frozenset({"bandwidth"})
    links = [replace(ln, annotations=bandwidth) if ln.dst == "spine1" else ln for ln in base.links]
    links.append(
        Link("leaf1", "leaf2", 13, 13, GBPS, DEFAULT_LATENCY_S, annotations=frozenset({"latency"}))
    )
    mapping = {"leaf1": "tor1", "leaf2": "tor2"} | {
        h.name: f"i{i + 1}" for i, h in enumerate(base.hosts)
    }
    topo = base.with_links(links).renamed(mapping, "netsa")
    meta = {**base.meta, "kind": "netsa", "preset": "netsa"}
    return Topology(topo.name, topo.hosts, topo.switches, topo.links, meta)


GENERATED: dict[str, Callable[[], Topology]] = {
    "unisonflow": unisonflow,
    "allreduce28": allreduce28,
    "netsa": netsa,
}
