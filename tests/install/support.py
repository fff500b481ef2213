"""Helpers of the install tests (issue 16): run a command as a user of the installation
would, ``make install`` into a prefix.

Dependencies: a venv these tests make gets the wheel with ``--no-deps`` and a ``.pth``
naming the site-packages of the interpreter running the tests (which has every
dependency), so a test does not download ~140 packages (a full ``pip install`` of the
wheel from the PyPI mirror took 54 s here, docs/INSTALL.md).  Only these tests do
that; ``make install`` installs the dependencies.  ``SDNMPI_INSTALL_FULL=1`` makes the
tests do the full install too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FULL = os.environ.get("SDNMPI_INSTALL_FULL") == "1"


def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """``argv`` in :func:`clean_env` unless ``env`` is given; it must succeed.  (With the
    test's PYTHONPATH=src, pip would take src/sdnmpi.egg-info for an installed sdnmpi.)"""
    kw.setdefault("env", clean_env())
    res = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    assert res.returncode == 0, f"{argv} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res  # type: ignore[no-any-return]


def clean_env() -> dict[str, str]:
    """The environment of a user of the installation: no checkout on the path, no
    variable pointing at a build tree."""
    drop = ("PYTHONPATH", "SDNMPI_LIBDIR", "SDNMPI_BUILD", "SDNMPI_BPF_DIR", "SDNMPI_IDLE_LIB")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("VIRTUAL")}


def reuse_deps(venv: Path) -> None:
    """Unless SDNMPI_INSTALL_FULL=1: the test interpreter's site-packages behind the
    venv's own (a ``.pth`` line is appended to sys.path, after the venv's packages)."""
    if FULL:
        return
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "zz-sdnmpi-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")


def pip_args() -> list[str]:
    return [] if FULL else ["--no-deps"]


@dataclass
class Installed:
    prefix: Path
    log: str

    @property
    def bin(self) -> Path:
        return self.prefix / "bin" / "sdnmpi"

    @property
    def libdir(self) -> Path:
        return self.prefix / "lib" / "sdnmpi"

    @property
    def python(self) -> Path:
        return self.libdir / "venv" / "bin" / "python"


def make_install(prefix: Path, wheel: Path, destdir: Path | None = None) -> str:
    argv = ["make", "-s", "-C", str(REPO), "install", f"PREFIX={prefix}", f"WHEEL={wheel}"]
    argv += [f"PYTHON={sys.executable}", f"PIP_ARGS={' '.join(pip_args())}"]
    if destdir is not None:
        argv.append(f"DESTDIR={destdir}")
    res = run(argv)
    return res.stdout + res.stderr
