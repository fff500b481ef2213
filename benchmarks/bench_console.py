"""The live console's freshness and isolation on the emulated fabric (root).

Run with ``.venv/bin/python benchmarks/bench_console.py [--bursts N]
[--stats-interval S]``: leaf_spine(2, 2, 2) under ``sdnmpi controller run``
(its defaults, or ``--stats-interval S``), ``sdnmpi console run`` beside it, headless Chromium
on the page, and a job route h1 <-> h3 through spine2.  Measured and printed:

* counter to page: N bursts of Open MPI traffic h1 -> h3 (``sdnmpi-bench pairs``, 2 s
  each); for each, the time from leaf1's port counter towards spine2 moving (read with
  ``ovs-ofctl dump-ports`` every ~10 ms) to the page showing the link busy (read in the
  browser the same way): lower bound (counter first seen moved) and upper bound (last
  seen unmoved).  Ratio of the worst upper bound to the 1 s target.
* isolation: the controller's ``install_job`` + ``remove_job`` round trip (barriers
  confirmed), 20 times with the console idle before and 20 after, and 20 times while 200
  clients hold connections to the console and others send it garbage: medians and
  their ratio.

Everything started is stopped, and the fabric removed, on exit, also on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.console.browser import Browser  # noqa: E402
from tests.console.support import (  # noqa: E402
    BUSY_BPS,
    SDNMPI,
    Delay,
    counter_to_page,
    port_towards,
    shown_bps,
    start,
    stop,
)
from tests.controller_integration.support import controlled_fabric  # noqa: E402

from sdnmpi.core.generators import leaf_spine  # noqa: E402
from sdnmpi.emu.plan import FabricPlan  # noqa: E402
from sdnmpi.testing.waits import free_port, wait_for  # noqa: E402
from sdnmpi.wire.controller_api import Client  # noqa: E402

PAIRS = {
    ("h1", "h3"): ["h1", "leaf1", "spine2", "leaf2", "h3"],
    ("h3", "h1"): ["h3", "leaf2", "spine2", "leaf1", "h1"],
}


def flood(port: int, stop_at: threading.Event) -> None:
    """200 connections held open, and garbage sent on new ones, until ``stop_at``."""
    held: list[socket.socket] = []
    try:
        for _ in range(200):
            with contextlib.suppress(OSError):
                held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        while not stop_at.is_set():
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), timeout=2) as s,
            ):
                s.sendall(b"\x16\x03\x01garbage" * 100 + b"\r\n\r\n")
                s.recv(100)
    finally:
        for s in held:
            s.close()


def round_trips(client: Client, n: int) -> list[float]:
    """Seconds of ``n`` install_job + remove_job requests (each after its barriers)."""
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        client.install_job(99, {("h2", "h4"): ["h2", "leaf1", "spine1", "leaf2", "h4"]})
        client.remove_job(99)
        out.append(time.monotonic() - t0)
    return out


def bursts(browser: Browser, plan: FabricPlan, leaf_port: int, exe: Path, n: int) -> list[Delay]:
    """``n`` bursts of MPI traffic h1 -> h3: each one's counter-to-page delay."""
    delays = []
    for _ in range(n):
        wait_for("an idle link", lambda: shown_bps(browser, "leaf1|spine2") < BUSY_BPS, 10)
        job = subprocess.Popen(
            [*SDNMPI, "emu", "mpirun", "--name", plan.name, "-n", "2", "--mpi",
             "openmpi", "--hosts", "h1,h3", "--timeout", "60", "--", str(exe), "pairs",
             "--oneway", "--shift", "1", "--size", str(1 << 20), "--duration", "2",
             "--warmup", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            delay = counter_to_page(browser, plan, "leaf1", leaf_port, "leaf1|spine2", lambda: True)
            job.wait(timeout=90)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
        if delay is None:
            sys.exit("the page never showed the burst")
        delays.append(delay)
        print(f"burst: counter -> page {delay.low:.3f} s (at most {delay.high:.3f} s)")
    return delays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument(
        "--stats-interval",
        default=None,
        help="the controller's --stats-interval (default: its own, 2 s; 0.5 s while watched)",
    )
    args = parser.parse_args()
    subprocess.run(["make", "-s", "-C", str(ROOT), "mpibench"], check=True)
    exe = ROOT / "build" / "openmpi" / "sdnmpi-bench"
    model = leaf_spine(2, 2, 2)
    work = Path(tempfile.mkdtemp(prefix="sdnmpi-bench-console-"))
    flags = [] if args.stats_interval is None else ["--stats-interval", args.stats_interval]
    with controlled_fabric(work, model, "bcon", *flags) as (
        plan,
        ctl,
    ):
        port = free_port()
        argv = [
            *SDNMPI,
            "console",
            "run",
            "--controller-api",
            str(ctl.api_path),
            "--port",
            str(port),
        ]
        console = start(argv, work / "console.log", "console: serving")
        browser = None
        try:
            client = Client(ctl.api_path, timeout_s=20)
            client.install_job(7, PAIRS)
            browser = Browser(work / "chromium.log")
            browser.open(f"http://127.0.0.1:{port}/")
            wait_for("the page", lambda: browser.js("document.body.dataset.loadsServed"), 20)
            delays = bursts(browser, plan, port_towards(model, "leaf1", "spine2"), exe, args.bursts)
            quiet = round_trips(client, 20)
            done = threading.Event()
            flooder = threading.Thread(target=flood, args=(port, done))
            flooder.start()
            time.sleep(1.0)
            try:
                busy = round_trips(client, 20)
            finally:
                done.set()
                flooder.join()
            quiet += round_trips(client, 20)  # idle again: before and after, one median
        finally:
            if browser is not None:
                browser.close()
            stop(console)
    worst = max(d.high for d in delays)
    print(
        f"\ncounter -> page over {len(delays)} bursts (controller --stats-interval "
        f"{args.stats_interval or 'default'}, console 0.1 s, page 0.2 s): median "
        f"{statistics.median(d.low for d in delays):.3f} s, worst {worst:.3f} s; "
        f"worst / 1 s target = {worst:.2f}"
    )
    q, b = statistics.median(quiet), statistics.median(busy)
    print(
        f"install_job + remove_job round trip: {q * 1e3:.1f} ms median with the console idle, "
        f"{b * 1e3:.1f} ms with 200 connections and garbage at the console; ratio {b / q:.2f}"
    )
    print(f"logs: {work}")


if __name__ == "__main__":
    main()
