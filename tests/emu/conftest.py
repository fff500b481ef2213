"""Fixtures of the emulated-fabric tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi import catalog
from sdnmpi.core.generators import leaf_spine
from tests.emu.support import Fabrics, require_root_and_tools


@pytest.fixture(scope="session")
def small_topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """leaf_spine(1, 2, 2) as a JSON file: loop-free, h1 h2 on leaf1, h3 h4 on leaf2."""
    path = tmp_path_factory.mktemp("topo") / "leaf-spine-1x2x2.json"
    catalog.save_topology(leaf_spine(1, 2, 2), path)
    return path


@pytest.fixture
def fabrics(small_topology: Path) -> Iterator[Fabrics]:
    """Fabrics brought up by one test, all taken down (and checked) afterwards."""
    require_root_and_tools()
    f = Fabrics(small_topology)
    try:
        yield f
    finally:
        f.down_all()
