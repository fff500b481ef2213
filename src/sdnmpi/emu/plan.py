"""From a topology to an emulated fabric, as data: the pure half of ``sdnmpi emu``.

:func:`make_plan` turns a :class:`~sdnmpi.core.topology.Topology` into a
:class:`FabricPlan`: the network namespace, addresses and interfaces of every
host, one Open vSwitch bridge per switch (dpid and port numbers from the model),
one veth pair per link shaped to ``capacity_bps * link_scale``, and the ordered
:class:`Step` list (commands and files) that builds it.  Every step that creates
something names the :class:`Resource` it creates, so the runner can record it
*before* running the step and ``down`` can remove exactly what ``up`` made.
Nothing here runs a command or touches the system.

Names and addresses: :mod:`sdnmpi.emu.naming` (inside a host's namespace its
interfaces are ``eth0``, ``eth1``, ... in port order); link shaping:
:mod:`sdnmpi.emu.shaping`.

Every bridge runs in fail-mode *secure*: with a controller (``--controller``) it
forwards what the controller installs; without one it forwards nothing until
flows are installed (``l2_learning`` adds one NORMAL flow per bridge, allowed only
on loop-free fabrics, since MAC learning floods loops forever; or install flows
with ``ovs-ofctl`` and ``OVS_RUNDIR=<state dir>/ovs``).  Standalone mode would
flood the loops of a fat-tree, so it is never used.

Only the first interface of a multi-homed host gets the model's MAC and IP; its
other interfaces come up unaddressed.  Members of an aggregated link
(``Link.lag``) are separate ports for now (no OVS bond).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sdnmpi.core.topology import Topology
from sdnmpi.emu.naming import (
    IFNAMSIZ,
    bridge_name,
    check_fabric_name,
    fabric_network,
    fabric_tag,
    host_addresses,
    hosts_file,
    is_loop_free,
    netns_name,
    switch_end_name,
)
from sdnmpi.emu.queues import (
    DEFAULT_QUEUES,
    QUEUE_MODES,
    hosts_rto_min_s,
    rto_min_supported,
    switch_mark_bytes,
    tcp_rto_min_s,
)
from sdnmpi.emu.shaping import shaping_argvs, tcp_wmem_max
from sdnmpi.errors import ConfigError, TopologyError

#: Default scale of link capacities: 1 Gbit/s becomes 50 Mbit/s, far below the
#: about 1 Gbit/s the userspace datapath moves in total, so the links bottleneck.
DEFAULT_LINK_SCALE = 0.05
DEFAULT_STATE_ROOT = Path("/run/sdnmpi")
OVS_SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
#: The tap device of the userspace datapath; OVS names it itself, so only one
#: netdev-datapath OVS instance can run per network namespace.
NETDEV_DATAPATH = "ovs-netdev"

ResourceKind = Literal["dir", "daemon", "netns", "etc_netns", "link", "sysctl"]
#: TCP congestion control of the emulated hosts: CUBIC, the Linux default that cluster
#: nodes run (the seeds' CentOS 6 and Debian 8 nodes did).  The VM's own default may
#: differ (BBR on these machines), and it matters: four Open MPI rank pairs exchanging
#: 64 KiB each way at once on disjoint 10 Mbit/s paths took 129-157 ms per exchange
#: under BBR and 81-85 ms under CUBIC (one way alone: 55 ms).  ``None`` keeps the
#: kernel's default.
DEFAULT_TCP_CONGESTION = "cubic"
#: ovs-vswitchd forwards every packet of the fabric in userspace; MPI ranks that poll
#: their progress engines keep both cores busy, so the switch runs at a higher weight
#: (nice -10) to forward packets on time.
OVS_NICE = -10
#: Socket send buffer default (bytes) while the fabric is up.  The userspace datapath
#: sends to every switch port through one packet socket, and frames waiting in the
#: shaped ports' queues count against its send buffer: at the machine's 208 KiB,
#: four MPI rank pairs exchanging at once lost about 0.6 % of their frames inside the
#: switches with no drop counter anywhere (TCP then retransmits and halves its
#: window; the exchanges took up to 1.4 times as long).  ``up`` raises the default
#: before OVS starts and ``down`` restores it.
OVS_WMEM_DEFAULT = 8 * 1024 * 1024
_CONGESTION_RE = re.compile(r"^[a-z0-9_]{1,15}$")


@dataclass(frozen=True)
class Resource:
    """Something ``up`` creates and ``down`` removes.

    ``name`` is a path (``dir``, ``etc_netns``), a pidfile (``daemon``), a
    namespace name (``netns``) or an interface name in the root namespace
    (``link``).
    """

    kind: ResourceKind
    name: str


@dataclass(frozen=True)
class Step:
    """One command (``argv``) or one file to write (``path`` and ``text``)."""

    argv: tuple[str, ...] = ()
    creates: Resource | None = None
    path: str | None = None
    text: str | None = None
    mode: int = 0o644


@dataclass(frozen=True)
class HostIface:
    """One interface of an emulated host, inside its namespace."""

    iface: str
    port_no: int
    mac: str | None
    ip: str | None


@dataclass(frozen=True)
class HostPlan:
    """An emulated host: its namespace, hostname and interfaces."""

    name: str
    netns: str
    ip: str
    mac: str
    ifaces: tuple[HostIface, ...]


@dataclass(frozen=True)
class BridgePlan:
    """The OVS bridge of one switch."""

    switch: str
    bridge: str
    dpid: int

    @property
    def dpid_hex(self) -> str:
        """The datapath id as OVS wants it: 16 hex digits."""
        return f"{self.dpid:016x}"


@dataclass(frozen=True)
class LinkEnd:
    """One end of a veth pair: a host interface or a bridge port."""

    node: str
    port_no: int
    dev: str
    netns: str | None


@dataclass(frozen=True)
class LinkPlan:
    """One link of the model as a veth pair, shaped to ``rate_bps`` each way."""

    index: int
    a: LinkEnd
    b: LinkEnd
    capacity_bps: float
    rate_bps: float
    lag: str | None


@dataclass(frozen=True)
class FabricPlan:
    """Everything ``up`` builds, and the steps that build it."""

    name: str
    tag: str
    state_dir: Path
    network: ipaddress.IPv4Network
    link_scale: float
    controller: str | None
    l2_learning: bool
    tcp_congestion: str | None
    hosts: tuple[HostPlan, ...]
    bridges: tuple[BridgePlan, ...]
    links: tuple[LinkPlan, ...]
    steps: tuple[Step, ...]
    queues: str = "droptail"

    @property
    def run_dir(self) -> Path:
        """The private OVS instance's directory (database, sockets, pidfiles, logs)."""
        return self.state_dir / "ovs"

    @property
    def state_file(self) -> Path:
        """The JSON record of what ``up`` created."""
        return self.state_dir / "state.json"

    @property
    def launcher(self) -> Path:
        """The fake ssh that MPI launchers use to start processes in host namespaces."""
        return self.state_dir / "ssh-launcher"

    def host(self, name: str) -> HostPlan:
        """The emulated host ``name``, or :class:`~sdnmpi.errors.ConfigError`."""
        for h in self.hosts:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in self.hosts)
        raise ConfigError(f"fabric {self.name!r} has no host {name!r} (hosts: {known})")

    def ovs_env(self) -> dict[str, str]:
        """Environment variables that point every ovs-* tool at this instance."""
        run = str(self.run_dir)
        return {"OVS_RUNDIR": run, "OVS_DBDIR": run, "OVS_LOGDIR": run}

    def root_links(self) -> tuple[str, ...]:
        """Interface names this fabric owns in the root namespace."""
        bridges = tuple(b.bridge for b in self.bridges)
        ends = tuple(e.dev for ln in self.links for e in (ln.a, ln.b) if e.netns is None)
        return bridges + ends

    def switch_ports(self) -> dict[str, float]:
        """The switches' ports (their root-namespace veth ends) and their shaped rates."""
        return {e.dev: ln.rate_bps for ln in self.links for e in (ln.a, ln.b) if e.netns is None}

    def switch_marks(self) -> dict[str, int]:
        """Each switch port's ECN threshold (``--queues ecn``): what it drains in a share
        of the timer floor the hosts run with (:func:`switch_mark_bytes`)."""
        floor = hosts_rto_min_s(self.link_scale, rto_min_supported())
        return {dev: switch_mark_bytes(rate, floor) for dev, rate in self.switch_ports().items()}

    def host_ports(self, host: HostPlan) -> dict[str, float]:
        """``host``'s interfaces (in its namespace) and their shaped rates."""
        ends = ((e, ln.rate_bps) for ln in self.links for e in (ln.a, ln.b))
        return {e.dev: rate for e, rate in ends if e.netns == host.netns}


# -- the plan ---------------------------------------------------------------------------


def make_plan(
    topo: Topology,
    name: str = "default",
    *,
    link_scale: float = DEFAULT_LINK_SCALE,
    controller: str | None = None,
    state_root: Path = DEFAULT_STATE_ROOT,
    l2_learning: bool = False,
    tcp_congestion: str | None = DEFAULT_TCP_CONGESTION,
    queues: str = DEFAULT_QUEUES,
) -> FabricPlan:
    """The fabric that emulates ``topo``, and the steps that build it."""
    check_fabric_name(name)
    if queues not in QUEUE_MODES:
        raise ConfigError(f"--queues {queues!r}: one of {', '.join(QUEUE_MODES)}")
    if tcp_congestion is not None and not _CONGESTION_RE.fullmatch(tcp_congestion):
        raise ConfigError(f"--tcp-congestion {tcp_congestion!r} is not an algorithm name")
    if not link_scale > 0:
        raise ConfigError(f"--link-scale must be > 0, got {link_scale}")
    if controller is not None:
        _check_controller(controller)
    if l2_learning and not is_loop_free(topo):
        raise ConfigError(
            f"topology {topo.name!r} has loops between switches: MAC learning (--l2-learning) "
            "would flood them forever; use a controller instead"
        )
    tag = fabric_tag(name)
    network = fabric_network(topo)
    addresses = host_addresses(topo, network)
    bridges = tuple(
        BridgePlan(s.name, bridge_name(tag, s.name, i + 1), s.dpid)
        for i, s in enumerate(topo.switches)
    )
    links = _links(topo, name, tag, link_scale)
    hosts = _hosts(topo, name, addresses, links)
    plan = FabricPlan(
        name,
        tag,
        state_root / name,
        network,
        link_scale,
        controller,
        l2_learning,
        tcp_congestion,
        hosts,
        bridges,
        links,
        (),
        queues,
    )
    _check_names(plan)
    steps = _steps(plan, hosts_file(topo, addresses))
    return FabricPlan(**{**plan.__dict__, "steps": tuple(steps)})


def _check_controller(target: str) -> None:
    if not re.fullmatch(r"(tcp|ssl):[0-9A-Za-z.\-\[\]:]+(:\d+)?|unix:/\S+", target):
        raise ConfigError(
            f"invalid controller {target!r} (want tcp:IP:PORT, ssl:IP:PORT or unix:PATH)"
        )


def _links(topo: Topology, fabric: str, tag: str, scale: float) -> tuple[LinkPlan, ...]:
    sw_index = {s.name: i + 1 for i, s in enumerate(topo.switches)}
    host_ifaces: dict[str, list[int]] = {}
    for ln in topo.links:
        for node, port in ((ln.src, ln.src_port), (ln.dst, ln.dst_port)):
            if topo.is_host(node):
                host_ifaces.setdefault(node, []).append(port)
    iface_of = {
        (h, p): f"eth{k}" for h, ports in host_ifaces.items() for k, p in enumerate(sorted(ports))
    }

    def end(node: str, port: int, link: int, side: str) -> LinkEnd:
        if topo.is_host(node):
            return LinkEnd(node, port, iface_of[node, port], netns_name(fabric, node))
        return LinkEnd(node, port, switch_end_name(tag, sw_index[node], port, link, side), None)

    return tuple(
        LinkPlan(
            i,
            end(ln.src, ln.src_port, i, "a"),
            end(ln.dst, ln.dst_port, i, "b"),
            ln.capacity_bps,
            ln.capacity_bps * scale,
            ln.lag,
        )
        for i, ln in enumerate(topo.links)
    )


def _hosts(
    topo: Topology, fabric: str, addresses: dict[str, str], links: tuple[LinkPlan, ...]
) -> tuple[HostPlan, ...]:
    out = []
    for h in topo.hosts:
        ends = sorted(
            (e for ln in links for e in (ln.a, ln.b) if e.node == h.name), key=lambda e: e.port_no
        )
        ifaces = tuple(
            HostIface(
                e.dev, e.port_no, h.mac if k == 0 else None, addresses[h.name] if k == 0 else None
            )
            for k, e in enumerate(ends)
        )
        out.append(HostPlan(h.name, netns_name(fabric, h.name), addresses[h.name], h.mac, ifaces))
    return tuple(out)


def _check_names(plan: FabricPlan) -> None:
    names = plan.root_links()
    too_long = [n for n in names if len(n) > IFNAMSIZ]
    dups = sorted({n for n in names if names.count(n) > 1})
    if too_long or dups:
        raise TopologyError(
            f"fabric {plan.name!r}: cannot name its interfaces (too long: {too_long}, "
            f"duplicate: {dups})"
        )


def _steps(plan: FabricPlan, hosts_text: str) -> list[Step]:
    steps = _ovs_steps(plan)
    steps += [s for h in plan.hosts for s in _host_steps(plan, h, hosts_text)]
    steps += [s for ln in plan.links for s in _link_steps(plan, ln)]
    if plan.l2_learning:
        steps += [_ofctl(b.bridge, "add-flow", "priority=0,actions=NORMAL") for b in plan.bridges]
    steps.append(Step(path=str(plan.launcher), text=launcher_script(plan), mode=0o755))
    return steps


def _vsctl(plan: FabricPlan, *args: str, creates: Resource | None = None) -> Step:
    db = f"unix:{plan.run_dir / 'db.sock'}"
    return Step(("ovs-vsctl", f"--db={db}", "--timeout=10", *args), creates)


def _ofctl(bridge: str, *args: str) -> Step:
    return Step(("ovs-ofctl", "-O", "OpenFlow13", *args[:1], bridge, *args[1:]))


def _ovs_steps(plan: FabricPlan) -> list[Step]:
    run = plan.run_dir
    db, sock = str(run / "conf.db"), f"punix:{run / 'db.sock'}"
    steps = [
        Step(("mkdir", "-p", str(plan.state_dir)), Resource("dir", str(plan.state_dir))),
        Step(("mkdir", "-p", str(run))),
        Step(("ovsdb-tool", "create", db, str(OVS_SCHEMA))),
        Step(
            _daemon_argv("ovsdb-server", run, db, f"--remote={sock}"),
            Resource("daemon", str(run / "ovsdb-server.pid")),
        ),
        _vsctl(plan, "--no-wait", "init"),
        Step(
            (
                "nice",
                "-n",
                str(OVS_NICE),
                *_daemon_argv("ovs-vswitchd", run, f"unix:{run / 'db.sock'}"),
            ),
            Resource("daemon", str(run / "ovs-vswitchd.pid")),
        ),
    ]
    # The first bridge also creates the userspace datapath's tap device.
    steps.append(Step(creates=Resource("link", NETDEV_DATAPATH)))
    return steps + [_bridge_step(plan, b) for b in plan.bridges]


def _daemon_argv(daemon: str, run: Path, *args: str) -> tuple[str, ...]:
    pidfile, logfile = run / f"{daemon}.pid", run / f"{daemon}.log"
    return (daemon, *args, f"--pidfile={pidfile}", "--detach", f"--log-file={logfile}")


def _bridge_step(plan: FabricPlan, b: BridgePlan) -> Step:
    args = ["add-br", b.bridge, "--", "set", "bridge", b.bridge, "datapath_type=netdev"]
    args += [f"other-config:datapath-id={b.dpid_hex}", "other-config:disable-in-band=true"]
    args += ["protocols=OpenFlow13", "fail-mode=secure"]
    if plan.controller:
        args += ["--", "set-controller", b.bridge, plan.controller]
    return _vsctl(plan, *args, creates=Resource("link", b.bridge))


def _host_steps(plan: FabricPlan, h: HostPlan, hosts_text: str) -> list[Step]:
    etc = f"/etc/netns/{h.netns}"
    sysctl = ("ip", "netns", "exec", h.netns, "sysctl", "-qw")
    wmem = tcp_wmem_max(plan.link_scale)
    return [
        Step(("ip", "netns", "add", h.netns), Resource("netns", h.netns)),
        Step(("mkdir", "-p", etc), Resource("etc_netns", etc)),
        Step(path=f"{etc}/hosts", text=hosts_text),
        Step(path=f"{etc}/hostname", text=f"{h.name}\n"),
        Step((*sysctl, "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")),
        Step((*sysctl, f"net.ipv4.tcp_wmem=4096 16384 {wmem}")),
        Step((*sysctl, f"net.ipv4.tcp_notsent_lowat={wmem}")),
        *_congestion_steps(plan, sysctl),
        *_ecn_steps(plan, sysctl),
        Step(("ip", "-n", h.netns, "link", "set", "lo", "up")),
    ]


def _ecn_steps(plan: FabricPlan, sysctl: tuple[str, ...]) -> list[Step]:
    """With ``--queues ecn``: the host asks for ECN on its connections, and its
    retransmission timer's floor is scaled like the links (:mod:`sdnmpi.emu.ecn`;
    kernels before 6.11 have no per-namespace floor and keep 200 ms)."""
    if plan.queues != "ecn":
        return []
    steps = [Step((*sysctl, "net.ipv4.tcp_ecn=1"))]
    if rto_min_supported():
        rto_us = round(tcp_rto_min_s(plan.link_scale) * 1e6)
        steps.append(Step((*sysctl, f"net.ipv4.tcp_rto_min_us={rto_us}")))
    return steps


def _congestion_steps(plan: FabricPlan, sysctl: tuple[str, ...]) -> list[Step]:
    """The host's TCP congestion control (a new namespace starts with the machine's)."""
    if plan.tcp_congestion is None:
        return []
    return [Step((*sysctl, f"net.ipv4.tcp_congestion_control={plan.tcp_congestion}"))]


def _link_steps(plan: FabricPlan, ln: LinkPlan) -> list[Step]:
    a, b = ln.a, ln.b
    if a.netns is not None and b.netns is None:
        a, b = b, a  # create from the root-namespace end
    create: tuple[str, ...] = ("ip", "link", "add", a.dev, "type", "veth", "peer", "name", b.dev)
    if a.netns is not None:
        raise TopologyError(f"link {ln.index}: host-to-host links are not supported by emu")
    if b.netns is not None:
        create += ("netns", b.netns)
    steps = [Step(create, Resource("link", a.dev))]
    for end in (a, b):
        steps += _end_steps(plan, end, ln.rate_bps)
    return steps


def _end_steps(plan: FabricPlan, end: LinkEnd, rate_bps: float) -> list[Step]:
    ip = ("ip", "-n", end.netns) if end.netns else ("ip",)
    nsexec = ("ip", "netns", "exec", end.netns) if end.netns else ()
    steps: list[Step] = []
    if end.netns is None:
        steps.append(Step(("sysctl", "-qw", f"net.ipv6.conf.{end.dev}.disable_ipv6=1")))
    else:
        iface = next(i for i in plan.host(end.node).ifaces if i.iface == end.dev)
        if iface.mac:
            steps.append(Step((*ip, "link", "set", end.dev, "address", iface.mac)))
        if iface.ip:
            cidr = f"{iface.ip}/{plan.network.prefixlen}"
            steps.append(Step((*ip, "addr", "add", cidr, "dev", end.dev)))
    steps.append(Step((*nsexec, "ethtool", "-K", end.dev, "tx", "off")))
    steps.append(Step((*ip, "link", "set", end.dev, "up")))
    if end.netns is None:
        steps.append(_port_step(plan, end))
    steps += [Step(argv) for argv in shaping_argvs(end.dev, rate_bps, end.netns)]
    return steps


def _port_step(plan: FabricPlan, end: LinkEnd) -> Step:
    bridge = next(b.bridge for b in plan.bridges if b.switch == end.node)
    port = ("add-port", bridge, end.dev, "--", "set", "interface", end.dev)
    request = f"ofport_request={end.port_no}"
    # QoS type linux-noop: OVS leaves our HTB qdisc alone (by default it replaces it).
    noop = ("--", "set", "port", end.dev, "qos=@q", "--", "--id=@q", "create", "qos")
    return _vsctl(plan, *port, request, *noop, "type=linux-noop")


def launcher_script(plan: FabricPlan) -> str:
    """A fake ``ssh`` for MPI launchers: runs the command in the host's namespace.

    It drops ssh options, takes the host name (or IP), and runs the rest as a
    shell command line (as ssh would) under ``ip netns exec NS unshare --uts``
    with the hostname set.
    """
    cases = "\n".join(f"  {h.name}|{h.ip}) ns={h.netns}; host={h.name} ;;" for h in plan.hosts)
    return f"""#!/bin/sh
# sdnmpi emu: fake ssh into the hosts of fabric {plan.name}
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i|-F|-E|-b|-c|-m|-S|-J|-W|-L|-R|-D) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
case "$1" in
{cases}
  *) echo "sdnmpi-ssh: fabric {plan.name} has no host '$1'" >&2; exit 255 ;;
esac
shift
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0"; exec sh -c "$*"' "$host" "$@"
"""
