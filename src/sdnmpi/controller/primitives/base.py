"""What a primitive module sees, and the one interface every module implements.

A tagged packet names a job slot, an MPI primitive and a world (source rank,
destination rank) pair (:mod:`sdnmpi.wire.tag`).  The planner turns it into a
:class:`TagContext` (the job as registered, the ranks, the registered
collective the pair belongs to if any) and asks the module registered for the
primitive for a :class:`~sdnmpi.controller.routes.Route` on the
:class:`Network` (the live topology and its default routes).  A module returns
``None`` to mean "the default route": the planner then uses the pair's default
path, so a module only decides where it has an opinion.

>>> job = TaggedJob(7, 1, ("h1", "h1", "h2"))
>>> job.world_size, job.host_of(2)
(3, 'h2')
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from sdnmpi.controller.routes import Route, route_from_arcs
from sdnmpi.core.routing import Fabric
from sdnmpi.core.topology import Topology
from sdnmpi.errors import RoutingError
from sdnmpi.wire.tag import MAX_JOB_SLOT, MAX_RANK, Primitive

#: Registered collective names -> (core collective expanded, primitive code tagged).
COLLECTIVE_PRIMITIVES: Mapping[str, tuple[str, Primitive]] = {
    "barrier": ("barrier", Primitive.BARRIER),
    "bcast": ("bcast", Primitive.BCAST),
    "reduce": ("reduce", Primitive.REDUCE),
    "allreduce": ("allreduce", Primitive.ALLREDUCE),
    "alltoall": ("alltoall", Primitive.ALLTOALL),
    "allgather": ("allgather", Primitive.ALLGATHER),
    "gather": ("gather", Primitive.GATHER),
    "scatter": ("scatter", Primitive.SCATTER),
    "reduce_scatter": ("reduce_scatter", Primitive.REDUCE_SCATTER),
    "reduce_scatter_block": ("reduce_scatter", Primitive.REDUCE_SCATTER_BLOCK),
}

#: One tagged message stream: (primitive code, world source rank, world destination rank).
Flow = tuple[int, int, int]


@dataclass(frozen=True)
class Collective:
    """A collective call a job announces: ``name`` (a key of :data:`COLLECTIVE_PRIMITIVES`),
    ``root`` (a rank of the communicator, as in MPI), ``count`` elements of
    ``type_bytes`` bytes (the counts of :func:`sdnmpi.core.collectives.expand`) and
    the communicator as its members' world ranks (``None``: the whole world).
    """

    name: str
    root: int = 0
    count: int = 1
    type_bytes: int = 1
    comm: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.name not in COLLECTIVE_PRIMITIVES:
            known = ", ".join(COLLECTIVE_PRIMITIVES)
            raise RoutingError(f"unknown collective {self.name!r}; known: {known}")
        if self.comm is not None:
            object.__setattr__(self, "comm", tuple(self.comm))

    @property
    def primitive(self) -> int:
        """The primitive code its packets carry."""
        return int(COLLECTIVE_PRIMITIVES[self.name][1])

    @property
    def core_name(self) -> str:
        """The name :func:`sdnmpi.core.collectives.expand` knows it by."""
        return COLLECTIVE_PRIMITIVES[self.name][0]

    def members(self, world_size: int) -> tuple[int, ...]:
        """World ranks of the communicator (checked against ``world_size``)."""
        comm = self.comm if self.comm is not None else tuple(range(world_size))
        bad: list[object] = [r for r in comm if isinstance(r, bool) or not isinstance(r, int)]
        bad += [r for r in comm if isinstance(r, int) and not 0 <= r < world_size]
        if bad or not comm:
            raise RoutingError(f"{self.name}: communicator {list(comm)} has ranks outside the job")
        if len(set(comm)) != len(comm):
            raise RoutingError(f"{self.name}: communicator {list(comm)} repeats a rank")
        return comm


@dataclass(frozen=True)
class TaggedJob:
    """A job routed by its tags: id, job slot (1..127), host of every world rank."""

    job_id: int
    slot: int
    rank_hosts: tuple[str, ...]
    collectives: tuple[Collective, ...] = ()

    def __post_init__(self) -> None:
        slot = self.slot
        if isinstance(slot, bool) or not isinstance(slot, int) or not 1 <= slot <= MAX_JOB_SLOT:
            raise RoutingError(
                f"job {self.job_id}: job slot {slot!r} out of range 1..{MAX_JOB_SLOT}"
            )
        if not 1 <= len(self.rank_hosts) <= MAX_RANK + 1:
            size = len(self.rank_hosts)
            raise RoutingError(
                f"job {self.job_id}: world size {size} out of range 1..{MAX_RANK + 1}"
            )
        object.__setattr__(self, "rank_hosts", tuple(self.rank_hosts))
        object.__setattr__(self, "collectives", tuple(self.collectives))

    @property
    def world_size(self) -> int:
        """Number of world ranks."""
        return len(self.rank_hosts)

    def host_of(self, rank: int) -> str:
        """The host of world rank ``rank``."""
        return self.rank_hosts[rank]


@dataclass(frozen=True)
class TagContext:
    """A decoded tag in its job's context: what a module decides on."""

    job: TaggedJob
    primitive: int
    src_rank: int
    dst_rank: int
    collective: Collective | None = None

    @property
    def src_host(self) -> str:
        """Host of the source rank."""
        return self.job.host_of(self.src_rank)

    @property
    def dst_host(self) -> str:
        """Host of the destination rank."""
        return self.job.host_of(self.dst_rank)


@dataclass(eq=False)
class Network:
    """The live fabric as modules see it: topology, default routes, a cache.

    A new :class:`Network` is made whenever the live topology changes, so
    ``cache`` (for modules' expanded patterns and routings) never outlives it.
    """

    topology: Topology
    default_routes: Mapping[tuple[str, str], Route]
    cache: dict[object, object] = field(default_factory=dict)

    @cached_property
    def fabric(self) -> Fabric:
        """The core routers' view of the topology (arc indices = topology arcs)."""
        return Fabric(self.topology)

    def has_host(self, name: str) -> bool:
        """Whether ``name`` is a live host."""
        return name in self.topology.host_index

    def mac(self, host: str) -> str:
        """MAC of live host ``host``."""
        return self.topology.host(host).mac

    def default_route(self, src_host: str, dst_host: str) -> Route | None:
        """The default route between two live hosts, ``None`` if there is none."""
        if not (self.has_host(src_host) and self.has_host(dst_host)):
            return None
        return self.default_routes.get((self.mac(src_host), self.mac(dst_host)))

    def route_of_arcs(self, arcs: Sequence[int]) -> Route:
        """The route along arc indices of the topology (as a core routing gives them)."""
        return route_from_arcs(self.topology, [self.topology.arcs[a] for a in arcs])

    def route_of_nodes(self, nodes: Sequence[str]) -> Route:
        """The route along node names, the lowest-port arc between neighbours."""
        arcs = []
        for a, b in itertools.pairwise(nodes):
            options = [arc for arc in self.topology.out_arcs.get(a, ()) if arc.dst == b]
            if not options:
                raise RoutingError(f"no live link from {a!r} to {b!r}")
            arcs.append(min(options, key=lambda arc: arc.src_port))
        return route_from_arcs(self.topology, arcs)


class PrimitiveModule(Protocol):
    """Routes one primitive's tagged packets: a path, or ``None`` for the default route."""

    @property
    def name(self) -> str:
        """Short name shown in logs and in registry specs."""
        ...

    def route(self, ctx: TagContext, net: Network) -> Route | None:
        """The path of ``ctx``'s packets on ``net``, ``None`` for the default route."""
        ...
