"""The per-switch budget of tag rules: exact rules, per-destination rules, or nothing,
never more than the budget, and every packet still delivered.

``leaf_spine(2, 2, 2)``: h1, h2 on leaf1 (dpid 1), h3, h4 on leaf2 (dpid 2), spines 3, 4.
"""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from sdnmpi.controller.layout import PRIORITY_TAG, PRIORITY_TAG_DST
from sdnmpi.controller.primitives import Collective, dst_match
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.testing.ofnetwork import matches
from sdnmpi.wire.tag import Primitive
from tests.controller.conftest import Setup, steady
from tests.controller.tagging import send, tag, tag_load, tag_rules, tagged, world_flows

RANKS = ["h1", "h2", "h3", "h4"]
COLLS = [Collective("alltoall", count=16), Collective("allreduce", count=64)]


def _setup(budget: int | None, router: str = "dmodk") -> Setup:
    return steady(leaf_spine(2, 2, 2), router, tag_budget=budget)


def _needs(router: str = "dmodk") -> tuple[int, int]:
    """(max exact+catch-all rules on a switch, max per-destination rules) without budget."""
    s = _setup(None, router)
    s.send(s.planner.register_tagged_job(1, 1, 4, RANKS, COLLS))
    rules = tag_rules(s.fabric.rules())
    full = max(tag_load(s.fabric).values())
    per_dst = [r for r in rules if r.priority == PRIORITY_TAG_DST]
    masked = max(sum(r.dpid == d for r in per_dst) for d in {r.dpid for r in per_dst})
    return full, masked


def _flows() -> list[tuple[int, int, int]]:
    flows = set().union(*(world_flows(c, RANKS) for c in COLLS))
    return sorted(flows | {(Primitive.P2P, 0, 3), (Primitive.SCAN, 3, 1)})


def _check_delivery(setup: Setup, slot: int, via_controller: bool) -> None:
    for prim, s, d in _flows():
        pkt, _ = tagged(setup.topo, RANKS[s], RANKS[d], tag(slot, prim, s, d))
        direct = setup.fabric.trace(RANKS[s], pkt)
        assert (direct.outcome == "controller") == via_controller, (prim, s, d, direct)
        tr = send(setup, RANKS[s], RANKS[d], tag(slot, prim, s, d))
        assert (tr.outcome, tr.host) == ("delivered", RANKS[d])
        assert tr.packet is not None and tr.packet.eth_dst == setup.topo.host(RANKS[d]).mac


@pytest.mark.parametrize("router", ["dmodk", "ecmp"])
@pytest.mark.parametrize("regime", ["exact", "masked", "none"])
def test_budget_regimes_never_exceed_the_budget_and_still_deliver(regime, router, caplog):
    full, masked = _needs(router)
    assert full > masked > 0
    budget = {"exact": full, "masked": full - 1, "none": masked - 1}[regime]
    caplog.set_level(logging.WARNING, logger="sdnmpi.controller")
    setup = _setup(budget, router)
    setup.send(setup.planner.register_tagged_job(1, 1, 4, RANKS, COLLS))
    assert setup.planner.tag_regime(1) == regime
    assert max(tag_load(setup.fabric).values(), default=0) <= budget
    prios = {r.priority for r in tag_rules(setup.fabric.rules())}
    assert (
        prios
        == {
            "exact": {PRIORITY_TAG, PRIORITY_TAG_DST},
            "masked": {PRIORITY_TAG_DST},
            "none": set(),
        }[regime]
    )
    _check_delivery(setup, 1, via_controller=regime == "none")
    assert max(tag_load(setup.fabric).values(), default=0) <= budget  # packet-ins added none
    logs = [r.getMessage() for r in caplog.records]
    if regime != "exact":
        assert len([m for m in logs if "per switch" in m]) == 1, logs


def test_a_second_job_is_demoted_when_the_first_fills_the_budget():
    full, masked = _needs()
    setup = _setup(full + masked)
    setup.send(setup.planner.register_tagged_job(1, 1, 4, RANKS, COLLS))
    setup.send(setup.planner.register_tagged_job(2, 2, 4, RANKS, COLLS))
    assert (setup.planner.tag_regime(1), setup.planner.tag_regime(2)) == ("exact", "masked")
    assert max(tag_load(setup.fabric).values()) <= full + masked
    _check_delivery(setup, 2, via_controller=False)
    setup.send(setup.planner.unregister_tagged_job(1))  # room again: job 2 gets exact rules
    assert setup.planner.tag_regime(2) == "exact"
    assert {r.priority for r in tag_rules(setup.fabric.rules(), 2)} == {
        PRIORITY_TAG,
        PRIORITY_TAG_DST,
    }


def test_reactive_job_switches_to_per_destination_rules_when_it_outgrows_the_budget():
    setup = _setup(4)
    setup.send(setup.planner.register_tagged_job(3, 7, 4, RANKS))
    assert tag_rules(setup.fabric.rules()) == []  # reactive: nothing before traffic
    for prim, s, d in _flows():
        tr = send(setup, RANKS[s], RANKS[d], tag(7, prim, s, d))
        assert (tr.outcome, tr.host) == ("delivered", RANKS[d])
        assert max(tag_load(setup.fabric).values(), default=0) <= 4
    assert setup.planner.tag_regime(3) == "masked"


def test_per_destination_match_covers_prefix_slot_and_destination_only():
    m = dst_match(5, 3)
    assert m.eth_dst_mask == "ff:fe:00:00:ff:f0"
    hits = [tag(5, p, s, 3) for p in (1, 3, 17, 31) for s in (0, 3, 4095)]
    misses = [tag(5, 1, 0, 4), tag(6, 1, 0, 3), tag(4, 1, 0, 3), "02:00:00:00:00:03"]
    for mac in hits + misses:
        pkt, _ = tagged(leaf_spine(1, 2, 1), "h1", "h2", mac)
        assert matches(m, 1, pkt) == (mac in hits), mac


@pytest.mark.parametrize("router", ["dmodk", "ecmp"])
def test_per_destination_rules_deliver_on_a_fat_tree(router):
    topo = fat_tree(4)
    hosts = [h.name for h in topo.hosts]
    probe = steady(topo, router)
    probe.send(probe.planner.register_tagged_job(1, 2, 16, hosts))
    net = probe.planner.network()
    assert net is not None
    masked = probe.planner.tag_planner.masked_rules(probe.planner.tagged[1].job, net)
    need = max(Counter(r.dpid for r in masked).values())
    setup = steady(topo, router, tag_budget=need)
    setup.send(setup.planner.register_tagged_job(1, 2, 16, hosts))
    pairs = [(s, d) for s in range(16) for d in range(16) if s != d]
    for s, d in pairs[::2]:  # reactive flows until they outgrow the budget
        tr = send(setup, hosts[s], hosts[d], tag(2, Primitive.ALLTOALL, s, d))
        assert (tr.outcome, tr.host) == ("delivered", hosts[d])
        assert max(tag_load(setup.fabric).values()) <= need
    assert setup.planner.tag_regime(1) == "masked"
    for s, d in pairs:  # every pair now on its destination's default tree, no packet-in
        pkt, _ = tagged(topo, hosts[s], hosts[d], tag(2, Primitive.P2P, s, d))
        tr = setup.fabric.trace(hosts[s], pkt)
        assert (tr.outcome, tr.host) == ("delivered", hosts[d])
        assert tr.packet is not None and tr.packet.eth_dst == topo.host(hosts[d]).mac
        assert len(set(tr.dpids)) == len(tr.dpids)
