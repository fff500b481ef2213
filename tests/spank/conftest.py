"""Build the SPANK plugin once per session (csrc/spank, `make -C csrc/spank`).

The outputs land in the repository's build/spank/ (what the README and plugstack.conf
point at); make rebuilds only what changed.  Without the gRPC++ development files
the plugin and its driver cannot be built: those tests are skipped with the reason,
the parser tests (plain C++) still run.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPANK_SRC = REPO / "csrc" / "spank"
OUT = REPO / "build" / "spank"


@dataclass(frozen=True)
class SpankBuild:
    """Paths of the built artefacts."""

    plugin: Path
    driver: Path
    test_parse: Path


def grpc_missing_reason() -> str | None:
    """Why the gRPC++ parts cannot be built here, or None."""
    if shutil.which("pkg-config") is None:
        return "pkg-config not found"
    probe = subprocess.run(
        ["pkg-config", "--exists", "grpc++", "protobuf"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        return "gRPC++ headers missing (pkg-config grpc++): apt-get install libgrpc++-dev"
    for tool in ("protoc", "grpc_cpp_plugin"):
        if shutil.which(tool) is None:
            return f"{tool} not found: apt-get install protobuf-compiler-grpc"
    if not Path("/usr/include/slurm/spank.h").is_file():
        return "slurm/spank.h missing: apt-get install slurm-wlm-basic-plugins-dev"
    return None


def _make(*targets: str) -> None:
    proc = subprocess.run(
        ["make", "-C", str(SPANK_SRC), "-j2", *targets],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.fixture(scope="session")
def test_parse_bin() -> Path:
    """build/spank/test_parse (needs only a C++ compiler)."""
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.fail("no C++ compiler (g++)")
    _make("unit")
    return OUT / "test_parse"


@pytest.fixture(scope="session")
def spank_build(test_parse_bin: Path) -> SpankBuild:
    """The plugin and the driver; skipped without gRPC++."""
    reason = grpc_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    _make("all")
    return SpankBuild(
        plugin=OUT / "sdnmpi_spank.so",
        driver=OUT / "sdnmpi_spank_driver",
        test_parse=test_parse_bin,
    )
