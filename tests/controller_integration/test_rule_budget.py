"""A real Open vSwitch table that is full: the controller (``--job-rules aggregate``)
takes the job back, nothing of it is left on any bridge, the reply says why, and the
pairs still reach their hosts (on default routes)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.controller import layout
from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import runner
from sdnmpi.emu.plan import FabricPlan
from sdnmpi.testing.waits import wait_for
from tests.controller_integration.support import Controller, all_flows, api, controlled_fabric
from tests.emu.support import ofctl, require_root_and_tools, vsctl

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FabricPlan, Controller]]:
    require_root_and_tools()
    workdir: Path = tmp_path_factory.mktemp("rules")
    model = leaf_spine(2, 2, 2)
    with controlled_fabric(workdir, model, "rb", "--job-rules", "aggregate") as (plan, ctl):
        wait_for("flow-mods confirmed", lambda: ctl.log().count("all flow-mods confirmed") >= 4, 10)
        yield plan, ctl


def _bridge(plan: FabricPlan, switch: str) -> str:
    return next(b.bridge for b in plan.bridges if b.switch == switch)


def test_a_full_table_takes_the_job_back_to_default_routes(
    fabric: tuple[FabricPlan, Controller],
) -> None:
    plan, ctl = fabric
    br = _bridge(plan, "leaf1")
    held = len([ln for ln in ofctl(plan, "dump-flows", br).splitlines() if "priority=" in ln])
    # leaf1's table 0 holds exactly what it has: one more rule is refused (TABLE_FULL)
    vsctl(plan, "--", "--id=@ft", "create", "Flow_Table", f"flow_limit={held}",
          "overflow_policy=refuse", "--", "set", "Bridge", br, "flow_tables=0=@ft")  # fmt: skip
    try:
        # D-mod-K sends h1 -> h3 through spine1; the job takes spine2: a rule on leaf1
        pairs = {"h1>h3": ["h1", "leaf1", "spine2", "leaf2", "h3"]}
        reply = api(ctl, {"op": "install_job", "job_id": 42, "pairs": pairs})
        assert reply["ok"] is False, reply
        error = str(reply["error"])
        assert "refused" in error and "default routes" in error, error
        assert api(ctl, {"op": "jobs"})["jobs"] == {}
        ck = f"cookie={layout.job_cookie(42):#x}"
        assert not any(ck in ln for rules in all_flows(plan).values() for ln in rules)
        argv = runner.host_argv(plan, "h1", ["ping", "-c", "1", "-W", "2", plan.host("h3").ip])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        vsctl(plan, "clear", "Bridge", br, "flow_tables")
