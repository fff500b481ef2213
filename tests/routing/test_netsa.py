"""NetSA's path processor on its testbed: latency cells on tor1-tor2, bandwidth cells via spine."""

from __future__ import annotations

import numpy as np
import pytest

from sdnmpi.catalog import load_topology
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.pattern import Cell, Pattern, Phase
from sdnmpi.core.routing import Demands, Fabric, route, validate
from sdnmpi.core.routing.netsa import BANDWIDTH, LATENCY, classify_flows
from tests.routing.flows import arc_between, demands

# netsa preset: i1..i8 on tor1, i9..i16 on tor2 (host indices 0..7 and 8..15)


@pytest.fixture(scope="module")
def testbed() -> Fabric:
    return Fabric(load_topology("netsa"))


def test_paper_example_latency_and_bandwidth_cells(testbed: Fabric) -> None:
    # NetSA Fig. 2: i9 -> i1 bandwidth-intensive, i9 -> i2 latency-sensitive (max 2 hops)
    hosts = tuple(h.name for h in testbed.topology.hosts)
    phase = Phase.from_cells(
        "allreduce",
        [
            Cell(8, 0, 2**20, 700, "bandwidth"),
            Cell(8, 1, 64, 1, "latency", 2),
            Cell(2, 3, 512, 4),
        ],
    )
    pattern = Pattern("fig2", len(hosts), (phase,), hosts)
    d = Demands.from_pattern(testbed, pattern)
    r = route("netsa", testbed, d)
    validate(testbed, d, r, valley_free=True)
    paths = {(int(d.src[i]), int(d.dst[i])): r.node_path(testbed, i) for i in range(len(d))}
    assert paths[(8, 0)] == ("i9", "tor2", "spine1", "tor1", "i1")
    assert paths[(8, 1)] == ("i9", "tor2", "tor1", "i2")
    assert paths[(2, 3)] == ("i3", "tor1", "i4")  # unannotated: default shortest path
    assert r.meta["classified"] is False
    assert (r.meta["bandwidth_paths"], r.meta["latency_paths"]) == (1, 1)


def test_latency_cells_cross_the_latency_link(testbed: Fabric) -> None:
    pairs = [(s, t) for s in range(8) for t in range(8, 16)]
    d = demands(pairs, 64, kind=[LATENCY] * len(pairs), max_hops=[2] * len(pairs))
    r = route("netsa", testbed, d)
    shortcut = set(arc_between(testbed, "tor1", "tor2"))
    assert all(shortcut & set(r.path(i)) for i in range(len(r)))
    assert r.meta["latency_fallbacks"] == 0


def test_bandwidth_cells_spread_over_the_spine_uplinks(testbed: Fabric) -> None:
    pairs = [(i, 8 + i) for i in range(8)]
    d = demands(pairs, 2**20, kind=[BANDWIDTH] * 8, max_hops=[0] * 8)
    r = route("netsa", testbed, d)
    uplinks = set(arc_between(testbed, "tor1", "spine1"))
    used = [next(a for a in r.path(i) if a in uplinks) for i in range(8)]
    assert len(uplinks) == 4
    assert sorted(used[:4]) == sorted(uplinks)  # weights grow: the first four take all four
    assert np.bincount(used, minlength=max(used) + 1)[sorted(uplinks)].tolist() == [2, 2, 2, 2]
    assert not set(arc_between(testbed, "tor1", "tor2")) & {a for i in range(8) for a in r.path(i)}


def test_latency_cell_without_fitting_path_falls_back(testbed: Fabric) -> None:
    # one switch at most: only same-ToR pairs fit; i1 -> i9 takes the default shortest path
    d = demands([(0, 8), (0, 1)], 64, kind=[LATENCY, LATENCY], max_hops=[1, 1])
    r = route("netsa", testbed, d)
    assert r.meta["latency_fallbacks"] == 1
    assert r.node_path(testbed, 0) == ("i1", "tor1", "tor2", "i9")
    assert r.node_path(testbed, 1) == ("i1", "tor1", "i2")


def test_unannotated_demands_are_classified_by_packet_size(testbed: Fabric) -> None:
    d = demands([(0, 8), (1, 9), (2, 10)], [64, 2**20, 1600])
    kind, hops = classify_flows(d)
    # 64 B: one 64 B packet (< 120) -> latency, 2 hops; 1 MiB: ~1500 B packets -> bandwidth;
    # 1600 B: two 800 B packets -> neither
    assert kind.tolist() == [LATENCY, BANDWIDTH, 0]
    assert hops.tolist() == [2, 0, 0]
    r = route("netsa", testbed, d)
    assert r.meta["classified"] is True
    assert r.node_path(testbed, 0) == ("i1", "tor1", "tor2", "i9")
    assert r.node_path(testbed, 1) == ("i2", "tor1", "spine1", "tor2", "i10")


def test_unannotated_fat_tree_stays_shortest() -> None:
    f = Fabric(fat_tree(4))
    d = Demands.all_pairs(f, size_bytes=2**20)
    r = route("netsa", f, d)
    validate(f, d, r, shortest=True, valley_free=True)
    # no latency-class links: a latency cell across switches falls back to its default path
    lat = demands([(0, 15), (0, 1)], 64, kind=[LATENCY] * 2, max_hops=[0, 0])
    r = route("netsa", f, lat)
    assert r.meta["latency_fallbacks"] == 1
    assert r.node_path(f, 1) == ("h01", "edge1_1", "h02")
