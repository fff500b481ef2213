"""Modules that run a core router on the primitive's expanded pattern.

For a tag of a registered collective, the collective is expanded into the
messages its algorithm sends (:func:`sdnmpi.core.collectives.expand`, MPICH's
default algorithm for its size), placed on the job's hosts, and routed by a
core router (:func:`sdnmpi.core.routing.route`); the tag's (source, destination)
rank pair takes the path of its heaviest flow.  The routing is computed once
per (job, collective, communicator, root, size) and live topology, and cached
in the :class:`~sdnmpi.controller.primitives.base.Network`.

A tag whose pair belongs to no registered collective of its primitive gets
``None`` (the default route): without the root, count and communicator the
pattern is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sdnmpi.controller.primitives.base import Collective, Network, TagContext, TaggedJob
from sdnmpi.controller.routes import Route
from sdnmpi.core.collectives import expand
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import ROUTERS, Demands, route
from sdnmpi.errors import ConfigError

RankPair = tuple[int, int]


@dataclass(frozen=True)
class PatternModule:
    """Core router ``router`` on the registered collective's pattern."""

    name: str
    router: str = "ours"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise ConfigError(f"unknown router {self.router!r}; known: {', '.join(ROUTERS)}")

    def route(self, ctx: TagContext, net: Network) -> Route | None:
        if ctx.collective is None:
            return None
        return self.routes(ctx.job, ctx.collective, net).get((ctx.src_rank, ctx.dst_rank))

    def routes(self, job: TaggedJob, coll: Collective, net: Network) -> Mapping[RankPair, Route]:
        """Routes of every inter-host world rank pair of one collective call (cached)."""
        comm = coll.members(job.world_size)
        key = ("pattern", self.router, self.seed, job.job_id, job.rank_hosts, coll, comm)
        cached = net.cache.get(key)
        if cached is None:
            cached = self._compute(job, coll, comm, net)
            net.cache[key] = cached
        assert isinstance(cached, dict)
        return cached

    def _compute(
        self, job: TaggedJob, coll: Collective, comm: tuple[int, ...], net: Network
    ) -> dict[RankPair, Route]:
        hosts = tuple(job.host_of(r) for r in comm)
        if not all(net.has_host(h) for h in hosts):
            return {}
        schedule = expand(
            coll.core_name, len(comm), coll.count, root=coll.root, type_bytes=coll.type_bytes
        )
        demands = Demands.from_pattern(net.fabric, schedule.to_pattern(), Placement(hosts))
        if len(demands) == 0:
            return {}
        routing = route(self.router, net.fabric, demands, seed=self.seed)
        weight = (demands.size_bytes * demands.phase_repeat[demands.phase]).tolist()
        best: dict[RankPair, int] = {}
        ranks = zip(demands.src_rank.tolist(), demands.dst_rank.tolist(), strict=True)
        for flow, (s, d) in enumerate(ranks):
            pair = (comm[s], comm[d])
            if pair not in best or weight[flow] > weight[best[pair]]:
                best[pair] = flow
        return {pair: net.route_of_arcs(routing.path(flow)) for pair, flow in best.items()}
