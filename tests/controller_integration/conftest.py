"""Fixtures of the controller integration tests: one controller and one fabric per module."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sdnmpi import catalog
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.topology import Topology
from sdnmpi.emu import runner
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT, FabricPlan, make_plan
from sdnmpi.testing.waits import free_port, wait_for
from tests.controller_integration.support import Controller
from tests.emu.support import (
    assert_clean,
    daemon_pids,
    require_root_and_tools,
    sdnmpi,
    unique_name,
)

DISCOVERY = re.compile(r"discovery complete: (\d+) switches, (\d+) switch links after ([\d.]+) s")


@dataclass
class Cluster:
    """A running controller and the emulated fabric connected to it."""

    model: Topology
    plan: FabricPlan
    controller: Controller
    discovery_s: float


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """leaf_spine(2, 2, 2) (loops through two spines) under our controller."""
    require_root_and_tools()
    workdir = tmp_path_factory.mktemp("ctl")
    model = leaf_spine(2, 2, 2)
    topo_file = workdir / "leaf-spine-2x2x2.json"
    catalog.save_topology(model, topo_file)
    controller = Controller(free_port(), topo_file, workdir)
    plan = make_plan(model, unique_name("ctl"), state_root=DEFAULT_STATE_ROOT)
    pids: list[int] = []
    try:
        controller.start()
        res = sdnmpi(
            "emu", "up", "--topology", str(topo_file), "--name", plan.name,
            "--controller", f"tcp:127.0.0.1:{controller.port}",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        pids = daemon_pids(plan)
        wait_for("LLDP discovery", lambda: DISCOVERY.search(controller.log()) is not None, 30)
        found = DISCOVERY.search(controller.log())
        assert found is not None
        wait_for(
            "flow-mods confirmed",
            lambda: controller.log().count("all flow-mods confirmed") >= 4,
            10,
        )
        yield Cluster(model, plan, controller, float(found.group(3)))
    finally:
        controller.stop()
        runner.down(plan.name)
        assert_clean(plan, pids)


def discovery(log: str) -> tuple[int, int, float]:
    """(switches, switch links, seconds) of the last discovery line of a controller log."""
    found = DISCOVERY.findall(log)
    assert found, log
    switches, links, secs = found[-1]
    return int(switches), int(links), float(secs)
