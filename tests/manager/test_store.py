"""The store contract (memory and SQLite), SQLite migrations, locked and corrupt files."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.errors import StoreError
from sdnmpi.manager.memory import MemoryStore
from sdnmpi.manager.model import Install, Job, JobState, Offer, Process, RoutePair, StoredPattern
from sdnmpi.manager.sqlite import MIGRATIONS, SqliteStore, migrate
from sdnmpi.manager.store import Store, open_store


def make_job(job_id: int = 7, **kw: object) -> Job:
    base = Job(
        job_id=job_id,
        name="cg",
        uid=1000,
        ntasks=4,
        state=JobState.CREATED,
        router="ours",
        created_s=10.0,
        pattern_name="cg:nprocs=4",
        pattern_json=b'{"x": 1}',
        source_sha256="ab" * 32,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def make_pattern(name: str = "cg", **kw: object) -> StoredPattern:
    base = StoredPattern(
        name=name,
        owner_uid=1000,
        description="CG class C",
        bandwidth_bps=1e9,
        latency_s=1e-6,
        json=b'{"format": "x"}',
        sha256="cd" * 32,
        created_s=5.0,
        nranks=8,
        phases=2,
        total_bytes=1e6,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


ROUTES = (
    RoutePair("h1", "h5", ("h1", "leaf1", "spine1", "leaf2", "h5"), 100.0),
    RoutePair("h5", "h1", ("h5", "leaf2", "spine2", "leaf1", "h1"), 50.0),
)


def test_job_round_trip(store: Store):
    job = make_job()
    store.create_job(job)
    assert store.get_job(7) == job
    assert store.get_job(8) is None


def test_create_twice_fails_and_keeps_the_first(store: Store):
    store.create_job(make_job())
    with pytest.raises(StoreError, match="7"):
        store.create_job(make_job(name="other"))
    got = store.get_job(7)
    assert got is not None and got.name == "cg"


def test_save_replaces_row_and_routes_and_keeps_processes(store: Store):
    store.create_job(make_job())
    store.add_process(7, Process(1, "h5", 42))
    store.add_process(7, Process(0, "h1", 41))
    routed = make_job(
        state=JobState.ROUTED,
        routes=ROUTES,
        install=Install(8, 4, 0.25),
        started_s=11.0,
        detail="",
    )
    store.save_job(routed)
    got = store.get_job(7)
    assert got is not None
    assert got.state is JobState.ROUTED
    assert got.routes == ROUTES
    assert got.install == Install(8, 4, 0.25)
    assert got.processes == (Process(0, "h1", 41), Process(1, "h5", 42))
    store.save_job(dataclasses.replace(routed, routes=ROUTES[:1]))
    again = store.get_job(7)
    assert again is not None and again.routes == ROUTES[:1]


def test_add_process_replaces_a_rank(store: Store):
    store.create_job(make_job())
    store.add_process(7, Process(0, "h1"))
    store.add_process(7, Process(0, "h2", 9))
    got = store.get_job(7)
    assert got is not None and got.processes == (Process(0, "h2", 9),)


def test_unknown_job_writes_fail(store: Store):
    with pytest.raises(StoreError):
        store.save_job(make_job())
    with pytest.raises(StoreError):
        store.add_process(99, Process(0, "h1"))


def test_list_jobs_hides_finished_unless_asked(store: Store):
    store.create_job(make_job(3))
    store.create_job(make_job(1, state=JobState.FINISHED))
    store.create_job(make_job(2, state=JobState.ROUTED))
    assert [j.job_id for j in store.list_jobs()] == [2, 3]
    assert [j.job_id for j in store.list_jobs(include_finished=True)] == [1, 2, 3]


def test_patterns_put_get_list_delete(store: Store):
    store.put_pattern(make_pattern("b"))
    store.put_pattern(make_pattern("a", description="first"))
    assert [p.name for p in store.list_patterns()] == ["a", "b"]
    assert store.get_pattern("a") == make_pattern("a", description="first")
    store.put_pattern(make_pattern("a", description="second"))
    got = store.get_pattern("a")
    assert got is not None and got.description == "second"
    assert store.delete_pattern("a") is True
    assert store.delete_pattern("a") is False
    assert store.get_pattern("a") is None


@settings(max_examples=25, deadline=None)
@given(
    name=st.text(max_size=40),
    uid=st.integers(0, 2**32 - 1),
    ntasks=st.integers(1, 65536),
    job_id=st.integers(1, 2**40 - 1),
    blob=st.binary(max_size=200),
)
def test_sqlite_round_trips_any_values(name, uid, ntasks, job_id, blob):
    store = SqliteStore(":memory:")
    job = make_job(job_id, name=name, uid=uid, ntasks=ntasks, pattern_json=blob)
    store.create_job(job)
    assert store.get_job(job_id) == job
    store.close()


# -- SQLite specifics -----------------------------------------------------------------


def test_sqlite_file_uses_wal_foreign_keys_and_version(tmp_path: Path):
    path = tmp_path / "m.db"
    SqliteStore(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    db.close()


def test_state_survives_reopen(tmp_path: Path):
    path = tmp_path / "m.db"
    s = SqliteStore(path)
    s.create_job(make_job(routes=ROUTES, state=JobState.ROUTED))
    s.close()
    s2 = SqliteStore(path)
    got = s2.get_job(7)
    assert got is not None and got.routes == ROUTES
    s2.close()


def test_older_database_migrates_and_keeps_its_data(tmp_path: Path):
    """A file opened by a build with one more step gains the step, rows intact."""
    path = tmp_path / "old.db"
    SqliteStore(path).close()
    s = SqliteStore(path)
    s.create_job(make_job())
    s.close()
    step = "ALTER TABLE jobs ADD COLUMN partition TEXT NOT NULL DEFAULT ''"
    s2 = SqliteStore(path, migrations=(*MIGRATIONS, step))
    assert s2.get_job(7) == make_job()
    s2.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) + 1
    assert "partition" in [r[1] for r in db.execute("PRAGMA table_info(jobs)")]
    db.close()


def test_a_failing_migration_changes_nothing(tmp_path: Path):
    path = tmp_path / "m.db"
    SqliteStore(path).close()
    bad = "CREATE TABLE extra (x INTEGER); CREATE TABLE broken (("
    with pytest.raises(StoreError, match=str(path)):
        SqliteStore(path, migrations=(*MIGRATIONS, bad))
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "extra" not in tables
    db.close()


def test_unversioned_database_gets_the_schema():
    db = sqlite3.connect(":memory:", isolation_level=None)
    assert migrate(db, MIGRATIONS) == len(MIGRATIONS) == 2
    assert migrate(db, MIGRATIONS) == 2


def test_newer_database_is_refused(tmp_path: Path):
    path = tmp_path / "new.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 9")
    db.close()
    with pytest.raises(StoreError, match="newer than this sdnmpi"):
        SqliteStore(path)


def test_locked_database_is_a_clear_error(tmp_path: Path):
    path = tmp_path / "m.db"
    store = SqliteStore(path, busy_timeout_s=0.2)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(StoreError, match="locked by another process"):
            store.create_job(make_job())
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.create_job(make_job())  # usable again once the lock is gone
    assert store.get_job(7) is not None
    store.close()


def test_corrupt_database_is_a_clear_error(tmp_path: Path):
    path = tmp_path / "m.db"
    path.write_bytes(b"this is not an SQLite database, just text " * 100)
    with pytest.raises(StoreError, match="corrupt or not an SQLite file"):
        SqliteStore(path)


def test_corrupted_pages_are_a_clear_error(tmp_path: Path):
    path = tmp_path / "m.db"
    s = SqliteStore(path)
    for i in range(1, 200):
        s.create_job(make_job(i, pattern_json=bytes(2000)))
    s.close()
    raw = bytearray(path.read_bytes())
    raw[4096:16384] = b"\xff" * (16384 - 4096)  # wipe pages past the header
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreError, match=r"m\.db"):
        _open_and_read(path)


def _open_and_read(path: Path) -> None:
    s = SqliteStore(path)
    try:
        s.list_jobs(include_finished=True)
    finally:
        s.close()


def test_open_store_picks_the_backend(tmp_path: Path):
    assert isinstance(open_store(":memory:"), MemoryStore)
    assert isinstance(open_store(str(tmp_path / "x.db")), SqliteStore)


def test_single_process_lookups(store: Store):
    store.create_job(make_job())
    assert store.count_processes(7) == 0
    store.add_process(7, Process(3, "h2", 8))
    store.add_process(7, Process(1, "h1"))
    assert store.count_processes(7) == 2
    assert store.get_process(7, 3) == Process(3, "h2", 8)
    assert store.get_process(7, 0) is None
    assert store.get_process(8, 3) is None
    light = store.get_job(7, brief=True)
    assert light is not None and light.processes == () and light.pattern_json == b""
    assert light.name == "cg" and light.source_sha256 == make_job().source_sha256


def test_a_version_1_database_gains_the_offers_table(tmp_path: Path):
    """Databases of earlier sdnmpi (schema 1) keep their jobs and gain offers."""
    path = tmp_path / "v1.db"
    s1 = SqliteStore(path, migrations=MIGRATIONS[:1])
    s1.create_job(make_job())
    s1.close()
    s2 = SqliteStore(path)
    assert s2.get_job(7) == make_job()
    offer = Offer(9, 1000, "a", 2, "", "cg", b"{}", 5.0)
    s2.put_offer(offer)
    assert s2.get_offer(9, 1000) == offer
    s2.close()


def test_offers_contract(store: Store):
    """Offers are keyed by (job id, uid): two users' offers for one id never mix."""
    a = Offer(9, 1000, "a", 2, "", "cg", b"x" * 10, 5.0)
    b = Offer(9, 1001, "b", 2, "ecmp", "ft", b"y" * 3, 6.0)
    store.put_offer(a)
    store.put_offer(b)
    store.put_offer(Offer(10, 1000, "c", 4, "", "p", b"z" * 5, 50.0))
    assert store.get_offer(9, 1000) == a and store.get_offer(9, 1001) == b
    assert store.get_offer(9, 1002) is None
    assert store.offer_usage(1000) == (2, 15) and store.offer_usage(1002) == (0, 0)
    store.put_offer(dataclasses.replace(a, pattern_json=b"w"))  # replaced
    assert store.offer_usage(1000) == (2, 6)
    assert store.delete_offer(9, 1001) and not store.delete_offer(9, 1001)
    assert store.purge_offers(before_s=10.0) == 1  # a's replacement (5.0), not 50.0
    assert store.get_offer(9, 1000) is None and store.offer_usage(1000) == (1, 5)
