"""Shared fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.emu import fabriclock

REPO = Path(__file__).resolve().parent.parent


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
    """
    integration = request.node.get_closest_marker("integration") is not None
    if not integration or os.geteuid() != 0:
        yield
        return
    with fabriclock.fabric_lock(lambda msg: print(f"\n{request.node.name}: {msg}", flush=True)):
        yield
