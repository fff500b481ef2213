"""Helpers of the controller integration tests: run the controller as a process, read flows."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from sdnmpi import catalog
from sdnmpi.core.topology import Topology
from sdnmpi.emu import runner
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT, FabricPlan, make_plan
from sdnmpi.testing.waits import free_port, wait_for
from sdnmpi.wire import controller_api
from tests.emu.support import assert_clean, daemon_pids, ofctl, sdnmpi, unique_name

DEFAULT_COOKIE = "cookie=0x5d03"
_COUNTERS = re.compile(r" (duration|n_packets|n_bytes|idle_age|hard_age)=[^,]*,")


class Controller:
    """``sdnmpi controller run`` as a child process, stopped by its PID."""

    def __init__(self, port: int, topology: Path, workdir: Path, *extra: str) -> None:
        self.extra = extra
        self.port = port
        self.topology = topology
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "controller-0.log"
        self.stats_path = workdir / "port-stats.json"
        self.api_path = workdir / "api.sock"
        self.state_path = workdir / "jobs.json"
        self.metrics_port = free_port()
        self.runs = 0

    def start(self) -> None:
        assert self.proc is None
        self.log_path = self.workdir / f"controller-{self.runs}.log"
        self.runs += 1
        argv = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()"]
        argv += ["controller", "run", "--port", str(self.port), "--topology", str(self.topology)]
        argv += ["--stats-interval", "1", "--stats-out", str(self.stats_path)]
        argv += ["--api-socket", str(self.api_path), "--state-file", str(self.state_path)]
        argv += ["--metrics-port", str(self.metrics_port)]
        argv += list(self.extra)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for("the controller to listen", lambda: "listening on" in self.log(), 20)

    def log(self) -> str:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"controller exited ({self.proc.returncode}):\n{self.log_text()}")
        return self.log_text()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int | None:
        """SIGTERM (then SIGKILL) to our child by PID; its exit code."""
        proc, self.proc = self.proc, None
        return None if proc is None else runner.stop_child(proc, timeout_s=5)


@contextlib.contextmanager
def controlled_fabric(
    workdir: Path, model: Topology, prefix: str, *controller_args: str
) -> Iterator[tuple[FabricPlan, Controller]]:
    """``model`` emulated under a controller process (``controller_args`` added to its
    command line), yielded once LLDP discovery is complete; afterwards the controller is
    stopped, the fabric is down and nothing of it is left (:func:`assert_clean`)."""
    topo_file = workdir / "topology.json"
    catalog.save_topology(model, topo_file)
    ctl = Controller(free_port(), topo_file, workdir, *controller_args)
    plan = make_plan(model, unique_name(prefix), state_root=DEFAULT_STATE_ROOT)
    pids: list[int] = []
    try:
        ctl.start()
        res = sdnmpi("emu", "up", "--topology", str(topo_file), "--name", plan.name,
                     "--controller", f"tcp:127.0.0.1:{ctl.port}")  # fmt: skip
        assert res.returncode == 0, res.stderr
        pids = daemon_pids(plan)
        wait_for("LLDP discovery", lambda: "discovery complete" in ctl.log(), 30)
        yield plan, ctl
    finally:
        ctl.stop()
        runner.down(plan.name)
        assert_clean(plan, pids)


def our_flows(plan: FabricPlan, bridge: str) -> list[str]:
    """The bridge's sdnmpi rules (cookie 0x5d...), counters stripped, sorted."""
    lines = ofctl(plan, "dump-flows", bridge).splitlines()
    return sorted(_COUNTERS.sub("", ln).strip() for ln in lines if "cookie=0x5d" in ln)


def all_flows(plan: FabricPlan) -> dict[str, list[str]]:
    return {b.switch: our_flows(plan, b.bridge) for b in plan.bridges}


def port_packets(plan: FabricPlan, bridge: str) -> int:
    """Total rx+tx packets of the bridge's ports (``dump-ports``)."""
    out = ofctl(plan, "dump-ports", bridge)
    return sum(int(n) for n in re.findall(r"[rt]x pkts=(\d+)", out))


def api(ctl: Controller, request: dict[str, object]) -> dict[str, object]:
    """One request to the controller's API socket; its reply, ``ok`` or not."""
    return controller_api.Client(ctl.api_path, timeout_s=20).send(dict(request))
