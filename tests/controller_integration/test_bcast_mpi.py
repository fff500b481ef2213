"""The switch-replicated MPI_Bcast through the whole system: real MPICH and Open MPI
ranks under libsdnmpi.so (``SDNMPI_MODE=register,bcast``), node agents, the os-ken
controller building trees as OpenFlow groups on Open vSwitch.

csrc/pmpi/tests/bcast_check.c broadcasts pseudo-random buffers (0 B to 1 MiB, odd
sizes, several roots and datatypes, dup'ed and split communicators) and compares every
byte.  While it runs, every switch's group table is read: the trees the job opened
are there (type ALL, buckets), and gone once the job has ended.  A second run drops
a share of the group's datagrams on one receiving host (a TC classifier,
csrc/pmpi/tests/drop.bpf.c): every byte still arrives, by repair or fallback.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import agents
from sdnmpi.emu.plan import FabricPlan
from sdnmpi.testing.waits import wait_for
from tests.controller_integration.support import Controller, controlled_fabric
from tests.emu.support import ofctl, require_root_and_tools, sdnmpi

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
CHECK_SRC = ROOT / "csrc" / "pmpi" / "tests"
FLAVOURS = ("mpich", "openmpi")
#: One rank per host over three leaves: trees cross the spines.
HOSTS = ("h1", "h3", "h4", "h6")
#: The controller's UDP port for every tree (``--bcast-port``, its default).
PORT = 47000
GROUP_LINE = re.compile(r"group_id=(\d+),type=all,(.*)")
STATS = re.compile(r"^sdnmpi: rank (\d+): bcast stats: (.*)$", re.MULTILINE)


@dataclass
class Fabric:
    plan: FabricPlan
    controller: Controller
    build: Path


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    require_root_and_tools()
    if not shutil.which("clang"):
        pytest.fail("clang not found (the drop filter)")
    res = subprocess.run(["make", "-s", "-C", str(ROOT), "bpf", "pmpi", "mpibench"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    build = tmp_path_factory.mktemp("bcast-mpi")
    for flavour in FLAVOURS:
        (build / flavour).mkdir()
        cc = subprocess.run(
            [f"mpicc.{flavour}", "-O1", "-Wall", "-Wextra", "-Werror", "-o",
             str(build / flavour / "bcast_check"), str(CHECK_SRC / "bcast_check.c")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert cc.returncode == 0, cc.stderr
    cc = subprocess.run(
        ["clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu",
         f"-DPORT={PORT}", "-DDROP_PER_MILLE=50",
         "-c", str(CHECK_SRC / "drop.bpf.c"), "-o", str(build / "drop50.o")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert cc.returncode == 0, cc.stderr
    workdir = tmp_path_factory.mktemp("bcast-fabric")
    with controlled_fabric(workdir, leaf_spine(2, 3, 2), "bcm") as (plan, ctl):
        agents.up(plan.name, controller_api=ctl.api_path)
        yield Fabric(plan, ctl, build)


def groups(plan: FabricPlan) -> dict[str, list[str]]:
    """Every switch's groups of type ALL (``dump-groups``), one line each."""
    out = {}
    for b in plan.bridges:
        text = ofctl(plan, "dump-groups", b.bridge)
        out[b.switch] = [m.group(0) for m in GROUP_LINE.finditer(text)]
    return out


class GroupWatch:
    """Reads every switch's group table while a job runs; keeps the largest seen."""

    def __init__(self, plan: FabricPlan) -> None:
        self.plan = plan
        self.seen: dict[str, set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for switch, lines in groups(self.plan).items():
                self.seen.setdefault(switch, set()).update(lines)

    def __enter__(self) -> GroupWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def run_check(f: Fabric, flavour: str, job: str) -> str:
    """bcast_check on :data:`HOSTS` in bcast mode; its output (exit 0 and no byte
    different asserted)."""
    env = {
        "LD_PRELOAD": str(ROOT / "build" / flavour / "libsdnmpi.so"),
        "SDNMPI_MODE": "register,bcast",
        "SDNMPI_JOB": job,
        "SDNMPI_AGENT_SOCKET": agents.socket_template(f.plan),
        "SDNMPI_BCAST_STATS": "1",
    }
    argv = ["emu", "mpirun", "--name", f.plan.name, "-n", str(len(HOSTS)), "--mpi", flavour]
    argv += ["--hosts", ",".join(HOSTS), "--timeout", "120"]
    argv += [a for k, v in env.items() for a in ("--env", f"{k}={v}")]
    res = sdnmpi(*argv, "--", str(f.build / flavour / "bcast_check"), timeout=200)
    out = res.stdout + res.stderr
    # MPICH/UCX's ranks sometimes hang in MPI_Finalize on the emulator, with or without
    # libsdnmpi (ENVIRONMENT.md): stopped at the timeout (124) after printing results
    hung = res.returncode == 124 and flavour == "mpich"
    assert res.returncode == 0 or hung, out[-4000:]
    assert re.search(r"bcast_check: \d+ calls per rank, 0 differences", out), out[-4000:]
    return out


def stats(out: str) -> dict[int, dict[str, int]]:
    """Per world rank: the counters of its stats line (fallback reasons as fb_NAME)."""
    rows = {}
    for rank, text in STATS.findall(out):
        head, rest = text.split("fallback[", 1)
        reasons, tail = rest.split("]", 1)
        row = {k: int(v) for k, v in re.findall(r"\b(\w+)=(\d+)", head + tail)}
        row |= {f"fb_{k}": int(v) for k, v in re.findall(r"([\w-]+)=(\d+)", reasons)}
        rows[int(rank)] = row
    assert sorted(rows) == list(range(len(HOSTS))), out[-3000:]
    return rows


def total(rows: dict[int, dict[str, int]], key: str) -> int:
    return sum(r[key] for r in rows.values())


def host_ns(plan: FabricPlan, host: str) -> tuple[str, str]:
    h = next(x for x in plan.hosts if x.name == host)
    return h.netns, h.ifaces[0].iface


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_trees_installed_used_and_removed(fabric: Fabric, flavour: str) -> None:
    with GroupWatch(fabric.plan) as watch:
        out = run_check(fabric, flavour, f"bcm-{flavour}")
    rows = stats(out)
    # the groups came from the controller (no static group): every rank replicated,
    # the roots sent, leaves received, and no call fell back for want of a group
    assert all(r["replicated"] > 0 for r in rows.values()), rows
    assert total(rows, "sent") > 0 and total(rows, "received") > 0, rows
    assert total(rows, "fb_no-group") == 0 and total(rows, "fb_setup") == 0, rows
    # derived datatypes and the intercommunicator took the library's Bcast, said once
    assert total(rows, "fb_datatype") > 0 and total(rows, "fb_intercomm") > 0, rows
    assert len([ln for ln in out.splitlines() if "falls back" in ln and "datatype" in ln]) == 1
    # the trees were on the switches while the job ran: h1's leaf copies to the
    # spine side, each group of type ALL has buckets that output somewhere
    assert watch.seen.get("leaf1"), watch.seen
    for lines in watch.seen.values():
        for line in lines:
            assert "bucket=" in line and "output:" in line, line
    assert any(len(lines) > 0 for s, lines in watch.seen.items() if s.startswith("spine"))
    # and gone once the job ended (its ranks left, the controller removed its trees)
    wait_for("the job's groups removed", lambda: not any(groups(fabric.plan).values()), 30)


def test_dropped_datagrams_are_repaired(fabric: Fabric) -> None:
    ns, iface = host_ns(fabric.plan, HOSTS[2])
    obj = str(fabric.build / "drop50.o")

    def tc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", ns, "tc", *args],
                              capture_output=True, text=True, check=False)  # fmt: skip

    assert tc("qdisc", "replace", "dev", iface, "clsact").returncode == 0
    try:
        res = tc("filter", "replace", "dev", iface, "ingress", "bpf", "da", "obj", obj,
                 "sec", "tc")  # fmt: skip
        assert res.returncode == 0, res.stderr
        out = run_check(fabric, "openmpi", "bcm-loss")
    finally:
        tc("qdisc", "del", "dev", iface, "clsact")
    rows = stats(out)
    # every byte arrived (run_check), the lost datagrams were sent again
    assert total(rows, "repairs") > 0, rows
    assert all(r["replicated"] > 0 for r in rows.values()), rows
