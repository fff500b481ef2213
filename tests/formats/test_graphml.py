"""GraphML: the milk cluster, round trips, and malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdnmpi import catalog
from sdnmpi.core.generators import fat_tree, leaf_spine, xgft
from sdnmpi.core.presets import netsa, unisonflow
from sdnmpi.core.topology import Link, Topology
from sdnmpi.errors import FormatError
from sdnmpi.formats.graphml import dump_graphml, load_graphml, parse_graphml


def test_milk_matches_the_file(workloads_dir: Path):
    t = load_graphml(workloads_dir / "milk.graphml")
    assert t.name == "Milk cluster"
    assert len(t.hosts) == 20 and all(h.cores == 8 for h in t.hosts)
    assert {s.name: s.dpid for s in t.switches} == {
        "edge1": 3,
        "edge2": 4,
        "edge3": 5,
        "edge4": 6,
        "core1": 1,
        "core2": 2,
    }
    assert t.host("milk01").mac == "00:30:48:cf:f0:39"
    assert len(t.links) == 28  # 56 directed edges paired into cables
    assert t.attachment("milk01") == ("edge1", 10)
    assert t.attachment("milk05") == ("edge1", 15)
    core_ports = {
        (a.dst, a.dst_port) for a in t.arcs if a.src == "edge1" and a.dst.startswith("core")
    }
    assert core_ports == {("core1", 1), ("core2", 41)}
    assert {ln.capacity_bps for ln in t.links} == {1e9}
    assert t.levels == {"edge1": 1, "edge2": 1, "edge3": 1, "edge4": 1, "core1": 2, "core2": 2}


def test_milk_preset_is_the_bundled_file(workloads_dir: Path):
    preset = catalog.load_topology("milk")
    original = load_graphml(workloads_dir / "milk.graphml")
    assert preset.links == original.links and preset.hosts == original.hosts


@pytest.mark.parametrize(
    "topo",
    [
        unisonflow(),
        netsa(),
        fat_tree(4),
        xgft(2, [3, 4], [2, 2]),
        leaf_spine(2, 2, 2, uplink_bps=2.5e9),
    ],
    ids=lambda t: t.name,
)
def test_round_trip_is_lossless(topo: Topology):
    assert parse_graphml(dump_graphml(topo)) == topo


def test_round_trip_of_one_way_links():
    t = leaf_spine(1, 1, 2)
    links = [
        *t.links,
        Link("h1", "leaf1", 2, 9, 1e8, duplex=False),
        Link("leaf1", "h1", 10, 3, 1e8, duplex=False),
    ]
    t2 = t.with_links(links)
    assert parse_graphml(dump_graphml(t2)) == t2


def test_milk_round_trips_through_our_writer(workloads_dir: Path):
    t = load_graphml(workloads_dir / "milk.graphml")
    assert parse_graphml(dump_graphml(t)) == t


GOOD_NODE = '<node id="h"><data key="t">host</data><data key="m">02:00:00:00:00:01</data></node>'
KEYS = (
    '<key id="t" for="node" attr.name="typ"/><key id="m" for="node" attr.name="mac"/>'
    '<key id="d" for="node" attr.name="dpid"/>'
)


def doc(body: str) -> str:
    head = f'<graphml xmlns="http://graphml.graphdrawing.org/xmlns">{KEYS}'
    return f'{head}<graph edgedefault="directed">{body}</graph></graphml>'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<graphml><graph>", "malformed XML"),
        (doc('<node id="x"><data key="t">router</data></node>'), "unknown node type 'router'"),
        (doc('<node id="x"><data key="t">switch</data></node>'), "switch without dpid"),
        (doc('<node id="x"><data key="t">host</data></node>'), "host without mac"),
        (
            doc(
                GOOD_NODE + '<node id="s"><data key="t">switch</data><data key="d">1</data></node>'
            ),
            "has no link",
        ),
        (doc(GOOD_NODE + '<edge source="h" target="nowhere"/>'), "dangling link"),
        (
            '<?xml version="1.0"?><!DOCTYPE g [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]>'
            "<graphml>&b;</graphml>",
            "forbidden XML construct",
        ),
        ("<notgraphml/>", "not <graphml>"),
    ],
)
def test_malformed_graphml_is_rejected_with_the_source_named(text: str, message: str):
    with pytest.raises(FormatError, match=message) as err:
        parse_graphml(text, source="bad.graphml")
    assert str(err.value).startswith("bad.graphml: ")


def test_unreadable_file_is_a_format_error(tmp_path: Path):
    with pytest.raises(FormatError, match="cannot read"):
        load_graphml(tmp_path / "missing.graphml")
