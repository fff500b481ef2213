"""The topology model: validation and graph views."""

from __future__ import annotations

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.topology import Host, Link, Switch, Topology, normalize_mac
from sdnmpi.errors import TopologyError

G = 1e9


def small(
    links: list[Link] | None = None,
    hosts: list[Host] | None = None,
    switches: list[Switch] | None = None,
) -> Topology:
    hosts = hosts or [
        Host("a", "02:00:00:00:00:01", "10.0.0.1"),
        Host("b", "02:00:00:00:00:02", "10.0.0.2"),
    ]
    switches = switches or [Switch("s1", 1)]
    links = links if links is not None else [Link("a", "s1", 1, 1, G), Link("b", "s1", 1, 2, G)]
    return Topology("t", tuple(hosts), tuple(switches), tuple(links))


def test_valid_topology_has_two_arcs_per_duplex_link():
    t = small()
    assert len(t.arcs) == 4
    assert t.attachment("a") == ("s1", 1)
    assert t.neighbors("s1") == ("a", "b")
    assert t.levels == {"s1": 1}


@pytest.mark.parametrize(
    ("links", "message"),
    [
        ([Link("a", "s1", 1, 1, G), Link("b", "s9", 1, 2, G)], "unknown node 's9' (dangling link)"),
        ([Link("a", "s1", 1, 1, G), Link("b", "s1", 1, 1, G)], "duplicate port: s1:1"),
        ([Link("a", "s1", 1, 1, G)], "host 'b' has no link"),
        ([Link("a", "s1", 1, 1, 0.0), Link("b", "s1", 1, 2, G)], "capacity must be > 0"),
        ([Link("a", "s1", 0, 1, G), Link("b", "s1", 1, 2, G)], "port 0 out of range"),
        ([Link("a", "s1", 1, 1, G, -1.0), Link("b", "s1", 1, 2, G)], "latency must be >= 0"),
        ([Link("a", "a", 1, 2, G), Link("b", "s1", 1, 2, G)], "connects 'a' to itself"),
        (
            [Link("a", "s1", 1, 1, G, annotations=frozenset({"fast"})), Link("b", "s1", 1, 2, G)],
            "unknown annotation",
        ),
    ],
)
def test_invalid_links_are_rejected_with_a_clear_message(links, message):
    with pytest.raises(TopologyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        small(links)


def test_disconnected_hosts_are_rejected():
    switches = [Switch("s1", 1), Switch("s2", 2)]
    links = [Link("a", "s1", 1, 1, G), Link("b", "s2", 1, 1, G)]
    with pytest.raises(TopologyError, match="cannot be reached"):
        small(links, switches=switches)


def test_one_way_links_need_a_way_back():
    links = [Link("a", "s1", 1, 1, G), Link("s1", "b", 2, 1, G, duplex=False)]
    with pytest.raises(TopologyError, match="cannot reach"):
        small(links)


def test_duplicate_names_macs_and_dpids_are_rejected():
    with pytest.raises(TopologyError, match="duplicate node name 'a'"):
        small(hosts=[Host("a", "02:00:00:00:00:01"), Host("a", "02:00:00:00:00:02")])
    with pytest.raises(TopologyError, match="duplicate MAC"):
        small(hosts=[Host("a", "02:00:00:00:00:01"), Host("b", "02:00:00:00:00:01")])
    with pytest.raises(TopologyError, match="duplicate dpid 1"):
        small(
            switches=[Switch("s1", 1), Switch("s2", 1)],
            links=[Link("a", "s1", 1, 1, G), Link("b", "s1", 1, 2, G), Link("s1", "s2", 3, 1, G)],
        )


def test_invalid_host_fields_are_rejected():
    with pytest.raises(TopologyError, match="invalid MAC"):
        small(hosts=[Host("a", "zz:00:00:00:00:01"), Host("b", "02:00:00:00:00:02")])
    with pytest.raises(TopologyError, match="invalid IP"):
        small(hosts=[Host("a", "02:00:00:00:00:01", "10.0.0.300"), Host("b", "02:00:00:00:00:02")])
    with pytest.raises(TopologyError, match="cores must be >= 1"):
        small(hosts=[Host("a", "02:00:00:00:00:01", cores=0), Host("b", "02:00:00:00:00:02")])


def test_a_port_may_face_only_one_peer():
    # a directed pair on the same ports is one cable; a third arc on s1:1 is not
    links = [
        Link("a", "s1", 1, 1, G, duplex=False),
        Link("s1", "a", 1, 1, G, duplex=False),
        Link("b", "s1", 1, 2, G),
    ]
    assert len(small(links).arcs) == 4
    with pytest.raises(TopologyError, match="wired to both"):
        small([*links, Link("s1", "b", 1, 2, G, duplex=False)])


def test_lag_members_must_match():
    t = leaf_spine(2, 2, 2, uplinks_per_pair=2, lag=True)
    bad = [
        ln
        if ln.lag is None or ln.src_port != 4
        else Link(ln.src, ln.dst, ln.src_port, ln.dst_port, 2 * G, lag=ln.lag)
        for ln in t.links
    ]
    with pytest.raises(TopologyError, match="members differ"):
        t.with_links(bad)


def test_normalize_mac():
    assert normalize_mac("AA-BB-CC-00-11-22") == "aa:bb:cc:00:11:22"
    with pytest.raises(TopologyError):
        normalize_mac("aa:bb")


def test_renamed_keeps_structure():
    t = leaf_spine(1, 2, 2)
    r = t.renamed({"h1": "x1", "leaf1": "tor1"})
    assert r.attachment("x1") == ("tor1", 1)
    assert len(r.links) == len(t.links)


def test_lookup_errors_name_the_missing_node():
    t = small()
    with pytest.raises(TopologyError, match="no host 'zz'"):
        t.host("zz")
    with pytest.raises(TopologyError, match="no switch 'zz'"):
        t.switch("zz")
