"""The planner: the whole fabric's flow rules as a pure function of events.

Like faucet's ``Valve`` (one per switch there, one for the fabric here), the
:class:`Planner` takes events (switch up/down, link up/down, host learned,
packet-in, job routes) and returns the messages to send: :class:`FlowRule`,
:class:`Barrier` and :class:`PacketOut` values.  It never touches a socket or a
clock; ``now`` is passed in where time matters.  The os-ken shim decodes events
into these calls and sends what they return, in order.

Rule set of a connected switch (table 0; cookie layout in
:mod:`sdnmpi.controller.cookies`):

========  ================================================  ===========
priority  match -> actions                                  cookie kind
========  ================================================  ===========
1100      ARP -> controller; LLDP (0x88cc) -> controller     base
1000      broadcast/multicast ``eth_dst`` -> drop            base
500       ``eth_dst`` = attached host -> its port            host
300       job route (``eth_src``, ``eth_dst``) -> port       job
110       default pair (``eth_src``, ``eth_dst``) -> port    default
100       default route ``eth_dst`` -> port                  default
0         anything else -> controller (first 128 bytes)      base
========  ================================================  ===========

So nothing is ever flooded: ARP is answered by the controller (proxy ARP),
other broadcasts and multicasts are dropped, unknown unicast goes to the
controller (which learns hosts from it) and no further.

After every event the planner recomputes the *desired* rule set of every
connected switch from its state (live topology, default routes, jobs) and
returns the difference from what it has sent before: adds first (replacing
rules with the same match and priority in place), then strict deletes of rules
no longer wanted, then barriers (:func:`~sdnmpi.controller.flows.batched`).  A
job whose path crosses a dead link or switch is withdrawn on the switches that
remain (its pairs fall back to default routes) and comes back with the link.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sdnmpi.controller import cookies
from sdnmpi.controller.flows import (
    ARP_REQUEST,
    ETH_TYPE_ARP,
    ETH_TYPE_LLDP,
    GROUP_BIT_MAC,
    OFPTT_ALL,
    FlowRule,
    Match,
    Message,
    Output,
    PacketOut,
    ToController,
    batched,
)
from sdnmpi.controller.inventory import Inventory
from sdnmpi.controller.packets import Packet, arp_reply, decode
from sdnmpi.controller.routes import (
    Encoding,
    PairKey,
    Route,
    default_rules,
    job_rules,
    route_problem,
    routes_from_names,
    routes_from_routing,
)
from sdnmpi.core.routing import Demands, Fabric, Routing, route
from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError, RoutingError

log = logging.getLogger(__name__)

PRIORITY_CONTROL = 1100
PRIORITY_GROUP_DROP = 1000
PRIORITY_DELIVER = 500
PRIORITY_MISS = 0
#: Bytes of an unknown unicast frame sent to the controller (enough for headers).
MISS_MAX_LEN = 128

RuleKey = tuple[int, int, int, Match]


@dataclass(frozen=True)
class PlannerConfig:
    """How default routes are computed and rules are sent.

    ``router`` routes all host pairs (a name of :data:`sdnmpi.core.routing.ROUTERS`);
    ``fallback_router`` is used when it cannot route the live topology (D-mod-K
    on a fabric that is not, or not yet, a multi-rooted tree).  ``batch_size``
    flow-mods per switch go between barriers.  ``expect_model_hosts``: route
    the model's hosts before they are seen (see :mod:`~sdnmpi.controller.inventory`).
    """

    router: str = "dmodk"
    fallback_router: str = "ecmp"
    seed: int = 0
    encoding: Encoding = "auto"
    batch_size: int = 200
    expect_model_hosts: bool = True

    def __post_init__(self) -> None:
        from sdnmpi.core.routing import ROUTERS

        for name in (self.router, self.fallback_router):
            if name not in ROUTERS:
                raise ConfigError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}")
        if self.encoding not in ("auto", "pair"):
            raise ConfigError(f"unknown rule encoding {self.encoding!r} (auto or pair)")
        if self.batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {self.batch_size}")


@dataclass(frozen=True, eq=False)
class _DefaultRoutes:
    """Default routes computed for one live topology, and their rules."""

    topology: Topology
    routes: tuple[Route, ...]
    router: str
    rules: tuple[FlowRule, ...]


JobRoutes = Mapping[tuple[str, str], Sequence[str]] | Sequence[Route]


class Planner:
    """The fabric's controller logic, pure: events in, messages out."""

    def __init__(self, topology: Topology | None = None, config: PlannerConfig | None = None):
        self.config = config or PlannerConfig()
        self.inventory = Inventory(topology, self.config.expect_model_hosts)
        self.jobs: dict[int, tuple[Route, ...]] = {}
        self._installed: dict[int, dict[RuleKey, FlowRule]] = {}
        self._wipe: set[int] = set()
        self._jobs_version = 0
        self._routes: _DefaultRoutes | None = None
        self._desired: tuple[tuple[int, int], dict[int, list[FlowRule]]] | None = None

    # -- events: switches and links -----------------------------------------------------
    # Every event updates the state and, unless ``sync=False``, returns the messages
    # that bring the switches to the new desired state.  A shim that receives a burst
    # of events (LLDP at start-up) may pass ``sync=False`` and call :meth:`sync` once
    # the burst is over: the result is the same, computed once.

    def switch_up(
        self, dpid: int, installed: Iterable[FlowRule] | None = None, *, sync: bool = True
    ) -> list[Message]:
        """Switch ``dpid`` (re)connected: its complete rule set.

        Without ``installed`` (what the switch reports holding, from a flow-stats
        reply) every sdnmpi rule on it is deleted first, by cookie, then all are
        added.  With it, only the difference is sent (no gap in forwarding).
        """
        self.inventory.switch_up(dpid)
        if installed is None:
            self._installed[dpid] = {}
            self._wipe.add(dpid)
        else:
            self._installed[dpid] = {r.key: r for r in installed if cookies.kind_of(r.cookie)}
            self._wipe.discard(dpid)
        return self.sync() if sync else []

    def switch_down(self, dpid: int, *, sync: bool = True) -> list[Message]:
        """Switch ``dpid`` disconnected: reroute around it on the others."""
        self.inventory.switch_down(dpid)
        self._installed.pop(dpid, None)
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
        return out + ([reply] if reply is not None else [])

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
        routes: JobRoutes | Routing,
        fabric: Fabric | None = None,
        demands: Demands | None = None,
    ) -> list[Message]:
        """Install a job's routes at job priority with the job's cookie.

        ``routes`` is a core :class:`Routing` (with the ``fabric`` it was computed
        on, and optionally its ``demands`` to pick a pair's heaviest flow), a
        mapping ``(src host, dst host) -> node names`` on the live topology, or
        :class:`Route` values.  Everything is checked before anything is sent:
        :class:`RoutingError` names the first bad route and nothing changes.
        """
        cookies.job_cookie(job_id)  # range check
        if job_id in self.jobs:
            raise RoutingError(f"job {job_id} already has routes; remove them first")
        parsed = self._parse_routes(routes, fabric, demands)
        self._check_job(job_id, parsed)
        self.jobs[job_id] = tuple(parsed)
        self._jobs_version += 1
        return self.sync()

    def remove_job(self, job_id: int) -> list[Message]:
        """Delete exactly job ``job_id``'s rules (one delete by cookie per switch)."""
        if job_id not in self.jobs:
            raise RoutingError(f"job {job_id} has no routes installed")
        del self.jobs[job_id]
        self._jobs_version += 1
        ck = cookies.job_cookie(job_id)
        out: list[Message] = []
        for dpid, table in sorted(self._installed.items()):
            if any(r.cookie == ck for r in table.values()):
                out.append(
                    FlowRule(dpid, 0, cookie=ck, cookie_mask=cookies.FULL_MASK, command="delete")
                )
                self._installed[dpid] = {k: r for k, r in table.items() if r.cookie != ck}
        return self._finish(out + self._diff())

    def _parse_routes(
        self, routes: JobRoutes | Routing, fabric: Fabric | None, demands: Demands | None
    ) -> list[Route]:
        if isinstance(routes, Routing):
            if fabric is None:
                raise RoutingError("a Routing needs the Fabric it was computed on")
            return routes_from_routing(fabric, routes, demands)
        if isinstance(routes, Mapping):
            topo = self.live_topology()
            if topo is None:
                raise RoutingError("no live topology yet: cannot resolve node names")
            return routes_from_names(topo, routes)
        return list(routes)

    def _check_job(self, job_id: int, parsed: list[Route]) -> None:
        taken = {r.key: j for j, rs in self.jobs.items() for r in rs}
        seen: set[PairKey] = set()
        for r in parsed:
            problem = route_problem(self.inventory, r)
            if problem is not None:
                raise RoutingError(f"job {job_id}: {problem}")
            if r.key in taken:
                raise RoutingError(
                    f"job {job_id}: pair {r.src_mac} -> {r.dst_mac} is routed by job {taken[r.key]}"
                )
            if r.key in seen:
                raise RoutingError(f"job {job_id}: two routes for {r.src_mac} -> {r.dst_mac}")
            seen.add(r.key)

    # -- queries -------------------------------------------------------------------------
    def live_topology(self) -> Topology | None:
        """The routable part of the fabric as it is known now."""
        return self.inventory.live_topology()

    def default_routes(self) -> tuple[Route, ...]:
        """The current default routes (one per live host pair)."""
        return self._defaults()[0]

    def default_router(self) -> str:
        """The router that computed the current default routes ('' if none)."""
        return self._defaults()[1]

    def desired(self, dpid: int) -> list[FlowRule]:
        """The complete rule set switch ``dpid`` should hold now."""
        return list(self._desired_all().get(dpid, []))

    def installed(self, dpid: int) -> list[FlowRule]:
        """What the planner has sent to switch ``dpid`` (its view of the switch's table)."""
        return sorted(self._installed.get(dpid, {}).values(), key=_order)

    # -- the desired state and the difference --------------------------------------------
    def _defaults(self) -> tuple[tuple[Route, ...], str]:
        cached = self._default_state()
        return (cached.routes, cached.router) if cached is not None else ((), "")

    def _default_state(self) -> _DefaultRoutes | None:
        """Routes and rules for the live topology, recomputed only when it changed."""
        topo = self.live_topology()
        if topo is None:
            return None
        if self._routes is None or self._routes.topology != topo:
            routes, used = self._route_all(topo)
            rules = tuple(default_rules(routes, self.config.encoding))
            self._routes = _DefaultRoutes(topo, routes, used, rules)
        return self._routes

    def _route_all(self, topo: Topology) -> tuple[tuple[Route, ...], str]:
        fabric = Fabric(topo)
        demands = Demands.all_pairs(fabric)
        for name in dict.fromkeys((self.config.router, self.config.fallback_router)):
            try:
                routing = route(name, fabric, demands, seed=self.config.seed)
            except RoutingError as exc:
                log.info("router %s cannot route %s: %s", name, topo.name, exc)
                continue
            return tuple(routes_from_routing(fabric, routing)), name
        return (), ""

    def _desired_all(self) -> dict[int, list[FlowRule]]:
        """Desired rules by switch, recomputed only when the state changed."""
        version = (self.inventory.version, self._jobs_version)
        if self._desired is None or self._desired[0] != version:
            self._desired = (version, self._compute_desired())
        return self._desired[1]

    def _compute_desired(self) -> dict[int, list[FlowRule]]:
        rules = [r for d in sorted(self.inventory.switches_up) for r in _base_rules(d)]
        rules += self._delivery_rules()
        state = self._default_state()
        rules += state.rules if state is not None else ()
        for job_id, routes in sorted(self.jobs.items()):
            alive = [r for r in routes if route_problem(self.inventory, r) is None]
            rules += job_rules(job_id, alive)
        out: dict[int, list[FlowRule]] = {d: [] for d in self.inventory.switches_up}
        for rule in rules:
            if rule.dpid in out:
                out[rule.dpid].append(rule)
        return out

    def _delivery_rules(self) -> list[FlowRule]:
        ck = cookies.cookie("host")
        return [
            FlowRule(h.dpid, 0, PRIORITY_DELIVER, Match(eth_dst=h.mac), (Output(h.port),), ck)
            for h in sorted(self.inventory.live_hosts(), key=lambda h: (h.dpid, h.port, h.mac))
        ]

    def sync(self) -> list[Message]:
        """Everything needed to bring every connected switch to its desired rules:
        pending wipes of reconnected switches, adds, strict deletes, barriers."""
        wipes: list[Message] = [
            FlowRule(
                dpid,
                OFPTT_ALL,
                cookie=cookies.ours_cookie(),
                cookie_mask=cookies.OURS_MASK,
                command="delete",
            )
            for dpid in sorted(self._wipe)
        ]
        self._wipe.clear()
        return self._finish(wipes + self._diff())

    def _diff(self) -> list[Message]:
        """Adds and strict deletes bringing every connected switch to its desired rules."""
        adds: list[Message] = []
        deletes: list[Message] = []
        for dpid, rules in sorted(self._desired_all().items()):
            have = self._installed.setdefault(dpid, {})
            want = {r.key: r for r in rules}
            adds += [r for r in sorted(want.values(), key=_order) if have.get(r.key) != r]
            deletes += [
                _delete_strict(r) for k, r in sorted(have.items(), key=_korder) if k not in want
            ]
            self._installed[dpid] = want
        return adds + deletes

    def _finish(self, messages: list[Message]) -> list[Message]:
        return batched(messages, self.config.batch_size)


def _base_rules(dpid: int) -> list[FlowRule]:
    """Control-plane rules every switch gets: ARP/LLDP up, group addresses dropped, miss up."""
    ck = cookies.cookie("base")
    up = (ToController(),)
    group = Match(eth_dst=GROUP_BIT_MAC, eth_dst_mask=GROUP_BIT_MAC)
    return [
        FlowRule(dpid, 0, PRIORITY_CONTROL, Match(eth_type=ETH_TYPE_ARP), up, ck),
        FlowRule(dpid, 0, PRIORITY_CONTROL, Match(eth_type=ETH_TYPE_LLDP), up, ck),
        FlowRule(dpid, 0, PRIORITY_GROUP_DROP, group, (), ck),
        FlowRule(dpid, 0, PRIORITY_MISS, Match(), (ToController(MISS_MAX_LEN),), ck),
    ]


def _delete_strict(rule: FlowRule) -> FlowRule:
    return FlowRule(
        rule.dpid,
        rule.table_id,
        rule.priority,
        rule.match,
        cookie=rule.cookie,
        cookie_mask=cookies.FULL_MASK,
        command="delete_strict",
    )


def _order(rule: FlowRule) -> tuple[int, int, int, str]:
    return (rule.dpid, rule.table_id, -rule.priority, rule.match.render())


def _korder(item: tuple[RuleKey, FlowRule]) -> tuple[int, int, int, str]:
    return _order(item[1])
