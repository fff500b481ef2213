"""Session fixtures of the install tests: a clean clone of HEAD, its wheel, and
``make install`` of this working tree into a fresh prefix (shared by both modules)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.install.support import REPO, Installed, make_install, reuse_deps, run


@pytest.fixture(scope="session")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean clone of this checkout's HEAD: no generated stubs, no build tree."""
    dest = tmp_path_factory.mktemp("clone") / "sdnmpi"
    run(["git", "clone", "--quiet", str(REPO), str(dest)])
    assert not list((dest / "src/sdnmpi/wire").glob("manager_pb2*")), "stubs are committed"
    return dest


@pytest.fixture(scope="session")
def wheel(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(clone)])
    (whl,) = out.glob("sdnmpi-*.whl")
    return whl


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Installed:
    """``make install PREFIX=<fresh>`` from this working tree (make csrc first)."""
    prefix = tmp_path_factory.mktemp("prefix") / "sdnmpi"
    log = make_install(prefix, wheel)
    reuse_deps(prefix / "lib" / "sdnmpi" / "venv")
    return Installed(prefix, log)
