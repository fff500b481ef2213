"""Fabrics a killed run left behind: found by their state files, removed with what they
recorded (the fabric, and the Slurm daemons started in it)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from sdnmpi.emu import slurm
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT
from sdnmpi.emu.runner import down, switch_daemon_runs
from sdnmpi.errors import SdnMpiError

log = logging.getLogger(__name__)

#: An unfinished fabric whose state file has not changed for this long is not being built.
STALE_BUILD_S = 60.0


def stale_fabrics(state_root: Path, *, now: float | None = None) -> list[str]:
    """Fabrics recorded under ``state_root`` that nothing runs any more: their switch
    daemon is gone, and they are complete or their state has not changed for
    :data:`STALE_BUILD_S` (an ``up`` in progress writes it at every step). A run killed
    before its teardown (a CI job cut short, a SIGKILL) leaves these behind."""
    now = time.time() if now is None else now
    found = []
    for path in sorted(state_root.glob("*/state.json")):
        if switch_daemon_runs(path.parent):
            continue
        try:
            complete = json.loads(path.read_text()).get("complete") is True
            age = now - path.stat().st_mtime
        except (OSError, ValueError, AttributeError):
            complete, age = False, STALE_BUILD_S  # unreadable: a killed write
        if complete or age >= STALE_BUILD_S:
            found.append(path.parent.name)
    return found


def down_stale(state_root: Path = DEFAULT_STATE_ROOT) -> list[str]:
    """Remove every fabric of :func:`stale_fabrics`; their names."""
    removed = []
    for name in stale_fabrics(state_root):
        log.warning("fabric %s: its switch daemon is gone; removing what it recorded", name)
        try:
            stopped = slurm.down(name, state_root=state_root)
            if stopped:
                log.warning("fabric %s: stopped its %d Slurm daemons", name, stopped)
            down(name, state_root=state_root)
        except SdnMpiError as exc:
            log.error("fabric %s: %s", name, exc)
            continue
        removed.append(name)
    return removed
