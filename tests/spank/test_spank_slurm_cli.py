"""Real Slurm clients (srun, sbatch, salloc 22.05) load the plugin and check
--comm-pattern at submission.  No daemon is started or contacted: every case ends
in option processing, before a client talks to slurmctld; the private slurm.conf
points at port 1 on loopback, where nothing listens, in case one ever got further.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.spank.conftest import SpankBuild

SLURM_CONF = """\
ClusterName=spanktest
SlurmctldHost=localhost
SlurmctldPort=1
SlurmdPort=2
AuthType=auth/none
CredType=cred/none
PlugStackConfig={plugstack}
NodeName=n1 CPUs=1 State=UNKNOWN
PartitionName=p Nodes=n1 Default=YES
"""


@pytest.fixture
def slurm_env(spank_build: SpankBuild, tmp_path: Path) -> dict[str, str]:
    """SLURM_CONF for a private slurm.conf whose plugstack.conf loads the plugin."""
    if shutil.which("srun") is None:
        pytest.skip("Slurm clients not installed (apt-get install slurm-client)")
    plugstack = tmp_path / "plugstack.conf"
    plugstack.write_text(
        f"required {spank_build.plugin} manager=unix:{tmp_path}/none.sock timeout=3\n"
    )
    conf = tmp_path / "slurm.conf"
    conf.write_text(SLURM_CONF.format(plugstack=plugstack))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env["SLURM_CONF"] = str(conf)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=30, check=False, env=env, cwd=cwd
    )


def test_srun_help_lists_the_option(slurm_env, tmp_path) -> None:
    proc = _run(["srun", "--help"], slurm_env, tmp_path)
    assert "--comm-pattern=NAME|FILE" in proc.stdout, proc.stdout + proc.stderr
    assert "[sdnmpi] Communication pattern of the job" in proc.stdout


@pytest.mark.parametrize("client", ["srun", "sbatch", "salloc"])
def test_a_bad_value_is_refused_at_submission(slurm_env, tmp_path, client) -> None:
    args = [client, "--comm-pattern=./missing.json"]
    args += ["--wrap", "true"] if client == "sbatch" else ["true"]
    proc = _run(args, slurm_env, tmp_path)
    assert proc.returncode != 0
    assert (
        f"{client}: error: sdnmpi: --comm-pattern='./missing.json': no such file, "
        "and not a pattern name" in proc.stderr
    )
    assert "controller" not in proc.stderr  # refused before any contact


def test_sbatch_directive_is_checked(slurm_env, tmp_path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --comm-pattern=/etc\ntrue\n")
    proc = _run(["sbatch", str(script)], slurm_env, tmp_path)
    assert proc.returncode != 0
    assert "sbatch: error: sdnmpi: --comm-pattern='/etc': not a regular file" in proc.stderr


def test_bad_plugstack_arguments_stop_a_required_plugin(slurm_env, spank_build, tmp_path) -> None:
    plugstack = Path(slurm_env["SLURM_CONF"]).with_name("plugstack.conf")
    plugstack.write_text(f"required {spank_build.plugin} colour=blue\n")
    proc = _run(["srun", "--comm-pattern=cg:8", "true"], slurm_env, tmp_path)
    assert proc.returncode != 0
    assert "srun: error: sdnmpi: plugstack.conf: unknown plugstack argument 'colour'" in (
        proc.stderr
    )
    assert "init() failed" in proc.stderr
