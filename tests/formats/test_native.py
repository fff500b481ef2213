"""sdnmpi JSON: lossless round trips and strict reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.core.generators import fat_tree, xgft
from sdnmpi.core.pattern import Cell, Pattern, Phase
from sdnmpi.core.presets import netsa, unisonflow
from sdnmpi.errors import FormatError
from sdnmpi.formats.native import dumps, load_json, pattern_from_dict, topology_from_dict

kinds = st.sampled_from([None, "bandwidth", "latency"])
cell_st = st.builds(
    Cell,
    st.integers(0, 9),
    st.integers(0, 9),
    st.integers(0, 2**40),
    st.integers(0, 10**6),
    kinds,
    st.integers(0, 6),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 100)), max_size=3).map(tuple),
)
phase_st = st.builds(
    lambda label, cells, rep: Phase.from_cells(label, cells, repeat=rep),
    st.text(max_size=20),
    st.lists(cell_st, max_size=20),
    st.integers(1, 1000),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(phase_st, max_size=4), st.booleans())
def test_property_pattern_round_trip(phases, host_level):
    hosts = tuple(f"h{i}" for i in range(10)) if host_level else None
    p = Pattern("p", 10, tuple(phases), hosts, {"source": "x", "n": 3})
    assert pattern_from_dict(json.loads(dumps(p))) == p


@pytest.mark.parametrize(
    "topo", [unisonflow(), netsa(), fat_tree(4), xgft(2, [2, 3], [2, 2])], ids=lambda t: t.name
)
def test_topology_round_trip(topo):
    assert topology_from_dict(json.loads(dumps(topo))) == topo


def test_unknown_keys_and_wrong_types_are_rejected(tmp_path: Path):
    good = json.loads(dumps(netsa()))
    bad = dict(good, colour="red")
    with pytest.raises(FormatError, match="unknown key\\(s\\) \\['colour'\\]"):
        topology_from_dict(bad, "t.json")
    bad = json.loads(dumps(netsa()))
    bad["links"][0]["capacity_bps"] = "fast"
    with pytest.raises(FormatError, match=r"links\[0\]\.capacity_bps must be a number"):
        topology_from_dict(bad, "t.json")
    bad = json.loads(dumps(netsa()))
    bad["links"][0]["dst"] = "ghost"
    with pytest.raises(FormatError, match=r"(?s)t\.json: .*dangling"):
        topology_from_dict(bad, "t.json")
    pat = json.loads(dumps(Pattern("p", 2, (Phase.from_cells("x", [(0, 1, 5)]),))))
    pat["phases"][0]["size_bytes"] = [-5]
    with pytest.raises(FormatError, match="negative bytes"):
        pattern_from_dict(pat, "p.json")
    pat["version"] = 99
    with pytest.raises(FormatError, match="unsupported sdnmpi-pattern version 99"):
        pattern_from_dict(pat, "p.json")


def test_load_json_dispatches_on_format(tmp_path: Path):
    (tmp_path / "t.json").write_text(dumps(netsa()))
    assert load_json(tmp_path / "t.json") == netsa()
    (tmp_path / "x.json").write_text('{"format": "other"}')
    with pytest.raises(FormatError, match="unknown format 'other'"):
        load_json(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("{")
    with pytest.raises(FormatError, match="not valid JSON"):
        load_json(tmp_path / "y.json")
