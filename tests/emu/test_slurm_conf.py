"""The emulated Slurm's configuration text (pure: no Slurm needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import slurm
from sdnmpi.emu.plan import FabricPlan, make_plan
from sdnmpi.errors import ConfigError


def _plan() -> FabricPlan:
    return make_plan(leaf_spine(2, 2, 2), "sl", state_root=Path("/run/x"))


def test_every_host_is_a_node_and_the_head_runs_slurmctld() -> None:
    plan = _plan()
    lay = slurm.layout(plan)
    text = slurm.slurm_conf(plan, lay, cpus=8)
    lines = text.splitlines()
    head = plan.hosts[0]
    assert f"SlurmctldHost={head.name}({head.ip})" in lines
    nodes = [ln for ln in lines if ln.startswith("NodeName=")]
    assert nodes == [f"NodeName={h.name} NodeAddr={h.ip} CPUs=8 State=UNKNOWN" for h in plan.hosts]
    assert "AuthType=auth/none" in lines and "ProctrackType=proctrack/linuxproc" in lines
    assert "KillOnBadExit=1" in lines
    # per-node files (several slurmd on one machine) and no plugstack unless asked
    assert f"SlurmdSpoolDir={lay.dir}/spool/%n" in lines
    assert not any(ln.startswith("PlugStackConfig") for ln in lines)
    with_plugin = slurm.slurm_conf(plan, lay, plugstack=True)
    assert f"PlugStackConfig={lay.plugstack}" in with_plugin.splitlines()
    with pytest.raises(ConfigError, match="--cpus"):
        slurm.slurm_conf(plan, lay, cpus=0)


def test_plugstack_line_and_bad_arguments() -> None:
    line = slurm.plugstack_conf(Path("/b/sdnmpi_spank.so"), {"manager": "unix:/m", "timeout": "5"})
    assert line == "optional /b/sdnmpi_spank.so manager=unix:/m timeout=5\n"
    for bad in ({"manager": "a b"}, {"bad key": "x"}, {"timeout": ""}):
        with pytest.raises(ConfigError, match="plugin argument"):
            slurm.plugstack_conf(Path("/p.so"), bad)


def test_clients_get_the_fabric_mpi_settings() -> None:
    plan = _plan()
    env = slurm.fabric_env(plan, slurm.layout(plan))
    assert env["SLURM_CONF"].endswith("/slurm/slurm.conf")
    assert env["OMPI_MCA_btl_tcp_if_include"] == str(plan.network)
