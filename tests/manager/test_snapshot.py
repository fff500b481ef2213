"""The routed jobs' versions and the commit check (pure)."""

from __future__ import annotations

import dataclasses

from sdnmpi.manager.model import Job, JobState, RoutePair
from sdnmpi.manager.snapshot import RoutedJobs, switch_links


def routed(job_id: int, spine: str, src: str = "h1", dst: str = "h5") -> Job:
    path = (src, "leaf1", spine, "leaf2", dst)
    return Job(job_id, "", 0, 2, JobState.ROUTED, "ours", 0.0,
               routes=(RoutePair(src, dst, path, 1.0),))  # fmt: skip


def test_a_plan_is_stale_only_if_a_job_routed_since_uses_its_links():
    book = RoutedJobs([routed(1, "spine1")])
    snap = book.snapshot()
    plan = switch_links(routed(9, "spine2", "h2", "h6").routes)
    assert book.stale(snap, plan) == []
    book.note(routed(2, "spine1", "h3", "h7"))  # routed since, elsewhere
    assert book.stale(snap, plan) == []
    book.note(routed(3, "spine2", "h4", "h8"))  # routed since, on the plan's links
    assert book.stale(snap, plan) == [3]
    assert book.stale(snap, plan, ignore=[3]) == []
    assert not book.removed_since(snap)


def test_versions_change_with_routes_only():
    book = RoutedJobs([routed(1, "spine1")])
    snap = book.snapshot()
    book.note(dataclasses.replace(book.jobs()[1], detail="noted"))  # same routes
    assert not book.changed(1, snap) and book.jobs()[1].detail == "noted"
    book.note(routed(1, "spine2"))  # moved: a new version, and its old links are free
    assert book.changed(1, snap) and book.removed_since(snap)
    assert book.since(snap) == {1: book.jobs()[1]}


def test_a_job_no_longer_routed_leaves_the_book():
    book = RoutedJobs([routed(1, "spine1"), routed(2, "spine2", "h2", "h6")])
    snap = book.snapshot()
    book.note(dataclasses.replace(book.jobs()[1], state=JobState.FINISHED))
    assert 1 not in book and book.changed(1, snap) and book.removed_since(snap)
    book.sync([])  # the store lists no unfinished job
    assert book.jobs() == {}
