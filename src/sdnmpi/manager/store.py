"""The manager's persistent state behind one interface.

:class:`Store` is what the service core needs; :mod:`~sdnmpi.manager.memory`
(tests, ``--db :memory:``), :mod:`~sdnmpi.manager.sqlite` (the default) and
:mod:`~sdnmpi.manager.postgres` (sites running several managers) implement it.
Every method is one transaction: it is applied whole or not at all.  Failures
of the backing database raise :class:`~sdnmpi.errors.StoreError` with a message
naming the database; the service passes them on as UNAVAILABLE.
"""

from __future__ import annotations

from typing import Protocol

from sdnmpi.errors import StoreError
from sdnmpi.manager.model import Job, Offer, Process, StoredPattern


class Store(Protocol):
    """Jobs (with their processes and routes), stored patterns and pattern offers."""

    def get_job(self, job_id: int, *, brief: bool = False) -> Job | None:
        """The job with its processes and routes, or None.

        ``brief``: without its processes and pattern snapshot (cheap for large jobs).
        """
        ...

    def get_process(self, job_id: int, rank: int) -> Process | None:
        """One rank's record, or None."""
        ...

    def count_processes(self, job_id: int) -> int:
        """How many ranks of the job have registered."""
        ...

    def list_jobs(self, include_finished: bool = False) -> list[Job]:
        """Jobs by id (finished ones only if asked)."""
        ...

    def create_job(self, job: Job) -> None:
        """Insert a new job (and its processes and routes); StoreError if the id is used."""
        ...

    def save_job(self, job: Job) -> None:
        """Replace a job's row and its routes (processes are added with add_process)."""
        ...

    def add_process(self, job_id: int, process: Process) -> None:
        """Record one rank of a job (replacing an earlier record of that rank)."""
        ...

    def get_pattern(self, name: str) -> StoredPattern | None:
        """A stored pattern, or None."""
        ...

    def list_patterns(self) -> list[StoredPattern]:
        """Stored patterns by name."""
        ...

    def put_pattern(self, pattern: StoredPattern) -> None:
        """Insert or replace a stored pattern."""
        ...

    def delete_pattern(self, name: str) -> bool:
        """Remove a stored pattern; whether it existed."""
        ...

    def count_jobs(self, uid: int) -> int:
        """Jobs of ``uid`` not finished (its quota's use)."""
        ...

    def pattern_usage(self, uid: int) -> tuple[int, int]:
        """Stored patterns ``uid`` owns and their bytes (its quota's use)."""
        ...

    def put_offer(self, offer: Offer) -> None:
        """Insert or replace the offer of (job id, uid)."""
        ...

    def get_offer(self, job_id: int, uid: int) -> Offer | None:
        """The offer ``uid`` made for ``job_id``, or None."""
        ...

    def delete_offer(self, job_id: int, uid: int) -> bool:
        """Remove one offer; whether it existed."""
        ...

    def offer_usage(self, uid: int) -> tuple[int, int]:
        """How many offers ``uid`` holds and their pattern bytes (its quota's use)."""
        ...

    def purge_offers(self, before_s: float) -> int:
        """Remove the offers made before ``before_s``; how many."""
        ...

    def close(self) -> None:
        """Release the database."""
        ...


def open_store(db: str, postgres: str | None = None, *, busy_timeout_s: float = 5.0) -> Store:
    """The store a command line names: ``--postgres DSN``, ``--db :memory:`` or an SQLite file."""
    if postgres:
        from sdnmpi.manager.postgres import PostgresStore

        return PostgresStore(postgres)
    if db == ":memory:":
        from sdnmpi.manager.memory import MemoryStore

        return MemoryStore()
    from pathlib import Path

    from sdnmpi.manager.sqlite import SqliteStore

    try:
        Path(db).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"database {db}: cannot create its directory: {exc.strerror}") from None
    return SqliteStore(db, busy_timeout_s=busy_timeout_s)
