"""The live console in a real browser (Debian's Chromium, headless, over the DevTools
protocol) against the emulated fabric under the real controller, with the real manager
routing a real Open MPI job: the page draws the job's paths, the ranks on their hosts,
the jobs table, and link loads that rise while the job runs and fall after it.

Measured (printed; run with ``-s``): the delay from leaf1's port counter moving to the
page showing the load.  ``SDNMPI_DOCS_SCREENSHOT=1`` also copies the screenshot to
docs/console.png.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from sdnmpi.console.view import link_id
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.topology import Topology
from sdnmpi.emu.plan import FabricPlan
from sdnmpi.manager.client import ManagerClient
from sdnmpi.testing.waits import free_port, wait_for
from tests.console.browser import CHROMIUM, Browser
from tests.console.support import (
    BUSY_BPS,
    SDNMPI,
    counter_to_page,
    port_towards,
    shown_bps,
    start,
    stop,
)
from tests.controller_integration.support import Controller, api, controlled_fabric
from tests.emu.support import require_root_and_tools
from tests.manager.test_server import write_pattern

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
JOB = 7
#: The controller's live poll interval while the console reads its rates (its default).
LIVE_INTERVAL_S = 0.5


def bench() -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT), "mpibench"], check=True, capture_output=True)
    exe = ROOT / "build" / "openmpi" / "sdnmpi-bench"
    if not exe.exists():
        pytest.fail("sdnmpi-bench (Open MPI) not built: apt-get install openmpi-bin libopenmpi-dev")
    return exe


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sdnmpi-con-") as d:
        yield Path(d)


def test_console_shows_a_running_mpi_jobs_paths_and_loads(tmp_path: Path, sock_dir: Path):
    require_root_and_tools()
    if not CHROMIUM.exists():
        pytest.fail("no Chromium: apt-get install -y chromium (scripts/install-system-deps.sh)")
    exe = bench()
    model = leaf_spine(2, 2, 2)
    procs: list[subprocess.Popen[bytes]] = []
    browsers: list[Browser] = []  # filled as soon as it starts: closed however _run ends
    # the controller's defaults: port statistics every 2 s, every 0.5 s while watched
    with controlled_fabric(tmp_path, model, "con") as (
        plan,
        ctl,
    ):
        try:
            _run(tmp_path, sock_dir, model, plan, ctl, exe, procs, browsers)
        finally:
            for browser in browsers:
                browser.close()
            for proc in procs:
                stop(proc)


def _run(
    tmp_path: Path,
    sock_dir: Path,
    model: Topology,
    plan: FabricPlan,
    ctl: Controller,
    exe: Path,
    procs: list[subprocess.Popen[bytes]],
    browsers: list[Browser],
) -> None:
    mgr_sock = sock_dir / "manager.sock"
    procs.append(start([*SDNMPI, "manager", "run", "--socket", str(mgr_sock), "--db",
                        str(sock_dir / "m.db"), "--controller-api", str(ctl.api_path)],
                       tmp_path / "manager.log", "", 30))  # fmt: skip
    wait_for("the manager's socket", mgr_sock.exists, 30)
    port = free_port()
    procs.append(start([*SDNMPI, "console", "run", "--controller-api", str(ctl.api_path),
                        "--manager", str(mgr_sock), "--port", str(port)],
                       tmp_path / "console.log", "console: serving"))  # fmt: skip
    _polls_live(ctl)
    with ManagerClient(str(mgr_sock)) as mgr:
        mgr.create_job(JOB, "bench", 0, 2, pattern_file=write_pattern(sock_dir / "p.json"))
        mgr.start_job(JOB)
        mgr.register_process(JOB, 0, "h1")
        mgr.register_process(JOB, 1, "h3")
        assert mgr.wait_routes(JOB, 20000).installed
    routes = api(ctl, {"op": "jobs"})["jobs"]
    assert isinstance(routes, dict)
    path = routes[str(JOB)]["h1>h3"]
    spine = path[2]
    assert path[0:2] == ["h1", "leaf1"] and spine.startswith("spine"), path
    uplink = f"leaf1|{spine}"
    job_links = {link_id(a, b) for p in routes[str(JOB)].values() for a, b in pairwise(p)}

    # a tagged job as node agents report one (ranks 0, 1 on h2, h4; a broadcast announced)
    coll = {"name": "bcast", "root": 0, "count": 1 << 20, "type_bytes": 1, "comm": None}
    assert api(ctl, {"op": "tag_collectives", "job": "9", "collectives": [coll]})["ok"]
    for rank, host in enumerate(["h2", "h4"]):
        req = {"op": "tag_join", "job": "9", "rank": rank, "nprocs": 2, "host": host}
        assert api(ctl, req)["ok"]
    tagged = api(ctl, {"op": "tagged"})["tagged"]
    assert isinstance(tagged, dict)
    bcast_links = {
        link_id(a, b) for f in tagged["9"]["routes"]["bcast"] for a, b in pairwise(f["path"])
    }

    browser = Browser(tmp_path / "chromium.log")
    browsers.append(browser)
    browser.open(f"http://127.0.0.1:{port}/")
    drawn = (
        f"[...document.querySelectorAll('line.path[data-job=\"{JOB}\"]')].map(e => e.dataset.link)"
    )
    wait_for("the job's path on the page", lambda: set(browser.js(drawn) or []) == job_links, 20)
    prim = "line.path[data-tagged-job='9'][data-primitive='bcast']"
    shown = browser.js(f'[...document.querySelectorAll("{prim}")].map(e => e.dataset.link)')
    assert bcast_links and set(shown) == bcast_links
    row = (
        f"[...document.querySelectorAll('#jobs tr[data-job=\"{JOB}\"] td')].map(e => e.textContent)"
    )
    cells = browser.js(row)
    assert cells[0] == str(JOB) and cells[1] == "bench" and cells[2] == "routed", cells
    ranks = "[...document.querySelectorAll('text.ranks')].map(e => e.dataset.host + e.textContent)"
    assert set(browser.js(ranks)) >= {
        f"h1rank {JOB}:0",
        f"h3rank {JOB}:1",
        "h2rank 9:0",
        "h4rank 9:1",
    }
    switches = browser.js("[...document.querySelectorAll('rect.switch')].map(e => e.dataset.node)")
    assert sorted(switches) == ["leaf1", "leaf2", "spine1", "spine2"]
    wait_for("loads on the page", lambda: browser.js("document.body.dataset.loadsServed"), 10)
    idle = shown_bps(browser, uplink)
    assert idle < BUSY_BPS, idle

    leaf_port = port_towards(model, "leaf1", spine)
    mpirun = [*SDNMPI, "emu", "mpirun", "--name", plan.name, "-n", "2", "--mpi", "openmpi",
              "--hosts", "h1,h3", "--timeout", "90", "--", str(exe), "pairs", "--oneway",
              "--shift", "1", "--size", str(1 << 20), "--duration", "8", "--warmup", "1",
              "--json"]  # fmt: skip
    job = subprocess.Popen(mpirun, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        delay = counter_to_page(
            browser, plan, "leaf1", leaf_port, uplink, lambda: job.poll() is None
        )
        assert delay is not None, job.poll()
        time.sleep(1.0)
        first = shown_bps(browser, uplink)
        browser.screenshot(tmp_path / "console.png")
        time.sleep(1.0)
        second = shown_bps(browser, uplink)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, out + err
    wait_for("the load to fall", lambda: shown_bps(browser, uplink) < BUSY_BPS, 5)
    assert first > BUSY_BPS and second > BUSY_BPS  # idle before, busy twice, idle after
    png = (tmp_path / "console.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    if os.environ.get("SDNMPI_DOCS_SCREENSHOT"):
        shutil.copy(tmp_path / "console.png", ROOT / "docs" / "console.png")
    result = json.loads(next(ln for ln in out.splitlines() if ln.startswith("{")))["results"][0]
    print(
        f"\nconsole: leaf1->{spine} counter moved, the page showed it {delay.low:.3f} s later "
        f"(at most {delay.high:.3f} s); "
        f"loads shown {first / 1e6:.1f}, {second / 1e6:.1f} Mbit/s "
        f"(MPI {result['iterations']} x 1 MiB); "
        f"controller polling every {LIVE_INTERVAL_S} s while watched; "
        f"screenshot {tmp_path / 'console.png'}"
    )
    with ManagerClient(str(sock_dir / "manager.sock")) as mgr:
        mgr.finish_job(JOB)


def _polls_live(ctl: Controller) -> None:
    """With the console reading the port rates, the controller polls every
    :data:`LIVE_INTERVAL_S` instead of its default 2 s: over 3 s, one port's rates come
    from at least 3 polls (about 6; at most 2 at the default interval, so a loaded
    machine that delays some polls does not fail it)."""
    times: dict[tuple[int, int], set[float]] = {}
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        ports = api(ctl, {"op": "port_stats"})["ports"]
        assert isinstance(ports, list)
        for rate in ports:
            times.setdefault((rate["dpid"], rate["port_no"]), set()).add(rate["time_s"])
        time.sleep(0.1)
    polls = max((len(t) for t in times.values()), default=0)
    assert polls >= 3, f"port statistics from {polls} polls in 3 s: not polling live"
