"""Property tests: on random fat-trees, leaf-spines and XGFTs, random flows get valid routes.

Valid: contiguous, from the source host to the destination host, no host
transited, no node visited twice (loop-free); for every router but the two
load-driven Dijkstra ones, also shortest and valley-free (the Dijkstra routers
may detour once shortest paths are loaded, which is legitimate for them).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sdnmpi.core.generators import fat_tree, leaf_spine, xgft
from sdnmpi.core.routing import Demands, Fabric, route, validate
from sdnmpi.core.topology import Topology
from tests.routing.flows import ROUTER_NAMES, demands

DETOURING = ("allreduce", "netsa")


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    kind = draw(st.sampled_from(["fat_tree", "leaf_spine", "xgft"]))
    if kind == "fat_tree":
        return fat_tree(draw(st.sampled_from([2, 4, 6])))
    if kind == "leaf_spine":
        return leaf_spine(
            draw(st.integers(1, 3)),
            draw(st.integers(1, 4)),
            draw(st.integers(1, 3)),
            uplinks_per_pair=draw(st.integers(1, 3)),
            lag=draw(st.booleans()),
        )
    h = draw(st.integers(1, 3))
    m = draw(st.lists(st.integers(1, 3), min_size=h, max_size=h))
    w = draw(st.lists(st.integers(1, 3), min_size=h, max_size=h))
    return xgft(h, m, w)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Fabric, Demands, int]:
    topo = draw(topologies())
    n = len(topo.hosts)
    assume(n >= 2)
    host = st.integers(0, n - 1)
    pairs = draw(
        st.lists(st.tuples(host, host).filter(lambda p: p[0] != p[1]), min_size=1, max_size=24)
    )
    sizes = draw(st.lists(st.integers(1, 1 << 22), min_size=len(pairs), max_size=len(pairs)))
    ranked = draw(st.booleans())
    ranks = [(2 * i, 2 * i + 1) for i in range(len(pairs))] if ranked else None
    return Fabric(topo), demands(pairs, sizes, ranks=ranks), draw(st.integers(0, 2**32))


@pytest.mark.parametrize("router", ROUTER_NAMES)
@settings(max_examples=50, deadline=None)
@given(case=scenarios())
def test_random_flows_get_valid_routes(router: str, case: tuple[Fabric, Demands, int]) -> None:
    fabric, d, seed = case
    r = route(router, fabric, d, seed=seed)
    strict = router not in DETOURING
    validate(fabric, d, r, shortest=strict, valley_free=strict)
    again = route(router, fabric, d, seed=seed)
    assert np.array_equal(r.arcs, again.arcs)  # deterministic for a seed


@settings(max_examples=50, deadline=None)
@given(case=scenarios())
def test_oblivious_routers_ignore_bytes(case: tuple[Fabric, Demands, int]) -> None:
    fabric, d, seed = case
    heavy = demands(
        list(zip(d.src.tolist(), d.dst.tolist(), strict=True)),
        (d.size_bytes[::-1] * 7).tolist(),
        ranks=list(zip(d.src_rank.tolist(), d.dst_rank.tolist(), strict=True)),
    )
    for router in ("single", "ecmp", "dmodk", "minhop"):
        assert np.array_equal(
            route(router, fabric, d, seed=seed).arcs, route(router, fabric, heavy, seed=seed).arcs
        )
