"""``sdnmpi emu mpirun --duplex``: the full-duplex settings (sdnmpi.node.duplex) in every
rank's launch line, the user's ``--env`` winning over them.  Pure: no fabric, no MPI."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdnmpi.cli.main import main
from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import mpi as emu_mpi
from sdnmpi.emu.plan import FabricPlan, make_plan
from sdnmpi.emu.state import FabricState, save_state
from sdnmpi.node.duplex import duplex_env


def _plan() -> FabricPlan:
    return make_plan(leaf_spine(1, 2, 2), "dx")


def _ompi_env(argv: tuple[str, ...]) -> dict[str, str]:
    """The ``-x VAR=VALUE`` of an Open MPI launch line."""
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    return dict(p.split("=", 1) for p in pairs)


def _mpich_env(argv: tuple[str, ...]) -> dict[str, str]:
    """The ``-genv VAR VALUE`` of an MPICH launch line (UCX_TLS included)."""
    return {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "-genv"}


def test_openmpi_ranks_get_the_raised_tcp_limits() -> None:
    launch = emu_mpi.mpi_launch(_plan(), ["./a"], nprocs=2, mpi="openmpi", duplex=True)
    assert _ompi_env(launch.argv) == duplex_env("openmpi")
    assert _ompi_env(launch.argv)["OMPI_MCA_btl_tcp_eager_limit"] == "4194304"
    assert launch.argv[-1] == "./a"  # before the program, not in its arguments


def test_mpich_ranks_get_an_unbounded_rendezvous_threshold() -> None:
    launch = emu_mpi.mpi_launch(_plan(), ["./a"], nprocs=2, mpi="mpich", duplex=True)
    assert _mpich_env(launch.argv) == {"UCX_TLS": "tcp,self", **duplex_env("mpich")}
    assert _mpich_env(launch.argv)["UCX_RNDV_THRESH"] == "inf"


def test_without_duplex_the_line_is_unchanged() -> None:
    for mpi in ("openmpi", "mpich"):
        plain = emu_mpi.mpi_launch(_plan(), ["./a"], nprocs=2, mpi=mpi)
        off = emu_mpi.mpi_launch(_plan(), ["./a"], nprocs=2, mpi=mpi, duplex=False)
        assert plain == off
        assert not any("OMPI_MCA_btl_tcp" in a or "RNDV" in a for a in plain.argv)


def test_the_users_env_wins_and_is_kept() -> None:
    mine = {"OMPI_MCA_btl_tcp_eager_limit": "131072", "LD_PRELOAD": "/x/libsdnmpi.so"}
    ompi = emu_mpi.mpi_launch(_plan(), ["./a"], nprocs=2, rank_env=mine, duplex=True).argv
    env = _ompi_env(ompi)
    assert env == {**duplex_env("openmpi"), **mine}
    assert env["OMPI_MCA_btl_tcp_eager_limit"] == "131072"
    assert sum(a.startswith("OMPI_MCA_btl_tcp_eager_limit=") for a in ompi) == 1  # once
    mich = emu_mpi.mpi_launch(
        _plan(), ["./a"], nprocs=2, mpi="mpich", rank_env={"UCX_RNDV_THRESH": "8k"}, duplex=True
    ).argv
    assert _mpich_env(mich)["UCX_RNDV_THRESH"] == "8k"
    assert list(mich).count("UCX_RNDV_THRESH") == 1


def test_cli_duplex_reaches_the_launch_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The CLI flag and ``--env`` on a recorded fabric; the launch is caught before it runs."""
    save_state(FabricState("rec", tmp_path, leaf_spine(1, 2, 2), 0.05, None, False, True))
    ran: list[list[str]] = []

    def fake_run(argv: list[str], env: object = None, timeout_s: object = None) -> int:
        ran.append(argv)
        return 0

    monkeypatch.setattr("sdnmpi.cli.emu.runner.run_foreground", fake_run)
    monkeypatch.setattr("sdnmpi.cli.emu.shutil.which", lambda name: f"/usr/bin/{name}")
    base = ["emu", "mpirun", "-n", "2", "--name", "rec", "--state-dir", str(tmp_path)]
    base += ["--idle-us", "0"]  # spin: only the duplex variables reach the ranks
    for extra in (["--duplex"], ["--duplex", "--env", "OMPI_MCA_btl_tcp_max_send_size=65536"], []):
        with pytest.raises(SystemExit) as exc:
            main([*base, *extra, "--", "./bench", "bibw"])
        assert exc.value.code == 0, capsys.readouterr().err
    with_dx, mine, without = (_ompi_env(tuple(argv)) for argv in ran)
    assert with_dx == duplex_env("openmpi")
    assert mine["OMPI_MCA_btl_tcp_max_send_size"] == "65536"
    assert mine["OMPI_MCA_btl_tcp_eager_limit"] == "4194304"
    assert without == {}
    assert all(argv[-2:] == ["./bench", "bibw"] for argv in ran)
