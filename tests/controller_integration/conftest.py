"""Fixtures of the controller integration tests: one controller and one fabric per module."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.topology import Topology
from sdnmpi.emu.plan import FabricPlan
from sdnmpi.testing.waits import wait_for
from tests.controller_integration.support import Controller, controlled_fabric
from tests.emu.support import (
    require_root_and_tools,
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
    with controlled_fabric(workdir, model, "ctl") as (plan, controller):
        found = DISCOVERY.search(controller.log())
        assert found is not None
        wait_for(
            "flow-mods confirmed",
            lambda: controller.log().count("all flow-mods confirmed") >= 4,
            10,
        )
        yield Cluster(model, plan, controller, float(found.group(3)))


def discovery(log: str) -> tuple[int, int, float]:
    """(switches, switch links, seconds) of the last discovery line of a controller log."""
    found = DISCOVERY.findall(log)
    assert found, log
    switches, links, secs = found[-1]
    return int(switches), int(links), float(secs)
