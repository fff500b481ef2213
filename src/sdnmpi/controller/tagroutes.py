"""The planner's tag part: jobs routed per MPI primitive by the tag in ``eth_dst``.

Each registered job (:meth:`TagRoutes.register`) gets rules for the flows of its
announced collectives (proactive) and for the tags first seen at the controller
(:meth:`TagRoutes.learn`, reactive), computed by the primitive modules
(:class:`~sdnmpi.controller.primitives.tagged.TagPlanner`) within the per-switch
budget: exact rules while every job's fit, else per-destination masked ones, else
none (the controller delivers).  Priorities and cookies:
:mod:`sdnmpi.controller.layout`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from sdnmpi.controller import layout
from sdnmpi.controller.flows import FlowRule
from sdnmpi.controller.primitives.base import Collective, Flow, Network, TaggedJob
from sdnmpi.controller.primitives.registry import Registry
from sdnmpi.controller.primitives.tagged import (
    LogOnce,
    Regime,
    TagJobState,
    TagPlanner,
    collective_flows,
)
from sdnmpi.errors import RoutingError


class TagRoutes:
    """The tagged jobs and their rules; :attr:`version` changes with them."""

    def __init__(self, registry: Registry, budget: int | None) -> None:
        self.budget = budget
        self.log_once = LogOnce()
        self.planner = TagPlanner(registry, budget, self.log_once)
        self.tagged: dict[int, TagJobState] = {}
        self.version = 0
        #: Each job's regime and the tag rules per switch, as of the last :meth:`rules`.
        self.regimes: dict[int, Regime] = {}
        self.usage: Counter[int] = Counter()

    # --- jobs ---
    def register(
        self,
        job_id: int,
        slot: int,
        rank_hosts: tuple[str, ...],
        collectives: Sequence[Collective],
        catch_all: bool | None,
    ) -> None:
        """Route job ``job_id`` (job slot ``slot``, ranks on ``rank_hosts``) by its tags;
        :class:`RoutingError` and nothing changes."""
        layout.tag_cookie(job_id)  # range check
        job = TaggedJob(job_id, slot, rank_hosts, tuple(collectives))
        if job_id in self.tagged:
            raise RoutingError(f"tagged job {job_id} is already registered; unregister it first")
        holder = next((s.job.job_id for s in self.tagged.values() if s.job.slot == slot), None)
        if holder is not None:
            raise RoutingError(f"job {job_id}: job slot {slot} is held by job {holder}")
        flows: dict[Flow, Collective | None] = dict(collective_flows(job))
        wanted = bool(collectives) if catch_all is None else catch_all
        self.tagged[job_id] = TagJobState(job, flows, wanted)
        self.log_once.forget(slot)
        self.version += 1

    def announce(self, job_id: int, collectives: Sequence[Collective]) -> bool:
        """Add collectives to registered job ``job_id``; whether any was new."""
        state = self.tagged.get(job_id)
        if state is None:
            raise RoutingError(f"tagged job {job_id} is not registered")
        new = tuple(c for c in collectives if c not in state.job.collectives)
        if not new:
            return False
        job = replace(state.job, collectives=state.job.collectives + new)
        for flow, coll in collective_flows(job).items():
            state.flows.setdefault(flow, coll)
        state.job = job
        state.catch_all = True
        self.version += 1
        return True

    def unregister(self, job_id: int) -> None:
        """Forget job ``job_id`` (its rules go by cookie)."""
        if job_id not in self.tagged:
            raise RoutingError(f"tagged job {job_id} is not registered")
        self.log_once.forget(self.tagged.pop(job_id).job.slot)
        self.version += 1

    def slots(self) -> dict[int, TaggedJob]:
        """The registered jobs by job slot."""
        return {s.job.slot: s.job for s in self.tagged.values()}

    # --- rules ---
    def rules(self, net: Network | None) -> list[FlowRule]:
        """Every job's tag rules on ``net`` within the budget; sets :attr:`regimes` and
        :attr:`usage`."""
        plan = self.planner.plan(self.tagged.values(), net)
        self.regimes = plan.regimes
        self.usage = Counter(r.dpid for r in plan.rules)
        return plan.rules

    def learn(self, job: TaggedJob, flow: Flow) -> TagJobState | None:
        """A tag of ``job`` seen at the controller: its job's state if the flow is new."""
        state = self.tagged[job.job_id]
        if flow in state.flows:
            return None
        state.flows[flow] = next(
            (c for c in job.collectives if c.primitive == flow[0] and _in_comm(c, job, flow)), None
        )
        self.version += 1
        return state

    def extension(
        self, state: TagJobState, net: Network, switches: Iterable[int]
    ) -> list[FlowRule] | None:
        """The rules a job's newly learned flow adds, when they can simply be added: the
        job has its exact rules on ``net``, and the new rules fit the budget beside every
        job's (so no job's regime changes) on ``switches``.  ``None`` otherwise (the
        whole desired state must be recomputed).  Counts the rules in :attr:`usage`."""
        if state.net is not net or self.regimes.get(state.job.job_id) != "exact":
            return None
        before = len(state.exact)
        new = self.planner.exact_rules(state, net)[before:]
        need = Counter(r.dpid for r in new)
        known = set(switches)
        if any(d not in known for d in need):
            return None
        if self.budget is not None and any(
            self.usage[d] + n > self.budget for d, n in need.items()
        ):
            return None
        self.usage.update(need)
        return new


def rank_hosts(
    job_id: int, world_size: int, by_rank: Mapping[int, str] | Sequence[str], known: set[str]
) -> tuple[str, ...]:
    """The host of every world rank 0..``world_size``-1, each one of ``known``."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise RoutingError(f"job {job_id}: world size {world_size!r} must be >= 1")
    hosts = dict(by_rank) if isinstance(by_rank, Mapping) else dict(enumerate(by_rank))
    if set(hosts) != set(range(world_size)):
        raise RoutingError(
            f"job {job_id}: ranks {sorted(hosts)} are not exactly 0..{world_size - 1}"
        )
    unknown = sorted({h for h in hosts.values() if h not in known})
    if unknown:
        raise RoutingError(f"job {job_id}: unknown host(s) {unknown}")
    return tuple(hosts[r] for r in range(world_size))


def _in_comm(coll: Collective, job: TaggedJob, flow: Flow) -> bool:
    comm = coll.members(job.world_size)
    return flow[1] in comm and flow[2] in comm
