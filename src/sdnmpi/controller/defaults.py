"""The planner's default part: rules every switch holds whatever the jobs.

Control-plane rules (:func:`base_rules`), delivery to attached hosts
(:func:`delivery_rules`) and the default routes of every live host pair
(:class:`DefaultRoutes`, computed by the configured router, or its fallback when
the live topology is not one the router can route).  Priorities and cookies:
:mod:`sdnmpi.controller.layout`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

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
from sdnmpi.controller.routes import Encoding, Route, default_rules, routes_from_routing
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.core.topology import Topology
from sdnmpi.errors import RoutingError

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class DefaultState:
    """Default routes computed for one live topology, and their rules."""

    topology: Topology
    routes: tuple[Route, ...]
    router: str
    rules: tuple[FlowRule, ...]
    net: Network


class DefaultRoutes:
    """Default routes of the live topology, recomputed only when it changed."""

    def __init__(self, router: str, fallback: str, seed: int, encoding: Encoding) -> None:
        self.routers = tuple(dict.fromkeys((router, fallback)))
        self.seed = seed
        self.encoding = encoding
        self._state: DefaultState | None = None

    @property
    def current(self) -> DefaultState | None:
        """The state last computed (None before the first), without recomputing."""
        return self._state

    def state(self, topo: Topology | None) -> DefaultState | None:
        """Routes and rules for ``topo`` (the live topology; None: nothing routable)."""
        if topo is None:
            return None
        if self._state is None or self._state.topology != topo:
            routes, used = self._route_all(topo)
            rules = tuple(default_rules(routes, self.encoding))
            net = Network(topo, {r.key: r for r in routes})
            self._state = DefaultState(topo, routes, used, rules, net)
        return self._state

    def _route_all(self, topo: Topology) -> tuple[tuple[Route, ...], str]:
        fabric = Fabric(topo)
        demands = Demands.all_pairs(fabric)
        for name in self.routers:
            try:
                routing = route(name, fabric, demands, seed=self.seed)
            except RoutingError as exc:
                log.info("router %s cannot route %s: %s", name, topo.name, exc)
                continue
            return tuple(routes_from_routing(fabric, routing)), name
        return (), ""


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
