"""A control-plane-only fabric for controller scale tests: OVS bridges joined by patch ports.

The emulator (:mod:`sdnmpi.emu.runner`) gives every host a network namespace and
every link a veth pair; that is what a data-plane experiment needs, and too much for
hundreds of switches on two CPUs.  A control-plane test needs only the switches'
OpenFlow side: here every switch of a model topology is a bridge of one private Open
vSwitch instance, every switch-to-switch link a pair of patch ports (no kernel device,
LLDP crosses them like a cable) with the model's port numbers, every bridge
``fail-mode=secure`` with the controller target set.  Hosts get no device at all: the
controller routes the model's hosts before it sees them (``expect_model_hosts``, see
:mod:`sdnmpi.controller.inventory`), so default and job routes to them are installed
as on the full emulator, and the rules that deliver to a host name a port that does not
exist (Open vSwitch accepts them).

The instance runs in its own network namespace (``ip netns exec``): the userspace
datapath's tap device (``ovs-netdev``, one per namespace) and the bridges' local ports
are created there, so this fabric neither meets an emulated fabric that is up in the
root namespace nor leaves devices behind: deleting the namespace removes them.  The
controller must listen inside that namespace (:meth:`ScaleFabric.netns_argv`).

:func:`scale_fabric` is a context manager that removes exactly what it created (its two
daemons by PID, checked against their pidfiles; its namespace; its directory), also
when it fails half-way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sdnmpi.core.topology import Topology
from sdnmpi.emu.plan import NETDEV_DATAPATH, OVS_SCHEMA
from sdnmpi.emu.runner import (
    EmuError,
    _netns_exists,
    daemon_pid,
    run_cmd,
    stop_child,
    stop_daemon,
)
from sdnmpi.errors import ConfigError

log = logging.getLogger(__name__)

#: Bridges (or their patch ports) per ``ovs-vsctl`` transaction: 40 ran into the 60 s
#: command timeout on this loaded machine at fat_tree(16).
BRIDGES_PER_CALL = 10


@dataclass(frozen=True)
class BridgeSpec:
    """One switch of the model as a bridge."""

    switch: str
    bridge: str
    dpid: int


@dataclass(frozen=True)
class PatchSpec:
    """One switch-to-switch link as two patch ports (``a`` on ``a_bridge``)."""

    a_bridge: str
    a: str
    a_port: int
    b_bridge: str
    b: str
    b_port: int


@dataclass
class ScaleFabric:
    """A running private OVS instance with one bridge per model switch."""

    model: Topology
    name: str
    workdir: Path
    bridges: tuple[BridgeSpec, ...]
    patches: tuple[PatchSpec, ...]
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def netns(self) -> str:
        return f"sdnmpi-scale-{self.name}"

    @property
    def run_dir(self) -> Path:
        return self.workdir / "ovs"

    @property
    def db(self) -> str:
        return f"unix:{self.run_dir / 'db.sock'}"

    def ovs_env(self) -> dict[str, str]:
        """Environment that points ``ovs-ofctl``/``ovs-appctl`` at this instance."""
        run = str(self.run_dir)
        return {"OVS_RUNDIR": run, "OVS_DBDIR": run, "OVS_LOGDIR": run}

    def netns_argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the fabric's namespace (where 127.0.0.1 is its loopback)."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def vsctl(self, *args: str) -> str:
        return run_cmd(("ovs-vsctl", f"--db={self.db}", "--timeout=60", *args))

    def ofctl(self, *args: str) -> str:
        return run_cmd(("ovs-ofctl", "-O", "OpenFlow13", *args), self.ovs_env())

    def bridge(self, switch: str) -> str:
        return next(b.bridge for b in self.bridges if b.switch == switch)

    def flow_count(self, bridge: str, cookie: str = "0x5d00000000000000/0xff00000000000000") -> int:
        """How many rules of ``bridge`` carry the cookie (default: every sdnmpi rule)."""
        out = self.ofctl("dump-aggregate", bridge, f"cookie={cookie}")
        for word in out.replace(",", " ").split():
            if word.startswith("flow_count="):
                return int(word.split("=", 1)[1])
        raise EmuError(f"dump-aggregate {bridge}: no flow_count in {out!r}")

    def daemon_stats(self) -> dict[str, dict[str, float]]:
        """RSS (MiB) and CPU seconds of the fabric's two daemons."""
        return {name: process_stats(pid) for name, pid in self.pids.items()}


def plan_scale(model: Topology, name: str) -> tuple[tuple[BridgeSpec, ...], tuple[PatchSpec, ...]]:
    """Bridges and patch-port pairs for ``model`` (pure; names fit in 15 characters)."""
    if not name.isalnum() or len(name) > 12:
        raise ConfigError(f"scale fabric name {name!r}: 1 to 12 letters or digits")
    bridges = tuple(BridgeSpec(s.name, f"b{i}", s.dpid) for i, s in enumerate(model.switches))
    by_switch = {b.switch: b.bridge for b in bridges}
    patches = []
    for i, ln in enumerate(model.links):
        if model.is_host(ln.src) or model.is_host(ln.dst):
            continue
        patches.append(
            PatchSpec(
                by_switch[ln.src], f"p{i}a", ln.src_port, by_switch[ln.dst], f"p{i}b", ln.dst_port
            )
        )
    return bridges, tuple(patches)


def _bridge_args(b: BridgeSpec) -> list[str]:
    return [
        "--", "add-br", b.bridge,
        "--", "set", "bridge", b.bridge, "datapath_type=netdev",
        f"other-config:datapath-id={b.dpid:016x}", "other-config:disable-in-band=true",
        "protocols=OpenFlow13", "fail-mode=secure",
    ]  # fmt: skip


def _patch_args(bridge: str, port: str, peer: str, port_no: int) -> list[str]:
    return [
        "--", "add-port", bridge, port,
        "--", "set", "interface", port, "type=patch", f"options:peer={peer}",
        f"ofport_request={port_no}",
    ]  # fmt: skip


@contextlib.contextmanager
def scale_fabric(
    model: Topology, name: str, workdir: Path, controller: str = ""
) -> Iterator[ScaleFabric]:
    """``model``'s switches as bridges of a private OVS connected to ``controller``
    (e.g. ``tcp:127.0.0.1:6653``, inside the fabric's namespace); removed on exit.
    Without ``controller`` only the namespace and the daemons are started: call
    :func:`add_bridges` (after starting the controller, so that no switch waits out
    its reconnection back-off)."""
    bridges, patches = plan_scale(model, name)
    fab = ScaleFabric(model, name, workdir, bridges, patches)
    if _netns_exists(fab.netns):
        raise ConfigError(f"namespace {fab.netns} exists: another scale fabric {name!r} is up")
    if fab.run_dir.exists():
        raise ConfigError(f"{fab.run_dir} exists: remove it or pick another directory")
    try:
        _start_ovs(fab)
        if controller:
            add_bridges(fab, controller)
        yield fab
    finally:
        teardown(fab)


def _start_ovs(fab: ScaleFabric) -> None:
    run = fab.run_dir
    run.mkdir(parents=True)
    run_cmd(("ip", "netns", "add", fab.netns))
    run_cmd(("ip", "-n", fab.netns, "link", "set", "lo", "up"))
    run_cmd(("ovsdb-tool", "create", str(run / "conf.db"), str(OVS_SCHEMA)))
    for daemon, args in (
        ("ovsdb-server", (str(run / "conf.db"), f"--remote=punix:{run / 'db.sock'}")),
        ("ovs-vswitchd", (fab.db,)),
    ):
        pidfile, logfile = run / f"{daemon}.pid", run / f"{daemon}.log"
        argv = (daemon, *args, f"--pidfile={pidfile}", "--detach", f"--log-file={logfile}")
        run_cmd(tuple(fab.netns_argv(argv)), fab.ovs_env())
        pid = daemon_pid(pidfile)
        if pid is None:
            raise EmuError(f"{daemon} did not start (see {logfile})")
        fab.pids[daemon] = pid
        if daemon == "ovsdb-server":
            fab.vsctl("--no-wait", "init")


def add_bridges(fab: ScaleFabric, controller: str) -> None:
    """Create every bridge and every patch link, then point every bridge at
    ``controller`` in one transaction (the switches connect together, as a running
    fabric meets a controller that starts)."""
    by_bridge: dict[str, list[str]] = {b.bridge: [] for b in fab.bridges}
    for p in fab.patches:
        by_bridge[p.a_bridge] += _patch_args(p.a_bridge, p.a, p.b, p.a_port)
        by_bridge[p.b_bridge] += _patch_args(p.b_bridge, p.b, p.a, p.b_port)
    for i in range(0, len(fab.bridges), BRIDGES_PER_CALL):
        args: list[str] = []
        for b in fab.bridges[i : i + BRIDGES_PER_CALL]:
            args += _bridge_args(b)
        fab.vsctl(*args[1:])
    # Patch ports after every bridge exists (a peer on a missing bridge is an error
    # until it appears); one transaction per batch of bridges.
    names = list(by_bridge)
    for i in range(0, len(names), BRIDGES_PER_CALL):
        args = [a for n in names[i : i + BRIDGES_PER_CALL] for a in by_bridge[n]]
        if args:
            fab.vsctl(*args[1:])
    targets = [a for b in fab.bridges for a in ("--", "set-controller", b.bridge, controller)]
    fab.vsctl(*targets[1:])
    log.info(
        "scale fabric %s: %d bridges, %d patch links in namespace %s",
        fab.name, len(fab.bridges), len(fab.patches), fab.netns,
    )  # fmt: skip


def teardown(fab: ScaleFabric) -> None:
    """Stop the fabric's daemons (by pidfile-checked PID), delete its namespace (and
    with it ``ovs-netdev`` and the bridges' tap devices) and its directory."""
    errors = []
    for daemon in ("ovs-vswitchd", "ovsdb-server"):
        try:
            stop_daemon(fab.run_dir / f"{daemon}.pid")
        except EmuError as exc:
            errors.append(str(exc))
    if _netns_exists(fab.netns):
        try:
            run_cmd(("ip", "netns", "delete", fab.netns))
        except EmuError as exc:
            errors.append(str(exc))
    if fab.run_dir.exists():
        shutil.rmtree(fab.run_dir)
    if errors:
        raise EmuError(f"scale fabric {fab.name}: " + "; ".join(errors))
    log.info("scale fabric %s removed (%s gone with %s)", fab.name, NETDEV_DATAPATH, fab.netns)


def process_stats(pid: int) -> dict[str, float]:
    """``rss_mib``, ``peak_rss_mib`` and ``cpu_s`` (user + system) of process ``pid``."""
    out = {"rss_mib": 0.0, "peak_rss_mib": 0.0, "cpu_s": 0.0}
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return out
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            mib = int(value.split()[0]) / 1024
            out["rss_mib" if key == "VmRSS" else "peak_rss_mib"] = mib
    tick = os.sysconf("SC_CLK_TCK")
    out["cpu_s"] = (int(stat[11]) + int(stat[12])) / tick
    return out


class ControllerProcess:
    """``sdnmpi controller run`` inside a scale fabric's namespace, stopped by its PID.

    ``ip netns exec`` execs the controller, so the child's PID is the controller's."""

    def __init__(
        self, fab: ScaleFabric, port: int, topology: Path, workdir: Path, *extra: str
    ) -> None:
        self.fab, self.port, self.topology, self.workdir = fab, port, topology, workdir
        self.extra = extra
        self.api_path = workdir / "api.sock"
        self.state_path = workdir / "jobs.json"
        self.log_path = workdir / "controller-0.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    @property
    def target(self) -> str:
        return f"tcp:127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> None:
        if self.proc is not None:
            raise RuntimeError("controller already running")
        self.log_path = self.workdir / f"controller-{self.runs}.log"
        self.runs += 1
        argv = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()"]
        argv += ["controller", "run", "--port", str(self.port), "--topology", str(self.topology)]
        argv += ["--api-socket", str(self.api_path), "--state-file", str(self.state_path)]
        argv += list(self.extra)
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                self.fab.netns_argv(argv), stdout=out, stderr=subprocess.STDOUT
            )
        self.wait_log(re.compile("listening on"), timeout_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_log(self, pattern: re.Pattern[str], timeout_s: float) -> re.Match[str]:
        """The first match of ``pattern`` in the current run's log, polled."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = pattern.search(self.log())
            if found is not None:
                return found
            if self.proc is not None and self.proc.poll() is not None:
                raise EmuError(f"controller exited ({self.proc.returncode}):\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise EmuError(f"controller: no {pattern.pattern!r} in {timeout_s:.0f} s")
            time.sleep(0.05)

    def stats(self) -> dict[str, float]:
        return process_stats(self.proc.pid) if self.proc is not None else {}

    def stop(self) -> None:
        """SIGTERM, then SIGKILL, to our child by PID."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_child(proc)
