"""Two real unprivileged users against the manager on a real Slurm (issue 12).

The test creates two system users (removed after), then plays the attacks that
succeeded before job identity came from the scheduler, each as the attacker's own
uid through the manager's public socket (SO_PEERCRED), while the victim runs a
real ``srun --comm-pattern`` job as their own uid:

- squatting: the attacker creates the victim's future Slurm job ids (refused) and
  offers a pattern of their own for them (kept under the attacker's uid, never
  taken);
- claiming host pairs: the attacker's own job (outside Slurm) registered on the
  victim's nodes first; the victim's Slurm job takes the pairs;
- reading: GetJob, RegisterProcess and ListJobs on the victim's job, and the
  database file;
- flooding: more connections than a user may hold, while the victim is served.

Each attack fails with a clear error, and the victim's job is routed with its own
pattern on its own nodes.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.slurm_integration.conftest import SlurmCluster
from tests.slurm_integration.test_slurm import manager_job, watch_jobs

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


#: Run first in every user process: load what the attack needs while still root (the
#: interpreter and the virtualenv may live where users cannot read, as /root/.pyenv
#: does here), then become the user for good: uid, gid, no supplementary groups.  From
#: then on the kernel, and so SO_PEERCRED, knows the process only as that user.
BECOME = """
import json, os, socket, sys
from sdnmpi.manager.client import ManagerClient
from sdnmpi.manager.model import ManagerError
_uid, _gid = int(os.environ["AS_UID"]), int(os.environ["AS_GID"])
os.setgroups([])
os.setgid(_gid)
os.setuid(_uid)
assert (os.getuid(), os.geteuid(), os.getgid(), os.getgroups()) == (_uid, _uid, _gid, [])
"""


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def argv(self, code: str, *args: str) -> list[str]:
        return [sys.executable, "-c", BECOME + textwrap.dedent(code), *args]

    def env(self) -> dict[str, str]:
        return {**os.environ, "AS_UID": str(self.uid), "AS_GID": str(self.gid)}

    def run_python(
        self, code: str, *args: str, timeout_s: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``code`` as this user (after :data:`BECOME`)."""
        return subprocess.run(self.argv(code, *args), env=self.env(), cwd="/",
                              capture_output=True, text=True, timeout=timeout_s,
                              check=False)  # fmt: skip


@pytest.fixture(scope="module")
def users() -> Iterator[tuple[User, User]]:
    """Two fresh system users, deleted afterwards (only the ones this test created)."""
    made: list[str] = []
    try:
        for role in ("a", "b"):
            name = f"sdnt{os.getpid() % 100000}{role}"
            res = subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                 "--user-group", name],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if res.returncode != 0:
                pytest.skip(f"cannot create a test user: {res.stderr.strip()}")
            made.append(name)
        alice, bob = (pwd.getpwnam(n) for n in made)
        yield (User(alice.pw_name, alice.pw_uid, alice.pw_gid),
               User(bob.pw_name, bob.pw_uid, bob.pw_gid))  # fmt: skip
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True, check=False)


#: The attacker's calls, as one script: prints one JSON line of outcomes.
ATTACKS = """
    sock, uid, step = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    out = {}

    def outcome(name, call):
        try:
            call()
            out[name] = "ok"
        except ManagerError as exc:
            out[name] = exc.kind.name + ": " + str(exc)

    with ManagerClient(sock) as c:
        if step == "claim":
            own = 2**32 + 1
            c.create_job(own, "claim", uid, 4, pattern="shift4")
            c.start_job(own)
            for rank, node in enumerate(["h1", "h2", "h3", "h4"]):
                c.register_process(own, rank, node)
            out["claimed"] = c.get_job(own).state
        elif step == "squat":
            refused = set()
            for job_id in range(1, 201):
                try:
                    c.create_job(job_id, "squat", uid, 4, pattern="shift4")
                except ManagerError as exc:
                    refused.add(exc.kind.name)
                else:
                    refused.add("CREATED")
            out["squat"] = sorted(refused)
            offered = 0
            for job_id in range(1, 61):
                c.offer_job(job_id, "squat", uid, 4, pattern="alltoall:nprocs=4,bytes=1048576")
                offered += 1
            out["offered"] = offered
        elif step == "read":
            victim = int(sys.argv[4])
            outcome("get", lambda: c.get_job(victim))
            outcome("register", lambda: c.register_process(victim, 0, "h1"))
            outcome("finish", lambda: c.finish_job(victim))
            out["list"] = [j.job_id for j in c.list_jobs(include_finished=True)]
            own = c.get_job(2**32 + 1)
            out["own"] = [own.state, own.routes.detail]
    print(json.dumps(out))
"""

#: Holds more connections than one user may, reports the refusal, waits for stdin.
FLOOD = """
    sock, n = sys.argv[1], int(sys.argv[2])
    held = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock)
        held.append(s)
    try:
        with ManagerClient(sock, timeout_s=10) as c:
            c.list_jobs()
        out = {"call": "ok"}
    except ManagerError as exc:
        out = {"call": exc.kind.name + ": " + str(exc)}
    print(json.dumps(out), flush=True)
    sys.stdin.read()
"""


def attack(user: User, cluster: SlurmCluster, step: str, *extra: str) -> dict[str, Any]:
    res = user.run_python(ATTACKS, str(cluster.manager.socket), str(user.uid), step, *extra)
    assert res.returncode == 0, res.stderr[-3000:]
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def test_a_hostile_user_captures_nothing(cluster: SlurmCluster, users: tuple[User, User]) -> None:
    alice, bob = users
    # claiming: bob's own job (outside Slurm) routed on every host pair alice will use
    assert attack(bob, cluster, "claim")["claimed"] == 3  # ROUTED
    # squatting: bob cannot create Slurm job ids, only offer for them as himself
    squat = attack(bob, cluster, "squat")
    assert squat == {"squat": ["PERMISSION_DENIED"], "offered": 60}, squat
    # alice's real job, as alice, through srun and the SPANK plugin
    argv = ["setpriv", f"--reuid={alice.uid}", f"--regid={alice.gid}", "--clear-groups",
            "srun", "-N4", "-n4", "--comm-pattern=shift4", "sleep", "2"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-c", "from sdnmpi.cli.main import main; main()", "emu", "slurm",
         "run", "--name", cluster.plan.name, "--", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/tmp",
    )  # fmt: skip
    seen = watch_jobs(cluster, [proc])
    _, err = proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    slurm_jobs = [int(j) for j in seen if int(j) < 2**32]
    assert len(slurm_jobs) == 1, (seen, err[-2000:], cluster.manager.log()[-3000:])
    (job_id,) = slurm_jobs
    # routed with alice's pattern (shift4: h1>h3, h2>h4), not bob's offered all-to-all
    assert set(seen[str(job_id)]) == {"h1>h3", "h2>h4"}, seen
    job = manager_job(cluster, job_id)
    assert (job.uid, job.pattern) == (alice.uid, "shift4")
    assert {p.node for p in job.processes} == {"h1", "h2", "h3", "h4"}
    # reading: alice's job is not there for bob; his own claim lost its pairs
    read = attack(bob, cluster, "read", str(job_id))
    assert read["get"] == read["register"] == f"NOT_FOUND: no job {job_id}"
    # (bob's FinishJob withdraws his own useless offer for that id, nothing else)
    assert read["finish"].startswith(f"NOT_FOUND: no job {job_id}")
    assert job_id not in read["list"]
    assert read["own"][0] == 4 and f"scheduler job {job_id}" in read["own"][1]  # DEFAULT
    peek = bob.run_python("import sys; open(sys.argv[1], 'rb').read(1)", str(cluster.manager.db))
    assert peek.returncode != 0 and "PermissionError" in peek.stderr


def test_a_flooding_user_is_refused_and_others_are_served(
    cluster: SlurmCluster, users: tuple[User, User]
) -> None:
    alice, bob = users
    flood = subprocess.Popen(
        bob.argv(FLOOD, str(cluster.manager.socket), "40"), env=bob.env(), cwd="/",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert flood.stdout is not None
        line = flood.stdout.readline()
        assert line, flood.stderr.read() if flood.stderr else ""
        refused = json.loads(line)["call"]
        assert refused.startswith("RESOURCE_EXHAUSTED: ") and "limit 32 per user" in refused
        served = alice.run_python(
            """
            with ManagerClient(sys.argv[1], timeout_s=10) as c:
                print(len(c.list_jobs(include_finished=True)))
            """,
            str(cluster.manager.socket),
        )
        assert served.returncode == 0, served.stderr[-2000:]
    finally:
        flood.communicate(input="", timeout=30)
