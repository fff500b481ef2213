"""What the controller knows of the fabric right now: switches, links and hosts.

The :class:`Inventory` records events (a switch connected, LLDP saw a link, a
host spoke) and turns them into a *live* :class:`~sdnmpi.core.topology.Topology`
that the routers understand.  A model topology, when given (``--topology``),
supplies names, levels, capacities and the node order, so that once everything
has been discovered the live topology equals the model and routes are exactly
those the core routers compute on the model.  Without a model, switches are
named ``s<dpid>`` and hosts ``h<mac without colons>``.

Hosts of the model are *expected*: they count as attached where the model puts
them (with the model's IP) before they are seen, so default routes to them are
installed proactively and do not change as hosts show up; a sighting elsewhere
(a moved host) or with an IP overrides the model.  ``expect_model_hosts=False``
routes only hosts that have been seen.

A switch link is live when both of its directions have been discovered and both
switches are connected; a host is live when its switch is.  Only the connected
component holding the most hosts is routed (the others wait for their links).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace

from sdnmpi.controller.flows import check_ipv4, check_mac, check_port
from sdnmpi.core.topology import Host, Link, Switch, Topology
from sdnmpi.errors import TopologyError

log = logging.getLogger(__name__)

#: Capacity assumed for a discovered link the model does not describe.
DEFAULT_CAPACITY_BPS = 1e9

PortRef = tuple[int, int]  # (dpid, port_no)


@dataclass(frozen=True)
class HostEntry:
    """A host as learned: its MAC, IPv4 address if known, and where it is attached.

    ``last_seen_s`` is ``None`` for a model host not seen yet.
    """

    mac: str
    ip: str | None
    dpid: int
    port: int
    last_seen_s: float | None


class Inventory:
    """Mutable record of discovered switches, links and hosts (see module docstring)."""

    def __init__(self, model: Topology | None = None, expect_model_hosts: bool = True) -> None:
        self.model = model
        self.switches_up: set[int] = set()
        self.links: dict[PortRef, PortRef] = {}
        self.capacity: dict[PortRef, float] = {}
        #: Hosts seen on the network, by MAC.
        self.seen: dict[str, HostEntry] = {}
        self._expected = _model_hosts(model) if model is not None and expect_model_hosts else {}
        #: Bumped on every change that can change the rules.
        self.version = 0
        self._host_cache: dict[str, HostEntry] | None = None  # :attr:`hosts`, until seen changes
        self._live: tuple[int, Topology | None] | None = None  # (version, live topology)

    @property
    def hosts(self) -> dict[str, HostEntry]:
        """Every known host by MAC: seen ones, and expected model hosts not seen yet
        (computed again only after a host was seen or forgotten; do not modify)."""
        if self._host_cache is None:
            self._host_cache = self._all_hosts()
        return self._host_cache

    def _all_hosts(self) -> dict[str, HostEntry]:
        taken = {e.ip for e in self.seen.values() if e.ip is not None}
        out = {
            mac: replace(e, ip=None) if e.ip in taken else e
            for mac, e in self._expected.items()
            if mac not in self.seen
        }
        out.update(self.seen)
        return out

    # -- names ------------------------------------------------------------------------
    def switch_name(self, dpid: int) -> str:
        """The model's name of switch ``dpid``, else ``s<dpid>``."""
        if self.model is not None and dpid in self.model.switch_by_dpid:
            return self.model.switch_by_dpid[dpid].name
        return f"s{dpid}"

    def host_name(self, mac: str) -> str:
        """The model's name of host ``mac``, else ``h<mac hex>``."""
        if self.model is not None and mac in self.model.host_by_mac:
            return self.model.host_by_mac[mac].name
        return "h" + mac.replace(":", "")

    def link_ports(self, dpid: int) -> set[int]:
        """Ports of ``dpid`` known to face another switch."""
        return {port for (d, port) in self.links if d == dpid}

    def host_by_ip(self, ip: str) -> HostEntry | None:
        """The host that owns IPv4 address ``ip``, if known."""
        for entry in self.hosts.values():
            if entry.ip == ip:
                return entry
        return None

    # -- events ---------------------------------------------------------------------
    def switch_up(self, dpid: int) -> None:
        """Switch ``dpid`` connected."""
        self.switches_up.add(dpid)
        self.version += 1

    def switch_down(self, dpid: int) -> None:
        """Switch ``dpid`` disconnected: its links stop being live (both ends must be
        up) but are kept; they come and go only with LLDP's link events.  (Forgetting
        them here raced with LLDP: os-ken delivers a switch's disconnection and the
        link events of its reconnection from different threads, so a link found again
        could arrive first and be forgotten for good; at fat_tree(16) a controller
        restart lost 5 of 4,096 link directions that way and never completed discovery.)"""
        self.switches_up.discard(dpid)
        self.version += 1

    def link_up(self, src: PortRef, dst: PortRef, capacity_bps: float | None = None) -> None:
        """LLDP saw ``src`` -> ``dst`` (one direction); a link already known with the
        same capacity changes nothing (no new version, so no diff of the plan)."""
        for dpid, port in (src, dst):
            check_port(port, f"link port of switch {dpid}")
        if self.links.get(src) == dst and capacity_bps in (None, self.capacity.get(src)):
            return
        self.version += 1
        self.links[src] = dst
        for mac, entry in list(self.seen.items()):
            if (entry.dpid, entry.port) in (src, dst):
                log.info(
                    "host %s was seen on link port %s: forgotten", mac, (entry.dpid, entry.port)
                )
                del self.seen[mac]
                self._host_cache = None
        if capacity_bps is not None:
            self.capacity[src] = capacity_bps

    def link_down(self, src: PortRef, dst: PortRef) -> None:
        """The link ``src`` -> ``dst`` is gone."""
        if self.links.get(src) == dst:
            del self.links[src]
            self.version += 1

    def host_seen(self, mac: str, dpid: int, port: int, ip: str | None, now: float) -> bool:
        """Record that ``mac`` (and ``ip``) spoke on ``dpid``:``port``.

        Returns whether anything routing depends on changed (new host, moved, new IP).
        Sightings on inter-switch ports are ignored (the frame transited).
        """
        check_mac(mac, "host MAC")
        check_port(port, "host port")
        if ip is not None:
            check_ipv4(ip, f"IP of host {mac}")
        if port in self.link_ports(dpid) or int(mac[:2], 16) & 1:
            return False
        old = self.hosts.get(mac)
        ip = ip if ip is not None else (old.ip if old else None)
        if ip is not None:
            self._release_ip(ip, mac)
        self.seen[mac] = HostEntry(mac, ip, dpid, port, now)
        self._host_cache = None
        changed = old is None or (old.ip, old.dpid, old.port) != (ip, dpid, port)
        self.version += changed
        return changed

    def _release_ip(self, ip: str, owner: str) -> None:
        for mac, entry in list(self.seen.items()):
            if entry.ip == ip and mac != owner:
                log.info("IP %s moved from %s to %s", ip, mac, owner)
                self.seen[mac] = replace(entry, ip=None)
                self._host_cache = None
                self.version += 1  # the live topology names hosts with their IPs

    # -- the live topology ------------------------------------------------------------
    def live_hosts(self) -> list[HostEntry]:
        """Known hosts whose switch is connected."""
        return [h for h in self.hosts.values() if h.dpid in self.switches_up]

    def duplex_links(self) -> list[tuple[PortRef, PortRef]]:
        """Switch links seen in both directions between connected switches, each once."""
        out = []
        for src, dst in self.links.items():
            up = src[0] in self.switches_up and dst[0] in self.switches_up
            if up and src < dst and self.links.get(dst) == src:
                out.append((src, dst))
        return sorted(out)

    def live_topology(self) -> Topology | None:
        """The routable part of the fabric, or ``None`` if fewer than two hosts are live
        (built again only after :attr:`version` changed: 40 ms at 320 switches)."""
        if self._live is None or self._live[0] != self.version:
            self._live = (self.version, self._live_topology())
        return self._live[1]

    def _live_topology(self) -> Topology | None:
        switches = self._switches()
        hosts = self._hosts()
        links = self._host_links(hosts) + self._switch_links()
        keep = _largest_component(links, {h.name for h in hosts})
        if keep is None:
            return None
        name = self.model.name if self.model is not None else "discovered"
        live_switches = tuple(s for s in switches if s.name in keep)
        live_links = tuple(ln for ln in links if ln.src in keep)
        meta: dict[str, object] = {}
        complete = self.model is not None and (live_switches, live_links) == (
            self.model.switches,
            self.model.links,
        )
        if complete and self.model is not None:  # the model's parameters hold (D-mod-K uses them)
            meta = dict(self.model.meta)
        try:
            return Topology(
                name, tuple(h for h in hosts if h.name in keep), live_switches, live_links, meta
            )
        except TopologyError as exc:
            log.info("live topology not routable yet: %s", exc)
            return None

    def _switches(self) -> list[Switch]:
        model = self.model.switches if self.model is not None else ()
        out = [s for s in model if s.dpid in self.switches_up]
        known = {s.dpid for s in out}
        out += [Switch(f"s{d}", d) for d in sorted(self.switches_up - known)]
        return out

    def _hosts(self) -> list[Host]:
        live = {h.mac: h for h in self.live_hosts()}
        model = self.model.hosts if self.model is not None else ()
        out = [replace(h, ip=live[h.mac].ip) for h in model if h.mac in live]
        known = {h.mac for h in out}
        out += [Host(self.host_name(m), m, live[m].ip) for m in sorted(set(live) - known)]
        return out

    def _host_links(self, hosts: Iterable[Host]) -> list[Link]:
        known = self.hosts
        out = []
        for host in hosts:
            entry = known[host.mac]
            sw = self.switch_name(entry.dpid)
            link = self._model_link(host.name, sw, entry.port)
            out.append(link or self._new_link(host, sw, entry))
        return out

    def _model_link(self, host: str, switch: str, port: int) -> Link | None:
        if self.model is None or not self.model.is_host(host):
            return None
        for arc in self.model.host_arcs(host):
            if arc.dst == switch and arc.dst_port == port:
                return self.model.links[arc.link]
        return None

    def _new_link(self, host: Host, switch: str, entry: HostEntry) -> Link:
        cap = self.capacity.get((entry.dpid, entry.port), DEFAULT_CAPACITY_BPS)
        return Link(host.name, switch, 1, entry.port, cap)

    def _switch_links(self) -> list[Link]:
        wanted = {frozenset(pair) for pair in self.duplex_links()}
        out: list[Link] = []
        for ln in self.model.links if self.model is not None else ():
            ends = self._ends(ln)
            if ends is not None and ends in wanted:
                out.append(ln)
                wanted.discard(ends)
        for a, b in sorted(tuple(sorted(e)) for e in wanted):
            cap = min(self.capacity.get(a, DEFAULT_CAPACITY_BPS), self.capacity.get(b, 1e18))
            out.append(Link(self.switch_name(a[0]), self.switch_name(b[0]), a[1], b[1], cap))
        return out

    def _ends(self, ln: Link) -> frozenset[PortRef] | None:
        assert self.model is not None
        if self.model.is_host(ln.src) or self.model.is_host(ln.dst):
            return None
        a = self.model.switch(ln.src).dpid
        b = self.model.switch(ln.dst).dpid
        return frozenset({(a, ln.src_port), (b, ln.dst_port)})


def _model_hosts(model: Topology) -> dict[str, HostEntry]:
    out = {}
    for host in model.hosts:
        switch, port = model.attachment(host.name)
        out[host.mac] = HostEntry(host.mac, host.ip, model.switch(switch).dpid, port, None)
    return out


def _largest_component(links: list[Link], hosts: set[str]) -> set[str] | None:
    """Nodes of the connected component with the most hosts (at least two)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for ln in links:
        parent[find(ln.src)] = find(ln.dst)
    groups: dict[str, set[str]] = {}
    for node in list(parent):
        groups.setdefault(find(node), set()).add(node)
    best = max(groups.values(), key=lambda g: (len(g & hosts), -len(g)), default=set())
    return best if len(best & hosts) >= 2 else None
