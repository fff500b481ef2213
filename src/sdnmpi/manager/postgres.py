"""A :class:`~sdnmpi.manager.store.Store` on PostgreSQL (psycopg 3), for several managers.

The store contract tests run against a real, private PostgreSQL 15 server
(``tests/manager/pgserver.py``) beside the memory and SQLite stores.  The SQL
mirrors :mod:`~sdnmpi.manager.sqlite` (same tables, same migration scheme with
a ``schema_version`` table instead of ``PRAGMA user_version``), every method
is one transaction, and ``SELECT ... FOR UPDATE`` is not needed because the
manager serializes its own calls; several managers on one database must still
not serve the same job at once (give each its own scheduler partition).
psycopg is imported only when this store is chosen (``--postgres DSN``).
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sdnmpi.errors import StoreError
from sdnmpi.manager.model import Job, JobState, Offer, Process, StoredPattern
from sdnmpi.manager.sqlite import (
    _OFFER_COLUMNS,
    MIGRATIONS,
    _job_row,
    _pattern,
    _pattern_row,
    _statements,
    offer_of,
    offer_row,
)
from sdnmpi.manager.sqlite import _job as _sqlite_job

_JOB_COLUMNS = (
    "job_id, name, uid, ntasks, state, router, pattern_name, pattern_json, source_sha256, "
    "created_s, started_s, finished_s, detail, flow_mods, switches, install_s"
)
_BRIEF_COLUMNS = _JOB_COLUMNS.replace("pattern_json", "''::bytea AS pattern_json")
_PATTERN_COLUMNS = (
    "name, owner_uid, description, bandwidth_bps, latency_s, json, sha256, created_s, "
    "nranks, phases, total_bytes"
)


def _pg_schema(step: str) -> str:
    return (
        step.replace("BLOB", "BYTEA")
        .replace("REAL", "DOUBLE PRECISION")
        .replace("INTEGER", "BIGINT")
    )


class PostgresStore:
    """Jobs and patterns in a PostgreSQL database."""

    def __init__(self, dsn: str) -> None:
        try:
            self._psycopg: Any = importlib.import_module("psycopg")
        except ImportError:
            raise StoreError("--postgres needs the psycopg package (pip install psycopg)") from None
        self._lock = threading.RLock()
        try:
            self._db: Any = self._psycopg.connect(dsn, autocommit=False)
            self._migrate()
        except self._psycopg.Error as exc:
            raise StoreError(f"PostgreSQL {_redact(dsn)}: {exc}") from None

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock:
            try:
                with self._db.transaction(), self._db.cursor() as cur:
                    yield cur
            except self._psycopg.Error as exc:
                raise StoreError(f"PostgreSQL: {exc}") from None

    def _migrate(self) -> None:
        with self._tx() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
            cur.execute("LOCK TABLE schema_version IN EXCLUSIVE MODE")
            row = cur.execute("SELECT version FROM schema_version").fetchone()
            version = int(row[0]) if row else 0
            if version > len(MIGRATIONS):
                raise StoreError(f"PostgreSQL schema version {version} is newer than this sdnmpi")
            for step in MIGRATIONS[version:]:
                for statement in _statements(_pg_schema(step)):
                    cur.execute(statement)
            cur.execute("DELETE FROM schema_version")
            cur.execute("INSERT INTO schema_version VALUES (%s)", (len(MIGRATIONS),))

    def get_job(self, job_id: int, *, brief: bool = False) -> Job | None:
        """The job, or None."""
        with self._tx() as cur:
            columns = _BRIEF_COLUMNS if brief else _JOB_COLUMNS
            row = cur.execute(f"SELECT {columns} FROM jobs WHERE job_id = %s", (job_id,)).fetchone()
            return None if row is None else _job(cur, row, brief)

    def get_process(self, job_id: int, rank: int) -> Process | None:
        """One rank's record, or None."""
        with self._tx() as cur:
            row = cur.execute(
                "SELECT rank, node, pid FROM processes WHERE job_id = %s AND rank = %s",
                (job_id, rank),
            ).fetchone()
            return None if row is None else Process(int(row[0]), row[1], int(row[2]))

    def count_processes(self, job_id: int) -> int:
        """Registered ranks of the job."""
        with self._tx() as cur:
            sql = "SELECT COUNT(*) FROM processes WHERE job_id = %s"
            return int(cur.execute(sql, (job_id,)).fetchone()[0])

    def list_jobs(self, include_finished: bool = False) -> list[Job]:
        """Jobs by id."""
        where = "" if include_finished else f"WHERE state != {int(JobState.FINISHED)}"
        with self._tx() as cur:
            rows = cur.execute(f"SELECT {_JOB_COLUMNS} FROM jobs {where} ORDER BY job_id")
            return [_job(cur, r) for r in rows.fetchall()]

    def create_job(self, job: Job) -> None:
        """Insert a new job."""
        with self._tx() as cur:
            marks = ", ".join(["%s"] * 16)
            cur.execute(f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES ({marks})", _job_row(job))
            _insert_routes(cur, job)
            for p in job.processes:
                _insert_process(cur, job.job_id, p)

    def save_job(self, job: Job) -> None:
        """Replace the job's row and routes."""
        with self._tx() as cur:
            sets = ", ".join(f"{c.strip()} = %s" for c in _JOB_COLUMNS.split(",")[1:])
            cur.execute(
                f"UPDATE jobs SET {sets} WHERE job_id = %s", (*_job_row(job)[1:], job.job_id)
            )
            if cur.rowcount != 1:
                raise StoreError(f"PostgreSQL: job {job.job_id} is not stored")
            cur.execute("DELETE FROM routes WHERE job_id = %s", (job.job_id,))
            _insert_routes(cur, job)

    def add_process(self, job_id: int, process: Process) -> None:
        """Record one rank."""
        with self._tx() as cur:
            _insert_process(cur, job_id, process)

    def get_pattern(self, name: str) -> StoredPattern | None:
        """A stored pattern, or None."""
        with self._tx() as cur:
            sql = f"SELECT {_PATTERN_COLUMNS} FROM patterns WHERE name = %s"
            row = cur.execute(sql, (name,)).fetchone()
            return None if row is None else _pattern(row)

    def list_patterns(self) -> list[StoredPattern]:
        """Stored patterns by name."""
        with self._tx() as cur:
            rows = cur.execute(f"SELECT {_PATTERN_COLUMNS} FROM patterns ORDER BY name")
            return [_pattern(r) for r in rows.fetchall()]

    def put_pattern(self, pattern: StoredPattern) -> None:
        """Insert or replace."""
        with self._tx() as cur:
            cur.execute("DELETE FROM patterns WHERE name = %s", (pattern.name,))
            marks = ", ".join(["%s"] * 11)
            cur.execute(
                f"INSERT INTO patterns ({_PATTERN_COLUMNS}) VALUES ({marks})",
                _pattern_row(pattern),
            )

    def delete_pattern(self, name: str) -> bool:
        """Remove; whether it existed."""
        with self._tx() as cur:
            cur.execute("DELETE FROM patterns WHERE name = %s", (name,))
            return bool(cur.rowcount > 0)

    def count_jobs(self, uid: int) -> int:
        """Unfinished jobs of ``uid``."""
        with self._tx() as cur:
            sql = "SELECT COUNT(*) FROM jobs WHERE uid = %s AND state != %s"
            return int(cur.execute(sql, (uid, int(JobState.FINISHED))).fetchone()[0])

    def pattern_usage(self, uid: int) -> tuple[int, int]:
        """Patterns ``uid`` owns and their bytes."""
        with self._tx() as cur:
            row = cur.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(json)), 0) FROM patterns "
                "WHERE owner_uid = %s",
                (uid,),
            ).fetchone()
            return int(row[0]), int(row[1])

    def put_offer(self, offer: Offer) -> None:
        """Insert or replace."""
        with self._tx() as cur:
            cur.execute(
                "DELETE FROM offers WHERE job_id = %s AND uid = %s", (offer.job_id, offer.uid)
            )
            marks = ", ".join(["%s"] * 8)
            cur.execute(f"INSERT INTO offers ({_OFFER_COLUMNS}) VALUES ({marks})", offer_row(offer))

    def get_offer(self, job_id: int, uid: int) -> Offer | None:
        """The offer, or None."""
        with self._tx() as cur:
            sql = f"SELECT {_OFFER_COLUMNS} FROM offers WHERE job_id = %s AND uid = %s"
            row = cur.execute(sql, (job_id, uid)).fetchone()
            return None if row is None else offer_of(row)

    def delete_offer(self, job_id: int, uid: int) -> bool:
        """Remove; whether it existed."""
        with self._tx() as cur:
            cur.execute("DELETE FROM offers WHERE job_id = %s AND uid = %s", (job_id, uid))
            return bool(cur.rowcount > 0)

    def offer_usage(self, uid: int) -> tuple[int, int]:
        """Offers of ``uid`` and their pattern bytes."""
        with self._tx() as cur:
            row = cur.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(pattern_json)), 0) FROM offers "
                "WHERE uid = %s",
                (uid,),
            ).fetchone()
            return int(row[0]), int(row[1])

    def purge_offers(self, before_s: float) -> int:
        """Remove offers older than ``before_s``."""
        with self._tx() as cur:
            cur.execute("DELETE FROM offers WHERE created_s < %s", (before_s,))
            return int(cur.rowcount)

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


def _job(cur: Any, row: Any, brief: bool = False) -> Job:
    return _sqlite_job(cur, row, brief, mark="%s")


def _insert_routes(cur: Any, job: Job) -> None:
    cur.executemany(
        "INSERT INTO routes (job_id, src, dst, path, size_bytes) VALUES (%s, %s, %s, %s, %s)",
        [(job.job_id, r.src, r.dst, json.dumps(list(r.path)), r.size_bytes) for r in job.routes],
    )


def _insert_process(cur: Any, job_id: int, p: Process) -> None:
    cur.execute(
        "INSERT INTO processes (job_id, rank, node, pid) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (job_id, rank) DO UPDATE SET node = EXCLUDED.node, pid = EXCLUDED.pid",
        (job_id, p.rank, p.node, p.pid),
    )


def _redact(dsn: str) -> str:
    """A DSN without its password."""
    return " ".join(w for w in dsn.split() if not w.lower().startswith("password="))
