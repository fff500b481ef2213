"""The planner's default part: rules every switch holds whatever the jobs.

Control-plane rules (:func:`base_rules`), delivery to attached hosts
(:func:`delivery_rules`) and the default routes of every live host pair
(:class:`DefaultRoutes`, computed by the configured router, or its fallback when
the live topology is not one the router can route).  Priorities and cookies:
:mod:`sdnmpi.controller.layout`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping

from sdnmpi.controller import layout
from sdnmpi.controller.flows import (
    BROADCAST_MAC,
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    ETH_TYPE_LLDP,
    GROUP_BIT_MAC,
    FlowRule,
    Match,
    Output,
    ToController,
)
from sdnmpi.controller.inventory import Inventory
from sdnmpi.controller.primitives.base import Network
from sdnmpi.controller.routes import (
    Encoding,
    Route,
    default_rules_of_routing,
    routes_from_routing,
)
from sdnmpi.core.routing import Demands, Fabric, Routing, route
from sdnmpi.core.topology import Topology
from sdnmpi.errors import RoutingError

log = logging.getLogger(__name__)


class DefaultState:
    """Default routes computed for one live topology, and their rules.

    The rules are encoded from the routing's arrays; the routes themselves (a
    :class:`Route` per host pair: a million at fat_tree(16)) are built only when
    something asks for them (a tagged job's module, a measurement job)."""

    def __init__(
        self,
        topology: Topology,
        router: str,
        rules: tuple[FlowRule, ...],
        build: Callable[[], tuple[Route, ...]],
    ) -> None:
        self.topology, self.router, self.rules = topology, router, rules
        self._build = build
        self.net = Network(topology, _LazyRoutes(self))

    @functools.cached_property
    def routes(self) -> tuple[Route, ...]:
        """One route per live host pair, in flow order."""
        return self._build()


class _LazyRoutes(Mapping[tuple[str, str], Route]):
    """A state's routes by (source MAC, destination MAC), built at the first lookup."""

    def __init__(self, state: DefaultState) -> None:
        self._state = state

    @functools.cached_property
    def _by_key(self) -> dict[tuple[str, str], Route]:
        return {r.key: r for r in self._state.routes}

    def __getitem__(self, key: tuple[str, str]) -> Route:
        return self._by_key[key]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)


class DefaultRoutes:
    """Default routes of the live topology, recomputed only when it changed.

    Computing them takes seconds on a large fabric (fat_tree(16): about 10 s).  A shim
    that must not hold its lock that long computes them ahead with :meth:`compute`
    (pure: it touches nothing here, so it may run while the state changes) and hands
    the result to :meth:`offer`; :meth:`state` then takes it while the live topology
    is still the one it was computed for.
    """

    def __init__(self, router: str, fallback: str, seed: int, encoding: Encoding) -> None:
        self.routers = tuple(dict.fromkeys((router, fallback)))
        self.seed = seed
        self.encoding = encoding
        self._state: DefaultState | None = None
        self._offered: DefaultState | None = None

    @property
    def current(self) -> DefaultState | None:
        """The state last computed (None before the first), without recomputing."""
        return self._state

    def needs(self, topo: Topology | None) -> bool:
        """Whether :meth:`state` of ``topo`` would compute: neither the current state
        nor an offered one is for it."""
        if topo is None:
            return False
        return not any(s is not None and s.topology == topo for s in (self._state, self._offered))

    def state(self, topo: Topology | None) -> DefaultState | None:
        """Routes and rules for ``topo`` (the live topology; None: nothing routable)."""
        if topo is None:
            return None
        if self._state is None or self._state.topology != topo:
            offered, self._offered = self._offered, None
            if offered is not None and offered.topology == topo:
                self._state = offered
            else:
                self._state = self.compute(topo)
        return self._state

    def compute(self, topo: Topology) -> DefaultState:
        """The state for ``topo``, computed without reading or changing this object's
        state (its router, seed and encoding are fixed)."""
        fabric = Fabric(topo)
        demands = Demands.all_pairs(fabric)
        for name in self.routers:
            try:
                routing = route(name, fabric, demands, seed=self.seed)
                rules = tuple(default_rules_of_routing(fabric, routing, self.encoding))
            except RoutingError as exc:
                log.info("router %s cannot route %s: %s", name, topo.name, exc)
                continue
            build = functools.partial(_routes_of, fabric, routing)
            return DefaultState(topo, name, rules, build)
        return DefaultState(topo, "", (), tuple)

    def offer(self, state: DefaultState) -> None:
        """A state :meth:`compute` made ahead: :meth:`state` takes it while the live
        topology is ``state.topology`` (a later offer replaces it)."""
        self._offered = state


def _routes_of(fabric: Fabric, routing: Routing) -> tuple[Route, ...]:
    return tuple(routes_from_routing(fabric, routing))


def base_rules(dpid: int) -> list[FlowRule]:
    """Control-plane rules every switch gets: broadcast ARP and LLDP up, group addresses
    dropped, unrouted IPv4 frames with the tag prefix up whole, any other miss up
    (headers).  Unicast ARP (a host revalidating a neighbour) follows the routes like
    any frame to that MAC, so hosts keep their neighbours while the controller is
    restarting."""
    ck = layout.cookie("base")
    up = (ToController(),)
    group = Match(eth_dst=GROUP_BIT_MAC, eth_dst_mask=GROUP_BIT_MAC)
    local = Match(
        eth_dst=layout.TAG_PREFIX_MAC, eth_dst_mask=layout.TAG_PREFIX_MASK, eth_type=ETH_TYPE_IPV4
    )
    arp_broadcast = Match(eth_dst=BROADCAST_MAC, eth_type=ETH_TYPE_ARP)
    return [
        FlowRule(dpid, 0, layout.PRIORITY_CONTROL, arp_broadcast, up, ck),
        FlowRule(dpid, 0, layout.PRIORITY_CONTROL, Match(eth_type=ETH_TYPE_LLDP), up, ck),
        FlowRule(dpid, 0, layout.PRIORITY_GROUP_DROP, group, (), ck),
        FlowRule(dpid, 0, layout.PRIORITY_TAG_MISS, local, (ToController(),), ck),
        FlowRule(dpid, 0, layout.PRIORITY_MISS, Match(), (ToController(layout.MISS_MAX_LEN),), ck),
    ]


def delivery_rules(inventory: Inventory) -> list[FlowRule]:
    """Frames to an attached live host go out of its port."""
    ck = layout.cookie("host")
    return [
        FlowRule(h.dpid, 0, layout.PRIORITY_DELIVER, Match(eth_dst=h.mac), (Output(h.port),), ck)
        for h in sorted(inventory.live_hosts(), key=lambda h: (h.dpid, h.port, h.mac))
    ]
