"""libsdnmpi_idle.so (csrc/idle) and how sdnmpi emu mpirun preloads it: no root needed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sdnmpi.cli.main import main
from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import idle
from sdnmpi.emu import mpi as emu_mpi
from sdnmpi.emu.plan import make_plan
from sdnmpi.emu.state import FabricState, save_state
from sdnmpi.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def idle_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("idle-build")
    subprocess.run(
        ["make", "-s", "-C", str(REPO / "csrc" / "idle"), "all", f"BUILD={out}"],
        check=True,
        capture_output=True,
    )
    return out / "idle"


def _ompi_env(argv: tuple[str, ...]) -> dict[str, str]:
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    return dict(p.split("=", 1) for p in pairs)


def test_c_unit_tests(idle_build: Path) -> None:
    out = subprocess.run(
        [str(idle_build / "test_idle")], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("test_idle: ") and " 0 failures" in out.stdout


def _yield_time(idle_build: Path, calls: int, **env: str) -> float:
    full = {**os.environ, **env}
    out = subprocess.run(
        [str(idle_build / "yielder"), str(calls)],
        env=full,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout)


def test_preloaded_yield_sleeps_and_zero_spins(idle_build: Path) -> None:
    """Lower bounds hold whatever the machine does; the calls that must not sleep are
    few (10) against a 5 ms sleep, so a loaded machine's slow yields do not fail it."""
    lib = str(idle_build / "libsdnmpi_idle.so")
    # 50 + 100 + 98 * 200 us = 19.75 ms at least
    assert _yield_time(idle_build, 100, LD_PRELOAD=lib) >= 0.01975
    assert _yield_time(idle_build, 100, LD_PRELOAD=lib, SDNMPI_IDLE_US="lots") >= 0.01975
    assert _yield_time(idle_build, 10, LD_PRELOAD=lib, SDNMPI_IDLE_US="5000") >= 0.05
    assert _yield_time(idle_build, 10) < 0.04
    assert _yield_time(idle_build, 10, LD_PRELOAD=lib, SDNMPI_IDLE_US="0") < 0.04


def _progress_time(idle_build: Path, calls: int, events: int, **env: str) -> float:
    out = subprocess.run(
        [str(idle_build / "progresser"), str(calls), str(events)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout)


def test_preloaded_ucx_progress_sleeps_only_when_it_found_nothing(idle_build: Path) -> None:
    """MPICH over UCX waits in ucp_worker_progress (a stand-in UCX here): empty passes
    sleep like yields, passes with events and IDLE_US=0 do not, events pass through."""
    lib = str(idle_build / "libsdnmpi_idle.so")
    assert _progress_time(idle_build, 100, 0, LD_PRELOAD=lib) >= 0.01975
    assert _progress_time(idle_build, 10, 0, LD_PRELOAD=lib, SDNMPI_IDLE_US="5000") >= 0.05
    assert _progress_time(idle_build, 10, 0) < 0.04
    assert _progress_time(idle_build, 10, 3, LD_PRELOAD=lib, SDNMPI_IDLE_US="5000") < 0.04
    assert _progress_time(idle_build, 10, 0, LD_PRELOAD=lib, SDNMPI_IDLE_US="0") < 0.04


def test_an_idle_ucx_worker_waits_on_its_descriptor_for_at_most_the_sleep(
    idle_build: Path,
) -> None:
    """An empty pass arms the worker and waits on its event descriptor: an event there
    (or events pending at arming) returns at once, where a fixed sleep would wait; a
    descriptor that stays quiet waits the schedule's sleep; a worker without one, or
    SDNMPI_IDLE_WAKE=0, sleeps as before."""
    lib = str(idle_build / "libsdnmpi_idle.so")
    slow = {"LD_PRELOAD": lib, "SDNMPI_IDLE_US": "5000"}
    assert _progress_time(idle_build, 10, 0, **slow, FAKEUCP_EFD="ready") < 0.04
    assert _progress_time(idle_build, 10, 0, **slow, FAKEUCP_ARM="busy") < 0.04
    assert _progress_time(idle_build, 10, 0, **slow, FAKEUCP_EFD="quiet") >= 0.05
    assert _progress_time(idle_build, 10, 0, **slow, FAKEUCP_EFD="none") >= 0.05
    no_wake = {**slow, "SDNMPI_IDLE_WAKE": "0"}
    assert _progress_time(idle_build, 10, 0, **no_wake, FAKEUCP_EFD="ready") >= 0.05


def _features(idle_build: Path, mask: int, features: int, **env: str) -> int:
    out = subprocess.run(
        [str(idle_build / "progresser"), "init", hex(mask), hex(features)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout, 16)


def test_ucx_contexts_ask_for_wake_up_unless_ranks_spin(idle_build: Path) -> None:
    """UCP_FEATURE_WAKEUP (bit 4) joins the features a context asks for (bit 0 of
    the field mask says they are given), and nothing else changes."""
    lib = str(idle_build / "libsdnmpi_idle.so")
    tag_rma = 0x1 | 0x2
    assert _features(idle_build, 0x1, tag_rma, LD_PRELOAD=lib) == tag_rma | 0x10
    assert _features(idle_build, 0x0, tag_rma, LD_PRELOAD=lib) == tag_rma
    assert _features(idle_build, 0x1, tag_rma, LD_PRELOAD=lib, SDNMPI_IDLE_US="0") == tag_rma
    assert _features(idle_build, 0x1, tag_rma, LD_PRELOAD=lib, SDNMPI_IDLE_WAKE="0") == tag_rma
    assert _features(idle_build, 0x1, tag_rma) == tag_rma


def _finish(idle_build: Path, **env: str) -> dict[str, int]:
    out = subprocess.run(
        [str(idle_build / "finisher")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()
    return {out[i]: int(out[i + 1]) for i in range(0, len(out), 2)}


def test_a_finishing_rank_keeps_answering_until_its_worker_goes(idle_build: Path) -> None:
    """MPICH 4.0's MPI_Finalize waits in a PMI barrier after closing its endpoints,
    progressing nothing, so a peer whose close needs an answer hangs.  Preloaded, the
    library progresses the worker while the rank sits there (the stand-in's barrier ends
    after 50 passes, or after about a second with none), never at the same time as one
    of the rank's own UCX calls (it asks every millisecond whether its request
    completed), and not after the worker was destroyed."""
    lib = str(idle_build / "libsdnmpi_idle.so")
    kept = _finish(idle_build, LD_PRELOAD=lib)
    assert kept == {"answered": 50, "overlaps": 0, "after_destroy": 0}
    assert _finish(idle_build, LD_PRELOAD=lib, SDNMPI_IDLE_US="0")["answered"] == 50
    assert _finish(idle_build, LD_PRELOAD=lib, SDNMPI_IDLE_KEEP="0")["answered"] == 0
    assert _finish(idle_build)["answered"] == 0


def test_only_sched_yield_and_the_ucx_calls_it_wraps_are_exported(idle_build: Path) -> None:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(idle_build / "libsdnmpi_idle.so")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    exported = sorted(ln.split()[-1] for ln in out.splitlines() if " T " in ln)
    assert exported == [
        "MPI_Finalize",
        "sched_yield",
        "ucp_disconnect_nb",
        "ucp_ep_close_nbx",
        "ucp_init_version",
        "ucp_request_free",
        "ucp_request_is_completed",
        "ucp_request_release",
        "ucp_worker_destroy",
        "ucp_worker_progress",
        "ucp_worker_release_address",
    ]


def test_idle_env_puts_the_library_first_and_keeps_the_callers_values() -> None:
    lib = Path("/opt/libsdnmpi_idle.so")
    env = idle.idle_env(lib, {"LD_PRELOAD": "/a.so /b.so", "SDNMPI_IDLE_US": "10,20"})
    assert env["LD_PRELOAD"] == "/opt/libsdnmpi_idle.so /a.so /b.so"
    assert env["SDNMPI_IDLE_US"] == "10,20"
    assert env["OMPI_MCA_mpi_yield_when_idle"] == "1"
    again = idle.idle_env(lib, env)
    assert again["LD_PRELOAD"].split().count(str(lib)) == 1


@pytest.mark.parametrize("bad", ["", "-1", "0,5", "20,10", "200001", "1,200001", "a", "1,2,3"])
def test_bad_idle_values(bad: str) -> None:
    with pytest.raises(ConfigError, match="FIRST"):
        idle.check_idle_us(bad)


def test_launch_line_and_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    plan = make_plan(leaf_spine(1, 2, 2), "idl")
    lib = tmp_path / "libsdnmpi_idle.so"
    lib.write_bytes(b"")
    argv = emu_mpi.mpi_launch(plan, ["./a"], nprocs=2, idle_library=lib, idle_us="20,100").argv
    env = _ompi_env(argv)
    assert env["LD_PRELOAD"] == str(lib) and env["SDNMPI_IDLE_US"] == "20,100"
    save_state(FabricState("rec", tmp_path, leaf_spine(1, 2, 2), 0.05, None, False, True))
    ran: list[list[str]] = []

    def fake_run(argv: list[str], env: object = None, timeout_s: object = None) -> int:
        ran.append(argv)
        return 0

    monkeypatch.setattr("sdnmpi.cli.emu.runner.run_foreground", fake_run)
    monkeypatch.setattr("sdnmpi.cli.emu.shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setenv("SDNMPI_IDLE_LIB", str(lib))
    base = ["emu", "mpirun", "-n", "2", "--name", "rec", "--state-dir", str(tmp_path)]
    for extra in ([], ["--idle-us", "0"]):
        with pytest.raises(SystemExit) as exc:
            main([*base, *extra, "--", "./bench"])
        assert exc.value.code == 0
    preloaded, spinning = (_ompi_env(tuple(a)) for a in ran)
    assert preloaded["LD_PRELOAD"] == str(lib)
    assert "LD_PRELOAD" not in spinning
    monkeypatch.setenv("SDNMPI_IDLE_LIB", str(tmp_path / "missing.so"))
    with pytest.raises(SystemExit):
        main([*base, "--", "./bench"])
    assert "not built" in capsys.readouterr().err
