"""Every baseline router on every test topology and pattern: paths the controller can install.

On multi-rooted trees (leaf-spine with LAG or parallel uplinks, fat-tree, XGFT,
milk, unisonflow, allreduce28) every router's paths are shortest and
valley-free: the spanning tree's too, because each generated fabric's top switch
is a common ancestor of all hosts; the load-driven Dijkstra routers (allreduce,
netsa) could detour under heavy load but do not on these patterns.  On the
NetSA testbed (a ToR-to-ToR shortcut), only ECMP, min-hop and greedy keep
shortest paths; the others are still valid.
"""

from __future__ import annotations

from functools import cache

import pytest

from sdnmpi.core import placement, workloads
from sdnmpi.core.routing import ROUTERS, Demands, Fabric, info, route, validate
from sdnmpi.errors import RoutingError
from tests.routing.flows import ALWAYS_SHORTEST, ROUTER_NAMES, TOPOLOGIES, TREES

PATTERNS = (
    "allreduce:nprocs={n},bytes=1048576",
    "alltoall:nprocs={n},bytes=65536",
    "bcast:nprocs={n},bytes=4096",
    "cg:nprocs={n},klass=S",
)


@cache
def fabric(name: str) -> Fabric:
    return Fabric(TOPOLOGIES[name]())


@cache
def workload(topo: str, spec: str) -> Demands:
    f = fabric(topo)
    if spec == "all pairs":
        return Demands.all_pairs(f)
    n = 16 if f.nhosts >= 16 else 8
    pattern = workloads.build(spec.format(n=n))
    return Demands.from_pattern(f, pattern, placement.cyclic(f.topology, n))


@pytest.mark.parametrize("router", ROUTER_NAMES)
@pytest.mark.parametrize("topo", list(TOPOLOGIES))
def test_routes_are_valid(router: str, topo: str) -> None:
    f = fabric(topo)
    tree = topo in TREES
    for spec in (*PATTERNS, "all pairs"):
        d = workload(topo, spec)
        r = route(router, f, d, seed=1)
        assert r.router == router
        assert len(r) == len(d)
        strict = tree or router in ALWAYS_SHORTEST
        validate(f, d, r, shortest=strict, valley_free=strict)


@pytest.mark.parametrize("router", ROUTER_NAMES)
def test_netsa_testbed_shortcut_is_not_shortest_for_tree_routers(router: str) -> None:
    f = fabric("netsa")
    d = Demands.all_pairs(f, size_bytes=2**20)  # bandwidth-intensive for NetSA
    r = route(router, f, d)
    if router in ALWAYS_SHORTEST:
        validate(f, d, r, shortest=True)
    else:  # the tree routers ignore tor1-tor2; the Dijkstra ones load-balance onto the spine
        with pytest.raises(RoutingError, match="longer than a shortest path"):
            validate(f, d, r, shortest=True)


@pytest.mark.parametrize("router", ROUTER_NAMES)
def test_registry_describes_and_cites(router: str) -> None:
    about = info(router)
    assert about.name == router
    assert about.description
    assert about.citation
    assert router in ROUTERS


@pytest.mark.parametrize("router", ROUTER_NAMES)
def test_no_flows_no_paths(router: str) -> None:
    f = fabric("fat-tree-4")
    d = Demands.all_pairs(f, hosts=[])
    r = route(router, f, d)
    assert len(r) == 0
    validate(f, d, r)
