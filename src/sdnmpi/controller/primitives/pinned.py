"""The ``pinned`` policy (UnisonFlow's experiment): one primitive, one spine.

UnisonFlow separates MPI primitives in the fabric: e.g. every MPI_Bcast packet
crosses ``spine1`` and every MPI_Reduce packet ``spine2``, so the two never
share a link between leaves.  A :class:`PinnedModule` routes a packet whose
hosts are on different switches through its spine: the fewest-hop path going
only up (to switches of higher level) from the source host to the spine, then
only down to the destination host, so the path is valley-free and never
borrows another spine; when there is none (the spine or one of its links is
down, or the hosts share a switch) it returns ``None`` (the default route).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from sdnmpi.controller.primitives.base import Network, TagContext
from sdnmpi.controller.routes import Route
from sdnmpi.core.topology import Topology


@dataclass(frozen=True)
class PinnedModule:
    """Inter-switch traffic only through switch ``spine`` (a node name)."""

    spine: str

    @property
    def name(self) -> str:
        return f"pinned:{self.spine}"

    def route(self, ctx: TagContext, net: Network) -> Route | None:
        topo = net.topology
        src, dst = ctx.src_host, ctx.dst_host
        if not (net.has_host(src) and net.has_host(dst)) or self.spine not in topo.out_arcs:
            return None
        if topo.is_host(self.spine) or topo.attachment(src)[0] == topo.attachment(dst)[0]:
            return None
        up = _monotone(topo, src, self.spine, up=True)
        down = _monotone(topo, self.spine, dst, up=False)
        if up is None or down is None:
            return None
        nodes = up + down[1:]
        if len(set(nodes)) != len(nodes):
            return None
        return net.route_of_nodes(nodes)


def _monotone(topo: Topology, src: str, dst: str, *, up: bool) -> list[str] | None:
    """Fewest-hop node path ``src`` -> ``dst`` whose levels only rise (``up``) or only fall.

    Hosts are level 0; breadth-first with neighbours in name order (deterministic).
    """
    levels = topo.levels
    prev: dict[str, str] = {src: src}
    todo = deque([src])
    while todo:
        node = todo.popleft()
        if node == dst:
            path = [dst]
            while path[-1] != src:
                path.append(prev[path[-1]])
            return path[::-1]
        if node != src and topo.is_host(node):
            continue
        here = levels.get(node, 0)
        for nxt in sorted({a.dst for a in topo.out_arcs.get(node, ())}):
            rises = levels.get(nxt, 0) > here
            if nxt not in prev and rises == up and levels.get(nxt, 0) != here:
                prev[nxt] = node
                todo.append(nxt)
    return None
