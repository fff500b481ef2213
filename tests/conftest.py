"""Shared fixtures, and what the markers mean.

``root``: needs root (network namespaces, Open vSwitch, eBPF programs, Slurm
daemons, another uid).  ``toolchain``: builds C or C++ here (cc, clang, g++, mpicc)
or runs what the build makes.  ``integration``: runs real components together.
``reproduce``: the quick report, run by ``make reproduce-ci`` (``--reproduce-ci``) and
by nothing else.  A contributor without root or compilers runs ``make unit-user``
(``pytest -m "not root and not toolchain"``); ``make test`` runs everything.  Without
root a ``root`` test is skipped with that hint, except under CI (``CI=true``), which must run it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.emu import fabriclock, stale
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT

REPO = Path(__file__).resolve().parent.parent

#: The daemons the tests start (and their subprocesses) read no configuration file:
#: an administrator's /etc/sdnmpi/sdnmpi.toml on this machine would change them
#: (docs/CONFIG.md).  Tests of the file set their own.
os.environ["SDNMPI_CONFIG"] = ""

#: Shared fixtures and what a test that uses one needs (the marks are derived here,
#: not repeated on every test).
FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "bpf_build": ("toolchain",),  # tests/bpf: make -C csrc/bpf
    "tagger": ("root", "toolchain"),  # loads the tagger (CAP_BPF)
    "test_parse_bin": ("toolchain",),  # tests/spank: the parser's C++ tests
    "spank_build": ("toolchain",),  # tests/spank: the plugin and its drivers
    "idle_build": ("toolchain",),  # tests/emu/test_idle.py: csrc/idle
    "core_outputs": ("toolchain",),  # tests/pmpi/test_core.py: csrc/pmpi's unit tests
    "replay_tests": ("toolchain",),  # tests/replay/test_vectors.py: csrc/replay
    "c_build": ("toolchain",),  # tests/wire/test_vectors.py: the C tag codec
    "rbcast_build": ("toolchain",),  # tests/pmpi/test_rbcast_protocol.py: the engine
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reproduce-ci",
        action="store_true",
        help="run only the tests marked reproduce (make reproduce-ci: the quick report)",
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Add the marks of the shared fixtures each test uses (:data:`FIXTURE_MARKS`), and
    keep the ``reproduce`` tests for ``--reproduce-ci`` (and only them there): the quick
    report is ``make test``'s last step, after every other test."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for mark in sorted({m for f in names & set(FIXTURE_MARKS) for m in FIXTURE_MARKS[f]}):
            if item.get_closest_marker(mark) is None:
                item.add_marker(mark)
    wanted = bool(config.getoption("--reproduce-ci"))
    keep = [i for i in items if (i.get_closest_marker("reproduce") is not None) == wanted]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A ``root`` test without root: skipped with the hint, a failure under CI."""
    if item.get_closest_marker("root") is None or os.geteuid() == 0:
        return
    if os.environ.get("CI") == "true":
        pytest.fail("needs root, and CI runs every test: run make test as root")
    pytest.skip("needs root: sudo make unit, or make unit-user for the tests that do not")


def _workloads() -> Path:
    env = os.environ.get("SDNMPI_WORKLOADS")
    return Path(env) if env else REPO.parent / "shared" / "workloads" / "pfsim-traces"


@pytest.fixture(scope="session")
def workloads_dir() -> Path:
    """The real traces and topology in ``../shared/workloads/pfsim-traces``.

    Set ``SDNMPI_WORKLOADS`` to use another copy.  Missing data is an error, not a
    skip: these tests are part of what CI must check.
    """
    path = _workloads()
    if not (path / "cg-c-128.tar.gz").is_file():
        pytest.fail(f"workload traces not found in {path} (set SDNMPI_WORKLOADS)")
    return path


@pytest.fixture(scope="module", autouse=True)
def _fabric_lock(request: pytest.FixtureRequest) -> Iterator[None]:
    """An integration module (root) holds the machine's fabric lock while it runs.

    Only one emulated fabric can be up per machine; experiments and ``sdnmpi
    calibrate`` queue on the same lock, so a test run and an experiment (another
    session's ``make reproduce``, say) wait for each other instead of failing.  The
    experiments these tests start inherit the hold (``fabriclock.LOCK_HELD_ENV``).
    Holding it, the module first removes fabrics a killed run left behind
    (``sdnmpi emu down --stale``).
    """
    integration = request.node.get_closest_marker("integration") is not None
    if not integration or os.geteuid() != 0:
        yield
        return
    with fabriclock.fabric_lock(lambda msg: print(f"\n{request.node.name}: {msg}", flush=True)):
        # with the lock held nothing else is building a fabric: one whose switch daemon
        # is gone is what an earlier run killed before its teardown left (it holds the
        # datapath every test here needs)
        removed = stale.down_stale(DEFAULT_STATE_ROOT)
        if removed:
            print(f"\n{request.node.name}: removed stale fabrics {removed}", flush=True)
        yield
