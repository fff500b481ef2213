"""An in-memory :class:`~sdnmpi.manager.store.Store` (tests, ``--db :memory:``).

Values are frozen dataclasses, so keeping and returning them shares nothing
mutable; a lock makes each method atomic like a database transaction.
"""

from __future__ import annotations

import dataclasses
import threading

from sdnmpi.errors import StoreError
from sdnmpi.manager.model import Job, JobState, Offer, Process, StoredPattern


class MemoryStore:
    """Jobs and patterns in dictionaries; lost when the process ends."""

    def __init__(self) -> None:
        self._jobs: dict[int, Job] = {}
        self._patterns: dict[str, StoredPattern] = {}
        self._offers: dict[tuple[int, int], Offer] = {}
        self._lock = threading.Lock()

    def get_job(self, job_id: int, *, brief: bool = False) -> Job | None:
        """The job, or None."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None or not brief:
            return job
        return dataclasses.replace(job, processes=(), pattern_json=b"")

    def get_process(self, job_id: int, rank: int) -> Process | None:
        """One rank's record, or None."""
        with self._lock:
            job = self._jobs.get(job_id)
            return None if job is None else job.process_map().get(rank)

    def count_processes(self, job_id: int) -> int:
        """Registered ranks of the job."""
        with self._lock:
            job = self._jobs.get(job_id)
            return 0 if job is None else len(job.processes)

    def list_jobs(self, include_finished: bool = False) -> list[Job]:
        """Jobs by id."""
        with self._lock:
            jobs = [self._jobs[k] for k in sorted(self._jobs)]
        return [j for j in jobs if include_finished or j.state is not JobState.FINISHED]

    def create_job(self, job: Job) -> None:
        """Insert a new job."""
        with self._lock:
            if job.job_id in self._jobs:
                raise StoreError(f"job {job.job_id} already exists in the store")
            self._jobs[job.job_id] = _sorted(job)

    def save_job(self, job: Job) -> None:
        """Replace the job's row and routes; its stored processes are kept."""
        with self._lock:
            old = self._jobs.get(job.job_id)
            if old is None:
                raise StoreError(f"job {job.job_id} is not in the store")
            self._jobs[job.job_id] = dataclasses.replace(job, processes=old.processes)

    def add_process(self, job_id: int, process: Process) -> None:
        """Record one rank."""
        with self._lock:
            old = self._jobs.get(job_id)
            if old is None:
                raise StoreError(f"job {job_id} is not in the store")
            procs = {p.rank: p for p in old.processes}
            procs[process.rank] = process
            self._jobs[job_id] = _sorted(dataclasses.replace(old, processes=tuple(procs.values())))

    def get_pattern(self, name: str) -> StoredPattern | None:
        """A stored pattern, or None."""
        with self._lock:
            return self._patterns.get(name)

    def list_patterns(self) -> list[StoredPattern]:
        """Stored patterns by name."""
        with self._lock:
            return [self._patterns[k] for k in sorted(self._patterns)]

    def put_pattern(self, pattern: StoredPattern) -> None:
        """Insert or replace."""
        with self._lock:
            self._patterns[pattern.name] = pattern

    def delete_pattern(self, name: str) -> bool:
        """Remove; whether it existed."""
        with self._lock:
            return self._patterns.pop(name, None) is not None

    def count_jobs(self, uid: int) -> int:
        """Unfinished jobs of ``uid``."""
        with self._lock:
            return sum(
                1 for j in self._jobs.values() if j.uid == uid and j.state is not JobState.FINISHED
            )

    def pattern_usage(self, uid: int) -> tuple[int, int]:
        """Patterns ``uid`` owns and their bytes."""
        with self._lock:
            mine = [p for p in self._patterns.values() if p.owner_uid == uid]
        return len(mine), sum(len(p.json) for p in mine)

    def put_offer(self, offer: Offer) -> None:
        """Insert or replace."""
        with self._lock:
            self._offers[(offer.job_id, offer.uid)] = offer

    def get_offer(self, job_id: int, uid: int) -> Offer | None:
        """The offer, or None."""
        with self._lock:
            return self._offers.get((job_id, uid))

    def delete_offer(self, job_id: int, uid: int) -> bool:
        """Remove; whether it existed."""
        with self._lock:
            return self._offers.pop((job_id, uid), None) is not None

    def offer_usage(self, uid: int) -> tuple[int, int]:
        """Offers of ``uid`` and their pattern bytes."""
        with self._lock:
            mine = [o for o in self._offers.values() if o.uid == uid]
        return len(mine), sum(len(o.pattern_json) for o in mine)

    def purge_offers(self, before_s: float) -> int:
        """Remove offers older than ``before_s``."""
        with self._lock:
            old = [k for k, o in self._offers.items() if o.created_s < before_s]
            for k in old:
                del self._offers[k]
        return len(old)

    def close(self) -> None:
        """Nothing to release."""


def _sorted(job: Job) -> Job:
    procs = tuple(sorted(job.processes, key=lambda p: p.rank))
    return dataclasses.replace(job, processes=procs)
