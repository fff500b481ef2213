"""The plugin's hooks as Slurm calls them: fake_slurm_host (csrc/spank/tests/fake_slurm.cpp)
dlopens build/spank/sdnmpi_spank.so, provides the SPANK API with Slurm's per-context
item rules, and runs the hooks of srun, sbatch, slurmstepd or slurmd in order, against
the recording test server.  Real slurmd runs are integration tests elsewhere.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdnmpi.node.duplex import duplex_env
from sdnmpi.wire import manager_pb2 as pb
from tests.spank import fake_manager as fm
from tests.spank.conftest import OUT, SpankBuild

BATCH_STEP = "0xfffffffb"  # SLURM_BATCH_SCRIPT


@dataclass(frozen=True)
class HostRun:
    """Hook return codes (stdout "hook=rc" lines) and the plugin's log lines."""

    rc: int
    hooks: dict[str, str]
    lines: list[str]
    elapsed_s: float


def host(build: SpankBuild, context: str, *opts: str, args: tuple[str, ...] = ()) -> HostRun:
    cmd = [str(OUT / "fake_slurm_host"), str(build.plugin), context, *opts, "--", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    hooks = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert "unloaded" in proc.stdout, proc.stdout + proc.stderr  # no crash, dlclose included
    lines = proc.stderr.splitlines()
    for line in lines:
        assert line.split(": ", 1)[1].startswith("sdnmpi: "), line
    return HostRun(proc.returncode, hooks, lines, time.monotonic() - t0)


def errors(run: HostRun) -> list[str]:
    return [line for line in run.lines if line.startswith("error: ")]


@pytest.fixture
def manager() -> Iterator[fm.RunningServer]:
    d = Path(tempfile.mkdtemp(prefix="spank-", dir="/tmp"))
    srv = fm.serve(str(d / "m.sock"))
    yield srv
    srv.stop()
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


def test_slurmd_context_registers_nothing_and_calls_nobody(spank_build, manager) -> None:
    run = host(spank_build, "slurmd", args=(f"manager={manager.address}",))
    assert run.hooks["init"] == "0"
    assert run.hooks["registered"] == "0"
    assert run.lines == []
    assert manager.servicer.rec.methods() == []


def test_sbatch_checks_the_value_at_submission(spank_build, manager, tmp_path) -> None:
    bad = host(spank_build, "allocator", "--opt", "./no.json", args=(f"manager={manager.address}",))
    assert bad.rc == 1
    assert bad.hooks["option"] == "-1"
    assert errors(bad) == [
        "error: sdnmpi: --comm-pattern='./no.json': no such file, and not a pattern name "
        "([A-Za-z0-9_.:=,-]{1,256})"
    ]
    pattern = tmp_path / "p.json"
    pattern.write_text("{}")
    good = host(
        spank_build, "allocator", "--opt", str(pattern), args=(f"manager={manager.address}",)
    )
    assert (good.rc, good.hooks["option"], good.lines) == (0, "0", [])
    assert manager.servicer.rec.methods() == []  # no job id yet: no RPC from sbatch


def test_srun_offers_the_pattern_and_finishes_the_job(spank_build, manager, tmp_path) -> None:
    pattern = tmp_path / "ring.json"
    pattern.write_bytes(b'{"ring": 4}')
    run = host(
        spank_build,
        "local",
        "--opt",
        str(pattern),
        "--job",
        "77",
        "--uid",
        "1234",
        "--ntasks",
        "4",
        "--name",
        "lulesh",
        args=(f"manager={manager.address}",),
    )
    assert run.hooks["local_user_init"] == "0"
    assert errors(run) == []
    rec = manager.servicer.rec
    # srun runs as the user: it offers; the job is created by slurmstepd (remote)
    assert rec.methods() == ["OfferJob", "FinishJob"]
    (create,) = rec.requests("OfferJob")
    assert (create.job_id, create.name, create.uid, create.ntasks) == (77, "lulesh", 1234, 4)
    assert (create.pattern.file.filename, create.pattern.file.data) == ("ring.json", b'{"ring": 4}')


def test_srun_names_the_job_after_the_command_without_slurm_job_name(spank_build, manager) -> None:
    host(spank_build, "local", "--opt", "cg:8", args=(f"manager={manager.address}",))
    (create,) = manager.servicer.rec.requests("OfferJob")
    assert create.name == "mpi_app"
    assert create.pattern.name == "cg:8"


def test_no_option_no_default_no_rpc(spank_build, manager) -> None:
    for context in ("local", "remote"):
        run = host(spank_build, context, "--tasks", "0:10", args=(f"manager={manager.address}",))
        assert run.rc == 0 and run.lines == []
    assert manager.servicer.rec.methods() == []


def test_default_pattern_applies_in_srun_and_slurmstepd(spank_build, manager) -> None:
    args = (f"manager={manager.address}", "default_pattern=ring:2")
    host(spank_build, "local", args=args)
    host(spank_build, "remote", "--tasks", "0:10,1:11", args=args)
    methods = manager.servicer.rec.methods()
    assert methods[:4] == ["OfferJob", "FinishJob", "CreateJob", "StartJob"]
    assert manager.servicer.rec.requests("OfferJob")[0].pattern.name == "ring:2"
    assert "WaitRoutes" in methods


def test_slurmstepd_registers_all_local_ranks_then_waits_once(spank_build, manager) -> None:
    host(
        spank_build, "local", "--opt", "cg:8", "--ntasks", "4", args=(f"manager={manager.address}",)
    )
    run = host(
        spank_build,
        "remote",
        "--opt",
        "cg:8",
        "--tasks",
        "2:1002,3:1003",
        "--ntasks",
        "4",
        "--node-id",
        "1",
        args=(f"manager={manager.address}",),
    )
    assert run.hooks["task_post_fork[0]"] == "0"
    assert run.hooks["task_post_fork[1]"] == "0"
    rec = manager.servicer.rec
    # srun offered (and its exit's FinishJob found no job yet); node 1 creates the job
    # from the offer (or finds it created), registers its ranks, and does not finish
    assert rec.methods()[2:] == [
        "CreateJob", "StartJob", "RegisterProcess", "RegisterProcess", "WaitRoutes",
    ]  # fmt: skip
    (create,) = rec.requests("CreateJob")
    assert create.from_offer and create.job_id == rec.requests("OfferJob")[0].job_id
    regs = [(r.rank, r.node, r.pid) for r in rec.requests("RegisterProcess")]
    assert regs == [(2, socket.gethostname(), 1002), (3, socket.gethostname(), 1003)]
    assert [line for line in run.lines if "routes installed" in line]


def test_node_0_of_the_step_finishes_the_job(spank_build, manager) -> None:
    manager.servicer.jobs[42] = pb.Job(job_id=42, ntasks=1)
    host(
        spank_build,
        "remote",
        "--opt",
        "cg:8",
        "--tasks",
        "0:5",
        args=(f"manager={manager.address}",),
    )
    assert manager.servicer.rec.methods() == [
        "CreateJob", "StartJob", "RegisterProcess", "WaitRoutes", "FinishJob",
    ]  # fmt: skip


def test_the_batch_script_step_is_not_a_rank(spank_build, manager) -> None:
    run = host(
        spank_build,
        "remote",
        "--opt",
        "cg:8",
        "--step",
        BATCH_STEP,
        "--tasks",
        "0:5",
        args=(f"manager={manager.address}",),
    )
    assert run.rc == 0 and run.lines == []
    assert manager.servicer.rec.methods() == []


def test_manager_down_costs_one_line_per_process(spank_build, tmp_path) -> None:
    """srun's line is the user's (an error); each node's goes to slurmd's log (info),
    so the user's terminal does not repeat it once per node."""
    args = (f"manager=unix:{tmp_path}/none.sock", "connect_timeout=30")
    local = host(spank_build, "local", "--opt", "cg:8", args=args)
    remote = host(spank_build, "remote", "--opt", "cg:8", "--tasks", "0:5,1:6", args=args)
    ends = "No such file or directory); job 42 runs on default routes"
    (line,) = errors(local)
    assert line.endswith(ends)
    assert errors(remote) == []
    (info,) = [ln for ln in remote.lines if ln.startswith("info: ") and "unreachable" in ln]
    assert info.endswith(ends)
    for run in (local, remote):
        assert run.rc == 0
        assert run.elapsed_s < 10
    assert remote.hooks["task_post_fork[1]"] == "0"  # the tasks start anyway


def test_require_1_fails_the_step_when_the_manager_is_down(spank_build, tmp_path) -> None:
    args = (f"manager=unix:{tmp_path}/none.sock", "require=1")
    local = host(spank_build, "local", "--opt", "cg:8", args=args)
    assert local.hooks["local_user_init"] == "-1"
    remote = host(spank_build, "remote", "--opt", "cg:8", "--tasks", "0:5", args=args)
    assert remote.hooks["task_post_fork[0]"] == "-1"
    assert errors(remote)[0].endswith("; job 42 fails (require=1)")


def test_bad_plugstack_arguments_fail_init(spank_build) -> None:
    run = host(spank_build, "remote", "--opt", "cg:8", "--tasks", "0:5", args=("timeout=soon",))
    assert run.rc == 1
    assert run.hooks["init"] == "-1"
    assert errors(run) == [
        "error: sdnmpi: plugstack.conf: timeout='soon': expected seconds, e.g. 10 or 0.5; "
        "plugin disabled"
    ]


def job_env(run: HostRun) -> dict[str, str]:
    """The job's environment after the hooks (fake_slurm_host's "env NAME=VALUE" lines)."""
    return {k.removeprefix("env "): v for k, v in run.hooks.items() if k.startswith("env ")}


def test_a_step_with_a_pattern_gets_the_duplex_settings(spank_build, manager) -> None:
    args = (f"manager={manager.address}",)
    run = host(spank_build, "remote", "--opt", "cg:8", "--tasks", "0:5", args=args)
    assert run.hooks["user_init"] == "0"
    assert job_env(run) == duplex_env()
    done = "verbose: sdnmpi: job 42: full-duplex MPI settings: 8 set, 0 kept from the job's env"
    assert [line for line in run.lines if line.startswith(done)] == [done + "ironment"]
    default = host(spank_build, "remote", "--tasks", "0:5", args=(*args, "default_pattern=r:2"))
    assert job_env(default) == duplex_env()


def test_the_users_values_are_kept(spank_build, manager) -> None:
    run = host(
        spank_build,
        "remote",
        "--opt",
        "cg:8",
        "--tasks",
        "0:5",
        "--env",
        "UCX_RNDV_THRESH=64k",
        "--env",
        "OMPI_MCA_btl_tcp_eager_limit=",
        args=(f"manager={manager.address}",),
    )
    env = job_env(run)
    assert env["UCX_RNDV_THRESH"] == "64k"
    assert env["OMPI_MCA_btl_tcp_eager_limit"] == ""
    assert env["OMPI_MCA_btl_tcp_max_send_size"] == "4194304"
    assert any("6 set, 2 kept" in line for line in run.lines)


def test_no_duplex_settings_without_a_pattern_or_with_duplex_0(spank_build, manager) -> None:
    args = (f"manager={manager.address}",)
    plain = host(spank_build, "remote", "--tasks", "0:5", args=args)
    off = host(spank_build, "remote", "--opt", "cg:8", "--tasks", "0:5", args=(*args, "duplex=0"))
    batch = host(spank_build, "remote", "--opt", "cg:8", "--step", BATCH_STEP, "--tasks", "0:5",
                 args=args)  # fmt: skip
    for run in (plain, off, batch):
        assert run.hooks["user_init"] == "0"
        assert job_env(run) == {}
    assert plain.lines == [] and batch.lines == []


def test_srun_and_sbatch_set_nothing(spank_build, manager) -> None:
    """The settings go into the step's environment on the nodes, not the submitter's."""
    for context in ("local", "allocator"):
        run = host(spank_build, context, "--opt", "cg:8", args=(f"manager={manager.address}",))
        assert "user_init" not in run.hooks
        assert job_env(run) == {}
