"""A job's routes within the switches' rule budget, beside the other routed jobs (pure).

The controller turns job routes into rules as :func:`sdnmpi.core.routing.rules.aggregate`
shapes them (``sdnmpi controller run --job-rules aggregate``), over its default routes.
The manager knows the default routes the same way: the controller's default router
(D-mod-K unless configured otherwise) on the live topology, encoded as the controller
encodes them (:func:`~sdnmpi.core.routing.rules.defaults_from_routing`).  A new job's
pairs are admitted by :func:`~sdnmpi.core.routing.rules.fit` beside the routed jobs'
pairs (kept: they are installed), best first by the bytes they move off the most loaded
hops of their default routes; the rest stay on the default routes.  The controller
counts the same way and refuses a job that would take a switch over its own budget, so
a plan made on stale defaults fails whole (the job on default routes, the reason shown).

docs/rules.md has the measured cost of the budget.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.core.routing import rules as rulecore
from sdnmpi.core.topology import Topology
from sdnmpi.errors import RoutingError
from sdnmpi.manager.model import RoutePair

#: Default rule budget per switch (job rules, all jobs together).
DEFAULT_BUDGET = rulecore.DEFAULT_BUDGET
#: Routes remembered as (switch, port) hops per topology.
MAX_REMEMBERED = 1 << 20


@dataclass(frozen=True, eq=False)
class FabricRules:
    """What rule counting needs of one live topology: the default table, each host's
    switch, where a (switch, port) leads, and the lowest port between two nodes."""

    topology: Topology
    defaults: rulecore.DefaultTable
    edge: Mapping[Hashable, Hashable]
    links: Mapping[tuple[Hashable, int], Hashable]
    port_to: Mapping[tuple[str, str], int]
    _paths: dict[tuple[RoutePair, int], rulecore.PairPath] = field(default_factory=dict)

    def peer(self, switch: Hashable, port: int) -> Hashable | None:
        """The switch ``port`` of ``switch`` leads to (None: a host)."""
        return self.links.get((switch, port))

    def pair_path(self, r: RoutePair, job_id: int = 0) -> rulecore.PairPath:
        """A job route as (switch, out port) hops (``node:port`` names pick the port);
        remembered, as routed jobs' routes are read again for every arrival."""
        key = (r, job_id)
        found = self._paths.get(key)
        if found is None:
            found = self._paths[key] = self._pair_path(r, job_id)
            if len(self._paths) > MAX_REMEMBERED:
                del self._paths[next(iter(self._paths))]
        return found

    def _pair_path(self, r: RoutePair, job_id: int) -> rulecore.PairPath:
        hops = []
        names = r.path
        for here, nxt in itertools.pairwise(names[1:-1]):
            node, port = self.topology.hop(here)
            if port is None:
                port = self.port_to.get((node, self.topology.hop(nxt)[0]))
            if port is None:
                raise RoutingError(f"route {r.src} -> {r.dst}: no link {here} -> {nxt}")
            hops.append((node, port))
        return rulecore.PairPath(r.src, r.dst, tuple(hops), r.size_bytes, job_id)


_cache: dict[tuple[int, str], FabricRules] = {}
_lock = threading.Lock()


def fabric_rules(topology: Topology, router: str = "dmodk") -> FabricRules:
    """:class:`FabricRules` of ``topology`` with ``router``'s default routes (kept for the
    last two topologies: the controller client returns the same object while the fabric
    does not change)."""
    key = (id(topology), router)
    with _lock:
        found = _cache.get(key)
        if found is not None and found.topology is topology:
            return found
    fabric = Fabric(topology)
    demands = Demands.all_pairs(fabric)
    routing = route(router, fabric, demands)
    defaults, edge = rulecore.defaults_from_routing(fabric, routing, demands)
    links: dict[tuple[Hashable, int], Hashable] = {
        (a.src, a.src_port): a.dst for a in topology.arcs if not topology.is_host(a.dst)
    }
    port_to: dict[tuple[str, str], int] = {}
    for a in topology.arcs:
        old = port_to.get((a.src, a.dst))
        port_to[(a.src, a.dst)] = a.src_port if old is None else min(old, a.src_port)
    out = FabricRules(topology, defaults, edge, links, port_to)
    with _lock:
        while len(_cache) >= 2:
            del _cache[next(iter(_cache))]
        _cache[key] = out
    return out


@dataclass(frozen=True)
class Budgeted:
    """A job's routes within the budget: ``kept`` (sent to the controller), ``fallback``
    (left on default routes), and (:attr:`counts`) the job rules per switch with them."""

    kept: tuple[RoutePair, ...]
    fallback: tuple[RoutePair, ...]
    count: Callable[[], Mapping[Hashable, int]] = field(repr=False)
    budget: int | None

    @functools.cached_property
    def counts(self) -> Mapping[Hashable, int]:
        """Job rules per switch, all jobs together (computed when first asked for)."""
        return self.count()

    @property
    def fullest(self) -> tuple[Hashable, int]:
        """The switch with most job rules, and how many (("", 0) if none)."""
        if not self.counts:
            return ("", 0)
        return max(self.counts.items(), key=lambda kv: (kv[1], str(kv[0])))

    def note(self) -> str:
        """What the job view says when the budget left pairs on default routes (else
        nothing): how many, and the rules on the fullest switch."""
        if not self.fallback:
            return ""
        switch, n = self.fullest
        total = len(self.kept) + len(self.fallback)
        return (
            f"{len(self.fallback)} of {total} host pair(s) on default routes: rule budget "
            f"{self.budget} per switch (fullest: {switch}, {n} job rules)"
        )


def within_budget(
    view: FabricRules,
    routes: Sequence[RoutePair],
    others: Mapping[int, Iterable[RoutePair]],
    budget: int | None,
    job_id: int = 0,
) -> Budgeted:
    """Admit ``routes`` (job ``job_id``'s) beside the ``others``' routes (by job id,
    already installed) within ``budget`` job rules per switch.

    When even one exact rule per pair and switch off its default route (what the
    rules cost before any aggregation) fits every switch, every pair is admitted
    without running the fit: a small job on a large fabric no longer pays for
    aggregating every routed job's rules (1.2 s of its 1.6 s on ``fat_tree(16)``
    beside eight 64-rank jobs)."""
    fixed = [view.pair_path(r, j) for j, rs in others.items() for r in rs]
    mine = [view.pair_path(r, job_id) for r in routes]
    both = [*fixed, *mine]

    def aggregated() -> Mapping[Hashable, int]:
        return rulecore.aggregate(both, view.defaults, view.peer, view.edge).counts()

    if budget is None or _exact_rules_fit(view.defaults, both, budget):
        return Budgeted(tuple(routes), (), aggregated, budget)
    score = rulecore.relief(both, view.defaults, view.peer, view.edge)
    done = rulecore.fit(mine, view.defaults, view.peer, view.edge, budget, fixed=fixed, score=score)
    admitted = {p.key for p in done.admitted}
    kept = tuple(r for r in routes if (r.src, r.dst) in admitted)
    fallback = tuple(r for r in routes if (r.src, r.dst) not in admitted)
    return Budgeted(kept, fallback, lambda: done.counts, budget)


def _exact_rules_fit(
    defaults: rulecore.DefaultTable, paths: Iterable[rulecore.PairPath], budget: int
) -> bool:
    """Whether one exact rule per path and switch where it leaves the default route
    stays within ``budget`` on every switch: an upper bound on what
    :func:`~sdnmpi.core.routing.rules.fit` counts (aggregation only removes rules), so
    then it admits every path."""
    used: Counter[Hashable] = Counter()
    port = defaults.port
    for path in paths:
        for switch, out in path.hops:
            if out != port(switch, path.src, path.dst):
                used[switch] += 1
    return not used or max(used.values()) <= budget
