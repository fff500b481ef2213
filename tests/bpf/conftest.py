"""Build the tagger once per session into a temporary directory; load it per test."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.node.bpf import Tagger

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "csrc" / "bpf"


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("loading BPF programs needs root (CAP_BPF, CAP_NET_ADMIN)")


@pytest.fixture(scope="session")
def bpf_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make -C csrc/bpf`` into a temporary build directory; returns BUILD/bpf."""
    missing = [tool for tool in ("clang", "cc") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"missing {missing}: apt-get install clang llvm libbpf-dev linux-libc-dev")
    build = tmp_path_factory.mktemp("bpf-build")
    proc = subprocess.run(
        ["make", "-s", "-C", str(SRC), f"BUILD={build}"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return build / "bpf"


@pytest.fixture
def tagger(bpf_build: Path) -> Iterator[Tagger]:
    need_root()
    with Tagger(bpf_build / "tagger.bpf.o") as loaded:
        yield loaded
