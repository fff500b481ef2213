"""Widest single paths (:func:`sdnmpi.core.routing.cuts.widest`) against a search per
capacity threshold, on fabrics whose arcs each have their own capacity."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from sdnmpi.catalog import load_topology
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.routing.cuts import widest
from sdnmpi.core.routing.model import Fabric, FloatArray
from sdnmpi.core.topology import Topology
from tests.routing.flows import host_bridge


@dataclasses.dataclass(frozen=True, eq=False)
class Residual(Fabric):
    """A fabric with capacities of its own (as the manager's LoadedFabric)."""

    given_bps: FloatArray | None = None

    @property
    def capacity_bps(self) -> FloatArray:
        assert self.given_bps is not None
        return self.given_bps


def by_threshold(fabric: Fabric) -> FloatArray:
    """For each capacity c, largest first: the host pairs a path of arcs >= c joins
    (hosts split into a source and a sink, so none forwards); inf where none does."""
    nh, nsw = fabric.nhosts, fabric.nnodes - fabric.nhosts
    n = nsw + 2 * nh
    a_src = np.where(fabric.arc_src < nh, nsw + fabric.arc_src, fabric.arc_src - nh)
    a_dst = np.where(fabric.arc_dst < nh, nsw + nh + fabric.arc_dst, fabric.arc_dst - nh)
    cap = fabric.capacity_bps
    out = np.full((nh, nh), np.inf)
    for c in np.unique(cap)[::-1]:
        ok = cap >= c
        graph = csr_matrix((np.ones(int(ok.sum())), (a_src[ok], a_dst[ok])), shape=(n, n))
        hops = np.atleast_2d(shortest_path(graph, unweighted=True, indices=nsw + np.arange(nh)))
        out = np.where(np.isfinite(hops[:, nsw + nh :]) & np.isinf(out), c, out)
    return out


@pytest.mark.parametrize(
    "topo",
    [leaf_spine(2, 3, 2), fat_tree(4), host_bridge(), load_topology("netsa")],
    ids=lambda t: t.name,
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_widest_matches_a_search_per_capacity(topo: Topology, seed: int) -> None:
    plain = Fabric(topo)
    rng = np.random.default_rng(seed)
    shares = 1 + rng.integers(0, 4, plain.narcs) * rng.random(plain.narcs)
    fab = Residual(topo, plain.capacity_bps / shares)
    assert np.array_equal(widest(fab), by_threshold(fab))
    assert np.array_equal(widest(plain), by_threshold(plain))


def test_the_widest_path_takes_the_detour_when_the_short_one_is_narrow() -> None:
    """h1 -> h3 on the host bridge: s1-s3-s4-s2 (all 1 Gbit/s) beats nothing else (h2
    does not forward); narrowing s3-s4 to 0.25 Gbit/s narrows the pair to 0.25."""
    topo = host_bridge()
    plain = Fabric(topo)
    cap = plain.capacity_bps.copy()
    s3, s4 = plain.index["s3"], plain.index["s4"]
    cap[(plain.arc_src == s3) & (plain.arc_dst == s4)] = 0.25e9
    h1, h3 = plain.index["h1"], plain.index["h3"]
    assert widest(plain)[h1, h3] == 1e9
    assert widest(Residual(topo, cap))[h1, h3] == 0.25e9
