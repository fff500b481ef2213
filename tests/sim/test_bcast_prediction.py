"""The Bcast experiment's predictions (sdnmpi.sim.bcast_prediction).

Hand-solvable cases on a star (one switch, 1 Gbit/s): a replicated Bcast of B bytes
puts B + ceil(B / 1400) * 42 bytes on each link, at 1 Gbit/s, plus one round trip
(2 x (2 arcs x arc latency + base latency)) per window of 64 packets.
"""

from __future__ import annotations

import doctest
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.core import collectives
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.errors import ConfigError, RoutingError
from sdnmpi.sim import bcast_prediction
from sdnmpi.sim.bcast_prediction import SIZES, DataPath, predict_bcasts
from sdnmpi.sim.calibration import Calibration

MIB = 1 << 20
C = 1e9


def _hosts(topo, n: int) -> list[str]:
    return [h.name for h in topo.hosts][:n]


def test_sizes_and_data_path_defaults() -> None:
    assert SIZES[0] == 4096 and SIZES[-1] == 16 * MIB
    d = DataPath()
    assert (d.payload_bytes, d.header_bytes, d.window_packets) == (1400, 42, 64)
    assert d.packets(1) == 1 and d.packets(1400) == 1 and d.packets(1401) == 2
    assert doctest.testmod(bcast_prediction).failed == 0
    for bad in ({"payload_bytes": 0}, {"window_packets": True}, {"header_bytes": -1}):
        with pytest.raises(ConfigError):
            DataPath(**bad)


@pytest.mark.parametrize("window", [1, 8, 64])
def test_on_a_star_the_replicated_time_is_wire_bytes_and_a_round_trip_per_window(
    window: int,
) -> None:
    topo = leaf_spine(1, 1, 6, latency_s=0.0)
    cal = Calibration(arc_latency_s=1e-5, base_latency_s=1e-4)
    path = DataPath(window_packets=window)
    (p,) = predict_bcasts(
        topo, _hosts(topo, 6), [MIB], library="mpich", calibration=cal, data_path=path
    )
    packets = math.ceil(MIB / 1400)
    rtt = 2 * (2 * 1e-5 + 1e-4)
    assert p.round_trip_s == pytest.approx(rtt)
    assert p.windows == math.ceil(packets / window)
    assert p.replicated_s == pytest.approx((MIB + 42 * packets) * 8 / C + p.windows * rtt)
    assert p.tree_links == 6


def test_the_library_is_what_the_other_experiments_predict() -> None:
    """Without competing traffic: Calibration.simulate in ranks mode on D-mod-K
    routes, as exp_allreduce predicts its Allreduce."""
    topo = leaf_spine(2, 5, 4)
    cal = Calibration(link_scale=0.01, goodput=0.9, arc_latency_s=2e-5, base_latency_s=1e-3)
    hosts = _hosts(topo, 20)
    fabric = Fabric(topo)
    for library in ("openmpi", "mpich"):
        points = predict_bcasts(topo, hosts, [4096, MIB], library=library, calibration=cal)
        for p in points:
            s = collectives.expand("bcast", 20, p.nbytes, library=library)
            assert p.algorithm == s.algorithm
            demands = Demands.from_pattern(fabric, s.to_pattern(), Placement(tuple(hosts)))
            routing = route("dmodk", fabric, demands)
            want = cal.simulate(fabric, demands, routing, library, mode="ranks").total_s
            assert p.library_s == pytest.approx(want)
            assert p.gain > 1


def _ranks_time(fabric: Fabric, hosts: list[str], algorithm: str, nbytes: int) -> float:
    s = collectives.expand("bcast", len(hosts), nbytes, algorithm=algorithm)
    demands = Demands.from_pattern(fabric, s.to_pattern(), Placement(tuple(hosts)))
    routing = route("dmodk", fabric, demands)
    return Calibration().simulate(fabric, demands, routing, "openmpi", mode="ranks").total_s


def test_open_mpis_binomial_on_20_hosts_is_13_transfers_where_mpichs_is_5() -> None:
    """One rank per host on an idle leaf-spine (1 Gbit/s everywhere, no latency),
    T = one buffer over one link.  Open MPI's tree sends to all children at once, so a
    rank with k children is busy k T: the root's 5 children have the buffer at 5 T,
    rank 1 (4 children) serves 3 by 9 T, rank 3 (3 children) serves 7 by 12 T, and
    rank 7 serves 15 by 13 T.  MPICH's tree sends one child per step: 5 T.  The
    spines are not the bottleneck (checked when this was written): the time is the
    senders' links alone."""
    topo = leaf_spine(2, 5, 4, latency_s=0.0)
    fabric = Fabric(topo)
    hosts = _hosts(topo, 20)
    t = MIB * 8 / C
    assert _ranks_time(fabric, hosts, "ompi_binomial", MIB) == pytest.approx(13 * t)
    assert _ranks_time(fabric, hosts, "binomial", MIB) == pytest.approx(5 * t)
    # and it is what the Open MPI prediction runs for 20 ranks below 1 MiB
    (p,) = predict_bcasts(topo, hosts, [MIB // 2], library="openmpi")
    assert p.algorithm == "ompi_binomial"
    assert p.library_s == pytest.approx(13 * t / 2)


def test_a_competing_stream_into_a_receiver_halves_the_tree_and_a_spine_one_is_avoided() -> None:
    topo = leaf_spine(2, 4, 2, latency_s=0.0)
    hosts = _hosts(topo, 4)  # h1..h4: two leaves
    names = [h.name for h in topo.hosts]
    alone = predict_bcasts(topo, hosts, [MIB])[0]
    wire = (MIB + 42 * math.ceil(MIB / 1400)) * 8 / C
    assert alone.replicated_s == pytest.approx(wire)
    # another job's host streams into receiver hosts[3]: its downlink is shared max-min
    into = predict_bcasts(topo, hosts, [MIB], competing=[(names[6], hosts[3])])[0]
    assert into.replicated_s == pytest.approx(2 * wire)
    assert into.library_s > alone.library_s
    # receiver h2 streams to h5: D-mod-K sends it by leaf1 -> spine1, the spine an
    # idle tree would cross to leaf2 by (checked when this was written); the tree,
    # grown over that load, crosses by spine2 and keeps the whole line rate
    across = predict_bcasts(topo, hosts, [MIB], competing=[(hosts[1], names[4])])[0]
    assert across.replicated_s == pytest.approx(wire)


def test_bad_input() -> None:
    topo = leaf_spine(2, 4, 2)
    hosts = _hosts(topo, 4)
    for kwargs, message in (
        ({"library": "lam"}, "library"),
        ({"root": 4}, "root"),
        ({"competing": [(hosts[0], hosts[0])]}, "itself"),
    ):
        with pytest.raises(ConfigError, match=message):
            predict_bcasts(topo, hosts, [MIB], **kwargs)
    with pytest.raises(ConfigError, match="distinct"):
        predict_bcasts(topo, [hosts[0], hosts[0]], [MIB])
    with pytest.raises(ConfigError, match="sizes"):
        predict_bcasts(topo, hosts, [0])
    with pytest.raises(RoutingError, match="no host"):
        predict_bcasts(topo, [*hosts, "nohost"], [MIB])


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from([leaf_spine(2, 4, 2, latency_s=0.0), fat_tree(4, latency_s=0.0)]),
    st.integers(2, 16),
    st.sampled_from([64 * 1024, MIB, 16 * MIB]),
    st.sampled_from(["openmpi", "mpich"]),
)
def test_without_latency_replicated_costs_at_most_the_headers_over_the_library(
    topo: object, n: int, nbytes: int, library: str
) -> None:
    """Equal capacities, no latency: the library's root sends the buffer at least once
    over its link; the tree sends it once with the headers on top."""
    hosts = _hosts(topo, n)
    (p,) = predict_bcasts(topo, hosts, [nbytes], library=library)  # type: ignore[arg-type]
    overhead = DataPath().wire_bytes(nbytes) / nbytes
    assert p.replicated_s <= p.library_s * overhead * (1 + 1e-9)
    assert p.replicated_s == pytest.approx(DataPath().wire_bytes(nbytes) * 8 / C)
