"""The SPANK plugin builds hardened, exports only its entry points, and parses its
input (csrc/spank/tests/test_parse.cpp and the driver's `config` command)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.spank.conftest import SpankBuild

EXPORTED = {
    "plugin_name",
    "plugin_type",
    "plugin_version",
    "spank_plugin_version",
    "slurm_spank_init",
    "slurm_spank_local_user_init",
    "slurm_spank_user_init",
    "slurm_spank_task_post_fork",
    "slurm_spank_exit",
}


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=60, check=False
    )


def _dynamic_symbols(lib: Path, *flags: str) -> set[str]:
    if shutil.which("nm") is None:
        pytest.fail("nm not found (binutils)")
    proc = _run("nm", "-D", *flags, lib)
    assert proc.returncode == 0, proc.stderr
    # "__stack_chk_fail@GLIBC_2.4" -> "__stack_chk_fail"
    return {line.split()[-1].split("@")[0] for line in proc.stdout.splitlines() if line.strip()}


def test_parser_unit_tests_pass(test_parse_bin: Path) -> None:
    proc = _run(test_parse_bin)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.fullmatch(r"test_parse: (\d+) checks, 0 failures", proc.stdout.strip())
    assert m is not None, proc.stdout + proc.stderr
    assert int(m.group(1)) > 100


def test_only_spank_entry_points_are_exported(spank_build: SpankBuild) -> None:
    defined = _dynamic_symbols(spank_build.plugin, "--defined-only")
    assert defined == EXPORTED
    assert all(re.match(r"(slurm_spank_|plugin_|spank_plugin_version$)", s) for s in defined)


def test_plugin_needs_only_slurm_from_its_host(spank_build: SpankBuild) -> None:
    undefined = _dynamic_symbols(spank_build.plugin, "--undefined-only")
    slurm = {s for s in undefined if s.startswith(("slurm_", "spank_"))}
    assert slurm == {
        "slurm_error",
        "slurm_info",
        "slurm_verbose",
        "slurm_debug",
        "spank_context",
        "spank_get_item",
        "spank_option_register",
        "spank_setenv",
        "spank_strerror",
    }
    assert "__stack_chk_fail" in undefined  # -fstack-protector-strong


def test_plugin_is_hardened(spank_build: SpankBuild) -> None:
    if shutil.which("readelf") is None:
        pytest.fail("readelf not found (binutils)")
    dynamic = _run("readelf", "-d", spank_build.plugin).stdout
    assert "BIND_NOW" in dynamic
    assert "NODELETE" in dynamic  # gRPC threads outlive dlclose()
    headers = _run("readelf", "-lW", spank_build.plugin).stdout
    assert "GNU_RELRO" in headers
    stack = next(line for line in headers.splitlines() if "GNU_STACK" in line)
    assert "RWE" not in stack


def test_driver_prints_the_parsed_config(spank_build: SpankBuild) -> None:
    proc = _run(spank_build.driver, "config", "manager=[::1]:7070", "timeout=2.5")
    assert proc.returncode == 0, proc.stderr
    assert "manager=[::1]:7070\ntarget=[::1]:7070\ntimeout=2.5\nconnect_timeout=2\n" in (
        proc.stdout
    )
    defaults = _run(spank_build.driver, "config")
    assert "manager=unix:/run/sdnmpi/manager.sock\n" in defaults.stdout
    assert "require=0\n" in defaults.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["colour=blue"], "unknown plugstack argument 'colour' (known: manager, timeout,"),
        (["timeout=0"], "timeout='0': must be more than 0 and at most 600 s"),
        (["timeout=10", "timeout=20"], "plugstack argument 'timeout' given twice"),
        (["manager=unix:rel.sock"], "manager='unix:rel.sock': a unix socket path must be absolute"),
        (["manager=h:99999"], "manager='h:99999': the port must be 1..65535"),
        (["tls_ca=/ca.pem"], "tls_ca and token_file need a TCP manager address"),
        (["require=true"], "require='true': expected 0 or 1"),
        (["default_pattern=../x"], "default_pattern='../x': not a pattern name"),
        (["manager"], "plugstack argument 'manager' is not key=value"),
    ],
)
def test_bad_plugstack_arguments_are_rejected(
    spank_build: SpankBuild, args: list[str], message: str
) -> None:
    proc = _run(spank_build.driver, "config", *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: sdnmpi: plugstack.conf: ")
    assert message in lines[0]
    assert lines[0].endswith("; plugin disabled")
