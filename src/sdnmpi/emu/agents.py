"""Node agents on the emulated hosts: ``sdnmpi emu agents up|down``.

One ``sdnmpi agent run`` per host, inside the host's namespace (with its
hostname), on the host's fabric interface.  Its socket is
``RUN_DIR/agents/HOST.sock``, which is what a rank finds from
``SDNMPI_AGENT_SOCKET=RUN_DIR/agents/%h.sock`` (``%h``: its hostname).  Each
agent is recorded in the fabric's state file as a daemon (by pidfile) before
it starts, so ``emu down`` stops it even after a crash.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from sdnmpi.emu.plan import DEFAULT_STATE_ROOT, FabricPlan, Resource
from sdnmpi.emu.runner import (
    EmuError,
    FabricStateError,
    daemon_pid,
    host_argv,
    require_state,
    stop_daemon,
)
from sdnmpi.emu.state import save_state

log = logging.getLogger(__name__)

CLI = (sys.executable, "-c", "from sdnmpi.cli.main import main; main()")


def agent_dir(plan: FabricPlan) -> Path:
    return plan.run_dir / "agents"


def socket_template(plan: FabricPlan) -> str:
    """The ``SDNMPI_AGENT_SOCKET`` value for the fabric's ranks (``%h``: hostname)."""
    return str(agent_dir(plan) / "%h.sock")


def up(
    name: str = "default",
    *,
    state_root: Path = DEFAULT_STATE_ROOT,
    bpf_object: Path | None = None,
    controller_api: Path | None = None,
    timeout_s: float | None = None,
) -> dict[str, Path]:
    """Start one agent per host; host -> its socket.  All or none: on failure, stop them.

    ``timeout_s``: how long they may take to be ready; by default 30 s and one more
    per host (they start together and share the machine's CPUs)."""
    state = require_state(name, state_root)
    plan = state.plan()
    adir = agent_dir(plan)
    adir.mkdir(parents=True, exist_ok=True)
    sockets = {h.name: adir / f"{h.name}.sock" for h in plan.hosts}
    pidfiles = {h.name: adir / f"{h.name}.pid" for h in plan.hosts}
    if any(daemon_pid(p) is not None for p in pidfiles.values()):
        raise FabricStateError(f"fabric {name!r}: agents are already running")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for h in plan.hosts:
            state = state.with_resource(Resource("daemon", str(pidfiles[h.name])))
            save_state(state)
            argv = [*CLI, "agent", "run", "--iface", h.ifaces[0].iface]
            argv += [f"--socket={sockets[h.name]}", f"--pidfile={pidfiles[h.name]}"]
            if bpf_object is not None:
                argv.append(f"--bpf-object={bpf_object}")
            if controller_api is not None:
                argv += [f"--controller-api={controller_api}", f"--host={h.name}"]
            with (adir / f"{h.name}.log").open("ab") as out:
                procs[h.name] = subprocess.Popen(
                    host_argv(plan, h.name, argv),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        wait_s = 30.0 + len(procs) if timeout_s is None else timeout_s
        _wait_ready(procs, pidfiles, adir, wait_s)
    except BaseException:
        down(name, state_root=state_root)
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        raise
    log.info("fabric %s: %d agents up in %s", name, len(procs), adir)
    return sockets


def _wait_ready(
    procs: dict[str, subprocess.Popen[bytes]],
    pidfiles: dict[str, Path],
    adir: Path,
    timeout_s: float,
) -> None:
    deadline = time.monotonic() + timeout_s
    waiting = set(procs)
    while waiting:
        for host in sorted(waiting):
            if procs[host].poll() is not None:
                tail = (adir / f"{host}.log").read_text(errors="replace")[-2000:]
                raise EmuError(f"agent of {host} exited ({procs[host].returncode}):\n{tail}")
            if daemon_pid(pidfiles[host]) is not None:
                waiting.discard(host)
        if waiting and time.monotonic() > deadline:
            raise EmuError(f"agents of {sorted(waiting)} not ready after {timeout_s} s")
        time.sleep(0.05)


def down(name: str = "default", *, state_root: Path = DEFAULT_STATE_ROOT) -> int:
    """Stop the fabric's agents (SIGTERM by pidfile); how many were running."""
    state = require_state(name, state_root)
    adir = str(agent_dir(state.plan()))
    mine = [r for r in state.resources if r.kind == "daemon" and r.name.startswith(adir)]
    running = 0
    for res in mine:
        running += daemon_pid(Path(res.name)) is not None
        stop_daemon(Path(res.name))
    save_state(replace(state, resources=tuple(r for r in state.resources if r not in mine)))
    return running
