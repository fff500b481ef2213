"""The SPANK plugin's ``duplex`` key (default 1) on a real Slurm: the tasks of a step with
``--comm-pattern`` start with the full-duplex MPI settings (sdnmpi.node.duplex) in their
environment, a value the user exported kept; a step without a pattern gets none; and an
Open MPI rank of such a step runs with the raised TCP limits (its own report of where
each MCA parameter came from)."""

from __future__ import annotations

import re
import subprocess

import pytest

from sdnmpi.node.duplex import duplex_env
from tests.slurm_integration.conftest import BENCH, SlurmCluster

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]


def task_envs(res: subprocess.CompletedProcess[str], ntasks: int) -> list[dict[str, str]]:
    """Each task's environment from ``srun -l env`` ("RANK: NAME=VALUE" lines)."""
    assert res.returncode == 0, res.stderr[-3000:]
    envs: list[dict[str, str]] = [{} for _ in range(ntasks)]
    for line in res.stdout.splitlines():
        m = re.fullmatch(r"\s*(\d+): ([A-Za-z_][A-Za-z0-9_]*)=(.*)", line)
        if m:
            envs[int(m.group(1))][m.group(2)] = m.group(3)
    assert all(envs), res.stdout[-3000:]
    return envs


def duplex_part(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in duplex_env()}


def test_tasks_of_a_step_with_a_pattern_get_the_settings(cluster: SlurmCluster) -> None:
    res = cluster.srun("-N2", "-n2", "-l", "--comm-pattern=shift2", "env")
    for env in task_envs(res, 2):
        assert duplex_part(env) == duplex_env()


def test_a_value_the_user_exported_is_kept(cluster: SlurmCluster) -> None:
    res = cluster.srun(
        "-N2", "-n2", "-l", "--comm-pattern=shift2", "--export=ALL,UCX_RNDV_THRESH=65536", "env"
    )
    for env in task_envs(res, 2):
        assert duplex_part(env) == {**duplex_env(), "UCX_RNDV_THRESH": "65536"}


def test_tasks_of_a_step_without_a_pattern_get_none(cluster: SlurmCluster) -> None:
    res = cluster.srun("-N2", "-n2", "-l", "env")
    for env in task_envs(res, 2):
        assert duplex_part(env) == {}


def test_open_mpi_ranks_run_with_the_raised_limits(cluster: SlurmCluster) -> None:
    """``mpi_show_mca_params`` makes rank 0 print every MCA parameter with its source."""
    bench = [str(BENCH), "latency", "--size", "1", "--iters", "10", "--warmup", "1"]
    show = "--export=ALL,OMPI_MCA_mpi_show_mca_params=all"
    res = cluster.srun("-N2", "-n2", "--comm-pattern=shift2", show, *bench)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout + res.stderr
    for name in ("btl_tcp_eager_limit", "btl_tcp_rndv_eager_limit", "btl_tcp_max_send_size"):
        assert re.search(rf"\b{name}=4194304 \(environment\)", out), out[-3000:]
    plain = cluster.srun("-N2", "-n2", show, *bench)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert re.search(r"\bbtl_tcp_eager_limit=65536 \(default\)", plain.stdout + plain.stderr)
