"""The planner's broadcast part: switch-replicated ``MPI_Bcast`` trees (issue 14).

A tree carries one communicator's broadcasts from its root's host to the hosts of its
other ranks.  The root sends UDP datagrams to the tree's IPv4 multicast group
(``group:port``); every switch of the tree holds one OpenFlow group of type ALL whose
buckets output to the tree's child ports (next switches, receiving hosts), and one rule
sending the group's UDP datagrams that arrive from the tree's parent port to that
group (:data:`~sdnmpi.controller.layout.PRIORITY_BCAST`, above the multicast drop).  On
the root's own switch the rule also matches the root's IPv4 address, so no other host
can inject into the tree; any other multicast is still dropped.

:class:`BcastTrees` holds the trees: it builds them
(:func:`sdnmpi.core.routing.multicast.build_tree`, arcs weighted by the measured load
of other traffic when the shim knows it), allocates each a group address from a pool
(unique across jobs; the same (job, root, ranks) gets the same tree back), refuses
what exceeds its caps (trees per job, groups per switch) before anything changes, and
gives every live tree's rules and groups (:meth:`BcastTrees.plan`); a tree over a dead
link or switch is withdrawn until it comes back, like a job route.  The group id of
a tree is the same on every switch: the layout's marker and the tree's offset in the
pool (:func:`~sdnmpi.controller.layout.bcast_group_id`).  Rules carry the job's
``bcast`` cookie.  Pure: no sockets, no clock.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sdnmpi.controller import layout
from sdnmpi.controller.flows import (
    ETH_TYPE_IPV4,
    IP_PROTO_UDP,
    FlowRule,
    Group,
    GroupMod,
    Match,
    check_ipv4,
)
from sdnmpi.core.routing import Fabric
from sdnmpi.core.routing.multicast import build_tree, check_tree
from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError, RoutingError

#: (source node, its port, destination node, its port): one arc of a tree, by name.
TreeArc = tuple[str, int, str, int]
#: Measured load of a switch port's transmit side, bit/s, by (dpid, port).
PortLoad = Mapping[tuple[int, int], float]


@dataclass(frozen=True)
class BcastConfig:
    """The group address pool, the UDP port, and the caps.

    ``pool``: IPv4 multicast network the groups come from (at most 2^24 addresses,
    its first address unused); ``port``: the UDP port every tree's datagrams use;
    ``max_trees_per_job``; ``max_groups_per_switch``: trees one switch may carry
    (each is one group there).
    """

    pool: str = "239.192.0.0/16"
    port: int = 47000
    max_trees_per_job: int = 64
    max_groups_per_switch: int = 1024

    def __post_init__(self) -> None:
        net = self.network
        if not net.is_multicast or net.num_addresses > 2**layout.GROUP_OFFSET_BITS:
            raise ConfigError(f"broadcast pool {self.pool}: want IPv4 multicast, /8 or longer")
        if net.num_addresses < 2:
            raise ConfigError(f"broadcast pool {self.pool} has no address to give")
        for name, value, high in (
            ("port", self.port, 65535),
            ("max_trees_per_job", self.max_trees_per_job, 2**20),
            ("max_groups_per_switch", self.max_groups_per_switch, 2**24),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ConfigError(f"broadcast {name} {value!r} out of range 1..{high}")

    @property
    def network(self) -> ipaddress.IPv4Network:
        try:
            return ipaddress.IPv4Network(self.pool)
        except (ValueError, TypeError):
            raise ConfigError(f"broadcast pool {self.pool!r} is not an IPv4 network") from None


@dataclass(frozen=True)
class BcastTree:
    """One tree: whose (``job_id``, ``root_rank``, ``ranks``), its group and port, its
    root host (and IP) and receiving hosts, and its arcs (a parent's first)."""

    job_id: int
    root_rank: int
    ranks: tuple[int, ...]
    group: str
    port: int
    offset: int
    root: str
    root_ip: str
    receivers: tuple[str, ...]
    arcs: tuple[TreeArc, ...]

    @property
    def key(self) -> tuple[int, int, tuple[int, ...]]:
        """What identifies a tree: (job id, root rank, sorted ranks)."""
        return (self.job_id, self.root_rank, self.ranks)

    @property
    def group_id(self) -> int:
        """The OpenFlow group id on every switch of the tree."""
        return layout.bcast_group_id(self.offset)

    def switches(self) -> set[str]:
        """The switches holding a group of the tree (every tree node sending on)."""
        return {a[0] for a in self.arcs if a[0] != self.root}

    def to_dict(self) -> dict[str, Any]:
        """The tree as the job store keeps it (:func:`tree_from_dict` reads it)."""
        return {
            "root_rank": self.root_rank,
            "ranks": list(self.ranks),
            "group": self.group,
            "port": self.port,
            "root": self.root,
            "root_ip": self.root_ip,
            "receivers": list(self.receivers),
            "arcs": [list(a) for a in self.arcs],
        }


def tree_from_dict(job_id: int, obj: Any, config: BcastConfig) -> BcastTree:
    """A stored tree (:meth:`BcastTree.to_dict`); :class:`ConfigError` if malformed."""
    keys = {"root_rank", "ranks", "group", "port", "root", "root_ip", "receivers", "arcs"}
    if not isinstance(obj, dict) or set(obj) != keys:
        raise ConfigError(f"broadcast tree: want an object with {sorted(keys)}")
    ranks, arcs = obj["ranks"], obj["arcs"]
    if not isinstance(ranks, list) or not all(_is_int(r) for r in ranks):
        raise ConfigError("broadcast tree: ranks must be a list of integers")
    if not isinstance(arcs, list) or not all(_is_arc(a) for a in arcs):
        raise ConfigError("broadcast tree: arcs must be [src, port, dst, port] lists")
    names = (obj["root"], *obj["receivers"]) if isinstance(obj["receivers"], list) else ()
    if not names or not all(isinstance(n, str) for n in names):
        raise ConfigError("broadcast tree: root and receivers must be host names")
    group, offset = _group(obj["group"], config)
    check_ipv4(obj["root_ip"], "broadcast tree root_ip")
    port = obj["port"]
    if not _is_int(obj["root_rank"]) or not _is_int(port) or not 1 <= port <= 65535:
        raise ConfigError(f"broadcast tree {group}: bad root_rank or port")
    return BcastTree(
        job_id, obj["root_rank"], tuple(ranks), group, port, offset,
        obj["root"], obj["root_ip"], tuple(obj["receivers"]), tuple(tuple(a) for a in arcs),
    )  # fmt: skip


class BcastTrees:
    """Every job's broadcast trees by group address; :attr:`version` changes with them."""

    def __init__(self, config: BcastConfig | None = None) -> None:
        self.config = config or BcastConfig()
        self.trees: dict[str, BcastTree] = {}
        self.version = 0

    def find(self, job_id: int, root_rank: int, ranks: Iterable[int]) -> BcastTree | None:
        """The tree of (job, root rank, ranks), if it has one."""
        key = (job_id, root_rank, tuple(sorted(ranks)))
        return next((t for t in self.trees.values() if t.key == key), None)

    def of_job(self, job_id: int) -> list[BcastTree]:
        """Job ``job_id``'s trees, by group address."""
        return [t for _, t in sorted(self.trees.items()) if t.job_id == job_id]

    def open(
        self,
        job_id: int,
        root_rank: int,
        ranks: Iterable[int],
        hosts: Mapping[int, str],
        live: Topology | None,
        load: PortLoad | None = None,
    ) -> BcastTree:
        """The tree of (job, root rank, ranks), built now if it has none.

        ``hosts`` maps each of ``ranks`` to its host in ``live``.  Everything is checked
        before anything changes: :class:`RoutingError` (no route, caps, pool) and the
        trees stay as they were.
        """
        layout.bcast_cookie(job_id)  # range check
        ranks = tuple(sorted(ranks))
        known = self.find(job_id, root_rank, ranks)
        if known is not None:
            return known
        if live is None:
            raise RoutingError("the fabric is not discovered yet")
        if len(self.of_job(job_id)) >= self.config.max_trees_per_job:
            cap = self.config.max_trees_per_job
            raise RoutingError(f"the job has {cap} broadcast trees, the most allowed")
        if root_rank not in ranks or not set(ranks) <= set(hosts):
            raise RoutingError(f"root {root_rank} or ranks {list(ranks)[:8]} without a host")
        root = hosts[root_rank]
        receivers = tuple(sorted({hosts[r] for r in ranks} - {root}))
        arcs = _tree_arcs(live, root, receivers, load or {})
        offset = self._free_offset()
        tree = BcastTree(
            job_id, root_rank, ranks, self._address(offset), self.config.port, offset,
            root, _host_ip(live, root), receivers, arcs,
        )  # fmt: skip
        self.add(tree)
        return tree

    def add(self, tree: BcastTree) -> None:
        """Take ``tree`` (built, or restored from the job store) if the caps allow and
        its group is free; :class:`RoutingError` and nothing changes otherwise."""
        if tree.group in self.trees or self.find(*tree.key) is not None:
            raise RoutingError(f"group {tree.group} or its (job, root, ranks) has a tree")
        load = self.groups_per_switch()
        full = sorted(s for s in tree.switches() if load[s] >= self.config.max_groups_per_switch)
        if full:
            cap = self.config.max_groups_per_switch
            raise RoutingError(
                f"switch {full[0]} carries {cap} broadcast groups, the most allowed per switch"
            )
        self.trees[tree.group] = tree
        self.version += 1

    def close(self, job_id: int, group: str) -> BcastTree:
        """Forget job ``job_id``'s tree of ``group`` (its rules and groups go)."""
        tree = self.trees.get(group)
        if tree is None or tree.job_id != job_id:
            raise RoutingError(f"job {job_id} has no broadcast tree with group {group}")
        del self.trees[group]
        self.version += 1
        return tree

    def close_job(self, job_id: int) -> list[BcastTree]:
        """Forget every tree of job ``job_id``; the trees forgotten."""
        gone = self.of_job(job_id)
        for tree in gone:
            del self.trees[tree.group]
        self.version += bool(gone)
        return gone

    def groups_per_switch(self) -> Counter[str]:
        """How many trees each switch carries (its groups)."""
        return Counter(s for t in self.trees.values() for s in t.switches())

    def plan(self, live: Topology | None) -> tuple[list[FlowRule], dict[int, dict[int, GroupMod]]]:
        """Every live tree's rules, and groups (``add``) by switch and group id; trees
        over dead parts left out."""
        rules: list[FlowRule] = []
        groups: dict[int, dict[int, GroupMod]] = {}
        if live is None:
            return rules, groups
        present = {(a.src, a.src_port, a.dst, a.dst_port) for a in live.arcs}
        for _, tree in sorted(self.trees.items()):
            if all(a in present for a in tree.arcs):
                r, g = tree_rules(live, tree)
                rules += r
                for mod in g:
                    groups.setdefault(mod.dpid, {})[mod.group_id] = mod
        return rules, groups

    def _free_offset(self) -> int:
        used = {t.offset for t in self.trees.values()}
        size = self.config.network.num_addresses
        free = next((o for o in range(1, size) if o not in used), None)
        if free is None:
            raise RoutingError(f"every group address of {self.config.pool} is in use")
        return free

    def _address(self, offset: int) -> str:
        return str(self.config.network.network_address + offset)


def tree_rules(live: Topology, tree: BcastTree) -> tuple[list[FlowRule], list[GroupMod]]:
    """One group and one rule per switch of ``tree`` on ``live`` (where its arcs are)."""
    parent: dict[str, int] = {}
    children: dict[str, list[int]] = {}
    for src, src_port, dst, dst_port in tree.arcs:
        parent[dst] = dst_port
        if src != tree.root:
            children.setdefault(src, []).append(src_port)
    first = next((a[2] for a in tree.arcs if a[0] == tree.root), None)
    ck, gid = layout.bcast_cookie(tree.job_id), tree.group_id
    rules, groups = [], []
    for switch, ports in sorted(children.items()):
        dpid = live.switch(switch).dpid
        match = Match(
            in_port=parent[switch],
            eth_type=ETH_TYPE_IPV4,
            ip_proto=IP_PROTO_UDP,
            ipv4_src=tree.root_ip if switch == first else None,
            ipv4_dst=tree.group,
        )
        groups.append(GroupMod(dpid, gid, "add", tuple(sorted(ports))))
        rules.append(FlowRule(dpid, 0, layout.PRIORITY_BCAST, match, (Group(gid),), ck))
    return rules, groups


def _tree_arcs(
    live: Topology, root: str, receivers: tuple[str, ...], load: PortLoad
) -> tuple[TreeArc, ...]:
    """The arcs of a tree from ``root`` to ``receivers`` on ``live`` (checked)."""
    fabric = Fabric(live)
    index = fabric.index
    for host in (root, *receivers):
        if host not in index or not live.is_host(host):
            raise RoutingError(f"host {host} is not in the live fabric")
    arc_load = [_arc_load(live, a.src, a.src_port, load) for a in live.arcs]
    tree = build_tree(fabric, index[root], [index[r] for r in receivers], arc_load)
    check_tree(fabric, tree)
    arcs = [live.arcs[a] for a in tree.arcs]
    return tuple((a.src, a.src_port, a.dst, a.dst_port) for a in arcs)


def _arc_load(live: Topology, src: str, port: int, load: PortLoad) -> float:
    if live.is_host(src):
        return 0.0
    return max(0.0, float(load.get((live.switch(src).dpid, port), 0.0)))


def _host_ip(live: Topology, host: str) -> str:
    ip = live.host(host).ip
    if ip is None:
        raise RoutingError(f"the IPv4 address of host {host} (the root's) is not known yet")
    return ip


def _group(text: Any, config: BcastConfig) -> tuple[str, int]:
    try:
        addr = ipaddress.IPv4Address(text)
    except (ValueError, TypeError):
        raise ConfigError(f"broadcast tree group {text!r} is not an IPv4 address") from None
    net = config.network
    offset = int(addr) - int(net.network_address)
    if addr not in net or offset == 0:
        raise ConfigError(f"broadcast tree group {addr} is not in the pool {config.pool}")
    return str(addr), offset


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_arc(a: Any) -> bool:
    return (
        isinstance(a, list)
        and len(a) == 4
        and isinstance(a[0], str)
        and isinstance(a[2], str)
        and _is_int(a[1])
        and _is_int(a[3])
    )


def group_changes(
    dpid: int, have: Mapping[int, GroupMod | None], want: Mapping[int, GroupMod]
) -> tuple[list[GroupMod], list[GroupMod]]:
    """(adds and modifies, deletes) taking switch ``dpid``'s groups from ``have`` (what
    it holds; ``None``: a group of ours with unknown buckets) to ``want``.

    >>> want = {7: GroupMod(1, 7, "add", (2, 3))}
    >>> [m.command for m in group_changes(1, {7: None, 8: None}, want)[0]]
    ['modify']
    >>> [m.group_id for m in group_changes(1, {7: None, 8: None}, want)[1]]
    [8]
    """
    ups: list[GroupMod] = []
    for gid, mod in sorted(want.items()):
        if gid not in have:
            ups.append(mod)
        elif have[gid] != mod:
            ups.append(GroupMod(dpid, gid, "modify", mod.ports))
    gone = [GroupMod(dpid, gid, "delete") for gid in sorted(set(have) - set(want))]
    return ups, gone
