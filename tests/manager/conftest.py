"""Fixtures of the manager tests: a small leaf-spine, a fake controller, stores, callers."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.topology import Topology
from sdnmpi.formats import native
from sdnmpi.manager.fake import FakeController
from sdnmpi.manager.memory import MemoryStore
from sdnmpi.manager.model import Caller
from sdnmpi.manager.service import ManagerService
from sdnmpi.manager.sqlite import SqliteStore
from sdnmpi.manager.store import Store
from sdnmpi.testing import FakeClock
from tests.manager import pgserver

ALICE = Caller(1000)
BOB = Caller(1001)
SCHED = Caller(0, True)


def pairs_pattern(nprocs: int = 2, size: int = 10**6, name: str = "pairs") -> Pattern:
    """Rank 2i sends ``size`` bytes to rank 2i+1."""
    cells = [(r, r + 1, size) for r in range(0, nprocs - 1, 2)]
    return Pattern(name, nprocs, (Phase.from_cells("exchange", cells),))


def pattern_bytes(pattern: Pattern | None = None) -> bytes:
    """sdnmpi JSON of a pattern."""
    return native.dumps(pattern or pairs_pattern()).encode()


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory (Unix socket names are limited to 108 bytes), open to other uids."""
    with tempfile.TemporaryDirectory(prefix="sdnmpi-mgr-") as d:
        os.chmod(d, 0o755)
        yield Path(d)


@pytest.fixture
def topo() -> Topology:
    """2 spines, 2 leaves, 4 hosts each: h1-h4 on leaf1, h5-h8 on leaf2."""
    return leaf_spine(2, 2, 4)


@pytest.fixture
def controller(topo: Topology) -> FakeController:
    return FakeController(topo)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A private PostgreSQL server for the session (skipped where none can run)."""
    why = pgserver.unavailable()
    if why is not None:
        pytest.skip(why)
    with pgserver.server() as dsn:
        yield dsn


_PG_DATABASES = itertools.count()


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.root)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Every store contract test runs on every store (PostgreSQL: a fresh database)."""
    if request.param != "postgres":
        s: Store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "m.db")
        yield s
        s.close()
        return
    import psycopg

    from sdnmpi.manager.postgres import PostgresStore

    base = request.getfixturevalue("pg_dsn")
    name = f"t{os.getpid()}_{next(_PG_DATABASES)}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    pg = PostgresStore(base.replace("dbname=postgres", f"dbname={name}"))
    yield pg
    pg.close()
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name}")


@pytest.fixture
def service(store: Store, controller: FakeController, clock: FakeClock) -> ManagerService:
    return ManagerService(store, controller, clock)
