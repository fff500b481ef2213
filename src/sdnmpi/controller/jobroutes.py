"""The planner's job part: each job's routes, one path per host pair, at job priority.

A job's routes come from the manager (node names), the controller's own measurement
jobs or a core :class:`~sdnmpi.core.routing.Routing`; they are checked before
anything changes (:meth:`JobRoutes.replace`), and a route over a dead link or switch
is left out of the rules until it comes back (:meth:`JobRoutes.rules`).

Encoding (``PlannerConfig.job_rules``): ``exact``, one (``eth_src``, ``eth_dst``) rule
per switch of a route but the last; or ``aggregate``, the rules of every job's routes
together as :func:`sdnmpi.core.routing.rules.aggregate` shapes them (no rule where the
default route already goes the planned way, per-destination rules shared by the pairs
leaving a switch by one port; docs/rules.md).  Measurement jobs keep exact rules (their
byte counters are read per pair).  ``PlannerConfig.job_budget`` bounds the job rules
per switch: a job whose routes would take a switch over it is refused and nothing
changes; :attr:`JobRoutes.usage` counts the rules per switch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Literal

from sdnmpi.controller import layout
from sdnmpi.controller.flows import FlowRule, Match, Output
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
from sdnmpi.core.routing import rules as rulecore
from sdnmpi.core.topology import Topology
from sdnmpi.errors import RoutingError

#: A job's routes as callers give them: node names by host pair, or routes.
JobRouteSpec = Mapping[tuple[str, str], Sequence[str]] | Sequence[Route]
#: How job routes become rules (see the module docstring).
JobRuleMode = Literal["exact", "aggregate"]
#: Job ids from here on are the controller's measurement jobs (exact rules always).
MEASURE_FIRST_ID = 2**40


class JobRoutes:
    """Every job's routes; :attr:`version` changes with them.

    :attr:`names` is the place of record of the routes given by node names (the
    manager's, what the controller's job store keeps and its ``jobs`` query answers);
    :attr:`jobs` holds every job's routes as hops, those derived from the names
    included.
    """

    def __init__(self, mode: JobRuleMode = "exact", budget: int | None = None) -> None:
        self.jobs: dict[int, tuple[Route, ...]] = {}
        self.names: dict[int, dict[tuple[str, str], list[str]]] = {}
        self.version = 0
        self.mode = mode
        self.budget = budget
        #: Job rules per switch (dpid), as of the last :meth:`rules` or :meth:`replace`.
        self.usage: Counter[int] = Counter()
        self._table: tuple[Sequence[FlowRule], rulecore.DefaultTable] | None = None
        #: Each job's rules and the inventory version they were computed at.
        self._rules: dict[int, tuple[int, tuple[FlowRule, ...]]] = {}

    def replace(
        self,
        job_id: int,
        routes: Sequence[Route],
        inventory: Inventory,
        names: Mapping[tuple[str, str], Sequence[str]] | None = None,
        defaults: Sequence[FlowRule] = (),
    ) -> None:
        """Give job ``job_id`` these routes (its old ones, if any, go), derived from
        ``names`` if it was given by node names; checked first against the fabric as
        ``inventory`` knows it and against the rule budget (with the ``defaults``
        rules): :class:`RoutingError` and nothing changes."""
        layout.job_cookie(job_id)  # range check
        old = self.jobs.pop(job_id, None)
        self._rules.pop(job_id, None)
        try:
            self._check(job_id, routes, inventory)
            self.jobs[job_id] = tuple(routes)
            # every route was just checked live: its rules, without checking them again
            self._rules[job_id] = (inventory.version, tuple(job_rules(job_id, routes)))
            self._check_budget(job_id, inventory, defaults)
        except RoutingError:
            self.jobs.pop(job_id, None)
            self._rules.pop(job_id, None)
            if old is not None:
                self.jobs[job_id] = old
            raise
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

    def rules(self, inventory: Inventory, defaults: Sequence[FlowRule] = ()) -> list[FlowRule]:
        """Every job's rules, routes over dead links or switches left out; the
        ``defaults`` rules are what an aggregated encoding leans on.  Sets :attr:`usage`."""
        out = self._encode(inventory, defaults)
        self.usage = Counter(r.dpid for r in out)
        return out

    def job_rules(self, job_id: int, inventory: Inventory) -> tuple[FlowRule, ...]:
        """Job ``job_id``'s exact rules, routes over dead links or switches left out (kept
        until the job or the inventory changes: a job's arrival costs its own rules)."""
        entry = self._rules.get(job_id)
        if entry is not None and entry[0] == inventory.version:
            return entry[1]
        alive = [r for r in self.jobs[job_id] if route_problem(inventory, r) is None]
        rules = tuple(job_rules(job_id, alive))
        self._rules[job_id] = (inventory.version, rules)
        return rules

    def cached(self, job_id: int, version: int) -> tuple[FlowRule, ...] | None:
        """Job ``job_id``'s rules if they were computed at inventory ``version`` (exact
        encoding only: aggregated rules depend on every job and the defaults)."""
        entry = self._rules.get(job_id)
        if self.mode != "exact" or entry is None or entry[0] != version:
            return None
        return entry[1]

    def _check_budget(
        self, job_id: int, inventory: Inventory, defaults: Sequence[FlowRule]
    ) -> None:
        if self.budget is None:
            return
        usage = Counter(r.dpid for r in self._encode(inventory, defaults))
        over = sorted(((n, d) for d, n in usage.items() if n > self.budget), reverse=True)
        if over:
            n, dpid = over[0]
            raise RoutingError(
                f"job {job_id}: {len(over)} switch(es) would hold more job rules than the "
                f"budget of {self.budget} per switch (switch {dpid:#x}: {n})"
            )

    def _encode(self, inventory: Inventory, defaults: Sequence[FlowRule]) -> list[FlowRule]:
        if self.mode == "exact" or not defaults:
            return [r for j in sorted(self.jobs) for r in self.job_rules(j, inventory)]
        alive = {
            j: [r for r in routes if route_problem(inventory, r) is None]
            for j, routes in sorted(self.jobs.items())
        }
        out: list[FlowRule] = []
        paths = []
        for j, routes in alive.items():
            if j >= MEASURE_FIRST_ID:
                out += job_rules(j, routes)
                continue
            paths += [rulecore.PairPath(r.src_mac, r.dst_mac, _hops(r), job=j) for r in routes]
        table = self._default_table(defaults)
        edge: dict[Hashable, Hashable] = {m: h.dpid for m, h in inventory.hosts.items()}

        def peer(dpid: Hashable, port: int) -> Hashable | None:
            found = inventory.links.get((_int(dpid), port))
            return None if found is None else found[0]

        shaped = rulecore.aggregate(paths, table, peer, edge)
        return out + aggregated_rules(shaped)

    def _default_table(self, defaults: Sequence[FlowRule]) -> rulecore.DefaultTable:
        """The default routes' rules as :class:`~sdnmpi.core.routing.rules.DefaultTable`
        (computed once per set of default rules)."""
        if self._table is None or self._table[0] is not defaults:
            self._table = (defaults, default_table(defaults))
        return self._table[1]

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


def _hops(route: Route) -> tuple[rulecore.Hop, ...]:
    return tuple((h.dpid, h.out_port) for h in route.hops[:-1])


def default_table(defaults: Sequence[FlowRule]) -> rulecore.DefaultTable:
    """Default-route rules (:func:`~sdnmpi.controller.routes.default_rules`) as the
    (switch, destination) ports and (switch, source, destination) exceptions."""
    dst: dict[tuple[Hashable, Hashable], int] = {}
    pair: dict[tuple[Hashable, Hashable, Hashable], int] = {}
    for rule in defaults:
        port = next((a.port for a in rule.actions if isinstance(a, Output)), None)
        if port is None or rule.match.eth_dst is None:
            continue
        if rule.priority == layout.PRIORITY_DEFAULT_DST:
            dst[(rule.dpid, rule.match.eth_dst)] = port
        elif rule.priority == layout.PRIORITY_DEFAULT_PAIR and rule.match.eth_src is not None:
            pair[(rule.dpid, rule.match.eth_src, rule.match.eth_dst)] = port
    return rulecore.DefaultTable(dst, pair)


def aggregated_rules(shaped: rulecore.RuleSet) -> list[FlowRule]:
    """Flow rules of an aggregated rule set: exact ones at job priority with their
    job's cookie, per-destination ones shared by the jobs (cookie kind ``jobdst``)."""
    out = []
    for dpid, exact in shaped.exact.items():
        for (src, dst), rule in exact.items():
            match = Match.pair(str(src), str(dst))
            ck = layout.job_cookie(rule.job)
            out.append(
                FlowRule(_int(dpid), 0, layout.PRIORITY_JOB, match, (Output(rule.port),), ck)
            )
    shared = layout.cookie("jobdst")
    for dpid, table in shaped.dst.items():
        for dst, port in table.items():
            match = Match(eth_dst=str(dst))
            rule_ = FlowRule(_int(dpid), 0, layout.PRIORITY_JOB_DST, match, (Output(port),), shared)
            out.append(rule_)
    return out


def _int(dpid: Hashable) -> int:
    assert isinstance(dpid, int)
    return dpid
