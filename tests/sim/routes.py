"""Test inputs for the simulator: a tiny shortest-path router and demand builders.

The real routers live in :mod:`sdnmpi.core.routing`; these tests only need some
valid path per flow.  ``shortest_routing`` walks down the hop-distance field of
:meth:`Fabric.hops_to`, taking the first (or a random, for variety) arc that
gets one hop closer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from sdnmpi.core.routing.model import Demands, Fabric, Routing


def shortest_path(
    fabric: Fabric, src: int, dst: int, rng: random.Random | None = None
) -> list[int]:
    """A shortest path (arc indices) from node ``src`` to host ``dst``."""
    dist = fabric.hops_to(dst)
    node, path = src, []
    while node != dst:
        closer = [a for a in fabric.out_arcs[node] if dist[fabric.arc_dst[a]] == dist[node] - 1]
        arc = rng.choice(closer) if rng is not None else closer[0]
        path.append(arc)
        node = int(fabric.arc_dst[arc])
    return path


def shortest_routing(fabric: Fabric, demands: Demands, rng: random.Random | None = None) -> Routing:
    """One shortest path per flow: the first found, or a random one per flow."""
    paths = [
        shortest_path(fabric, int(s), int(d), rng)
        for s, d in zip(demands.src.tolist(), demands.dst.tolist(), strict=True)
    ]
    return Routing.from_paths("test-shortest", paths)


def host_demands(
    flows: Sequence[tuple[int, int, int, int]],
    repeats: Sequence[int] = (1,),
    ranks: Sequence[tuple[int, int]] | None = None,
) -> Demands:
    """Demands from ``(src host, dst host, size_bytes, phase)`` rows.

    Ranks default to -1 (host level); ``ranks`` gives ``(src_rank, dst_rank)`` rows.
    """
    cols = np.array(flows, dtype=np.int64).reshape(-1, 4)
    r = np.array(ranks, dtype=np.int64).reshape(-1, 2) if ranks is not None else None
    minus = np.full(len(cols), -1, dtype=np.int64)
    return Demands(
        cols[:, 0],
        cols[:, 1],
        cols[:, 2],
        cols[:, 3],
        r[:, 0] if r is not None else minus,
        r[:, 1] if r is not None else minus,
        tuple(f"phase {i}" for i in range(len(repeats))),
        np.array(repeats, dtype=np.int64),
    )
