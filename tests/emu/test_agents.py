"""Node agents on an emulated fabric: one per host, in its namespace; stopped by down."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sdnmpi.emu import agents, runner
from sdnmpi.node.agent import iface_ipv4
from sdnmpi.node.client import AgentClient
from tests.emu.support import Fabrics, sdnmpi

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bpf_object() -> Path:
    argv = ["make", "-s", "-C", str(ROOT), "bpf"]
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return ROOT / "build" / "bpf" / "tagger.bpf.o"


def _pids(plan_dir: Path) -> list[int]:
    return [int(p.read_text()) for p in plan_dir.glob("*.pid")]


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_agents_up_serve_each_host_and_stop(fabrics: Fabrics, bpf_object: Path) -> None:
    plan = fabrics.up("agents", "--l2-learning")
    res = sdnmpi("emu", "agents", "up", "--name", plan.name, "--bpf-object", str(bpf_object))
    assert res.returncode == 0, res.stderr
    assert f"SDNMPI_AGENT_SOCKET={agents.agent_dir(plan)}/%h.sock" in res.stdout
    for h in plan.hosts:
        with AgentClient(agents.agent_dir(plan) / f"{h.name}.sock") as client:
            status = client.status()
        # the agent sits in the host's namespace, on its fabric interface
        assert (status["ip"], status["iface"], status["ranks"]) == (h.ip, h.ifaces[0].iface, [])
        shown = runner.run_cmd(("tc", "-n", h.netns, "filter", "show", "dev", "eth0", "egress"))
        assert "sdnmpi_tagger" in shown
    again = sdnmpi("emu", "agents", "up", "--name", plan.name)
    assert again.returncode == 2 and "already running" in again.stderr
    pids = _pids(agents.agent_dir(plan))
    assert len(pids) == len(plan.hosts)
    res = sdnmpi("emu", "agents", "down", "--name", plan.name)
    assert res.returncode == 0 and f"{len(plan.hosts)} agents stopped" in res.stdout
    for h in plan.hosts:
        assert not (agents.agent_dir(plan) / f"{h.name}.sock").exists()
        shown = runner.run_cmd(("tc", "-n", h.netns, "filter", "show", "dev", "eth0", "egress"))
        assert "sdnmpi_tagger" not in shown
    assert not any(_alive(pid) for pid in pids)


def test_emu_down_stops_running_agents(fabrics: Fabrics, bpf_object: Path) -> None:
    plan = fabrics.up("agentsdown", "--l2-learning")
    agents.up(plan.name, bpf_object=bpf_object)
    pids = _pids(agents.agent_dir(plan))
    assert runner.down(plan.name)
    assert not any(_alive(pid) for pid in pids)
    assert iface_ipv4("lo") == "127.0.0.1"
