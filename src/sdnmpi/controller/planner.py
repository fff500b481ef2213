"""The planner: the whole fabric's flow rules as a pure function of events.

Like faucet's ``Valve`` (one per switch there, one for the fabric here), the
:class:`Planner` takes events (switch up/down, link up/down, host learned,
packet-in, job routes) and returns the messages to send: :class:`FlowRule`,
:class:`Barrier` and :class:`PacketOut` values.  It never touches a socket or a
clock; ``now`` is passed in where time matters.  The os-ken shim decodes events
into these calls and sends what they return, in order.

Rule set of a connected switch: the table of :mod:`sdnmpi.controller.layout`
(priorities and cookie kinds, defined there once).

So nothing is ever flooded: ARP is answered by the controller (proxy ARP),
other broadcasts and multicasts are dropped, unknown unicast goes to the
controller (which learns hosts from it) and no further.

The planner is composed of parts, as faucet composes its ``Valve`` of managers: the
default part (:mod:`~sdnmpi.controller.defaults`: control-plane rules, delivery to
hosts, default routes), job routes (:mod:`~sdnmpi.controller.jobroutes`), tag
routes (:mod:`~sdnmpi.controller.tagroutes`) and broadcast trees
(:mod:`~sdnmpi.controller.bcasttrees`: rules and OpenFlow groups) each contribute to the
desired state; the planner owns the inventory and the difference from what the switches
hold (groups are added before the rules pointing to them and deleted after).

After every event the planner recomputes the *desired* rule set of every
connected switch from its state (live topology, default routes, jobs) and
returns the difference from what it has sent before: adds first (replacing
rules with the same match and priority in place), then strict deletes of rules
no longer wanted, then barriers (:func:`~sdnmpi.controller.flows.batched`).  A
job whose path crosses a dead link or switch is withdrawn on the switches that
remain (its pairs fall back to default routes) and comes back with the link.

Tagged jobs (:meth:`Planner.register_tagged_job`; :mod:`sdnmpi.controller.primitives`)
are routed per MPI primitive by the context tag the nodes write into the
destination MAC (:mod:`sdnmpi.wire.tag`).  Their rules are part of the desired
state too: the messages of registered collectives are installed on
registration (proactive), other tags when their first packet reaches the
controller (reactive, :meth:`Planner.packet_in`), within a per-switch budget
(``PlannerConfig.tag_budget``).  A packet whose tag cannot be routed (garbled,
reserved primitive, inactive slot, inconsistent ranks, foreign MAC) is still
delivered: the controller rewrites ``eth_dst`` to the real MAC of the host that
owns the packet's IPv4 destination and sends it on that host's default route;
the reason is logged once per (reason, job slot).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sdnmpi.controller import layout, tagroutes
from sdnmpi.controller.bcasttrees import BcastConfig, BcastTree, BcastTrees, PortLoad, group_changes
from sdnmpi.controller.defaults import DefaultRoutes, DefaultState, base_rules, delivery_rules
from sdnmpi.controller.flows import (
    ARP_REQUEST,
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    ETH_TYPE_LLDP,
    OFPTT_ALL,
    FlowRule,
    GroupMod,
    Match,
    Message,
    PacketOut,
    batched,
)
from sdnmpi.controller.inventory import HostEntry, Inventory
from sdnmpi.controller.jobroutes import JobRoutes, JobRouteSpec, JobRuleMode, parse_routes
from sdnmpi.controller.packets import Packet, arp_reply, decode
from sdnmpi.controller.primitives import inbound
from sdnmpi.controller.primitives.base import Collective, Flow, Network, TaggedJob
from sdnmpi.controller.primitives.registry import Registry
from sdnmpi.controller.primitives.tagged import Regime, TagJobState, TagPlanner
from sdnmpi.controller.routes import Encoding, Route
from sdnmpi.controller.tagroutes import TagRoutes
from sdnmpi.core.routing import Demands, Fabric, Routing
from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError, RoutingError

log = logging.getLogger(__name__)

RuleKey = tuple[int, int, int, Match]
Version = tuple[int, ...]


@dataclass(frozen=True)
class PlannerConfig:
    """How default routes are computed and rules are sent.

    ``router`` routes all host pairs (a name of :data:`sdnmpi.core.routing.ROUTERS`);
    ``fallback_router`` is used when it cannot route the live topology (D-mod-K
    on a fabric that is not, or not yet, a multi-rooted tree).  ``batch_size``
    flow-mods per switch go between barriers.  ``expect_model_hosts``: route
    the model's hosts before they are seen (see :mod:`~sdnmpi.controller.inventory`).
    ``tag_budget``: tag rules allowed per switch, all tagged jobs together (``None``:
    no limit); ``primitives``: which module routes which primitive, a
    :meth:`~sdnmpi.controller.primitives.registry.Registry.from_spec` string
    (empty: the standard modules); ``bcast``: broadcast trees' address pool and caps.
    ``job_rules``: how job routes become rules, ``exact`` (one per pair and switch) or
    ``aggregate`` (:mod:`~sdnmpi.controller.jobroutes`); ``job_budget``: job rules
    allowed per switch, all jobs together (``None``: no limit; a job over it is refused).
    """

    router: str = "dmodk"
    fallback_router: str = "ecmp"
    seed: int = 0
    encoding: Encoding = "auto"
    batch_size: int = 200
    expect_model_hosts: bool = True
    tag_budget: int | None = None
    primitives: str = ""
    bcast: BcastConfig = field(default_factory=BcastConfig)
    job_rules: JobRuleMode = "exact"
    job_budget: int | None = None

    def __post_init__(self) -> None:
        from sdnmpi.core.routing import ROUTERS

        for name in (self.router, self.fallback_router):
            if name not in ROUTERS:
                raise ConfigError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}")
        if self.encoding not in ("auto", "pair"):
            raise ConfigError(f"unknown rule encoding {self.encoding!r} (auto or pair)")
        if self.batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {self.batch_size}")
        if self.job_rules not in ("exact", "aggregate"):
            raise ConfigError(f"unknown job rule encoding {self.job_rules!r} (exact or aggregate)")
        for what, value in (("tag budget", self.tag_budget), ("job rule budget", self.job_budget)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{what} must be an integer or None, got {value!r}")
            if value is not None and value < 0:
                raise ConfigError(f"{what} must be >= 0 rules per switch, got {value}")
        Registry.from_spec(self.primitives)  # validates the spec


class Planner:
    """The fabric's controller logic, pure: events in, messages out."""

    def __init__(
        self,
        topology: Topology | None = None,
        config: PlannerConfig | None = None,
        primitives: Registry | None = None,
    ):
        self.config = config or PlannerConfig()
        self.primitives = primitives or Registry.from_spec(self.config.primitives)
        self.inventory = Inventory(topology, self.config.expect_model_hosts)
        cfg = self.config
        self.defaults = DefaultRoutes(cfg.router, cfg.fallback_router, cfg.seed, cfg.encoding)
        self.job_routes = JobRoutes(cfg.job_rules, cfg.job_budget)
        self.tags = TagRoutes(self.primitives, cfg.tag_budget)
        self.bcast = BcastTrees(cfg.bcast)
        self._synced: Version | None = None  # desired version last diffed
        self._installed: dict[int, dict[RuleKey, FlowRule]] = {}
        self._groups: dict[int, dict[int, GroupMod | None]] = {}  # what each switch holds
        self._want_groups: dict[int, dict[int, GroupMod]] = {}
        self._wipe: set[int] = set()
        self._desired: tuple[Version, dict[int, list[FlowRule]]] | None = None

    @property
    def jobs(self) -> dict[int, tuple[Route, ...]]:
        """Every job's routes."""
        return self.job_routes.jobs

    @property
    def tagged(self) -> dict[int, TagJobState]:
        """The tagged jobs by job id."""
        return self.tags.tagged

    @property
    def tag_planner(self) -> TagPlanner:
        """What computes the tagged jobs' rules."""
        return self.tags.planner

    # -- events: switches and links -----------------------------------------------------
    # Every event updates the state and, unless ``sync=False``, returns the messages
    # that bring the switches to the new desired state.  A shim that receives a burst
    # of events (LLDP at start-up) may pass ``sync=False`` and call :meth:`sync` once
    # the burst is over: the result is the same, computed once.

    def switch_up(
        self,
        dpid: int,
        installed: Iterable[FlowRule] | None = None,
        *,
        groups: Mapping[int, GroupMod | None] | None = None,
        sync: bool = True,
    ) -> list[Message]:
        """Switch ``dpid`` (re)connected: its complete rule set.

        Without ``installed`` (what the switch reports holding, from a flow-stats
        reply) every sdnmpi rule on it is deleted first, by cookie, then all are
        added.  With it, only the difference is sent (no gap in forwarding).
        ``groups``: the sdnmpi groups it reports (from a group-description reply;
        ``None``: it holds none), brought to the desired ones the same way.
        """
        self.inventory.switch_up(dpid)
        self._groups[dpid] = {g: m for g, m in (groups or {}).items() if layout.is_our_group(g)}
        if installed is None:
            self._installed[dpid] = {}
            self._wipe.add(dpid)
        else:
            self._installed[dpid] = {r.key: r for r in installed if layout.kind_of(r.cookie)}
            self._wipe.discard(dpid)
        return self.sync() if sync else []

    def switch_down(self, dpid: int, *, sync: bool = True) -> list[Message]:
        """Switch ``dpid`` disconnected: reroute around it on the others."""
        self.inventory.switch_down(dpid)
        self._installed.pop(dpid, None)
        self._groups.pop(dpid, None)
        self._wipe.discard(dpid)
        return self.sync() if sync else []

    def link_up(
        self,
        src: tuple[int, int],
        dst: tuple[int, int],
        capacity_bps: float | None = None,
        *,
        sync: bool = True,
    ) -> list[Message]:
        """LLDP discovered ``src`` (dpid, port) -> ``dst`` (dpid, port)."""
        self.inventory.link_up(src, dst, capacity_bps)
        return self.sync() if sync else []

    def link_down(
        self, src: tuple[int, int], dst: tuple[int, int], *, sync: bool = True
    ) -> list[Message]:
        """The link ``src`` -> ``dst`` went away."""
        self.inventory.link_down(src, dst)
        return self.sync() if sync else []

    # -- events: hosts and packets -----------------------------------------------------
    def host_learned(
        self,
        mac: str,
        dpid: int,
        port: int,
        ip: str | None = None,
        now: float = 0.0,
        *,
        sync: bool = True,
    ) -> list[Message]:
        """Host ``mac`` (``ip``) is attached to ``dpid``:``port`` (announcement or packet)."""
        if not self.inventory.host_seen(mac, dpid, port, ip, now):
            return []
        return self.sync() if sync else []

    def packet_in(self, dpid: int, in_port: int, data: bytes, now: float = 0.0) -> list[Message]:
        """A frame sent to the controller: learn its sender, answer ARP requests."""
        pkt = decode(data)
        if pkt is None or pkt.eth_type == ETH_TYPE_LLDP or dpid not in self.inventory.switches_up:
            return []
        ip = pkt.arp_spa if pkt.eth_type == ETH_TYPE_ARP and pkt.arp_spa != "0.0.0.0" else None
        out: list[Message] = []
        if not pkt.is_group or pkt.eth_type == ETH_TYPE_ARP:
            sender = pkt.arp_sha if pkt.arp_sha is not None else pkt.eth_src
            out += self.host_learned(sender, dpid, in_port, ip, now)
        reply = self._arp_reply(pkt, dpid, in_port)
        out += [reply] if reply is not None else []
        return out + self._tagged_packet_in(pkt, dpid, data)

    def _arp_reply(self, pkt: Packet, dpid: int, in_port: int) -> PacketOut | None:
        """Proxy ARP: the reply for a known target IP; ``None`` otherwise (never flood)."""
        if pkt.eth_type != ETH_TYPE_ARP or pkt.arp_op != ARP_REQUEST:
            return None
        if pkt.arp_tpa is None or pkt.arp_spa is None or pkt.arp_sha is None:
            return None
        target = self.inventory.host_by_ip(pkt.arp_tpa)
        if target is None or target.mac == pkt.arp_sha or pkt.arp_tpa == pkt.arp_spa:
            return None
        frame = arp_reply(target.mac, pkt.arp_tpa, pkt.arp_sha, pkt.arp_spa).encode()
        return PacketOut(dpid, in_port, frame)

    # -- job routes -------------------------------------------------------------------
    def install_job(
        self,
        job_id: int,
        routes: JobRouteSpec | Routing,
        fabric: Fabric | None = None,
        demands: Demands | None = None,
        *,
        sync: bool = True,
    ) -> list[Message]:
        """Install a job's routes at job priority with the job's cookie.

        ``routes`` is a core :class:`Routing` (with the ``fabric`` it was computed
        on, and optionally its ``demands`` to pick a pair's heaviest flow), a
        mapping ``(src host, dst host) -> node names`` on the live topology, or
        :class:`Route` values.  Everything is checked before anything is sent:
        :class:`RoutingError` names the first bad route and nothing changes.
        """
        if job_id in self.jobs:
            raise RoutingError(f"job {job_id} already has routes; remove them first")
        return self.replace_job(job_id, routes, fabric, demands, sync=sync)

    def replace_job(
        self,
        job_id: int,
        routes: JobRouteSpec | Routing,
        fabric: Fabric | None = None,
        demands: Demands | None = None,
        *,
        sync: bool = True,
    ) -> list[Message]:
        """Like :meth:`install_job`, but a job that has routes gets the new ones instead
        (checked first: on error its old routes stay; then the difference is sent).
        ``sync=False``: nothing is returned, the next :meth:`sync` sends it (restoring
        several jobs at start-up must not diff the switches against the first alone:
        that deleted every later job's rules from the switches, then added them back)."""
        layout.job_cookie(job_id)  # range check
        parsed = parse_routes(routes, self.live_topology(), fabric, demands)
        names = routes if isinstance(routes, Mapping) else None
        before = self._job_base(job_id)
        state = self._default_state()
        defaults = state.rules if state is not None else ()
        self.job_routes.replace(job_id, parsed, self.inventory, names, defaults)
        if not sync:
            return []
        fast = self._job_changed(job_id, before) if before is not None else None
        return fast if fast is not None else self.sync()

    def remove_job(self, job_id: int) -> list[Message]:
        """Delete exactly job ``job_id``'s rules (one delete by cookie per switch)."""
        before = self._job_base(job_id)
        self.job_routes.remove(job_id)
        fast = self._job_changed(job_id, before) if before is not None else None
        if fast is not None:
            return fast
        return self._finish(self._delete_cookie(layout.job_cookie(job_id)) + self._diff())

    #: Whether a job's arrival, change or removal may take the fast path (tests compare).
    fast_jobs = True

    def _job_base(self, job_id: int) -> tuple[Version, tuple[FlowRule, ...]] | None:
        """Before job ``job_id`` changes: the version the switches hold and the job's
        rules in it, when they hold exactly the desired state (else ``None``)."""
        if not self.fast_jobs or self._desired is None or self._wipe:
            return None
        if self.job_routes.mode != "exact":  # aggregated rules depend on every job
            return None
        version = self._desired[0]
        if self._synced != version or version != self._version():
            return None
        if job_id not in self.jobs:
            return version, ()
        rules = self.job_routes.cached(job_id, self.inventory.version)
        return (version, rules) if rules is not None else None

    def _job_changed(
        self, job_id: int, before: tuple[Version, tuple[FlowRule, ...]]
    ) -> list[Message] | None:
        """The fast path of a job's change: only its rules are computed and compared,
        not every switch's (at 320 switches the full difference took about a second per
        job).  The same messages as :meth:`sync` would send: adds (replacing in place),
        then strict deletes; for a removed job one delete by cookie per switch.  ``None``
        when the fast path does not apply (the job's rules would replace another part's)."""
        version, old = before
        now = self._version()
        if (version[0], *version[2:]) != (now[0], *now[2:]):  # only the jobs changed
            return None
        assert self._desired is not None
        ck = layout.job_cookie(job_id)
        new = self.job_routes.job_rules(job_id, self.inventory) if job_id in self.jobs else ()
        changed = []  # one lookup per rule (its key hashes its match: 32,000 for job 2)
        for rule in new:
            table = self._installed.get(rule.dpid)
            if table is None:
                return None
            held = table.get(rule.key)
            if held is not None and held.cookie != ck:
                return None
            if held != rule:
                changed.append(rule)
        adds = sorted(changed, key=_order)
        if job_id in self.jobs:
            new_keys = {r.key for r in new} if old else set()
            gone = sorted((r for r in old if r.key not in new_keys), key=_order)
            out: list[Message] = [*adds, *(_delete_strict(r) for r in gone)]
        else:
            out = [
                FlowRule(dpid, 0, cookie=ck, cookie_mask=layout.FULL_MASK, command="delete")
                for dpid in sorted({r.dpid for r in old})
            ]
        desired = self._desired[1]
        by_dpid: dict[int, list[FlowRule]] = {}
        for rule in new:
            by_dpid.setdefault(rule.dpid, []).append(rule)
        old_by_dpid: dict[int, list[FlowRule]] = {}
        for rule in old:
            old_by_dpid.setdefault(rule.dpid, []).append(rule)
        for dpid in old_by_dpid.keys() | by_dpid.keys():
            table = self._installed[dpid]
            for rule in old_by_dpid.get(dpid, ()):  # each switch's own (all old per switch:
                if table.get(rule.key) == rule:  # 10 M checks for a 32,000-rule job)
                    del table[rule.key]
            table.update((r.key, r) for r in by_dpid.get(dpid, ()))
            kept = desired[dpid]
            if dpid in old_by_dpid:  # (a new job has none: nothing to filter out)
                kept = [r for r in kept if r.cookie != ck]
            desired[dpid] = kept + by_dpid.get(dpid, [])
        self._desired = (self._version(), desired)
        self._synced = self._desired[0]
        usage = self.job_routes.usage  # job rules per switch, as a full sync would count
        usage.subtract(r.dpid for r in old)
        usage.update(r.dpid for r in new)
        for dpid in [d for d, n in usage.items() if n <= 0]:
            del usage[dpid]
        return self._finish(out)

    def _delete_cookie(self, ck: int) -> list[Message]:
        """One delete by cookie per switch holding rules with cookie ``ck``."""
        out: list[Message] = []
        for dpid, table in sorted(self._installed.items()):
            if any(r.cookie == ck for r in table.values()):
                out.append(
                    FlowRule(dpid, 0, cookie=ck, cookie_mask=layout.FULL_MASK, command="delete")
                )
                self._installed[dpid] = {k: r for k, r in table.items() if r.cookie != ck}
        return out

    # -- broadcast trees -----------------------------------------------------------------
    def open_bcast(
        self, job_id: int, root_rank: int, hosts: Mapping[int, str], load: PortLoad | None = None
    ) -> tuple[BcastTree, list[Message]]:
        """The broadcast tree of job ``job_id``'s ranks (``hosts``: rank -> host) from
        ``root_rank``, and the messages installing it (none if it existed).  Checked
        first (:class:`RoutingError`, nothing changes)."""
        live = self.live_topology()
        tree = self.bcast.open(job_id, root_rank, sorted(hosts), hosts, live, load)
        return tree, self.sync()

    def close_bcast(self, job_id: int, group: str) -> list[Message]:
        """Remove job ``job_id``'s tree of ``group``: its rules, then its groups."""
        self.bcast.close(job_id, group)
        return self.sync()

    def close_bcast_job(self, job_id: int) -> list[Message]:
        """Remove every tree of job ``job_id`` (rules by cookie, then the groups)."""
        if not self.bcast.close_job(job_id):
            return []
        return self._finish(self._delete_cookie(layout.bcast_cookie(job_id)) + self._diff())

    # -- tagged jobs (per-primitive routing) -----------------------------------------------
    def register_tagged_job(
        self,
        job_id: int,
        slot: int,
        world_size: int,
        rank_hosts: Mapping[int, str] | Sequence[str],
        collectives: Sequence[Collective] = (),
        *,
        catch_all: bool | None = None,
    ) -> list[Message]:
        """Route job ``job_id``'s tagged packets (job slot ``slot``) per MPI primitive.

        ``rank_hosts`` gives the host name (as in the live topology) of every world
        rank 0..``world_size``-1.  The messages of ``collectives`` get their rules
        now (proactive); other tags when first seen (reactive).  ``catch_all``
        (default: whether collectives are given) adds the job's per-destination
        masked rules under the exact ones, so its other traffic needs no
        packet-in.  Everything is checked first: :class:`RoutingError` and
        nothing changes.
        """
        layout.tag_cookie(job_id)  # range check
        hosts = tagroutes.rank_hosts(job_id, world_size, rank_hosts, set(self._hosts_by_name()))
        self.tags.register(job_id, slot, hosts, collectives, catch_all)
        return self.sync()

    def announce_collectives(self, job_id: int, collectives: Sequence[Collective]) -> list[Message]:
        """Add collectives to registered job ``job_id`` (push mode): rules for their
        messages are added, nothing of the job is removed first.  Everything is
        checked before anything changes (:class:`RoutingError`)."""
        return self.sync() if self.tags.announce(job_id, collectives) else []

    def unregister_tagged_job(self, job_id: int) -> list[Message]:
        """Delete exactly job ``job_id``'s tag rules (one delete by cookie per switch)."""
        self.tags.unregister(job_id)
        return self._finish(self._delete_cookie(layout.tag_cookie(job_id)) + self._diff())

    def tag_regime(self, job_id: int) -> Regime:
        """How job ``job_id``'s tags are carried now: ``exact`` rules, ``masked``
        per-destination rules (over budget), or ``none`` (via the controller)."""
        if job_id not in self.tagged:
            raise RoutingError(f"tagged job {job_id} is not registered")
        self._desired_all()
        return self.tags.regimes.get(job_id, "none")

    def network(self) -> Network | None:
        """What primitive modules route on now (``None`` until the topology is routable)."""
        state = self._default_state()
        return state.net if state is not None else None

    def _hosts_by_name(self) -> dict[str, HostEntry]:
        return {self.inventory.host_name(m): e for m, e in self.inventory.hosts.items()}

    def _tagged_packet_in(self, pkt: Packet, dpid: int, data: bytes) -> list[Message]:
        """A unicast IPv4 frame to an unknown locally administered MAC: a tag, or not."""
        if pkt.eth_type != ETH_TYPE_IPV4 or not inbound.locally_administered_unicast(pkt.eth_dst):
            return []
        if pkt.eth_dst in self.inventory.hosts:
            return []
        ip_dst = inbound.ipv4_destination(data)
        hosts = self._hosts_by_name()

        def lookup(name: str) -> tuple[str, str | None] | None:
            entry = hosts.get(name)
            return (entry.mac, entry.ip) if entry is not None else None

        verdict = inbound.inspect(pkt.eth_dst, pkt.eth_src, ip_dst, self.tags.slots(), lookup)
        out: list[Message] = []
        if verdict.job is not None and verdict.flow is not None:
            out = self._learn_flow(verdict.job, verdict.flow)
            if self.tags.regimes.get(verdict.job.job_id) == "none":
                verdict = inbound.Verdict(verdict.job, None, "over budget", verdict.slot)
        sent = self._send_on(dpid, pkt, data) if verdict.reason is None else None
        if sent is None:
            sent = self._fall_back(dpid, pkt, data, ip_dst, verdict)
        return out + ([sent] if sent is not None else [])

    def _learn_flow(self, job: TaggedJob, flow: Flow) -> list[Message]:
        if flow in self.tags.tagged[job.job_id].flows:
            return []
        desired = self._desired_all()  # up to date before the flow is added
        state = self.tags.learn(job, flow)
        assert state is not None
        added = self._extend_desired(state, desired)
        return self._finish(added if added is not None else self._diff())

    def _extend_desired(
        self, state: TagJobState, desired: dict[int, list[FlowRule]]
    ) -> list[Message] | None:
        """The fast path of a reactive flow: its rules only, without recomputing or
        diffing every switch, when that gives the same result as :meth:`_diff`.

        It does when the switches hold exactly the desired state and the tag part can
        add the flow's rules without changing any job's regime
        (:meth:`TagRoutes.extension`).  ``None`` otherwise.
        """
        defaults = self.defaults.current
        synced = self._desired is not None and self._synced == self._desired[0] and not self._wipe
        if not synced or defaults is None:
            return None
        new = self.tags.extension(state, defaults.net, desired)
        if new is None:
            return None
        for rule in new:
            desired[rule.dpid].append(rule)
            self._installed[rule.dpid][rule.key] = rule
        self._desired = (self._version(), desired)
        self._synced = self._desired[0]
        return [*sorted(new, key=_order)]

    def _fall_back(
        self, dpid: int, pkt: Packet, data: bytes, ip_dst: str | None, verdict: inbound.Verdict
    ) -> PacketOut | None:
        """Deliver on the default route of the host owning ``ip_dst`` (real MAC restored)."""
        reason = verdict.reason or "no tag rule"
        self.tags.log_once(
            reason,
            verdict.slot,
            "tagged packet %s -> %s (IPv4 %s): %s (%s); delivered on default routes",
            pkt.eth_src,
            pkt.eth_dst,
            ip_dst,
            reason,
            verdict.detail,
        )
        host = self.inventory.host_by_ip(ip_dst) if ip_dst is not None else None
        if host is None:
            self.tags.log_once(
                "unknown destination",
                verdict.slot,
                "IPv4 %s of %s: no such host; dropped",
                ip_dst,
                pkt.eth_dst,
            )
            return None
        real = Packet(pkt.eth_src, host.mac, pkt.eth_type)
        return self._send_on(dpid, real, inbound.with_dst(data, host.mac))

    def _send_on(self, dpid: int, pkt: Packet, data: bytes) -> PacketOut | None:
        """A packet-out doing what switch ``dpid``'s desired rules do with the frame."""
        hit = inbound.table_hit(self._desired_all().get(dpid, []), pkt.eth_src, pkt.eth_dst)
        if hit is None:
            return None
        dst, port = hit
        return PacketOut(dpid, port, inbound.with_dst(data, dst) if dst != pkt.eth_dst else data)

    # -- queries -------------------------------------------------------------------------
    def live_topology(self) -> Topology | None:
        """The routable part of the fabric as it is known now."""
        return self.inventory.live_topology()

    def default_routes(self) -> tuple[Route, ...]:
        """The current default routes (one per live host pair; built at the first ask)."""
        state = self._default_state()
        return state.routes if state is not None else ()

    def default_router(self) -> str:
        """The router that computed the current default routes ('' if none)."""
        state = self._default_state()
        return state.router if state is not None else ""

    def desired(self, dpid: int) -> list[FlowRule]:
        """The complete rule set switch ``dpid`` should hold now."""
        return list(self._desired_all().get(dpid, []))

    def rule_counts(self) -> dict[int, int]:
        """dpid -> how many rules the planner has sent to each switch it knows of."""
        return {dpid: len(rules) for dpid, rules in self._installed.items()}

    def installed(self, dpid: int) -> list[FlowRule]:
        """What the planner has sent to switch ``dpid`` (its view of the switch's table)."""
        return sorted(self._installed.get(dpid, {}).values(), key=_order)

    # -- the desired state and the difference --------------------------------------------
    def _default_state(self) -> DefaultState | None:
        """Routes and rules for the live topology, recomputed only when it changed."""
        return self.defaults.state(self.live_topology())

    def _desired_all(self) -> dict[int, list[FlowRule]]:
        """Desired rules by switch, recomputed only when the state changed."""
        version = self._version()
        if self._desired is None or self._desired[0] != version:
            self._desired = (version, self._compute_desired())
        return self._desired[1]

    def _version(self) -> Version:
        versions = (self.job_routes.version, self.tags.version, self.bcast.version)
        return (self.inventory.version, *versions)

    def _compute_desired(self) -> dict[int, list[FlowRule]]:
        """Every part's rules, by connected switch."""
        state = self._default_state()
        rules = [r for d in sorted(self.inventory.switches_up) for r in base_rules(d)]
        rules += delivery_rules(self.inventory)
        rules += state.rules if state is not None else ()
        rules += self.job_routes.rules(self.inventory, state.rules if state is not None else ())
        rules += self.tags.rules(state.net if state else None)
        trees, groups = self.bcast.plan(state.topology if state else None)
        rules += trees
        self._want_groups = {d: groups.get(d, {}) for d in self.inventory.switches_up}
        out: dict[int, list[FlowRule]] = {d: [] for d in self.inventory.switches_up}
        for rule in rules:
            if rule.dpid in out:
                out[rule.dpid].append(rule)
        return out

    def sync(self) -> list[Message]:
        """Everything needed to bring every connected switch to its desired rules:
        pending wipes of reconnected switches, adds, strict deletes, barriers."""
        wipes: list[Message] = [
            FlowRule(
                dpid,
                OFPTT_ALL,
                cookie=layout.ours_cookie(),
                cookie_mask=layout.OURS_MASK,
                command="delete",
            )
            for dpid in sorted(self._wipe)
        ]
        self._wipe.clear()
        return self._finish(wipes + self._diff())

    def _diff(self) -> list[Message]:
        """Adds and strict deletes bringing every connected switch to its desired rules
        (and groups: added or modified first, deleted last)."""
        adds: list[Message] = []
        deletes: list[Message] = []
        group_ups: list[Message] = []
        group_deletes: list[Message] = []
        self._synced = self._version()
        for dpid, rules in sorted(self._desired_all().items()):
            ups, downs = group_changes(dpid, self._groups.get(dpid, {}), self._want_groups[dpid])
            group_ups += ups
            group_deletes += downs
            self._groups[dpid] = dict(self._want_groups[dpid])
            have = self._installed.setdefault(dpid, {})
            want = {r.key: r for r in rules}
            # filter first, then sort: only the changes (the same order as before)
            changed = sorted((r for r in want.values() if have.get(r.key) != r), key=_order)
            if changed and have and log.isEnabledFor(logging.DEBUG):
                log.debug("switch %#x: %d rules to send, e.g. %s (held: %s)", dpid, len(changed),
                          changed[0], have.get(changed[0].key))  # fmt: skip
            adds += changed
            gone = sorted(((k, r) for k, r in have.items() if k not in want), key=_korder)
            deletes += [_delete_strict(r) for _, r in gone]
            self._installed[dpid] = want
        return group_ups + adds + deletes + group_deletes

    def _finish(self, messages: list[Message]) -> list[Message]:
        return batched(messages, self.config.batch_size)


def _delete_strict(rule: FlowRule) -> FlowRule:
    return FlowRule(
        rule.dpid,
        rule.table_id,
        rule.priority,
        rule.match,
        cookie=rule.cookie,
        cookie_mask=layout.FULL_MASK,
        command="delete_strict",
    )


def _order(rule: FlowRule) -> tuple[int, int, int, str]:
    return (rule.dpid, rule.table_id, -rule.priority, rule.match.rendered)


def _korder(item: tuple[RuleKey, FlowRule]) -> tuple[int, int, int, str]:
    return _order(item[1])
