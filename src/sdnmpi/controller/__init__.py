"""The OpenFlow interconnect controller: a pure planner and (elsewhere) its os-ken shim.

* :mod:`~sdnmpi.controller.flows`: flow rules, barriers and packet-outs as plain data;
* :mod:`~sdnmpi.controller.layout`: the rule layout (priorities, and cookies: who owns a rule);
* :mod:`~sdnmpi.controller.packets`: frames as header fields, ARP encode/decode;
* :mod:`~sdnmpi.controller.inventory`: switches, links and hosts as discovered;
* :mod:`~sdnmpi.controller.routes`: host-pair routes and their encoding into rules;
* :mod:`~sdnmpi.controller.planner`: events in, messages out (faucet's ``Valve``).

Nothing here imports os_ken, sockets or clocks; :mod:`sdnmpi.testing` has the
fake fabric that applies the planner's rules.
"""

from __future__ import annotations

from sdnmpi.controller.flows import (
    Barrier,
    FlowRule,
    FlowRuleError,
    Match,
    Message,
    Output,
    PacketOut,
    SetField,
    ToController,
)
from sdnmpi.controller.packets import Packet
from sdnmpi.controller.planner import Planner, PlannerConfig
from sdnmpi.controller.routes import Hop, Route

__all__ = [
    "Barrier",
    "FlowRule",
    "FlowRuleError",
    "Hop",
    "Match",
    "Message",
    "Output",
    "Packet",
    "PacketOut",
    "Planner",
    "PlannerConfig",
    "Route",
    "SetField",
    "ToController",
]
