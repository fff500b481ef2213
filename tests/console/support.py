"""Helpers of the console's browser test and benchmark: processes by PID, a switch port's
transmit counter, the load the page shows, and the delay from one to the other."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sdnmpi.core.topology import Topology
from sdnmpi.emu.plan import FabricPlan
from sdnmpi.emu.runner import stop_child
from sdnmpi.testing.waits import wait_for
from tests.console.browser import Browser
from tests.emu.support import ofctl

SDNMPI = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()"]
#: A link carrying more than this (bit/s) is busy; LLDP alone is a few kbit/s.
BUSY_BPS = 1e6
#: Bytes past the counter's value at the start that count as the traffic having begun
#: (what a 0.5 s sample over 1 Mbit/s holds).
MOVED_BYTES = 64 * 1024


def start(argv: list[str], log: Path, ready: str, timeout: float = 30) -> subprocess.Popen[bytes]:
    """``argv`` as a child process, once ``ready`` is in its output (``log``)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{argv[3:5]} exited: {log.read_text(errors='replace')}")
        return ready in log.read_text(errors="replace")

    wait_for(ready, up, timeout)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM (then SIGKILL) to our child by PID; its exit code."""
    return stop_child(proc)


def tx_bytes(plan: FabricPlan, switch: str, port: int) -> int:
    """Bytes switch ``switch`` has sent out of ``port`` (``ovs-ofctl dump-ports``)."""
    bridge = next(b.bridge for b in plan.bridges if b.switch == switch)
    out = ofctl(plan, "dump-ports", bridge, str(port))
    found = re.search(r"tx pkts=\d+, bytes=(\d+)", out)
    assert found is not None, out
    return int(found.group(1))


def port_towards(model: Topology, switch: str, peer: str) -> int:
    """The port of ``switch`` on its link to ``peer``."""
    ln = next(ln for ln in model.links if {ln.src, ln.dst} == {switch, peer})
    return ln.src_port if ln.src == switch else ln.dst_port


def shown_bps(browser: Browser, link: str) -> float:
    """The rate the page shows on ``link`` (its larger direction), bit/s."""
    value = browser.js(f"document.querySelector('text.load[data-link=\"{link}\"]')?.dataset.bps")
    return float(value or 0)


@dataclass(frozen=True)
class Delay:
    """When the counter was last seen unmoved, first seen moved, and the page showed it
    (monotonic seconds): the delay is ``shown - moved``, at most ``shown - before``."""

    before: float
    moved: float
    shown: float

    @property
    def low(self) -> float:
        return self.shown - self.moved

    @property
    def high(self) -> float:
        return self.shown - self.before


def counter_to_page(
    browser: Browser,
    plan: FabricPlan,
    switch: str,
    port: int,
    link: str,
    running: Callable[[], bool],
    timeout: float = 60,
) -> Delay | None:
    """Watch ``switch``'s ``port`` counter and the page's load of ``link`` (alternately,
    every 10 ms or so) while traffic starts: the :class:`Delay`, or ``None`` if the page
    never showed it while ``running()``."""
    base = tx_bytes(plan, switch, port)
    before = time.monotonic()
    moved = None
    deadline = before + timeout
    while time.monotonic() < deadline and running():
        now = time.monotonic()
        if moved is None:
            if tx_bytes(plan, switch, port) - base > MOVED_BYTES:
                moved = now
            else:
                before = now
        if moved is not None and shown_bps(browser, link) > BUSY_BPS:
            return Delay(before, moved, time.monotonic())
        time.sleep(0.01)
    return None
