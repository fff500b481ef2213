"""The controller at (small) scale: fat_tree(4), 20 Open vSwitch bridges joined by patch
ports (:mod:`sdnmpi.emu.scale`), under a real ``sdnmpi controller run``.

The small case of ``benchmarks/bench_controller.py`` (which measures fat_tree(8) and,
with ``--large``, fat_tree(16)): every link discovered, the default routes confirmed
and held by every switch exactly as the pure planner computes them, a job's routes for
every host installed over the API and confirmed, a controller restart that resyncs by
difference (nothing to send), and the fabric removed without a trace.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from sdnmpi import catalog
from sdnmpi.controller import layout
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.core.topology import Topology
from sdnmpi.emu.scale import ControllerProcess, add_bridges, scale_fabric
from sdnmpi.manager.controller_client import ControllerClient
from sdnmpi.manager.jobrouting import RESYNC_WAITS_S
from sdnmpi.manager.memory import MemoryStore
from sdnmpi.manager.model import JobState
from sdnmpi.manager.planning import pair_routes, pairs_of
from sdnmpi.manager.requests import CreateJob, PatternUpload
from sdnmpi.manager.service import ManagerService
from sdnmpi.testing.waits import free_port
from sdnmpi.wire import controller_api
from tests.emu.support import require_root_and_tools
from tests.manager.conftest import ALICE, SCHED, pairs_pattern, pattern_bytes

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]

DISCOVERY = re.compile(r"discovery (\w+): (\d+) switches, (\d+) switch links")
SYNC = re.compile(r"sync confirmed: (\d+) flow-mods to (\d+) switches")
JOB_COOKIE = f"{layout.job_cookie(1):#x}/0xffffffffffffffff"


def _pairs(model: Topology) -> dict[tuple[str, str], list[str]]:
    """Every host to the next one (a ring over all pods), routed by ECMP, as the
    manager sends them (node names by host pair)."""
    fabric = Fabric(model)
    n = fabric.nhosts
    src = np.array([fabric.host_index(h.name) for h in model.hosts], dtype=np.int64)
    dst = np.roll(src, -1)
    minus = np.full(n, -1, dtype=np.int64)
    demands = Demands(src, dst, np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                      minus, minus, ("ring",), np.array([1]))  # fmt: skip
    return pairs_of(pair_routes(fabric, demands, route("ecmp", fabric, demands, seed=1)))


def test_twenty_switches_discovered_routed_and_resynced(tmp_path: Path) -> None:
    require_root_and_tools()
    model = fat_tree(4)
    topo_file = tmp_path / "topology.json"
    catalog.save_topology(model, topo_file)
    pairs = _pairs(model)
    with scale_fabric(model, "test4", tmp_path) as fab:
        ctl = ControllerProcess(fab, free_port(), topo_file, tmp_path)
        try:
            ctl.start()
            add_bridges(fab, ctl.target)
            found = ctl.wait_log(DISCOVERY, 60)
            assert found.groups() == ("complete", "20", "32")
            sync = ctl.wait_log(SYNC, 60)
            defaults = sum(fab.flow_count(b.bridge) for b in fab.bridges)
            assert int(sync[2]) == 20 and int(sync[1]) == defaults > 20 * 5
            reply = controller_api.Client(ctl.api_path, timeout_s=30).send(
                {"op": "install_job", "job_id": 1, "pairs": controller_api.encode_pairs(pairs)}
            )
            assert reply["ok"], reply
            held = sum(fab.flow_count(b.bridge, JOB_COOKIE) for b in fab.bridges)
            assert held == reply["flow_mods"] > len(pairs)  # every hop but the last
            ctl.stop()
            ctl.start()
            assert ctl.wait_log(DISCOVERY, 60)[1] == "complete"
            assert ctl.wait_log(SYNC, 60)[1] == "0"  # the switches kept every rule
            assert sum(fab.flow_count(b.bridge) for b in fab.bridges) == defaults + held
            print(f"\nfat_tree(4): {defaults} default rules, {held} job rules, resync 0 flow-mods")
        finally:
            ctl.stop()
    assert not fab.run_dir.exists()


def test_the_manager_plans_again_while_a_switch_reconnects(tmp_path: Path) -> None:
    """End to end: the real manager core, the real controller, OVS bridges.  A job
    starts while the edge switch of its first host is disconnected (kept in the
    topology, so its install is taken back saying ``retry``); the switch reconnects
    0.8 s later, is resynced, and the manager's next try routes the job: every switch
    on its paths holds its rules, including the one that reconnected."""
    require_root_and_tools()
    model = fat_tree(4)
    topo_file = tmp_path / "topology.json"
    catalog.save_topology(model, topo_file)
    first, second = model.hosts[0].name, model.hosts[-1].name
    edge = model.attachment(first)[0]
    dpid = model.switch(edge).dpid
    with scale_fabric(model, "retry4", tmp_path) as fab:
        ctl = ControllerProcess(fab, free_port(), topo_file, tmp_path)
        try:
            ctl.start()
            add_bridges(fab, ctl.target)
            assert ctl.wait_log(DISCOVERY, 60)[1] == "complete"
            ctl.wait_log(SYNC, 60)
            service = ManagerService(MemoryStore(), ControllerClient(ctl.api_path), time.time)
            waits: list[float] = []

            def sleep(seconds: float) -> None:
                waits.append(seconds)
                time.sleep(seconds)

            service.routing.sleep = sleep
            fab.vsctl("del-controller", fab.bridge(edge))
            ctl.wait_log(re.compile(rf"switch {dpid:#x} disconnected"), 30)
            back = threading.Timer(0.8, fab.vsctl, ("set-controller", fab.bridge(edge), ctl.target))
            back.start()
            try:
                upload = PatternUpload("p.json", pattern_bytes(pairs_pattern(2)))
                service.create_job(SCHED, CreateJob(job_id=3, name="retry", uid=ALICE.uid,
                                                    ntasks=2, pattern_file=upload))  # fmt: skip
                service.start_job(SCHED, 3)
                service.register_process(SCHED, 3, 0, first, 100)
                job = service.register_process(SCHED, 3, 1, second, 101)
            finally:
                back.join()
            assert job.state is JobState.ROUTED, job.detail
            assert waits and waits == list(RESYNC_WAITS_S[: len(waits)])
            cookie = f"{layout.job_cookie(3):#x}/0xffffffffffffffff"
            # every switch on the paths but the last (it delivers by its default rule)
            on_path = {hop for r in job.routes for hop in r.path[1:-2]}
            assert edge in on_path and len(on_path) >= 3
            held = {s for s in on_path if fab.flow_count(fab.bridge(s), cookie) > 0}
            assert held == on_path
            assert re.search(r"disconnected before confirming", ctl.log())
        finally:
            ctl.stop()
    assert not fab.run_dir.exists()
