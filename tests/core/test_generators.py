"""Topology generators and presets: sizes, degrees, bisection, oversubscription."""

from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.core.capacity import bisection, oversubscription
from sdnmpi.core.generators import fat_tree, host_ip, host_mac, leaf_spine, oversubscribe, xgft
from sdnmpi.core.presets import allreduce28, netsa, unisonflow
from sdnmpi.core.topology import Topology
from sdnmpi.errors import TopologyError

G = 1e9


def degrees(t: Topology) -> Counter[str]:
    """Cables per node."""
    c: Counter[str] = Counter()
    for ln in t.links:
        c[ln.src] += 1
        c[ln.dst] += 1
    return c


def graph(t: Topology) -> nx.Graph:
    g = nx.MultiGraph()
    g.add_nodes_from(t.node_names)
    g.add_edges_from((ln.src, ln.dst) for ln in t.links)
    return g


@pytest.mark.parametrize(
    ("spines", "leaves", "hpl", "up"), [(2, 4, 6, 1), (4, 8, 4, 2), (1, 2, 3, 3), (3, 5, 7, 1)]
)
def test_leaf_spine_sizes_and_degrees(spines, leaves, hpl, up):
    t = leaf_spine(spines, leaves, hpl, uplinks_per_pair=up)
    assert len(t.hosts) == leaves * hpl
    assert len(t.switches) == spines + leaves
    assert len(t.links) == leaves * hpl + leaves * spines * up
    d = degrees(t)
    assert all(d[f"leaf{i + 1}"] == hpl + spines * up for i in range(leaves))
    assert all(d[f"spine{i + 1}"] == leaves * up for i in range(spines))
    assert all(d[h.name] == 1 for h in t.hosts)
    assert {s.name: s.level for s in t.switches} == t.levels


@pytest.mark.parametrize(
    ("spines", "leaves", "hpl", "up", "host_bps", "up_bps"),
    [(2, 4, 6, 4, G, G), (2, 4, 7, 1, G, G), (4, 4, 4, 1, G, G), (2, 6, 8, 2, G, 10 * G)],
)
def test_leaf_spine_bisection_matches_the_formula(spines, leaves, hpl, up, host_bps, up_bps):
    t = leaf_spine(spines, leaves, hpl, uplinks_per_pair=up, host_bps=host_bps, uplink_bps=up_bps)
    half_hosts = leaves * hpl // 2
    uplinks_of_half = (leaves // 2) * spines * up * up_bps
    assert bisection(t).bandwidth_bps == pytest.approx(min(half_hosts * host_bps, uplinks_of_half))
    assert oversubscription(t) == {1: pytest.approx(hpl * host_bps / (spines * up * up_bps))}


def test_leaf_spine_lag_groups_parallel_uplinks():
    t = leaf_spine(2, 4, 6, uplinks_per_pair=4, lag=True)
    groups = Counter(ln.lag for ln in t.links if ln.lag)
    assert len(groups) == 8
    assert set(groups.values()) == {4}
    plain = leaf_spine(2, 4, 6, uplinks_per_pair=4)
    assert all(ln.lag is None for ln in plain.links)


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fat_tree_sizes_degrees_and_full_bisection(k):
    t = fat_tree(k)
    assert len(t.hosts) == k**3 // 4
    assert len(t.switches) == 5 * k * k // 4
    d = degrees(t)
    assert all(d[s.name] == k for s in t.switches)
    assert Counter(t.levels.values()) == {1: k * k // 2, 2: k * k // 2, 3: k * k // 4}
    if k >= 4:
        assert bisection(t).bandwidth_bps == pytest.approx(len(t.hosts) / 2 * G)
    assert oversubscription(t) == {1: 1.0, 2: 1.0}


def test_fat_tree_pods_reach_every_core_once_per_aggregation_switch():
    t = fat_tree(4)
    for core in (s.name for s in t.switches if s.name.startswith("core")):
        pods = sorted(n.split("_")[0] for n in t.neighbors(core))
        assert pods == ["agg1", "agg2", "agg3", "agg4"]


def test_fat_tree_oversubscribed_edge():
    t = fat_tree(4, hosts_per_edge=6)
    assert len(t.hosts) == 48
    assert oversubscription(t)[1] == pytest.approx(3.0)
    assert bisection(t).ratio == pytest.approx(1 / 3)


def test_fat_tree_rejects_odd_k():
    with pytest.raises(TopologyError, match="even"):
        fat_tree(5)


def test_fat_tree_is_the_xgft_it_should_be():
    # k=4: XGFT(3; 2,2,4; 1,2,2).  Exact isomorphism is cheap only at this size;
    # larger k are checked through the size and degree tests.
    a, b = graph(fat_tree(4)), graph(xgft(3, [2, 2, 4], [1, 2, 2]))
    assert nx.is_isomorphic(a, b)


@pytest.mark.parametrize(
    ("h", "m", "w"),
    [(1, [4], [1]), (2, [4, 4], [1, 2]), (2, [3, 5], [2, 3]), (3, [2, 2, 4], [1, 2, 2])],
)
def test_xgft_sizes(h, m, w):
    t = xgft(h, m, w)
    prod = lambda xs: __import__("math").prod(xs)  # noqa: E731
    assert len(t.hosts) == prod(m)
    for level in range(1, h + 1):
        count = prod(m[level:]) * prod(w[:level])
        assert Counter(t.levels.values())[level] == count
        # each level-l switch: m_l children, w_{l+1} parents
        for s in (s for s in t.switches if s.level == level):
            up = w[level] if level < h else 0
            assert degrees(t)[s.name] == m[level - 1] + up
    assert all(degrees(t)[x.name] == w[0] for x in t.hosts)


def test_xgft_per_level_capacities_oversubscribe():
    t = xgft(2, [4, 4], [1, 2], link_bps=[G, 0.5 * G])
    assert oversubscription(t) == {1: pytest.approx(4.0)}


def test_xgft_rejects_bad_parameters():
    with pytest.raises(TopologyError):
        xgft(2, [4], [1, 2])
    with pytest.raises(TopologyError):
        xgft(2, [4, 0], [1, 2])
    with pytest.raises(TopologyError, match="one per level"):
        xgft(2, [4, 4], [1, 2], link_bps=[G])


def test_oversubscribe_halves_the_bisection():
    t = fat_tree(4)
    o = oversubscribe(t, 2.0)
    assert bisection(o).bandwidth_bps == pytest.approx(bisection(t).bandwidth_bps / 2)
    assert oversubscription(o)[1] == pytest.approx(2.0)
    assert o.meta["oversubscription"] == 2.0


def test_generated_addresses_are_unique_and_local():
    macs = {host_mac(i) for i in range(70000)}
    assert len(macs) == 70000
    assert all(int(m.split(":")[0], 16) & 0x02 for m in list(macs)[:100])
    assert host_ip(0) == "10.0.0.1"
    assert host_ip(255) == "10.0.1.0"


def test_preset_unisonflow():
    t = unisonflow()
    assert (len(t.hosts), len(t.switches)) == (24, 6)
    assert t.hosts[0].name == "node01" and t.hosts[-1].name == "node24"
    lags = Counter(ln.lag for ln in t.links if ln.lag)
    assert len(lags) == 8 and set(lags.values()) == {4}
    assert {ln.capacity_bps for ln in t.links} == {G}
    assert bisection(t).bandwidth_bps == pytest.approx(12 * G)


def test_preset_allreduce28():
    t = allreduce28()
    assert (len(t.hosts), len(t.switches)) == (28, 6)
    assert {ln.capacity_bps for ln in t.links} == {G}
    assert oversubscription(t) == {1: pytest.approx(3.5)}


def test_preset_netsa():
    t = netsa()
    assert (len(t.hosts), len(t.switches)) == (16, 3)
    assert {s.name for s in t.switches} == {"spine1", "tor1", "tor2"}
    bw = [ln for ln in t.links if "bandwidth" in ln.annotations]
    lat = [ln for ln in t.links if "latency" in ln.annotations]
    assert len(bw) == 8 and all(ln.dst == "spine1" for ln in bw)
    assert [(ln.src, ln.dst) for ln in lat] == [("tor1", "tor2")]
    assert Counter(t.attachment(h.name)[0] for h in t.hosts) == {"tor1": 8, "tor2": 8}


@settings(max_examples=30, deadline=None)
@given(
    spines=st.integers(1, 4),
    leaves=st.integers(1, 6),
    hpl=st.integers(1, 6),
    up=st.integers(1, 3),
    lag=st.booleans(),
)
def test_leaf_spine_property_valid_and_full_mesh(spines, leaves, hpl, up, lag):
    t = leaf_spine(spines, leaves, hpl, uplinks_per_pair=up, lag=lag)
    for leaf in (s for s in t.switches if s.level == 1):
        spine_links = Counter(a.dst for a in t.out_arcs[leaf.name] if not t.is_host(a.dst))
        assert spine_links == {f"spine{i + 1}": up for i in range(spines)}
    assert len({h.mac for h in t.hosts}) == len(t.hosts)


@settings(max_examples=25, deadline=None)
@given(
    h=st.integers(1, 3),
    data=st.data(),
)
def test_xgft_property_every_host_reaches_every_top_switch(h, data):
    m = data.draw(st.lists(st.integers(1, 3), min_size=h, max_size=h))
    w = data.draw(st.lists(st.integers(1, 3), min_size=h, max_size=h))
    t = xgft(h, m, w)
    g = graph(t)
    tops = [s.name for s in t.switches if s.level == h]
    for host in t.hosts[:3]:
        lengths = nx.single_source_shortest_path_length(g, host.name)
        assert all(lengths[top] == h for top in tops)
