"""Topologies and a planner brought to steady state on a fake fabric."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from sdnmpi.catalog import load_topology
from sdnmpi.controller import Planner, PlannerConfig
from sdnmpi.controller.api import ApiHandler
from sdnmpi.controller.flows import Message
from sdnmpi.controller.packets import ipv4
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.routing import Demands, Fabric, Routing, route
from sdnmpi.core.topology import Topology
from sdnmpi.testing import FakeOFNetwork, Trace, discover

TOPOLOGIES: dict[str, Callable[[], Topology]] = {
    "leaf_spine": lambda: leaf_spine(2, 4, 2),
    "fat_tree": lambda: fat_tree(4),
    "milk": lambda: load_topology("milk"),
}


@dataclass
class Setup:
    """A planner at steady state, the fake fabric holding its rules, and what it sent."""

    topo: Topology
    planner: Planner
    fabric: FakeOFNetwork
    messages: list[Message]

    def send(self, messages: list[Message]) -> list[Message]:
        self.fabric.apply(messages)
        return messages

    def trace(self, src: str, dst: str) -> Trace:
        return self.fabric.trace(src, ipv4(self.topo.host(src).mac, self.topo.host(dst).mac))

    def dpids(self, names: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(self.topo.switch(n).dpid for n in names if not self.topo.is_host(n))


def steady(topo: Topology, router: str = "dmodk", **config: object) -> Setup:
    planner = Planner(topo, PlannerConfig(router=router, **config))  # type: ignore[arg-type]
    fabric = FakeOFNetwork(topo)
    messages = discover(planner, topo)
    fabric.apply(messages)
    return Setup(topo, planner, fabric, messages)


def planned(topo: Topology, router: str) -> tuple[Fabric, Demands, Routing]:
    fabric = Fabric(topo)
    demands = Demands.all_pairs(fabric)
    return fabric, demands, route(router, fabric, demands)


@pytest.fixture(params=sorted(TOPOLOGIES))
def topo(request: pytest.FixtureRequest) -> Topology:
    return TOPOLOGIES[request.param]()


def request_line(**req: object) -> bytes:
    """One API request as the controller's socket receives it (a JSON line)."""
    return json.dumps(req).encode() + b"\n"


def synced_api(setup: Setup) -> ApiHandler:
    """An API handler on ``setup``'s planner, past its first sync (changes allowed)."""
    handler = ApiHandler(setup.planner)
    handler.synced = True
    return handler
