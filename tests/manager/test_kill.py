"""The kill test (issue 12): ``sdnmpi manager run`` is SIGKILLed at random moments
while clients create, start, register and finish jobs; after each restart (which
reconciles with the controller) no job's routes on the controller differ from what
the store says, and no finished or unknown job has routes.

The controller is the JSON-lines stand-in of ``test_controller`` with a short delay
in each install and remove, so kills land between the controller acting and the
store recording it, where a leak would come from.  ``SDNMPI_KILLS`` sets the number
of kills (default 10; the closing note's figure comes from a longer run).
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

from sdnmpi.manager import planning
from sdnmpi.manager.client import ManagerClient
from sdnmpi.manager.model import JobState, ManagerError
from sdnmpi.manager.sqlite import SqliteStore
from tests.manager.test_controller import InProcessController, _start_manager, _stop
from tests.manager.test_server import write_pattern

KILLS = int(os.environ.get("SDNMPI_KILLS", "10"))
NODES = ["h1", "h2", "h5", "h6"]


class SlowController(InProcessController):
    """The controller, taking 20 ms more per install or remove (switches at work)."""

    def answer(self, req: dict[str, Any]) -> dict[str, Any]:
        if req.get("op") in ("install_job", "remove_job"):
            time.sleep(0.02)
        return super().answer(req)


def _jobs_loop(sock: Path, pattern: Path, first_id: int, stop: threading.Event) -> int:
    """Jobs through their life until the manager dies; the next id to use."""
    job_id = first_id
    try:
        with ManagerClient(str(sock), timeout_s=5) as c:
            while not stop.is_set():
                c.create_job(job_id, "k", 0, 4, pattern_file=pattern)
                c.start_job(job_id)
                for rank, node in enumerate(NODES):
                    c.register_process(job_id, rank, node)
                if job_id % 3:  # some jobs stay running across a kill
                    c.finish_job(job_id)
                job_id += 1
    except ManagerError:
        pass  # the manager was killed mid-call
    return job_id + 1


def _collect(out: list[int], *args: Any) -> None:
    out.append(_jobs_loop(*args))


def _leaks(db: Path, standin: InProcessController) -> list[str]:
    """Where the controller's job routes and the store disagree."""
    store = SqliteStore(db)
    try:
        jobs = {j.job_id: j for j in store.list_jobs(include_finished=True)}
    finally:
        store.close()
    out = []
    held = dict(standin.jobs)
    for key, pairs in held.items():
        job = jobs.get(int(key))
        if job is None or job.state is not JobState.ROUTED:
            state = "unknown" if job is None else job.state.name
            out.append(f"job {key} has routes on the controller but is {state}")
            continue
        want = {f"{s}>{d}": list(p) for (s, d), p in planning.pairs_of(job.routes).items()}
        if want != pairs:
            out.append(f"job {key}: the controller's routes differ from the store's")
    for job in jobs.values():
        if job.state is JobState.ROUTED and str(job.job_id) not in held:
            out.append(f"job {job.job_id} is ROUTED but the controller has no routes for it")
    return out


def test_sigkill_at_random_points_leaks_nothing(sock_dir: Path, topo):
    standin = SlowController(sock_dir / "ctl.sock", topo)
    pattern = write_pattern(sock_dir / "p.json", nprocs=4)
    rng = random.Random(12)
    next_id, kills, leaks = 1, 0, []
    try:
        for k in range(KILLS):
            proc = _start_manager(sock_dir, f"k{k}")
            leaks += [f"after restart {k}: {x}" for x in _leaks(sock_dir / "run.db", standin)]
            stop = threading.Event()
            result: list[int] = []
            worker = threading.Thread(
                target=_collect,
                args=(result, sock_dir / f"k{k}.sock", pattern, next_id, stop),
            )
            worker.start()
            time.sleep(rng.uniform(0.05, 0.6))
            proc.kill()
            kills += 1
            stop.set()
            worker.join(30)
            _stop(proc)
            next_id = result[0] if result else next_id + 100
        final = _start_manager(sock_dir, "final")
        leaks += [f"after the last restart: {x}" for x in _leaks(sock_dir / "run.db", standin)]
        _stop(final)
    finally:
        standin.server.close()
    print(f"\n{kills} kills, {next_id - 1} job ids used, {len(leaks)} leaks")
    assert kills == KILLS and next_id > KILLS  # jobs did run between the kills
    assert leaks == []
