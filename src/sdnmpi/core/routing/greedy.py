"""The interconnect manager's greedy router: heaviest host pairs first, least-loaded path.

The multi-job interconnect manager computes a routing per job from the job's
communication pattern and placement (its routing module is pluggable).  This
is the greedy one: host pairs are taken in decreasing traffic (bytes of all
their flows, weighted by phase repeats; ties in pair order), and each is put on
the candidate path with the least load, where load counts the bytes of the
pairs already placed.  Candidates are the pair's shortest-hop paths, at most
:data:`MAX_CANDIDATES` of them (spread evenly over the enumeration when there
are more, see :class:`~sdnmpi.core.routing.paths.ShortestPaths`).  Two variants:

* ``greedy``: least sum over the path of ``load / capacity`` (first on ties);
* ``greedy_bottleneck``: least maximum over the path of
  ``(load + demand) / capacity``, ties by the sum, then first.

All flows of a host pair share its path.  Paths are shortest, so valley-free on
fat-trees.
"""

from __future__ import annotations

import numpy as np

from sdnmpi.core.routing.model import Demands, Fabric, FloatArray, IntArray, Routing
from sdnmpi.core.routing.paths import ShortestPaths
from sdnmpi.errors import ConfigError

NAME = "greedy"
VARIANTS: dict[str, str] = {
    "greedy": "greedy, heaviest pair first, on the shortest path of least sum of load/capacity",
    "greedy_bottleneck": (
        "greedy, heaviest pair first, on the shortest path of least max (load+demand)/capacity"
    ),
}
DESCRIPTION = VARIANTS["greedy"]
CITATION = (
    "Takahashi, Date, Watashiba, Kido, Shimojo, An MPI framework for HPC clusters deployed "
    "with software-defined networking (interconnect manager with pluggable routing)"
)
#: Most candidate paths considered per host pair.
MAX_CANDIDATES = 32
_RTOL = 1e-12


def route(fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing:
    """The ``greedy`` (sum) variant; ``seed`` is unused."""
    return route_variant(NAME, fabric, demands, seed=seed)


def route_variant(
    name: str,
    fabric: Fabric,
    demands: Demands,
    *,
    seed: int = 0,
    max_candidates: int = MAX_CANDIDATES,
) -> Routing:
    """Route with the ``greedy`` or ``greedy_bottleneck`` variant."""
    if name not in VARIANTS:
        raise ConfigError(f"unknown greedy variant {name!r}; known: {', '.join(VARIANTS)}")
    bottleneck = name == "greedy_bottleneck"
    pairs, _, pair_bytes = demands.host_pairs()
    load = np.zeros(fabric.narcs, dtype=np.float64)
    capacity = fabric.capacity_bps
    candidates = ShortestPaths(fabric, max_candidates)
    chosen: dict[tuple[int, int], list[int]] = {}
    for i in np.argsort(-pair_bytes, kind="stable").tolist():
        src, dst = int(pairs[i, 0]), int(pairs[i, 1])
        paths = candidates.paths(src, dst)
        demand = float(pair_bytes[i])
        path = paths[_best(paths, load, capacity, demand, bottleneck)]
        load[path] += demand
        chosen[(src, dst)] = path.tolist()
    meta = {"max_candidates": max_candidates, "pairs": len(chosen)}
    return Routing.from_pair_paths(name, demands, chosen, meta)


def _best(
    paths: IntArray, load: FloatArray, capacity: FloatArray, demand: float, bottleneck: bool
) -> int:
    """Row of ``paths`` with the least score (see the module docstring)."""
    total = (load[paths] / capacity[paths]).sum(axis=1)
    if bottleneck:
        peak = ((load[paths] + demand) / capacity[paths]).max(axis=1)
        keep = _near_min(peak)
        return int(keep[_near_min(total[keep])[0]])
    return int(_near_min(total)[0])


def _near_min(score: FloatArray) -> IntArray:
    """Indices whose score equals the minimum up to rounding, in order.

    >>> _near_min(np.array([0.3, 0.1 + 0.2, 0.5])).tolist()
    [0, 1]
    """
    low = float(score.min())
    out: IntArray = np.flatnonzero(score <= low + _RTOL * max(1.0, abs(low)))
    return out
