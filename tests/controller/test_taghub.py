"""The controller's tag hub: job slots, placements, mirrors, bad reports."""

from __future__ import annotations

import pytest

from sdnmpi.controller.taghub import TagHub
from sdnmpi.errors import ConfigError
from sdnmpi.node.procnet import Endpoint
from sdnmpi.wire.tag import MAX_JOB_SLOT

A, B = Endpoint("10.0.0.1", 1024), Endpoint("10.0.0.2", 40000)


def test_slots_placement_and_release() -> None:
    hub = TagHub()
    j7 = hub.join("7", 0, 2, "h1")
    assert (j7.slot, j7.complete) == (1, False)
    assert hub.join("8", 0, 1, "h3").slot == 2
    assert hub.join("7", 1, 2, "h2").complete
    assert hub.jobs["7"].hosts == {0: "h1", 1: "h2"}
    assert hub.join("7", 1, 2, "h2").slot == 1  # a repeated report is harmless
    assert hub.leave("7", 0) is None
    done = hub.leave("7", 1)
    assert done is not None and done.slot == 1
    assert hub.join("9", 0, 1, "h1").slot == 1  # slot 1 is free again


def test_mirrors_pair_two_ends() -> None:
    hub = TagHub()
    hub.join("7", 0, 3, "h1")
    hub.join("7", 2, 3, "h2")
    assert hub.conn("7", 0, (A, B)) is None
    assert hub.conn("7", 2, (B, A)) == 0
    assert hub.conn("7", 0, (A, B)) == 2


def test_bad_reports() -> None:
    hub = TagHub()
    hub.join("7", 0, 2, "h1")
    with pytest.raises(ConfigError, match="has 2 ranks, not 3"):
        hub.join("7", 1, 3, "h2")
    with pytest.raises(ConfigError, match="already runs on h1"):
        hub.join("7", 0, 2, "h2")
    with pytest.raises(ConfigError, match="out of range"):
        hub.join("7", 2, 2, "h2")
    with pytest.raises(ConfigError, match="has not joined"):
        hub.conn("7", 1, (A, B))
    with pytest.raises(ConfigError, match="not known"):
        hub.leave("nope", 0)


def test_slots_run_out_cleanly() -> None:
    hub = TagHub()
    for job in range(MAX_JOB_SLOT):
        hub.join(str(job), 0, 1, "h1")
    with pytest.raises(ConfigError, match="job slots are in use"):
        hub.join("one-more", 0, 1, "h1")
    assert "one-more" not in hub.jobs
