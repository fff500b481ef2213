"""When the shim syncs: quiet events, and a first sync that waits for discovery."""

from __future__ import annotations

import doctest

from sdnmpi.controller import Planner, PlannerConfig, syncpolicy
from sdnmpi.controller.syncpolicy import SyncPolicy, discovery_complete
from sdnmpi.core.generators import leaf_spine


def test_module_examples() -> None:
    assert doctest.testmod(syncpolicy).failed == 0


def test_events_must_be_quiet_before_a_sync() -> None:
    p = SyncPolicy(quiet_s=0.5, hold_s=20.0, now=0.0)
    assert not p.due(10.0, complete=True, reports_pending=False)  # nothing happened
    p.touch(1.0)
    p.touch(1.4)  # a burst: the quiet period counts from its last event
    assert not p.due(1.8, complete=True, reports_pending=False)
    assert p.due(1.9, complete=True, reports_pending=False)
    p.synced()
    assert not p.due(5.0, complete=True, reports_pending=False)


def test_the_first_sync_waits_for_discovery_then_for_hold_s_at_most() -> None:
    p = SyncPolicy(quiet_s=0.5, hold_s=20.0, now=0.0)
    p.switch_connected(100.0, first=True)  # the hold counts from the first switch
    p.switch_connected(101.0, first=False)
    p.touch(101.0)
    assert not p.due(110.0, complete=False, reports_pending=False)
    assert not p.due(110.0, complete=True, reports_pending=True)  # a switch's rules unknown
    assert p.due(110.0, complete=True, reports_pending=False)
    assert p.due(120.5, complete=False, reports_pending=True)  # hold_s passed: sync anyway
    p.synced()
    p.touch(200.0)
    p.switch_connected(200.0, first=True)  # after the first sync: no hold, no waiting
    assert p.due(200.6, complete=False, reports_pending=True)


def test_discovery_is_complete_with_every_switch_and_both_ways_of_every_link() -> None:
    topo = leaf_spine(2, 2, 2)
    planner = Planner(topo, PlannerConfig(router="dmodk"))
    assert not discovery_complete(planner.inventory)
    for sw in topo.switches:
        planner.switch_up(sw.dpid, sync=False)
    arcs = [a for a in topo.arcs if not topo.is_host(a.src) and not topo.is_host(a.dst)]
    for i, arc in enumerate(arcs):
        assert not discovery_complete(planner.inventory), f"after {i} of {len(arcs)} arcs"
        src, dst = topo.switch(arc.src), topo.switch(arc.dst)
        planner.link_up((src.dpid, arc.src_port), (dst.dpid, arc.dst_port), sync=False)
    assert discovery_complete(planner.inventory)
