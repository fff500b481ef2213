"""The default :class:`~sdnmpi.manager.store.Store`: one SQLite file.

* WAL journal (readers never block the writer), foreign keys on, a busy
  timeout: a write lock held by another process longer than that is reported as
  :class:`~sdnmpi.errors.StoreError` naming the file, as is a corrupt file.
* Every write is one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction: a crash or
  error leaves nothing half-applied.
* Schema migrations: :data:`MIGRATIONS` is a list of steps; ``PRAGMA
  user_version`` is the number applied.  Opening a file applies the missing
  steps in one transaction; a file from a newer sdnmpi is refused.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from sdnmpi.errors import StoreError
from sdnmpi.manager.files import private_database
from sdnmpi.manager.model import Install, Job, JobState, Offer, Process, RoutePair, StoredPattern

P = ParamSpec("P")
R = TypeVar("R")

SCHEMA_V1 = """
CREATE TABLE jobs (
    job_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    uid INTEGER NOT NULL,
    ntasks INTEGER NOT NULL,
    state INTEGER NOT NULL,
    router TEXT NOT NULL,
    pattern_name TEXT NOT NULL,
    pattern_json BLOB NOT NULL,
    source_sha256 TEXT NOT NULL,
    created_s REAL NOT NULL,
    started_s REAL NOT NULL,
    finished_s REAL NOT NULL,
    detail TEXT NOT NULL,
    flow_mods INTEGER NOT NULL,
    switches INTEGER NOT NULL,
    install_s REAL NOT NULL
);
CREATE INDEX jobs_state ON jobs(state);
CREATE TABLE processes (
    job_id INTEGER NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    rank INTEGER NOT NULL,
    node TEXT NOT NULL,
    pid INTEGER NOT NULL,
    PRIMARY KEY (job_id, rank)
);
CREATE TABLE routes (
    job_id INTEGER NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    src TEXT NOT NULL,
    dst TEXT NOT NULL,
    path TEXT NOT NULL,
    size_bytes REAL NOT NULL,
    PRIMARY KEY (job_id, src, dst)
);
CREATE TABLE patterns (
    name TEXT PRIMARY KEY,
    owner_uid INTEGER NOT NULL,
    description TEXT NOT NULL,
    bandwidth_bps REAL NOT NULL,
    latency_s REAL NOT NULL,
    json BLOB NOT NULL,
    sha256 TEXT NOT NULL,
    created_s REAL NOT NULL,
    nranks INTEGER NOT NULL,
    phases INTEGER NOT NULL,
    total_bytes REAL NOT NULL
);
"""

#: Version 2: srun's pattern offers for scheduler jobs not yet created (issue 12).
SCHEMA_V2 = """
CREATE TABLE offers (
    job_id INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    name TEXT NOT NULL,
    ntasks INTEGER NOT NULL,
    router TEXT NOT NULL,
    pattern_name TEXT NOT NULL,
    pattern_json BLOB NOT NULL,
    created_s REAL NOT NULL,
    PRIMARY KEY (job_id, uid)
);
CREATE INDEX offers_uid ON offers(uid);
"""

#: Schema steps; step i takes ``user_version`` i to i + 1.
MIGRATIONS: tuple[str, ...] = (SCHEMA_V1, SCHEMA_V2)

_JOB_COLUMNS = (
    "job_id, name, uid, ntasks, state, router, pattern_name, pattern_json, source_sha256, "
    "created_s, started_s, finished_s, detail, flow_mods, switches, install_s"
)
#: The same columns without the pattern snapshot (``get_job(brief=True)``).
_BRIEF_COLUMNS = _JOB_COLUMNS.replace("pattern_json", "X'' AS pattern_json")
_PATTERN_COLUMNS = (
    "name, owner_uid, description, bandwidth_bps, latency_s, json, sha256, created_s, "
    "nranks, phases, total_bytes"
)
_OFFER_COLUMNS = "job_id, uid, name, ntasks, router, pattern_name, pattern_json, created_s"


def _guarded(method: Callable[P, R]) -> Callable[P, R]:
    """Turn sqlite3 errors into StoreError naming the database file."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except sqlite3.Error as exc:
            store = args[0]
            assert isinstance(store, SqliteStore)
            raise store.error(exc) from None

    return wrapper


class SqliteStore:
    """Jobs and patterns in one SQLite file (``:memory:`` for a private one)."""

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 5.0,
        migrations: Sequence[str] = MIGRATIONS,
    ) -> None:
        self.path = str(path)
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        private_database(self.path)
        try:
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_s
            )
        except sqlite3.Error as exc:
            raise self.error(exc) from None
        try:
            self._setup(migrations)
        except sqlite3.Error as exc:
            self._db.close()
            raise self.error(exc) from None
        except StoreError:
            self._db.close()
            raise

    def error(self, exc: sqlite3.Error) -> StoreError:
        """A StoreError that says what happened to which file."""
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StoreError(
                f"database {self.path} is locked by another process "
                f"(waited {self.busy_timeout_s:g} s): {text}"
            )
        if isinstance(exc, sqlite3.DatabaseError) and (
            "not a database" in text or "malformed" in text or "corrupt" in text
        ):
            return StoreError(f"database {self.path} is corrupt or not an SQLite file: {text}")
        return StoreError(f"database {self.path}: {text}")

    def _setup(self, migrations: Sequence[str]) -> None:
        db = self._db
        db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        db.execute("PRAGMA foreign_keys = ON")
        if self.path != ":memory:":
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"database {self.path}: cannot use WAL (journal mode {mode})")
        db.execute("PRAGMA synchronous = NORMAL")
        migrate(db, migrations, self.path)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, rolled back on any error."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction (a consistent snapshot of several tables)."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    # -- jobs -------------------------------------------------------------------------
    @_guarded
    def get_job(self, job_id: int, *, brief: bool = False) -> Job | None:
        """The job with its routes (and processes), or None."""
        with self._read() as db:
            columns = _BRIEF_COLUMNS if brief else _JOB_COLUMNS
            row = db.execute(f"SELECT {columns} FROM jobs WHERE job_id = ?", (job_id,))
            found = row.fetchone()
            return None if found is None else _job(db, found, brief)

    @_guarded
    def get_process(self, job_id: int, rank: int) -> Process | None:
        """One rank's record, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT rank, node, pid FROM processes WHERE job_id = ? AND rank = ?",
                (job_id, rank),
            ).fetchone()
        return None if row is None else Process(int(row[0]), row[1], int(row[2]))

    @_guarded
    def count_processes(self, job_id: int) -> int:
        """Registered ranks of the job."""
        with self._lock:
            sql = "SELECT COUNT(*) FROM processes WHERE job_id = ?"
            return int(self._db.execute(sql, (job_id,)).fetchone()[0])

    @_guarded
    def list_jobs(self, include_finished: bool = False) -> list[Job]:
        """Jobs by id."""
        where = "" if include_finished else f"WHERE state != {int(JobState.FINISHED)}"
        with self._read() as db:
            rows = db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs {where} ORDER BY job_id")
            return [_job(db, r) for r in rows.fetchall()]

    @_guarded
    def create_job(self, job: Job) -> None:
        """Insert a new job with its processes and routes."""
        with self._write() as db:
            used = db.execute("SELECT 1 FROM jobs WHERE job_id = ?", (job.job_id,)).fetchone()
            if used:
                raise StoreError(f"database {self.path}: job {job.job_id} already exists")
            marks = ", ".join("?" * 16)
            db.execute(f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES ({marks})", _job_row(job))
            _insert_routes(db, job)
            for p in job.processes:
                _insert_process(db, job.job_id, p)

    @_guarded
    def save_job(self, job: Job) -> None:
        """Replace the job's row and its routes."""
        with self._write() as db:
            sets = ", ".join(f"{c.strip()} = ?" for c in _JOB_COLUMNS.split(",")[1:])
            cur = db.execute(
                f"UPDATE jobs SET {sets} WHERE job_id = ?", (*_job_row(job)[1:], job.job_id)
            )
            if cur.rowcount != 1:
                raise StoreError(f"database {self.path}: job {job.job_id} is not stored")
            db.execute("DELETE FROM routes WHERE job_id = ?", (job.job_id,))
            _insert_routes(db, job)

    @_guarded
    def add_process(self, job_id: int, process: Process) -> None:
        """Record one rank (replacing an earlier record of it)."""
        with self._write() as db:
            _insert_process(db, job_id, process)

    # -- patterns ---------------------------------------------------------------------
    @_guarded
    def get_pattern(self, name: str) -> StoredPattern | None:
        """A stored pattern, or None."""
        with self._lock:
            sql = f"SELECT {_PATTERN_COLUMNS} FROM patterns WHERE name = ?"
            row = self._db.execute(sql, (name,)).fetchone()
        return None if row is None else _pattern(row)

    @_guarded
    def list_patterns(self) -> list[StoredPattern]:
        """Stored patterns by name."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_PATTERN_COLUMNS} FROM patterns ORDER BY name")
            return [_pattern(r) for r in rows.fetchall()]

    @_guarded
    def put_pattern(self, pattern: StoredPattern) -> None:
        """Insert or replace."""
        with self._write() as db:
            marks = ", ".join("?" * 11)
            db.execute(
                f"INSERT OR REPLACE INTO patterns ({_PATTERN_COLUMNS}) VALUES ({marks})",
                _pattern_row(pattern),
            )

    @_guarded
    def delete_pattern(self, name: str) -> bool:
        """Remove; whether it existed."""
        with self._write() as db:
            return db.execute("DELETE FROM patterns WHERE name = ?", (name,)).rowcount > 0

    @_guarded
    def count_jobs(self, uid: int) -> int:
        """Unfinished jobs of ``uid``."""
        with self._lock:
            sql = "SELECT COUNT(*) FROM jobs WHERE uid = ? AND state != ?"
            return int(self._db.execute(sql, (uid, int(JobState.FINISHED))).fetchone()[0])

    @_guarded
    def pattern_usage(self, uid: int) -> tuple[int, int]:
        """Patterns ``uid`` owns and their bytes."""
        with self._lock:
            sql = (
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(json)), 0) FROM patterns WHERE owner_uid = ?"
            )
            row = self._db.execute(sql, (uid,)).fetchone()
        return int(row[0]), int(row[1])

    # -- offers -----------------------------------------------------------------------
    @_guarded
    def put_offer(self, offer: Offer) -> None:
        """Insert or replace."""
        with self._write() as db:
            marks = ", ".join("?" * 8)
            db.execute(
                f"INSERT OR REPLACE INTO offers ({_OFFER_COLUMNS}) VALUES ({marks})",
                offer_row(offer),
            )

    @_guarded
    def get_offer(self, job_id: int, uid: int) -> Offer | None:
        """The offer, or None."""
        with self._lock:
            sql = f"SELECT {_OFFER_COLUMNS} FROM offers WHERE job_id = ? AND uid = ?"
            row = self._db.execute(sql, (job_id, uid)).fetchone()
        return None if row is None else offer_of(row)

    @_guarded
    def delete_offer(self, job_id: int, uid: int) -> bool:
        """Remove; whether it existed."""
        with self._write() as db:
            sql = "DELETE FROM offers WHERE job_id = ? AND uid = ?"
            return db.execute(sql, (job_id, uid)).rowcount > 0

    @_guarded
    def offer_usage(self, uid: int) -> tuple[int, int]:
        """Offers of ``uid`` and their pattern bytes."""
        with self._lock:
            sql = (
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(pattern_json)), 0) FROM offers WHERE uid = ?"
            )
            row = self._db.execute(sql, (uid,)).fetchone()
        return int(row[0]), int(row[1])

    @_guarded
    def purge_offers(self, before_s: float) -> int:
        """Remove offers older than ``before_s``."""
        with self._write() as db:
            return int(db.execute("DELETE FROM offers WHERE created_s < ?", (before_s,)).rowcount)

    def close(self) -> None:
        """Close the connection (the WAL is checkpointed by SQLite)."""
        with self._lock:
            self._db.close()


def migrate(db: sqlite3.Connection, steps: Sequence[str], path: str = "<db>") -> int:
    """Apply the missing schema steps in one transaction; the resulting version."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > len(steps):
        raise StoreError(
            f"database {path} has schema version {version}, newer than this sdnmpi "
            f"knows ({len(steps)}): upgrade sdnmpi"
        )
    if version == len(steps):
        return version
    db.execute("BEGIN IMMEDIATE")
    try:
        for step in steps[version:]:
            for statement in _statements(step):
                db.execute(statement)
        db.execute(f"PRAGMA user_version = {len(steps)}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return len(steps)


def _statements(script: str) -> list[str]:
    """The statements of a migration step (``executescript`` would commit early)."""
    return [s.strip() for s in script.split(";") if s.strip()]


def _job_row(job: Job) -> tuple[Any, ...]:
    return (
        job.job_id,
        job.name,
        job.uid,
        job.ntasks,
        int(job.state),
        job.router,
        job.pattern_name,
        job.pattern_json,
        job.source_sha256,
        job.created_s,
        job.started_s,
        job.finished_s,
        job.detail,
        job.install.flow_mods,
        job.install.switches,
        job.install.install_s,
    )


def _job(db: Any, row: Any, brief: bool = False, mark: str = "?") -> Job:
    """A job from its row and its processes and routes (``db``: an SQLite connection,
    or a psycopg cursor with ``mark="%s"``, the placeholder)."""
    job_id = int(row[0])
    procs = (
        db.execute(
            f"SELECT rank, node, pid FROM processes WHERE job_id = {mark} ORDER BY rank",
            (job_id,),
        ).fetchall()
        if not brief
        else []
    )
    routes = db.execute(
        f"SELECT src, dst, path, size_bytes FROM routes WHERE job_id = {mark} ORDER BY src, dst",
        (job_id,),
    ).fetchall()
    return Job(
        job_id=job_id,
        name=row[1],
        uid=int(row[2]),
        ntasks=int(row[3]),
        state=JobState(int(row[4])),
        router=row[5],
        pattern_name=row[6],
        pattern_json=bytes(row[7]),
        source_sha256=row[8],
        created_s=float(row[9]),
        started_s=float(row[10]),
        finished_s=float(row[11]),
        detail=row[12],
        install=Install(int(row[13]), int(row[14]), float(row[15])),
        routes=tuple(RoutePair(s, d, tuple(json.loads(p)), float(b)) for s, d, p, b in routes),
        processes=tuple(Process(int(r), n, int(pid)) for r, n, pid in procs),
    )


def _insert_routes(db: sqlite3.Connection, job: Job) -> None:
    db.executemany(
        "INSERT INTO routes (job_id, src, dst, path, size_bytes) VALUES (?, ?, ?, ?, ?)",
        [(job.job_id, r.src, r.dst, json.dumps(list(r.path)), r.size_bytes) for r in job.routes],
    )


def _insert_process(db: sqlite3.Connection, job_id: int, p: Process) -> None:
    db.execute(
        "INSERT OR REPLACE INTO processes (job_id, rank, node, pid) VALUES (?, ?, ?, ?)",
        (job_id, p.rank, p.node, p.pid),
    )


def _pattern_row(p: StoredPattern) -> tuple[Any, ...]:
    return (
        p.name,
        p.owner_uid,
        p.description,
        p.bandwidth_bps,
        p.latency_s,
        p.json,
        p.sha256,
        p.created_s,
        p.nranks,
        p.phases,
        p.total_bytes,
    )


def _pattern(row: tuple[Any, ...]) -> StoredPattern:
    return StoredPattern(
        name=row[0],
        owner_uid=int(row[1]),
        description=row[2],
        bandwidth_bps=float(row[3]),
        latency_s=float(row[4]),
        json=bytes(row[5]),
        sha256=row[6],
        created_s=float(row[7]),
        nranks=int(row[8]),
        phases=int(row[9]),
        total_bytes=float(row[10]),
    )


def offer_row(o: Offer) -> tuple[Any, ...]:
    """An offer's column values (``_OFFER_COLUMNS``)."""
    return (o.job_id, o.uid, o.name, o.ntasks, o.router, o.pattern_name, o.pattern_json,
            o.created_s)  # fmt: skip


def offer_of(row: Sequence[Any]) -> Offer:
    """An offer from its columns."""
    return Offer(
        job_id=int(row[0]), uid=int(row[1]), name=row[2], ntasks=int(row[3]), router=row[4],
        pattern_name=row[5], pattern_json=bytes(row[6]), created_s=float(row[7]),
    )  # fmt: skip
