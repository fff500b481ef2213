"""The planner's job part: each job's routes, one path per host pair, at job priority.

A job's routes come from the manager (node names), the controller's own measurement
jobs or a core :class:`~sdnmpi.core.routing.Routing`; they are checked before
anything changes (:meth:`JobRoutes.replace`), and a route over a dead link or switch
is left out of the rules until it comes back (:meth:`JobRoutes.rules`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sdnmpi.controller import layout
from sdnmpi.controller.flows import FlowRule
from sdnmpi.controller.inventory import Inventory
from sdnmpi.controller.routes import (
    PairKey,
    Route,
    job_rules,
    route_problem,
    routes_from_names,
    routes_from_routing,
)
from sdnmpi.core.routing import Demands, Fabric, Routing
from sdnmpi.core.topology import Topology
from sdnmpi.errors import RoutingError

#: A job's routes as callers give them: node names by host pair, or routes.
JobRouteSpec = Mapping[tuple[str, str], Sequence[str]] | Sequence[Route]


class JobRoutes:
    """Every job's routes; :attr:`version` changes with them.

    :attr:`names` is the place of record of the routes given by node names (the
    manager's, what the controller's job store keeps and its ``jobs`` query answers);
    :attr:`jobs` holds every job's routes as hops, those derived from the names
    included.
    """

    def __init__(self) -> None:
        self.jobs: dict[int, tuple[Route, ...]] = {}
        self.names: dict[int, dict[tuple[str, str], list[str]]] = {}
        self.version = 0
        #: Each job's rules and the inventory version they were computed at.
        self._rules: dict[int, tuple[int, tuple[FlowRule, ...]]] = {}

    def replace(
        self,
        job_id: int,
        routes: Sequence[Route],
        inventory: Inventory,
        names: Mapping[tuple[str, str], Sequence[str]] | None = None,
    ) -> None:
        """Give job ``job_id`` these routes (its old ones, if any, go), derived from
        ``names`` if it was given by node names; checked first against the fabric as
        ``inventory`` knows it: :class:`RoutingError` and nothing changes."""
        layout.job_cookie(job_id)  # range check
        old = self.jobs.pop(job_id, None)
        try:
            self._check(job_id, routes, inventory)
        except RoutingError:
            if old is not None:
                self.jobs[job_id] = old
            raise
        self.jobs[job_id] = tuple(routes)
        self._rules.pop(job_id, None)
        self.names.pop(job_id, None)
        if names is not None:
            self.names[job_id] = {pair: list(path) for pair, path in names.items()}
        self.version += 1

    def remove(self, job_id: int) -> None:
        """Forget job ``job_id``'s routes."""
        if job_id not in self.jobs:
            raise RoutingError(f"job {job_id} has no routes installed")
        del self.jobs[job_id]
        self._rules.pop(job_id, None)
        self.names.pop(job_id, None)
        self.version += 1

    def rules(self, inventory: Inventory) -> list[FlowRule]:
        """Every job's rules, routes over dead links or switches left out."""
        out: list[FlowRule] = []
        for job_id in sorted(self.jobs):
            out += self.job_rules(job_id, inventory)
        return out

    def job_rules(self, job_id: int, inventory: Inventory) -> tuple[FlowRule, ...]:
        """Job ``job_id``'s rules, routes over dead links or switches left out (kept
        until the job or the inventory changes: a job's arrival costs its own rules)."""
        cached = self.cached(job_id, inventory.version)
        if cached is not None:
            return cached
        alive = [r for r in self.jobs[job_id] if route_problem(inventory, r) is None]
        rules = tuple(job_rules(job_id, alive))
        self._rules[job_id] = (inventory.version, rules)
        return rules

    def cached(self, job_id: int, version: int) -> tuple[FlowRule, ...] | None:
        """Job ``job_id``'s rules if they were computed at inventory ``version``."""
        entry = self._rules.get(job_id)
        return entry[1] if entry is not None and entry[0] == version else None

    def _check(self, job_id: int, parsed: Sequence[Route], inventory: Inventory) -> None:
        taken = {r.key: j for j, rs in self.jobs.items() if j != job_id for r in rs}
        seen: set[PairKey] = set()
        for r in parsed:
            problem = route_problem(inventory, r)
            if problem is not None:
                raise RoutingError(f"job {job_id}: {problem}")
            if r.key in taken:
                raise RoutingError(
                    f"job {job_id}: pair {r.src_mac} -> {r.dst_mac} is routed by job {taken[r.key]}"
                )
            if r.key in seen:
                raise RoutingError(f"job {job_id}: two routes for {r.src_mac} -> {r.dst_mac}")
            seen.add(r.key)


def parse_routes(
    routes: JobRouteSpec | Routing,
    live: Topology | None,
    fabric: Fabric | None = None,
    demands: Demands | None = None,
) -> list[Route]:
    """:class:`Route` values of a job's routes: a core :class:`Routing` (with the
    ``fabric`` it was computed on, and optionally its ``demands`` to pick a pair's
    heaviest flow), node names by host pair (on the ``live`` topology), or routes."""
    if isinstance(routes, Routing):
        if fabric is None:
            raise RoutingError("a Routing needs the Fabric it was computed on")
        return routes_from_routing(fabric, routes, demands)
    if isinstance(routes, Mapping):
        if live is None:
            raise RoutingError("no live topology yet: cannot resolve node names")
        return routes_from_names(live, routes)
    return list(routes)
