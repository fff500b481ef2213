"""MPI context tags end to end: OVS fabric, os-ken controller, node agents with the eBPF
tagger, ranks (fake, driven line by line) on two hosts.

The controller pins Bcast tags to spine1 and Reduce tags to spine2.  One TCP
connection between rank 0 (h1) and rank 1 (h3) carries Bcast traffic, then Reduce
traffic: each crosses its spine (port counters), the receiver gets every byte (the
last switch restores the real MAC), and a job that announced its collectives causes
no packet-in.  When the ranks leave, the job's tag rules go.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import agents, runner
from sdnmpi.emu.plan import FabricPlan
from sdnmpi.node.client import AgentClient
from sdnmpi.testing.waits import wait_for
from sdnmpi.wire.tag import Primitive
from tests.controller_integration.support import Controller, api, controlled_fabric
from tests.emu.support import (
    ofctl,
    port_rx_bytes,
    require_root_and_tools,
    sdnmpi,
)
from tests.node.ranks import FakeRank

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
TAG_COOKIE = "cookie=0x5d05"
MISS = re.compile(r"priority=1,.*dl_dst=a2:00:00:00:00:00/f3:00:00:00:00:00.*")
VOLUME = 400_000


@dataclass
class Tagged:
    plan: FabricPlan
    controller: Controller


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tagged]:
    require_root_and_tools()
    res = subprocess.run(["make", "-s", "-C", str(ROOT), "bpf", "pmpi", "mpibench"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    workdir = tmp_path_factory.mktemp("tag")
    pinned = ("--primitives", "bcast=pinned:spine1,reduce=pinned:spine2")
    with controlled_fabric(workdir, leaf_spine(2, 2, 2), "tag", *pinned) as (plan, ctl):
        agents.up(plan.name, controller_api=ctl.api_path)
        yield Tagged(plan, ctl)


def _bridge(plan: FabricPlan, switch: str) -> str:
    return next(b.bridge for b in plan.bridges if b.switch == switch)


def _spine_rx(plan: FabricPlan) -> dict[str, int]:
    """Bytes each spine received from leaf1 (port 1)."""
    return {s: port_rx_bytes(plan, _bridge(plan, s))[1] for s in ("spine1", "spine2")}


def _misses(plan: FabricPlan) -> int:
    """Packets that hit the tag-miss rule (sent to the controller) on every switch."""
    total = 0
    for b in plan.bridges:
        for line in ofctl(plan, "dump-flows", b.bridge).splitlines():
            if MISS.search(line):
                total += int(re.search(r"n_packets=(\d+)", line).group(1))  # type: ignore[union-attr]
    return total


def _tag_rules(plan: FabricPlan) -> int:
    return sum(
        TAG_COOKIE in ln
        for b in plan.bridges
        for ln in ofctl(plan, "dump-flows", b.bridge).splitlines()
    )


def _job(t: Tagged, job: str) -> tuple[FakeRank, FakeRank]:
    plan = t.plan
    ranks = []
    for rank, host in enumerate(("h1", "h3")):
        h = plan.host(host)
        prefix = runner.host_argv(plan, host, [])
        sock = agents.agent_dir(plan) / f"{host}.sock"
        ranks.append(FakeRank(prefix, sock, job, rank, 2, h.ip, 6000 + rank))
    r0, r1 = ranks
    hellos = [r.hello for r in ranks]
    assert all(isinstance(h, dict) and "pid" in h for h in hellos), hellos
    table = [[i, h["ip"], h["pid"], h["listen_ports"]] for i, h in enumerate(hellos)]  # type: ignore[index]
    for r in ranks:
        assert r.do(f"ranks {json.dumps(table)}") == "ok"
    assert isinstance(r0.do(f"connect {plan.host('h3').ip} 6001"), list)
    sock = agents.agent_dir(plan) / "h1.sock"

    def tagged_conn() -> bool:
        with AgentClient(sock) as c:
            return any(r["tagged"] for r in c.status()["ranks"])

    wait_for("rank 0's connection tagged", tagged_conn, 10)
    return r0, r1


def _send(plan: FabricPlan, r0: FakeRank, r1: FakeRank, prim: Primitive) -> dict[str, int]:
    before, got = _spine_rx(plan), r1.do("received")
    assert r0.do(f"prim {int(prim)}") == "ok"
    assert r0.do(f"sendall {VOLUME}") == "ok"
    wait_for("all bytes received", lambda: r1.do("received") == got + VOLUME, 30)  # type: ignore[operator]
    after = _spine_rx(plan)
    return {s: after[s] - before[s] for s in after}


def test_reactive_tags_follow_their_primitive_spine(tagged: Tagged) -> None:
    plan = tagged.plan
    r0, r1 = _job(tagged, "501")
    try:
        bcast = _send(plan, r0, r1, Primitive.BCAST)
        reduce = _send(plan, r0, r1, Primitive.REDUCE)
        rules = _tag_rules(plan)
        print(f"\nreactive: bcast spine bytes {bcast}, reduce spine bytes {reduce}, "
              f"{rules} tag rules")  # fmt: skip
        assert bcast["spine1"] >= VOLUME and bcast["spine2"] < VOLUME // 10
        assert reduce["spine2"] >= VOLUME and reduce["spine1"] < VOLUME // 10
        assert rules > 0
    finally:
        for r in (r0, r1):
            r.quit()
            r.kill()
    wait_for("the job's tag rules removed", lambda: _tag_rules(plan) == 0, 10)


def test_proactive_job_causes_no_packet_in(tagged: Tagged) -> None:
    plan, ctl = tagged.plan, tagged.controller
    coll = {"name": "bcast", "root": 0, "count": 1 << 20, "type_bytes": 1, "comm": None}
    reply = api(ctl, {"op": "tag_collectives", "job": "502", "collectives": [coll]})
    assert reply["ok"] is True, reply
    r0, r1 = _job(tagged, "502")
    try:
        misses = _misses(plan)
        bcast = _send(plan, r0, r1, Primitive.BCAST)
        print(f"\nproactive: bcast spine bytes {bcast}, tag misses {_misses(plan) - misses}")
        assert _misses(plan) == misses
        assert bcast["spine1"] >= VOLUME and bcast["spine2"] < VOLUME // 10
    finally:
        for r in (r0, r1):
            r.quit()
            r.kill()
    wait_for("the job's tag rules removed", lambda: _tag_rules(plan) == 0, 10)


def test_tagged_job_survives_a_controller_restart(tagged: Tagged) -> None:
    """The job store keeps tagged jobs: after a restart the switches keep the job's tag
    rules (no flow-mod sent) and its packets still need no controller."""
    plan, ctl = tagged.plan, tagged.controller
    coll = {"name": "bcast", "root": 0, "count": 1 << 20, "type_bytes": 1, "comm": None}
    assert api(ctl, {"op": "tag_collectives", "job": "503", "collectives": [coll]})["ok"]
    r0, r1 = _job(tagged, "503")
    try:
        rules = _tag_rules(plan)
        assert rules > 0
        assert ctl.stop() == 0
        ctl.start()
        # the first sync logs "discovery complete", then restores the stored jobs and
        # sends, all under the controller's lock, which an API query waits for
        wait_for("the stored jobs restored", lambda: "jobs restored" in ctl.log(), 30)
        assert api(ctl, {"op": "jobs"})["ok"] is True
        log = ctl.log()
        assert "tagged jobs restored: 503" in log, log
        assert "sending" not in log  # the switches already hold every rule
        assert _tag_rules(plan) == rules
        misses = _misses(plan)
        bcast = _send(plan, r0, r1, Primitive.BCAST)
        print(f"\nafter restart: {rules} tag rules kept, bcast spine bytes {bcast}, "
              f"tag misses {_misses(plan) - misses}")  # fmt: skip
        assert _misses(plan) == misses
        assert bcast["spine1"] >= VOLUME and bcast["spine2"] < VOLUME // 10
    finally:
        for r in (r0, r1):
            r.quit()
            r.kill()
    wait_for("the job's tag rules removed", lambda: _tag_rules(plan) == 0, 10)
    assert api(ctl, {"op": "jobs"})["ok"] is True


def _spine_totals(plan: FabricPlan) -> dict[str, int]:
    return {s: sum(port_rx_bytes(plan, _bridge(plan, s)).values()) for s in ("spine1", "spine2")}


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_real_mpi_collectives_are_tagged_and_take_their_spines(tagged: Tagged, mpi: str) -> None:
    """Unmodified sdnmpi-bench under LD_PRELOAD=libsdnmpi.so (tag mode): the Bcast loop
    crosses spine1, the Reduce loop spine2, as the controller's pinned modules say."""
    plan = tagged.plan
    lib, bench = ROOT / "build" / mpi / "libsdnmpi.so", ROOT / "build" / mpi / "sdnmpi-bench"
    size, iters = 1 << 20, 8
    env = [f"LD_PRELOAD={lib}", "SDNMPI_MODE=tag", f"SDNMPI_JOB=real-{mpi}",
           f"SDNMPI_AGENT_SOCKET={agents.socket_template(plan)}"]  # fmt: skip
    moved: dict[str, dict[str, int]] = {}
    for op in ("bcast", "reduce"):
        before = _spine_totals(plan)
        argv = ["emu", "mpirun", "--name", plan.name, "-n", "2", "--mpi", mpi, "--hosts", "h1,h3",
                "--timeout", "90", *(a for e in env for a in ("--env", e)), "--", str(bench),
                "coll", "--op", op, "--size", str(size), "--iters", str(iters), "--warmup", "1",
                "--json"]  # fmt: skip
        run = sdnmpi(*argv, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "running untagged" not in run.stderr, run.stderr
        after = _spine_totals(plan)
        moved[op] = {s: after[s] - before[s] for s in after}
    print(f"\n{mpi}: spine bytes per loop {moved}")
    volume = size * iters
    assert moved["bcast"]["spine1"] >= volume and moved["bcast"]["spine2"] < volume // 10
    assert moved["reduce"]["spine2"] >= volume and moved["reduce"]["spine1"] < volume // 10
    wait_for("the jobs' tag rules removed", lambda: _tag_rules(plan) == 0, 10)


def test_push_mode_installs_routes_before_the_collective(tagged: Tagged) -> None:
    """Open MPI Allreduce loop under tag mode, without and with push mode: with push,
    the communicator's rank 0 announces each distinct collective call once and the
    controller installs its rules before the traffic, so fewer (ideally no) tagged
    packets reach the controller."""
    plan, ctl = tagged.plan, tagged.controller
    build = ROOT / "build" / "openmpi"
    lib, bench = build / "libsdnmpi.so", build / "sdnmpi-bench"
    # two interleaved runs per mode: the packets tagged before the first push (MPI_Init's
    # own traffic) vary from run to run and once outnumbered a single run's difference
    misses: dict[str, int] = {"tag": 0, "tag,push": 0}
    for run_no, mode in enumerate(("tag", "tag,push") * 2):
        env = [f"LD_PRELOAD={lib}", f"SDNMPI_MODE={mode}", f"SDNMPI_JOB=push-{run_no}",
               f"SDNMPI_AGENT_SOCKET={agents.socket_template(plan)}"]  # fmt: skip
        before = _misses(plan)
        argv = ["emu", "mpirun", "--name", plan.name, "-n", "4", "--mpi", "openmpi", "--hosts",
                "h1,h2,h3,h4", "--timeout", "90", *(a for e in env for a in ("--env", e)), "--",
                str(bench), "coll", "--op", "allreduce", "--size", "256K", "--iters", "5",
                "--warmup", "1", "--json"]  # fmt: skip
        run = sdnmpi(*argv, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "running untagged" not in run.stderr and "not confirmed" not in run.stderr
        misses[mode] += _misses(plan) - before
    pushes = ctl.log().count("tag_push")
    print(f"\npush mode: tagged packets sent to the controller in two runs each {misses}, "
          f"{pushes} pushes logged")  # fmt: skip
    assert misses["tag"] > 0
    # each push job's rank 0 got its collective's rules installed and confirmed (the
    # library waited for that: no "not confirmed" above) before the collective ran
    confirmed = re.findall(r"tag_push (push-[13]): (\d+) flow-mods, confirmed=True", ctl.log())
    assert {job for job, mods in confirmed if int(mods) > 0} == {"push-1", "push-3"}, confirmed
    # fewer tagged packets reach the controller with push; how many fewer varies with
    # the packets tagged before the first push (MPI_Init's own), so it is reported only
    assert pushes >= 2
    wait_for("the jobs' tag rules removed", lambda: _tag_rules(plan) == 0, 10)
