"""Run a :class:`~sdnmpi.emu.plan.FabricPlan`: the thin, side-effecting half of ``sdnmpi emu``.

``up`` records every resource in the state file before the step that creates it
and rolls itself back when a step fails; ``down`` removes what the state file
lists, in a safe order, and tolerates what is already gone.  Daemons are stopped
by the PID in their pidfile, and only after checking that the process's command
line names that pidfile (never by process name).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from sdnmpi.core.topology import Topology
from sdnmpi.emu import ecn
from sdnmpi.emu.plan import (
    DEFAULT_LINK_SCALE,
    DEFAULT_STATE_ROOT,
    DEFAULT_TCP_CONGESTION,
    NETDEV_DATAPATH,
    OVS_WMEM_DEFAULT,
    FabricPlan,
    Resource,
    Step,
    make_plan,
)
from sdnmpi.emu.queues import DEFAULT_QUEUES
from sdnmpi.emu.state import FabricState, load_state, save_state
from sdnmpi.errors import ConfigError, SdnMpiError

log = logging.getLogger(__name__)

REQUIRED_TOOLS = ("ip", "tc", "ethtool", "unshare", "ovsdb-tool", "ovsdb-server", "ovs-vswitchd")
APT_HINT = "apt-get install -y openvswitch-switch ethtool iproute2"
_STOP_TIMEOUT_S = 3.0


class EmuError(SdnMpiError):
    """A command that builds or tears down the emulated fabric failed (runtime, exit 1)."""


class FabricStateError(ConfigError):
    """The fabric is in the wrong state for the request (already up, not up): exit 2."""


# -- commands ---------------------------------------------------------------------------


def run_cmd(argv: tuple[str, ...], env: dict[str, str] | None = None) -> str:
    """Run one command, return its stdout, or raise :class:`EmuError` with its stderr."""
    log.debug("run %s", " ".join(argv))
    try:
        proc = subprocess.run(
            argv,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmuError(f"`{' '.join(argv)}` failed: {exc}") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise EmuError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {detail}")
    return proc.stdout


def _run_step(step: Step, env: dict[str, str]) -> None:
    if step.path is not None:
        path = Path(step.path)
        path.write_text(step.text or "")
        path.chmod(step.mode)
    elif step.argv:
        run_cmd(step.argv, env)


# -- up ---------------------------------------------------------------------------------


def up(
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
    """Build the fabric; on any failure remove what was built and re-raise."""
    plan = make_plan(
        topo,
        name,
        link_scale=link_scale,
        controller=controller,
        state_root=state_root,
        l2_learning=l2_learning,
        tcp_congestion=tcp_congestion,
        queues=queues,
    )
    _preflight(plan)
    state = FabricState(
        name,
        state_root,
        topo,
        link_scale,
        controller,
        l2_learning,
        tcp_congestion=tcp_congestion,
        queues=queues,
    )
    state = state.with_resource(Resource("dir", str(plan.state_dir)))
    save_state(state)
    log.info("fabric %s: building %d steps in %s", name, len(plan.steps), plan.state_dir)
    try:
        state = _allow_congestion(plan, state)
        state = _raise_wmem_default(state)
        for step in plan.steps:
            if step.creates is not None:
                state = state.with_resource(step.creates)
                save_state(state)
            _run_step(step, plan.ovs_env())
        if plan.queues == "ecn":  # the ports exist now; deleting them removes the marker
            ecn.attach(plan.switch_ports(), plan.switch_marks())
            for h in plan.hosts:  # a host's own backlog is kept short (20 frames)
                ecn.attach(plan.host_ports(h), netns=h.netns)
    except BaseException:
        log.error("fabric %s: up failed, rolling back", name)
        _teardown(state)
        raise
    save_state(replace(state, complete=True))
    log.info("fabric %s is up", name)
    return plan


#: Where sysctls live; machine-wide ones ``up`` may change (and ``down`` restores).
PROC_SYS = Path("/proc/sys")
ALLOWED_CONGESTION = "net.ipv4.tcp_allowed_congestion_control"
WMEM_DEFAULT = "net.core.wmem_default"
_RESTORABLE = (ALLOWED_CONGESTION, WMEM_DEFAULT)


def _sysctl_path(key: str) -> Path:
    return PROC_SYS / key.replace(".", "/")


def _change_sysctl(state: FabricState, key: str, value: str) -> FabricState:
    """Set a machine-wide sysctl, recording its previous value first (``down`` restores)."""
    path = _sysctl_path(key)
    old = path.read_text().strip()
    if old.split() == value.split():
        return state
    state = state.with_resource(Resource("sysctl", f"{key}={old}"))
    save_state(state)
    path.write_text(value + "\n")
    return state


def _raise_wmem_default(state: FabricState) -> FabricState:
    """OVS's packet socket gets a send buffer that the shaped queues cannot exhaust."""
    old = int(_sysctl_path(WMEM_DEFAULT).read_text())
    if old >= OVS_WMEM_DEFAULT:
        return state
    return _change_sysctl(state, WMEM_DEFAULT, str(OVS_WMEM_DEFAULT))


def _allow_congestion(plan: FabricPlan, state: FabricState) -> FabricState:
    """Let the host namespaces pick ``plan.tcp_congestion``.

    Outside the initial namespace Linux accepts only the algorithms listed in
    the machine-wide ``tcp_allowed_congestion_control``; when ours is missing it
    is added, and the previous list is recorded (as a ``sysctl`` resource,
    before the change) so that ``down`` restores it.
    """
    cc = plan.tcp_congestion
    if cc is None:
        return state
    available = _sysctl_path("net.ipv4.tcp_available_congestion_control").read_text().split()
    if cc not in available:
        raise ConfigError(
            f"TCP congestion control {cc!r} is not in this kernel (available: "
            f"{', '.join(available)}); pick one with --tcp-congestion"
        )
    allowed = _sysctl_path(ALLOWED_CONGESTION).read_text().split()
    if cc in allowed:
        return state
    return _change_sysctl(state, ALLOWED_CONGESTION, " ".join([*allowed, cc]))


def _restore_sysctl(res: Resource) -> None:
    """Put back a machine-wide setting ``up`` changed (``key=previous value``)."""
    key, _, value = res.name.partition("=")
    if key not in _RESTORABLE:
        raise EmuError(f"unknown sysctl resource {res.name!r}")
    _sysctl_path(key).write_text(value + "\n")


def _preflight(plan: FabricPlan) -> None:
    if load_state(plan.state_dir.parent, plan.name) is not None or plan.state_dir.exists():
        raise FabricStateError(
            f"fabric {plan.name!r} is already up (state in {plan.state_dir}); "
            f"run `sdnmpi emu down --name {plan.name}` first"
        )
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if missing:
        raise ConfigError(f"missing tools {missing}: {APT_HINT}")
    if os.geteuid() != 0:
        raise ConfigError("sdnmpi emu up needs root (network namespaces, veths, OVS)")
    if _link_exists(NETDEV_DATAPATH):
        raise FabricStateError(netdev_in_use(plan.state_dir.parent))
    clashes = [n for n in plan.root_links() if _link_exists(n)]
    clashes += [h.netns for h in plan.hosts if _netns_exists(h.netns)]
    clashes += [f"/etc/netns/{h.netns}" for h in plan.hosts if Path("/etc/netns", h.netns).exists()]
    if clashes:
        raise FabricStateError(f"fabric {plan.name!r}: these already exist: {clashes}")


def switch_daemon_runs(fabric_dir: Path) -> bool:
    """Whether the switch daemon of the fabric recorded in ``fabric_dir`` runs (a run
    killed before its teardown leaves the fabric's other resources without it)."""
    return daemon_pid(fabric_dir / "ovs" / "ovs-vswitchd.pid") is not None


def netdev_in_use(state_root: Path) -> str:
    """Why a new fabric cannot start while ``ovs-netdev`` exists, naming the fabrics
    recorded under ``state_root`` and whether their switch daemon still runs (a run
    killed before its teardown leaves the device and its fabric behind)."""
    why = (
        f"a userspace Open vSwitch datapath ({NETDEV_DATAPATH}) already exists in this "
        "network namespace: only one can run at a time"
    )
    found = []
    for state in sorted(state_root.glob("*/state.json")):
        name = state.parent.name
        if switch_daemon_runs(state.parent):
            found.append(f"{name} (running)")
        else:
            found.append(f"{name} (its switch daemon is gone: `sdnmpi emu down --name {name}`)")
    if not found:
        return f"{why}; no fabric is recorded in {state_root}: another OVS instance owns it"
    return f"{why}; fabrics recorded in {state_root}: {', '.join(found)}"


def _link_exists(dev: str) -> bool:
    return Path("/sys/class/net", dev).exists()


def _netns_exists(netns: str) -> bool:
    return Path("/run/netns", netns).exists()


# -- down -------------------------------------------------------------------------------


def down(name: str = "default", *, state_root: Path = DEFAULT_STATE_ROOT) -> bool:
    """Remove fabric ``name``; ``False`` when it was not up (idempotent)."""
    state = load_state(state_root, name)
    if state is None:
        log.info("fabric %s is not up (no state in %s)", name, state_root / name)
        return False
    _teardown(state)
    log.info("fabric %s is down", name)
    return True


_ORDER = ("daemon", "netns", "link", "etc_netns", "sysctl", "dir")


def _teardown(state: FabricState) -> None:
    """Remove every resource in ``state``; keep the state file listing any that failed."""
    failed: list[Resource] = []
    errors: list[str] = []
    for kind in _ORDER:
        for res in reversed(state.resources):
            if res.kind != kind:
                continue
            if kind == "dir" and failed:
                failed.append(res)
                continue
            try:
                _remove(res, state)
            except (EmuError, OSError) as exc:
                failed.append(res)
                errors.append(str(exc))
    if failed:
        save_state(replace(state, resources=tuple(failed), complete=False))
        raise EmuError(f"fabric {state.name!r}: could not remove everything: {'; '.join(errors)}")


def _remove(res: Resource, state: FabricState) -> None:
    if res.kind == "sysctl":
        _restore_sysctl(res)
    elif res.kind == "daemon":
        stop_daemon(Path(res.name))
    elif res.kind == "netns":
        if _netns_exists(res.name):
            stop_netns_processes(res.name)
            run_cmd(("ip", "netns", "delete", res.name))
    elif res.kind == "link":
        if _link_exists(res.name):
            try:
                run_cmd(("ip", "link", "delete", res.name))
            except EmuError:
                # a veth goes with its peer, and a deleted namespace takes its ends
                # with it a moment after `ip netns delete` returns: gone is removed
                if _link_exists(res.name):
                    raise
    elif res.kind == "etc_netns":
        _rmtree_under(Path(res.name), Path("/etc/netns"))
    elif res.kind == "dir":
        _rmtree_under(Path(res.name), state.state_root)


def _rmtree_under(path: Path, parent: Path) -> None:
    if path.parent != parent:
        raise EmuError(f"refusing to remove {path}: not directly under {parent}")
    if path.exists():
        shutil.rmtree(path)


def daemon_pid(pidfile: Path) -> int | None:
    """The PID in ``pidfile`` if that process is alive and was started with that pidfile."""
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if _is_zombie(pid):
        return None
    if f"--pidfile={pidfile}".encode() not in cmdline:
        log.warning("pidfile %s names PID %d, which is another process: ignored", pidfile, pid)
        return None
    return pid


def stop_child(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> int:
    """SIGTERM our child ``proc`` by PID, SIGKILL it if it lingers; its exit code."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=timeout_s)
    return proc.wait(timeout=timeout_s)


def stop_daemon(pidfile: Path) -> None:
    """SIGTERM the daemon of ``pidfile``, SIGKILL it if it lingers."""
    pid = daemon_pid(pidfile)
    if pid is None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        log.debug("signal %s to %d (%s)", sig.name, pid, pidfile)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
                return
            time.sleep(0.02)
    raise EmuError(f"daemon {pid} ({pidfile}) survived SIGKILL")


def stop_netns_processes(netns: str) -> None:
    """Stop the processes left in one of our namespaces (``ip netns pids``): TERM, then KILL.

    Without this a namespace outlives ``ip netns delete`` (with its veths), held
    by a stray rank or server.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [int(p) for p in run_cmd(("ip", "netns", "pids", netns)).split()]
        pids = [p for p in pids if p != os.getpid() and not _is_zombie(p)]
        if not pids:
            return
        log.info("namespace %s: %s to PIDs %s", netns, sig.name, pids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while time.monotonic() < deadline and any(
            Path(f"/proc/{p}").exists() and not _is_zombie(p) for p in pids
        ):
            time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


# -- inspection and use -------------------------------------------------------------------


def require_state(name: str, state_root: Path) -> FabricState:
    """The state of a fabric that is up, or :class:`FabricStateError`."""
    state = load_state(state_root, name)
    if state is None:
        raise FabricStateError(f"fabric {name!r} is not up (no state in {state_root / name})")
    return state


def status(name: str = "default", *, state_root: Path = DEFAULT_STATE_ROOT) -> dict[str, Any]:
    """What exists of the fabric: namespaces, daemons, bridges, controller connections."""
    state = require_state(name, state_root)
    plan = state.plan()
    daemons = [
        {"pidfile": r.name, "pid": daemon_pid(Path(r.name))}
        for r in state.resources
        if r.kind == "daemon"
    ]
    running = all(d["pid"] is not None for d in daemons) and bool(daemons)
    return {
        "schema": "sdnmpi.emu-status/1",
        "name": plan.name,
        "complete": state.complete,
        "state_dir": str(plan.state_dir),
        "run_dir": str(plan.run_dir),
        "topology": state.topology.name,
        "network": str(plan.network),
        "link_scale": plan.link_scale,
        "queues": plan.queues,
        "tcp_congestion": plan.tcp_congestion,
        "controller": plan.controller,
        "daemons": daemons,
        "hosts": [_host_status(h.name, h.netns, h.ip, h.mac) for h in plan.hosts],
        "bridges": [
            {
                "switch": b.switch,
                "bridge": b.bridge,
                "dpid": b.dpid_hex,
                "present": _link_exists(b.bridge),
                "controller_connected": _connected(plan, b.bridge) if running else None,
            }
            for b in plan.bridges
        ],
        "links": [
            {
                "a": f"{ln.a.node}:{ln.a.port_no}",
                "b": f"{ln.b.node}:{ln.b.port_no}",
                "a_dev": ln.a.dev,
                "b_dev": ln.b.dev,
                "rate_bps": ln.rate_bps,
                "lag": ln.lag,
            }
            for ln in plan.links
        ],
    }


_PORT_RE = re.compile(r"port\s+(\d+): rx pkts=(\d+), bytes=(\d+).*?\n\s*tx pkts=(\d+), bytes=(\d+)")


def parse_dump_ports(text: str) -> dict[int, dict[str, int]]:
    r"""Numbered ports of an ``ovs-ofctl dump-ports`` reply: rx/tx packets and bytes.

    ``LOCAL`` and ports whose counters OVS prints as ``?`` are left out.

    >>> reply = (
    ...     "OFPST_PORT reply (OF1.3) (xid=0x2): 1 ports\n"
    ...     "  port  2: rx pkts=5, bytes=300, drop=0, errs=0, frame=0, over=0, crc=0\n"
    ...     "           tx pkts=7, bytes=420, drop=0, errs=0, coll=0\n"
    ... )
    >>> parse_dump_ports(reply)
    {2: {'rx_packets': 5, 'rx_bytes': 300, 'tx_packets': 7, 'tx_bytes': 420}}
    """
    return {
        int(port): {
            "rx_packets": int(rxp),
            "rx_bytes": int(rxb),
            "tx_packets": int(txp),
            "tx_bytes": int(txb),
        }
        for port, rxp, rxb, txp, txb in _PORT_RE.findall(text)
    }


def port_counters(
    name: str = "default", *, state_root: Path = DEFAULT_STATE_ROOT
) -> dict[str, dict[int, dict[str, int]]]:
    """Switch name -> port number -> counters, read from the fabric's bridges."""
    plan = require_state(name, state_root).plan()
    return {
        b.switch: parse_dump_ports(
            run_cmd(("ovs-ofctl", "-O", "OpenFlow13", "dump-ports", b.bridge), plan.ovs_env())
        )
        for b in plan.bridges
    }


def _host_status(name: str, netns: str, ip: str, mac: str) -> dict[str, Any]:
    return {"name": name, "netns": netns, "ip": ip, "mac": mac, "present": _netns_exists(netns)}


def _connected(plan: FabricPlan, bridge: str) -> bool | None:
    if plan.controller is None:
        return None
    db = f"--db=unix:{plan.run_dir / 'db.sock'}"
    try:
        out = run_cmd(("ovs-vsctl", db, "--timeout=5", "get", "controller", bridge, "is_connected"))
    except EmuError:
        return False
    return out.strip() == "true"


def host_argv(plan: FabricPlan, host: str, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` in ``host``'s namespace with its hostname."""
    h = plan.host(host)
    shell = 'hostname "$0"; exec "$@"'
    return ["ip", "netns", "exec", h.netns, "unshare", "--uts", "sh", "-c", shell, h.name, *argv]


def run_foreground(
    argv: list[str], env: dict[str, str] | None = None, timeout_s: float | None = None
) -> int:
    """Run a command with the caller's stdin/stdout/stderr; return its exit code.

    The command gets its own process group, so that on timeout or interrupt the
    whole tree (an MPI launcher, its fake-ssh children, the ranks) is stopped:
    SIGTERM, then SIGKILL.  A timeout gives exit code 124, like ``timeout(1)``.
    """
    log.debug("exec %s", " ".join(argv))
    try:
        proc = subprocess.Popen(argv, env={**os.environ, **(env or {})}, start_new_session=True)
    except OSError as exc:
        raise EmuError(f"`{argv[0]}` failed: {exc}") from None
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log.error("`%s` still runs after %s s: stopped", argv[0], timeout_s)
        _stop_group(proc)
        return 124
    except BaseException:
        _stop_group(proc)
        raise


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the process group of ``proc`` (started with its own session): TERM, then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_STOP_TIMEOUT_S)
        time.sleep(0.2)  # let the other members of the group exit too


def exec_in_host(
    host: str, argv: list[str], name: str = "default", *, state_root: Path = DEFAULT_STATE_ROOT
) -> int:
    """Run ``argv`` in an emulated host; its exit code."""
    plan = require_state(name, state_root).plan()
    plan.host(host)
    if not argv:
        raise ConfigError("no command given (use: sdnmpi emu exec HOST -- CMD ...)")
    return run_foreground(host_argv(plan, host, argv), plan.ovs_env())


def make_plan_for(name: str, state_root: Path) -> FabricPlan:
    """The plan of a fabric that is up."""
    return require_state(name, state_root).plan()
