"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
