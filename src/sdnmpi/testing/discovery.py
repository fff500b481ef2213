"""Feed a planner the events a real fabric would produce for a model topology.

What the os-ken shim reports when every switch of ``topology`` connects, LLDP
finds every switch link (both directions) and every host announces itself:
a quick way to bring a :class:`~sdnmpi.controller.planner.Planner` to the
steady state in tests and benchmarks.
"""

from __future__ import annotations

from sdnmpi.controller.flows import Message
from sdnmpi.controller.planner import Planner
from sdnmpi.core.topology import Topology


def discover(
    planner: Planner,
    topology: Topology,
    *,
    hosts: bool = True,
    host_ips: bool = True,
    now: float = 0.0,
    each: bool = False,
) -> list[Message]:
    """Switch-up for every switch, link-up for every switch arc, host-learned for every host.

    ``host_ips=False`` learns hosts without IP addresses (as from first packets).
    ``each=True`` syncs after every event (as a shim that does not coalesce
    events); by default the planner syncs once at the end.  Returns every
    message the planner produced, in order.
    """
    sync = each
    out: list[Message] = []
    for sw in topology.switches:
        out += planner.switch_up(sw.dpid, sync=sync)
    for arc in topology.arcs:
        if topology.is_host(arc.src) or topology.is_host(arc.dst):
            continue
        src = (topology.switch(arc.src).dpid, arc.src_port)
        dst = (topology.switch(arc.dst).dpid, arc.dst_port)
        out += planner.link_up(src, dst, arc.capacity_bps, sync=sync)
    if hosts:
        for host in topology.hosts:
            switch, port = topology.attachment(host.name)
            ip = host.ip if host_ips else None
            dpid = topology.switch(switch).dpid
            out += planner.host_learned(host.mac, dpid, port, ip, now, sync=sync)
    return out + planner.sync()
