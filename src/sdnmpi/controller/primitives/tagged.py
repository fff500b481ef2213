"""Tagged jobs as flow rules: exact per-tag paths, per-destination fallbacks, a budget.

A tagged job's *flows* are the (primitive, source rank, destination rank)
streams it is known to send: every message of its registered collectives
(proactive) and every tag seen in a packet-in (reactive).  Each flow becomes
one rule per switch of its path matching the exact 48-bit tag (the module of
its primitive picks the path, :mod:`~sdnmpi.controller.primitives.registry`);
the last switch rewrites ``eth_dst`` to the destination host's real MAC so its
NIC accepts the frame.

The *catch-all* of a job is one masked rule per (switch, destination rank):
``eth_dst`` matched on the tag prefix octet, the job-slot bits and the
destination-rank bits only (:data:`SLOT_DST_MASK`), forwarding along the
destination's default tree (each switch's most used default out-port towards
that host; on shortest-path defaults every such step gets closer, so the tree
is loop-free) and rewriting on the last switch.  Proactive jobs get it under
their exact rules, so point-to-point traffic and collectives they did not
register cost no packet-in (instead of one rule per rank pair, ranks^2).

The budget (tag rules per switch, all jobs together) is applied job by job in
registration order: a job gets its exact rules (plus its catch-all if
proactive) if they fit on every switch; else only its catch-all; else nothing
(its packets reach the controller, which delivers them on default routes).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from sdnmpi.controller import layout
from sdnmpi.controller.flows import FlowRule, Match, Output, SetField
from sdnmpi.controller.primitives.base import (
    Collective,
    Flow,
    Network,
    TagContext,
    TaggedJob,
)
from sdnmpi.controller.primitives.registry import Registry
from sdnmpi.controller.routes import Hop, Route
from sdnmpi.core.collectives import expand
from sdnmpi.errors import RoutingError, SdnMpiError
from sdnmpi.wire.tag import (
    TAG_DST_RANK_SHIFT,
    TAG_JOB_SLOT_BITS,
    TAG_JOB_SLOT_SHIFT,
    TAG_RANK_BITS,
    Primitive,
    Tag,
)

log = logging.getLogger(__name__)

#: Bits of a tag MAC kept by the per-destination rules: octet 0, job slot, destination rank.
SLOT_DST_MASK = (
    (0xFF << 40)
    | (((1 << TAG_JOB_SLOT_BITS) - 1) << TAG_JOB_SLOT_SHIFT)
    | (((1 << TAG_RANK_BITS) - 1) << TAG_DST_RANK_SHIFT)
)

Regime = Literal["exact", "masked", "none"]


def mac_text(value: int) -> str:
    """A 48-bit integer as a MAC string.

    >>> mac_text(SLOT_DST_MASK)
    'ff:fe:00:00:ff:f0'
    """
    return value.to_bytes(6, "big").hex(":")


def tag_mac(slot: int, flow: Flow) -> str:
    """The tag MAC of one flow of the job in ``slot``."""
    return Tag(slot, flow[0], flow[1], flow[2]).mac


def dst_match(slot: int, dst_rank: int) -> Match:
    """The masked match of every tag of ``slot`` to ``dst_rank``, whatever the rest."""
    value = int(Tag(slot, Primitive.P2P, 0, dst_rank).mac.replace(":", ""), 16)
    return Match(eth_dst=mac_text(value & SLOT_DST_MASK), eth_dst_mask=mac_text(SLOT_DST_MASK))


def collective_flows(job: TaggedJob) -> dict[Flow, Collective]:
    """Every inter-host flow of the job's registered collectives (first collective wins).

    Raises :class:`RoutingError` naming the job for a collective that cannot be expanded.
    """
    out: dict[Flow, Collective] = {}
    for coll in job.collectives:
        comm = coll.members(job.world_size)
        try:
            schedule = expand(
                coll.core_name, len(comm), coll.count, root=coll.root, type_bytes=coll.type_bytes
            )
        except SdnMpiError as exc:
            raise RoutingError(f"job {job.job_id}: {exc}") from None
        for msg in schedule.messages():
            src, dst = comm[msg.src], comm[msg.dst]
            if job.host_of(src) != job.host_of(dst):
                out.setdefault((coll.primitive, src, dst), coll)
    return out


@dataclass(eq=False)
class TagJobState:
    """One registered job: its flows so far (they only grow) and whether it gets a
    catch-all; plus its exact rules as computed on ``net`` for the first ``done`` flows."""

    job: TaggedJob
    flows: dict[Flow, Collective | None]
    catch_all: bool
    net: Network | None = None
    done: int = 0
    exact: list[FlowRule] = field(default_factory=list)


@dataclass
class TagPlan:
    """The rules of every tagged job and the regime each got."""

    rules: list[FlowRule] = field(default_factory=list)
    regimes: dict[int, Regime] = field(default_factory=dict)


class LogOnce:
    """Logs a warning once per key (e.g. (reason, job slot)), never per packet."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, int | None]] = set()

    def __call__(self, reason: str, slot: int | None, fmt: str, *args: object) -> None:
        if (reason, slot) in self.seen:
            return
        self.seen.add((reason, slot))
        log.warning(fmt, *args)

    def forget(self, slot: int) -> None:
        """Log again for ``slot`` (it changed hands)."""
        self.seen = {key for key in self.seen if key[1] != slot}


class TagPlanner:
    """Computes the tag rules of all jobs on a network, within the per-switch budget."""

    def __init__(self, registry: Registry, budget: int | None, log_once: LogOnce) -> None:
        self.registry = registry
        self.budget = budget
        self.log_once = log_once

    def plan(self, jobs: Iterable[TagJobState], net: Network | None) -> TagPlan:
        """Rules for ``jobs`` in order; with no network, nothing (every job ``none``)."""
        plan = TagPlan()
        used: Counter[int] = Counter()
        for state in jobs:
            regime, rules = self._job(state, net, used) if net is not None else ("none", [])
            plan.regimes[state.job.job_id] = regime
            plan.rules += rules
            used.update(r.dpid for r in rules)
        return plan

    def _job(
        self, state: TagJobState, net: Network, used: Counter[int]
    ) -> tuple[Regime, list[FlowRule]]:
        exact = self.exact_rules(state, net)
        # exact and per-destination rules never share a key (priorities differ)
        full = exact + self.masked_rules(state.job, net) if state.catch_all else exact
        if self._fits(full, used):
            return "exact", full
        job = state.job
        masked = self.masked_rules(job, net)
        if self._fits(masked, used):
            self.log_once(
                "budget: per-destination rules",
                job.slot,
                "job %s (slot %s): its %d exact tag rules do not fit %s per switch; "
                "per-destination rules (default paths) instead",
                job.job_id,
                job.slot,
                len(full),
                self.budget,
            )
            return "masked", masked
        self.log_once(
            "budget: nothing installed",
            job.slot,
            "job %s (slot %s): even per-destination tag rules exceed %s per switch; "
            "its tagged packets go to the controller (default routes)",
            job.job_id,
            job.slot,
            self.budget,
        )
        return "none", []

    def _fits(self, rules: list[FlowRule], used: Counter[int]) -> bool:
        if self.budget is None:
            return True
        need = Counter(r.dpid for r in rules)
        return all(used[d] + n <= self.budget for d, n in need.items())

    # -- exact rules ---------------------------------------------------------------------
    def exact_rules(self, state: TagJobState, net: Network) -> list[FlowRule]:
        """One rule per switch of every flow's path; only new flows are computed
        (everything again when the network changed)."""
        if state.net is not net:
            state.net, state.done, state.exact = net, 0, []
        if state.done < len(state.flows):
            new = list(state.flows.items())[state.done :]
            for flow, coll in new:
                state.exact += self._flow_rules(state.job, flow, coll, net)
            state.done = len(state.flows)
        return state.exact

    def _flow_rules(
        self, job: TaggedJob, flow: Flow, coll: Collective | None, net: Network
    ) -> tuple[FlowRule, ...]:
        route = self.flow_route(TagContext(job, flow[0], flow[1], flow[2], coll), net)
        if route is None:
            return ()
        match = Match(eth_dst=tag_mac(job.slot, flow))
        return tuple(path_rules(layout.tag_cookie(job.job_id), layout.PRIORITY_TAG, match, route))

    def flow_route(self, ctx: TagContext, net: Network) -> Route | None:
        """The module's route for ``ctx``, else the default route (``None`` if neither)."""
        src, dst = ctx.src_host, ctx.dst_host
        if src == dst or not (net.has_host(src) and net.has_host(dst)):
            return None
        module = self.registry.module_for(ctx.primitive)
        try:
            route = module.route(ctx, net)
        except SdnMpiError as exc:
            self.log_once(
                f"module {module.name} failed",
                ctx.job.slot,
                "primitive module %s failed for job %s: %s; default routes",
                module.name,
                ctx.job.job_id,
                exc,
            )
            route = None
        if route is not None and route.key != (net.mac(src), net.mac(dst)):
            route = None
        return route if route is not None else net.default_route(src, dst)

    # -- per-destination rules --------------------------------------------------------------
    def masked_rules(self, job: TaggedJob, net: Network) -> list[FlowRule]:
        """The job's catch-all: per destination rank, its default tree from the job's hosts."""
        key = ("tag-masked", job.job_id, job.slot, job.rank_hosts)
        cached = net.cache.get(key)
        if cached is None:
            cached = tuple(self._masked(job, net))
            net.cache[key] = cached
        assert isinstance(cached, tuple)
        return list(cached)

    def _masked(self, job: TaggedJob, net: Network) -> list[FlowRule]:
        hosts = [h for h in dict.fromkeys(job.rank_hosts) if net.has_host(h)]
        ck = layout.tag_cookie(job.job_id)
        out: list[FlowRule] = []
        for rank, dst in enumerate(job.rank_hosts):
            if not net.has_host(dst):
                continue
            tree = destination_tree(net, dst)
            routes = [tree_route(net, tree, src, dst) for src in hosts if src != dst]
            match = dst_match(job.slot, rank)
            rules = [
                r
                for rt in routes
                if rt is not None
                for r in path_rules(ck, layout.PRIORITY_TAG_DST, match, rt)
            ]
            out += _unique(rules)
        return out


def path_rules(cookie: int, priority: int, match: Match, route: Route) -> list[FlowRule]:
    """``match`` -> out-port on every switch of ``route``; the last one restores the real MAC."""
    out = [
        FlowRule(hop.dpid, 0, priority, match, (Output(hop.out_port),), cookie)
        for hop in route.hops[:-1]
    ]
    last = route.hops[-1]
    actions = (SetField("eth_dst", route.dst_mac), Output(last.out_port))
    return [*out, FlowRule(last.dpid, 0, priority, match, actions, cookie)]


def destination_tree(net: Network, dst: str) -> Mapping[int, int]:
    """Switch dpid -> out-port towards host ``dst``: the port most default routes use
    (lowest on ties).  All destinations' trees are computed in one pass and cached."""
    trees = net.cache.get("trees")
    if trees is None:
        uses: dict[str, dict[int, Counter[int]]] = {}
        for route in net.default_routes.values():
            mine = uses.setdefault(route.dst_mac, {})
            for hop in route.hops:
                mine.setdefault(hop.dpid, Counter())[hop.out_port] += 1
        trees = {
            mac: {d: _most_used(c) for d, c in by_switch.items()} for mac, by_switch in uses.items()
        }
        net.cache["trees"] = trees
    assert isinstance(trees, dict)
    tree: Mapping[int, int] = trees.get(net.mac(dst), {})
    return tree


def tree_route(net: Network, tree: Mapping[int, int], src: str, dst: str) -> Route | None:
    """The path from ``src`` following ``tree`` to ``dst``; ``None`` if it breaks or loops."""
    topo = net.topology
    node, port = topo.attachment(src)
    hops: list[Hop] = []
    while len(hops) <= len(topo.switches):
        dpid = topo.switch(node).dpid
        if dpid not in tree:
            return None
        out = tree[dpid]
        hops.append(Hop(dpid, port, out))
        arc = next((a for a in topo.out_arcs[node] if a.src_port == out), None)
        if arc is None:
            return None
        if arc.dst == dst:
            return Route(net.mac(src), net.mac(dst), tuple(hops))
        if topo.is_host(arc.dst):
            return None
        node, port = arc.dst, arc.dst_port
    return None


def _most_used(ports: Counter[int]) -> int:
    """The most used port, the lowest on ties.

    >>> _most_used(Counter({3: 2, 2: 2, 1: 1}))
    2
    """
    return min(ports, key=lambda p: (-ports[p], p))


def _unique(rules: Iterable[FlowRule]) -> list[FlowRule]:
    """Rules with duplicate keys dropped (first kept)."""
    seen: dict[tuple[int, int, int, Match], FlowRule] = {}
    for rule in rules:
        seen.setdefault(rule.key, rule)
    return list(seen.values())
