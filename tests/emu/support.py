"""Helpers for the emulated-fabric integration tests: run the CLI, check nothing is left."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import runner
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT, NETDEV_DATAPATH, FabricPlan, make_plan

TOOLS = ("ovs-vswitchd", "ovsdb-server", "ovs-vsctl", "ovs-ofctl", "ethtool", "ip", "tc")
_counter = itertools.count()


def require_root_and_tools() -> None:
    """Skip without root; fail (CI must have them) when the tools are missing."""
    if os.geteuid() != 0:
        pytest.skip("emulated fabric needs root")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"missing {missing}: apt-get install -y openvswitch-switch ethtool iproute2")
    if Path("/sys/class/net", NETDEV_DATAPATH).exists():
        pytest.fail(runner.netdev_in_use(DEFAULT_STATE_ROOT))


def unique_name(prefix: str) -> str:
    """A fabric name no other test (or concurrent run) uses."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}"


def sdnmpi(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the ``sdnmpi`` command line in a subprocess."""
    argv = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def ofctl(plan: FabricPlan, *args: str) -> str:
    """``ovs-ofctl -O OpenFlow13`` against the fabric's private OVS."""
    env = {**os.environ, **plan.ovs_env()}
    argv = ["ovs-ofctl", "-O", "OpenFlow13", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout


def vsctl(plan: FabricPlan, *args: str) -> str:
    """``ovs-vsctl`` against the fabric's private OVS."""
    db = f"--db=unix:{plan.run_dir / 'db.sock'}"
    argv = ["ovs-vsctl", db, "--timeout=5", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def port_rx_bytes(plan: FabricPlan, bridge: str) -> dict[int, int]:
    """Port number -> received bytes, from ``dump-ports``."""
    out = ofctl(plan, "dump-ports", bridge)
    return {int(p): int(b) for p, b in re.findall(r"port\s+(\d+): rx pkts=\d+, bytes=(\d+)", out)}


def daemon_pids(plan: FabricPlan) -> list[int]:
    """PIDs of the fabric's OVS daemons, from their pidfiles."""
    pids = []
    for name in ("ovsdb-server.pid", "ovs-vswitchd.pid"):
        pid = runner.daemon_pid(plan.run_dir / name)
        if pid is not None:
            pids.append(pid)
    return pids


def assert_clean(plan: FabricPlan, pids: list[int]) -> None:
    """Nothing of the fabric is left: namespaces, interfaces, files, daemons."""
    netns = _out("ip", "netns", "list")
    assert f"sdnmpi-{plan.name}-" not in netns
    links = _out("ip", "-o", "link")
    assert plan.tag not in links
    assert NETDEV_DATAPATH not in links
    assert not plan.state_dir.exists()
    assert not list(Path("/etc/netns").glob(f"sdnmpi-{plan.name}-*"))
    for pid in pids:
        alive = Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)
        assert not alive, f"OVS daemon {pid} still runs"


def namespaces() -> set[str]:
    """The names of the network namespaces that exist now (``ip netns list``)."""
    return {line.split()[0] for line in _out("ip", "netns", "list").splitlines() if line.strip()}


def _out(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return "Z"


class Fabrics:
    """Brings fabrics up through the CLI and always takes them down again."""

    def __init__(self, topology: Path) -> None:
        self.topology = topology
        self.plans: list[tuple[FabricPlan, list[int]]] = []

    def up(self, prefix: str, *extra: str) -> FabricPlan:
        name = unique_name(prefix)
        plan = make_plan(leaf_spine(1, 2, 2), name, state_root=DEFAULT_STATE_ROOT)
        self.plans.append((plan, []))
        res = sdnmpi("emu", "up", "--topology", str(self.topology), "--name", name, *extra)
        assert res.returncode == 0, res.stderr
        self.plans[-1] = (plan, daemon_pids(plan))
        return plan

    def down_all(self) -> None:
        for plan, recorded in self.plans:
            pids = recorded or daemon_pids(plan)
            runner.down(plan.name)
            assert_clean(plan, pids)
