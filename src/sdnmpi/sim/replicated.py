"""Replicated transfers: one flow that feeds every branch of a replication tree.

A switch-replicated broadcast (:mod:`sdnmpi.core.routing.multicast`, issue 14) sends
each byte once from its root; every switch of its tree copies it to the tree's
branches.  As a flow it is one row of the incidence matrix holding every arc of the
tree, each once.  Max-min sharing then gives it the fair share of its most contended
arc: the root feeds every branch at the rate of the slowest one, which is what the
reliable protocol's flow control does (the root does not outrun the slowest
receiver).  Its latency is the tree's longest root-to-receiver path, with the
platform's (calibrated) arc latencies.  Unicast flows share the arcs as usual.

:func:`replicated_flowset` builds trees and unicast paths as one
:class:`~sdnmpi.sim.flowset.FlowSet` (one phase, no ranks: every flow starts at 0);
:func:`transfer_times` simulates it and returns each flow's completion time.
:func:`predict_bcast` puts the MPI library's own ``MPI_Bcast`` (its algorithm for the
size, expanded as the library runs it, on default routes) beside the replicated one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sdnmpi.core import collectives
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import route
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.core.routing.multicast import ReplicationTree, build_tree, check_tree
from sdnmpi.core.routing.paths import padded
from sdnmpi.errors import RoutingError
from sdnmpi.sim import simulate
from sdnmpi.sim.engine import run
from sdnmpi.sim.flowset import FloatArray, FlowSet
from sdnmpi.sim.maxmin import incidence_matrix
from sdnmpi.sim.platform import Platform


def replicated_flowset(
    platform: Platform,
    fabric: Fabric,
    trees: Sequence[ReplicationTree],
    tree_bytes: Sequence[float],
    paths: Sequence[Sequence[int]] = (),
    path_bytes: Sequence[float] = (),
) -> FlowSet:
    """The trees' transfers (rows ``0..len(trees)-1``), then the unicast ``paths``.

    Every tree is checked (:func:`~sdnmpi.core.routing.multicast.check_tree`); a tree
    without receivers or a path without arcs is refused, as are sizes that do not
    match or are not positive.
    """
    if len(tree_bytes) != len(trees) or len(path_bytes) != len(paths):
        raise RoutingError(
            f"{len(trees)} trees with {len(tree_bytes)} sizes, "
            f"{len(paths)} paths with {len(path_bytes)} sizes"
        )
    if platform.narcs != fabric.narcs:
        raise RoutingError(f"platform has {platform.narcs} arcs, the fabric {fabric.narcs}")
    for tree in trees:
        check_tree(fabric, tree)
        if not tree.arcs:
            raise RoutingError(f"tree from {fabric.names[tree.root]} has no receiver")
    rows = [tuple(t.arcs) for t in trees] + [tuple(p) for p in paths]
    if any(not row for row in rows):
        raise RoutingError("a unicast path has no arc")
    sizes = np.array([*tree_bytes, *path_bytes], dtype=np.float64)
    if sizes.size and not (np.isfinite(sizes).all() and (sizes > 0).all()):
        raise RoutingError("transfer sizes must be finite and positive")
    lat = platform.latency_s
    latency = [t.farthest(fabric, lat) for t in trees]
    latency += [float(sum(lat[a] for a in p)) for p in paths]
    n = len(rows)
    return FlowSet(
        incidence_matrix(padded(rows), platform.narcs),
        sizes,
        np.array(latency, dtype=np.float64),
        np.zeros(n, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        ("replicated",),
        np.ones(1, dtype=np.int64),
    )


def transfer_times(flows: FlowSet, platform: Platform) -> FloatArray:
    """When each flow of ``flows`` completes, all starting at time 0 (seconds)."""
    trace = run(platform, flows.incidence, flows.size_bits, flows.latency_s)
    out: FloatArray = trace.finish_s
    return out


@dataclass(frozen=True)
class BcastPrediction:
    """One ``MPI_Bcast``'s predicted time: the library's algorithm and the replicated one."""

    library: str
    algorithm: str
    library_s: float
    replicated_s: float
    tree_links: int

    @property
    def gain(self) -> float:
        """How many times faster the replicated broadcast is."""
        return self.library_s / self.replicated_s


def predict_bcast(
    fabric: Fabric,
    placement: Placement,
    nbytes: int,
    *,
    root: int = 0,
    library: str = "openmpi",
    router: str = "dmodk",
    goodput: float = 1.0,
) -> BcastPrediction:
    """The library's Bcast of ``nbytes`` from rank ``root`` (its algorithm for this size,
    routed by ``router``, simulated rank by rank) against the replicated transfer on a
    tree over the idle fabric.  Ranks on the root's host cost nothing in either."""
    schedule = collectives.expand("bcast", placement.nprocs, nbytes, root=root, library=library)
    demands = Demands.from_pattern(fabric, schedule.to_pattern(), placement)
    library_s = 0.0
    if len(demands):
        routing = route(router, fabric, demands)
        library_s = simulate(fabric, demands, routing, mode="ranks", goodput=goodput).total_s
    hosts = [fabric.host_index(h) for h in placement.hosts]
    tree = build_tree(fabric, hosts[root], hosts)
    replicated_s = 0.0
    if tree.arcs:
        platform = Platform.from_fabric(fabric).scaled(goodput)
        flows = replicated_flowset(platform, fabric, [tree], [float(nbytes)])
        replicated_s = float(transfer_times(flows, platform)[0])
    return BcastPrediction(library, schedule.algorithm, library_s, replicated_s, tree.nlinks)
