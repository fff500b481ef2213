"""The SDN-enhanced MPI_Allreduce router: one Dijkstra per pair on route-count weights.

The seed paper's route generation (its Algorithm 1): every link starts with
weight 1; for each sender-receiver pair in turn, Dijkstra finds the least-weight
route, which is kept, and every link on it gets its weight incremented by one,
so a link's weight is one plus the number of routes already placed on it and
later pairs avoid shared links.  Here:

* pairs are the distinct (source host, destination host) pairs of the demands,
  in the order they first appear (phase by phase, then the pattern's cell
  order), as the rank-0 process lists the pattern's sender-receiver pairs (the
  paper's testbed runs one process per node, so process pairs are host pairs);
* "link" is one direction of a cable (an arc), as a controller's topology
  discovery sees it; full-duplex directions do not contend;
* Dijkstra is a real per-pair binary-heap search over the whole fabric
  (:func:`~sdnmpi.core.routing.paths.dijkstra`), never expanding hosts: this is
  the baseline whose cost the vectorized routers are compared with.

Bytes are ignored (every route counts one).  Paths are not restricted to shortest
ones: once the shortest routes carry enough routes, a longer route can weigh less,
so on a loaded fat-tree a path may detour (and then need not be valley-free).
"""

from __future__ import annotations

from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.core.routing.paths import dijkstra, pairs_in_order
from sdnmpi.errors import RoutingError

NAME = "allreduce"
DESCRIPTION = "per-pair Dijkstra on link weights 1 + routes already placed (SDN-enhanced Allreduce)"
CITATION = (
    "Takahashi et al., SDN-enhanced MPI_Allreduce on a fat-tree cluster (HPCS 2014); seed text "
    "'Accelerated MPI Collective Using Software-Defined Networking', pseudocode of route generation"
)


def route(fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing:
    """One Dijkstra per distinct host pair, in order of first appearance (``seed`` unused)."""
    pairs, _ = pairs_in_order(demands.src, demands.dst, fabric.nhosts)
    weight = [1.0] * fabric.narcs
    chosen: dict[tuple[int, int], list[int]] = {}
    for src, dst in pairs.tolist():
        path = dijkstra(fabric, weight, src, dst)
        if path is None:
            names = fabric.names
            raise RoutingError(f"{NAME}: no path from {names[src]} to {names[dst]}")
        chosen[(src, dst)] = path
        for arc in path:
            weight[arc] += 1.0
    return Routing.from_pair_paths(NAME, demands, chosen, {"pairs": len(chosen)})
