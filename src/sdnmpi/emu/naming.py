"""The emulated fabric's names and addresses: deterministic, unique per fabric.

* namespaces ``sdnmpi-<fabric>-<host>`` (:func:`netns_name`);
* names in the root namespace (bridges, switch-side veth ends) start with a
  6-character fabric tag (:func:`fabric_tag`): bridge ``<tag>-<switch>`` (or
  ``<tag>-b<index>`` when too long), veth end ``<tag>s<switch index>p<port>`` (or
  ``<tag>l<link index><a|b>``); all at most 15 characters (IFNAMSIZ);
* host addresses: the model's, or the next free ones in the fabric's network
  (:func:`fabric_network`, :func:`host_addresses`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError, TopologyError

IFNAMSIZ = 15
NS_PREFIX = "sdnmpi"
DEFAULT_NETWORK = ipaddress.IPv4Network("10.0.0.0/8")

_FABRIC_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,23}$")


def check_fabric_name(name: str) -> str:
    """``name`` if it is a valid fabric name, else :class:`ConfigError`.

    >>> check_fabric_name("demo-1")
    'demo-1'
    """
    if not _FABRIC_NAME_RE.match(name):
        raise ConfigError(
            f"invalid fabric name {name!r}: use 1-24 characters a-z, 0-9, '-', '_', "
            "starting with a letter or digit"
        )
    return name


def fabric_tag(name: str) -> str:
    """The 6-character prefix of this fabric's names in the root namespace.

    >>> len(fabric_tag("default")), fabric_tag("default").startswith("e")
    (6, True)
    """
    return "e" + hashlib.sha256(name.encode()).hexdigest()[:5]


def netns_name(fabric: str, host: str) -> str:
    """The namespace of an emulated host.

    >>> netns_name("demo", "h1")
    'sdnmpi-demo-h1'
    """
    return f"{NS_PREFIX}-{fabric}-{host}"


def fabric_network(topo: Topology) -> ipaddress.IPv4Network:
    """The subnet of the host addresses.

    ``meta["network"]`` if the topology names one, else ``10.0.0.0/8`` when every
    address lies in it, else the smallest network holding them all.
    """
    declared = topo.meta.get("network")
    if declared is not None:
        try:
            return ipaddress.IPv4Network(str(declared), strict=False)
        except ValueError as exc:
            raise TopologyError(f"topology {topo.name!r}: bad meta network: {exc}") from None
    addrs = [_ipv4(topo, h.name, h.ip) for h in topo.hosts if h.ip]
    if all(a in DEFAULT_NETWORK for a in addrs):
        return DEFAULT_NETWORK
    net = ipaddress.IPv4Network(f"{addrs[0]}/32")
    while not all(a in net for a in addrs):
        net = net.supernet()
    return net


def _ipv4(topo: Topology, host: str, ip: str | None) -> ipaddress.IPv4Address:
    addr = ipaddress.ip_address(ip or "")
    if not isinstance(addr, ipaddress.IPv4Address):
        raise TopologyError(f"topology {topo.name!r}: host {host!r} has IPv6 {ip}; emu is IPv4")
    return addr


def host_addresses(topo: Topology, network: ipaddress.IPv4Network) -> dict[str, str]:
    """Host -> IPv4: the model's, or the next free one in ``network`` for hosts without."""
    taken = {h.ip for h in topo.hosts if h.ip}
    out: dict[str, str] = {}
    free = (str(a) for a in network.hosts() if str(a) not in taken)
    for h in topo.hosts:
        if h.ip:
            if ipaddress.ip_address(h.ip) not in network:
                raise TopologyError(f"host {h.name!r}: {h.ip} is outside {network}")
            out[h.name] = h.ip
        else:
            try:
                out[h.name] = next(free)
            except StopIteration:
                raise TopologyError(f"{network} has too few addresses for the hosts") from None
    return out


def hosts_file(topo: Topology, addresses: dict[str, str]) -> str:
    """``/etc/hosts`` for every emulated host: localhost and every host's name."""
    lines = ["127.0.0.1\tlocalhost"] + [f"{addresses[h.name]}\t{h.name}" for h in topo.hosts]
    return "\n".join(lines) + "\n"


def bridge_name(tag: str, switch: str, index: int) -> str:
    """``<tag>-<switch>``, or ``<tag>-b<index>`` when that is too long."""
    name = f"{tag}-{switch}"
    return name if len(name) <= IFNAMSIZ and _ifname_ok(switch) else f"{tag}-b{index}"


def _ifname_ok(text: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9_-]+", text) is not None


def switch_end_name(tag: str, switch_index: int, port_no: int, link: int, side: str) -> str:
    """Root-namespace name of a switch-side veth end.

    >>> switch_end_name("e12345", 2, 7, 40, "b")
    'e12345s2p7'
    """
    name = f"{tag}s{switch_index}p{port_no}"
    return name if len(name) <= IFNAMSIZ else f"{tag}l{link}{side}"


def is_loop_free(topo: Topology) -> bool:
    """Whether the switches and their links form a forest (no loop, no parallel link)."""
    parent = {s.name: s.name for s in topo.switches}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for ln in topo.links:
        if topo.is_host(ln.src) or topo.is_host(ln.dst):
            continue
        ra, rb = find(ln.src), find(ln.dst)
        if ra == rb:
            return False
        parent[ra] = rb
    return True
