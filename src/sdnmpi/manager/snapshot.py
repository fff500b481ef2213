"""The routed jobs as plans see them: versions, snapshots and the check at commit.

Plans (a new job's routes, a running job's move) are computed with the manager's
lock released, on a :class:`Snapshot` of the routed jobs taken under it.  When the
lock is back, :meth:`RoutedJobs.stale` says whether the plan still holds: it does
unless a job routed or moved since the snapshot now uses a switch link the plan
uses (the plan's own cost depends only on the load of its links; load added
elsewhere only makes the paths it did not take worse).  Load that went away since
(a job ended, moved off) leaves the plan valid, maybe no longer the best:
:attr:`RoutedJobs.removed_at` tells the manager to look again afterwards.

:class:`RoutedJobs` mirrors the store's ROUTED jobs in memory, so a snapshot costs a
dictionary copy under the lock instead of reading every job's routes from the
store.  Every save of a job goes through :meth:`RoutedJobs.note` (the manager's
:meth:`~sdnmpi.manager.jobrouting.JobRouting.save`).  Pure: no locks, no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sdnmpi.manager.model import Job, JobState, RoutePair

#: A link between two switches as paths name it: (from node, to node).
Link = tuple[str, str]


def switch_links(routes: Iterable[RoutePair]) -> frozenset[Link]:
    """The switch-to-switch hops of ``routes`` (the first and last hop join a host).

    >>> sorted(switch_links([RoutePair("h1", "h2", ("h1", "l1", "s1", "l2", "h2"), 1.0)]))
    [('l1', 's1'), ('s1', 'l2')]
    """
    return frozenset(hop for r in routes for hop in itertools.pairwise(r.path[1:-1]))


@dataclass(frozen=True)
class Entry:
    """A routed job as committed: ``version`` is the clock of its last route change."""

    job: Job
    version: int
    links: frozenset[Link]


@dataclass(frozen=True)
class Snapshot:
    """The routed jobs at clock ``clock``."""

    clock: int
    jobs: Mapping[int, Entry]

    def routes(self, but: int | None = None) -> list[tuple[RoutePair, ...]]:
        """Every routed job's routes except job ``but``'s: the load a plan sees."""
        return [e.job.routes for j, e in self.jobs.items() if j != but]

    def routed(self, but: int | None = None) -> dict[int, Job]:
        """The routed jobs except job ``but``, by id."""
        return {j: e.job for j, e in self.jobs.items() if j != but}


class RoutedJobs:
    """The ROUTED jobs, their versions, and when load last went away."""

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self.clock = 0
        #: The clock when a routed job last stopped being routed or moved (load gone).
        self.removed_at = 0
        self._jobs: dict[int, Entry] = {}
        for job in jobs:
            self.note(job)

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._jobs

    def get(self, job_id: int) -> Entry | None:
        """The job's entry, if it is routed."""
        return self._jobs.get(job_id)

    def jobs(self) -> dict[int, Job]:
        """The routed jobs by id."""
        return {j: e.job for j, e in self._jobs.items()}

    def note(self, job: Job, links: frozenset[Link] | None = None) -> None:
        """Record a job as saved: routed with routes (a new version if they changed), or
        not routed (its load is gone).  ``links``: its :func:`switch_links`, if known."""
        old = self._jobs.get(job.job_id)
        if job.state is not JobState.ROUTED or not job.routes:
            if old is not None:
                del self._jobs[job.job_id]
                self.clock += 1
                self.removed_at = self.clock
            return
        if old is not None and (old.job.routes is job.routes or old.job.routes == job.routes):
            self._jobs[job.job_id] = Entry(job, old.version, old.links)
            return
        self.clock += 1
        if old is not None:
            self.removed_at = self.clock  # moved: its old paths are free
        known = links if links is not None else switch_links(job.routes)
        self._jobs[job.job_id] = Entry(job, self.clock, known)

    def sync(self, jobs: Iterable[Job]) -> None:
        """Follow the store's unfinished ``jobs`` (all of them): noted, and jobs not
        among them no longer routed."""
        listed = {job.job_id for job in jobs}
        for job in jobs:
            self.note(job)
        for gone in [j for j in self._jobs if j not in listed]:
            del self._jobs[gone]
            self.clock += 1
            self.removed_at = self.clock

    def since(self, snap: Snapshot, but: int | None = None) -> dict[int, Job]:
        """The jobs routed or moved since ``snap`` (except job ``but``), by id."""
        return {j: e.job for j, e in self._jobs.items() if e.version > snap.clock and j != but}

    def snapshot(self) -> Snapshot:
        """The routed jobs now (entries are immutable: a copy of the table)."""
        return Snapshot(self.clock, dict(self._jobs))

    def stale(
        self, snap: Snapshot, links: frozenset[Link], ignore: Iterable[int] = ()
    ) -> list[int]:
        """Jobs routed or moved since ``snap`` whose links meet ``links`` (none: a plan
        on ``snap`` with those links still holds).  Jobs in ``ignore`` do not count
        (the job planned, and those planned with it)."""
        skip = set(ignore)
        return sorted(
            j
            for j, e in self._jobs.items()
            if e.version > snap.clock and j not in skip and not links.isdisjoint(e.links)
        )

    def changed(self, job_id: int, snap: Snapshot) -> bool:
        """Whether job ``job_id``'s routes are not those of ``snap`` (moved, ended)."""
        now, then = self._jobs.get(job_id), snap.jobs.get(job_id)
        return now is None or then is None or now.version != then.version

    def removed_since(self, snap: Snapshot) -> bool:
        """Whether load went away since ``snap`` (a job ended or moved)."""
        return self.removed_at > snap.clock
