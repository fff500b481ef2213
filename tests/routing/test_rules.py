"""The rules a routing needs per switch (core/routing/rules.py): hand-solved cases,
a per-destination rule that would loop barred, the budget never exceeded and every
admitted pair on its planned path, and the default table equal to the controller's."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdnmpi.controller import layout
from sdnmpi.controller.jobroutes import default_table
from sdnmpi.controller.routes import default_rules, routes_from_routing
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.routing import Demands, Fabric, route
from sdnmpi.core.routing.rules import (
    DefaultTable,
    PairPath,
    RuleSet,
    aggregate,
    defaults_from_routing,
    fit,
    name_peer,
    trace,
)
from sdnmpi.errors import RoutingError

#   a, b, e -- L1 --1-- S1 --1-- L2 -- c
#                `--2-- S2 --1--'
EDGE = {"a": "L1", "b": "L1", "e": "L1", "c": "L2"}
LINKS: dict[tuple[Hashable, int], str] = {
    ("L1", 1): "S1", ("L1", 2): "S2", ("S1", 1): "L2", ("S2", 1): "L2"
}  # fmt: skip
DEFAULTS = DefaultTable({("L1", "c"): 1, ("S1", "c"): 1}, {})


def peer(switch: Hashable, port: int) -> Hashable | None:
    return LINKS.get((switch, port))


def via_s2(src: str, weight: float = 1.0) -> PairPath:
    return PairPath(src, "c", (("L1", 2), ("S2", 1)), weight)


def via_s1(src: str) -> PairPath:
    return PairPath(src, "c", (("L1", 1), ("S1", 1)))


def test_a_pair_on_its_default_route_needs_no_rule() -> None:
    assert aggregate([via_s1("a")], DEFAULTS, peer, EDGE).counts() == {}


def test_pairs_to_one_destination_share_a_per_destination_rule() -> None:
    # L1: two pairs leave by 2 (default 1): exact 2 rules, or 1 per-destination rule.
    # S2 holds no default for c: n=2 pairs by port 1 -> exact 2, or 1 per-destination.
    rules = aggregate([via_s2("a"), via_s2("b")], DEFAULTS, peer, EDGE)
    assert rules.counts() == {"L1": 1, "S2": 1}
    assert rules.dst == {"L1": {"c": 2}, "S2": {"c": 1}} and rules.exact == {}
    # with a pair on the default route too, L1 ties: min(n - n_m, 1 + n - max n_x) =
    # min(3 - 1, 1 + 3 - 2) = 2; a tie keeps exact rules (other traffic left alone)
    three = [via_s2("a"), via_s2("b"), via_s1("e")]
    rules = aggregate(three, DEFAULTS, peer, EDGE)
    assert rules.counts() == {"L1": 2, "S2": 1} and "L1" not in rules.dst
    # a fourth pair by S2: min(4 - 1, 1 + 4 - 3) = 2, the default-route pair now needs
    # an exact rule on L1 to keep its path under the per-destination rule
    four = [*three, via_s2("f")]
    rules = aggregate(four, DEFAULTS, peer, {**EDGE, "f": "L1"})
    assert rules.counts() == {"L1": 2, "S2": 1} and rules.dst["L1"] == {"c": 2}
    assert rules.exact["L1"][("e", "c")].port == 1
    for p in four:
        assert trace(rules, DEFAULTS, peer, {**EDGE, "f": "L1"}, p.src, p.dst) == p.hops


def test_exact_rules_only_without_per_destination() -> None:
    rules = aggregate([via_s2("a"), via_s2("b")], DEFAULTS, peer, EDGE, per_destination=False)
    assert rules.counts() == {"L1": 2, "S2": 2} and rules.dst == {}


def test_the_budget_admits_the_best_scored_pairs_and_the_rest_fall_back() -> None:
    paths = [via_s2("a", 1.0), via_s2("b", 5.0)]
    done = fit(paths, DEFAULTS, peer, EDGE, 1, per_destination=False)
    assert [p.src for p in done.admitted] == ["b"] and [p.src for p in done.fallback] == ["a"]
    assert done.counts == {"L1": 1, "S2": 1}
    # the pair left out follows the default route: S1
    assert trace(done.rules, DEFAULTS, peer, EDGE, "a", "c") == (("L1", 1), ("S1", 1))
    # fixed pairs are kept even over the budget; a pair that costs nothing more (it
    # shares their per-destination rule) still comes in, one that costs a rule does not
    held = fit([via_s2("a")], DEFAULTS, peer, EDGE, 0, fixed=[via_s2("b")])
    assert len(held.admitted) == 1 and held.counts == {"L1": 1, "S2": 1}
    assert held.rules.dst == {"L1": {"c": 2}, "S2": {"c": 1}}
    alone = fit([via_s2("a")], DEFAULTS, peer, EDGE, 0)
    assert alone.admitted == () and alone.counts == {}


def test_a_per_destination_rule_that_would_loop_is_barred() -> None:
    #   D <-1- A <-1- B -2-> C -2-> D,  C -3-> E -1-> D;  C's default for d: back to B
    # B: both pairs leave by 2 (default 1): 1 per-destination rule beats 2 exact ones;
    # C: one by 2, one by 3: a tie, exact rules; so frames to d at B would go to C and
    # C's default sends them back to B: the per-destination rule on B is barred.
    edge = {"x": "B", "y": "B", "d": "D"}
    links: dict[tuple[Hashable, int], str] = {
        ("A", 1): "D", ("B", 1): "A", ("B", 2): "C", ("C", 1): "B", ("C", 2): "D",
        ("C", 3): "E", ("E", 1): "D",
    }  # fmt: skip
    defaults = DefaultTable({("A", "d"): 1, ("B", "d"): 1, ("C", "d"): 1, ("E", "d"): 1}, {})

    def ring(switch: Hashable, port: int) -> Hashable | None:
        return links.get((switch, port))

    paths = [
        PairPath("x", "d", (("B", 2), ("C", 2))),
        PairPath("y", "d", (("B", 2), ("C", 3), ("E", 1))),
    ]
    done = fit(paths, defaults, ring, edge, None)
    assert done.rules.dst == {} and len(done.admitted) == 2
    assert set(done.rules.exact["B"]) == {("x", "d"), ("y", "d")}
    for p in paths:
        assert trace(done.rules, defaults, ring, edge, p.src, p.dst) == p.hops
    # on the plain aggregation (no check) it would have been one rule on B
    assert done.counts == {"B": 2, "C": 2}


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(RoutingError, match="budget must be >= 0"):
        fit([via_s2("a")], DEFAULTS, peer, EDGE, -1)


def _ft4() -> tuple[Fabric, DefaultTable, dict[object, object]]:
    fab = Fabric(fat_tree(4))
    demands = Demands.all_pairs(fab)
    table, edge = defaults_from_routing(fab, route("dmodk", fab, demands), demands)
    return fab, table, edge


FT4 = _ft4()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pairs=st.lists(
        st.tuples(st.integers(0, 15), st.integers(0, 15)).filter(lambda p: p[0] != p[1]),
        min_size=1,
        max_size=60,
        unique=True,
    ),
    budget=st.one_of(st.none(), st.integers(0, 12)),
    seed=st.integers(0, 5),
)
def test_budget_never_exceeded_and_every_pair_delivered(
    pairs: list[tuple[int, int]], budget: int | None, seed: int
) -> None:
    fab, table, edge = FT4
    hosts = [h.name for h in fab.topology.hosts]
    demands = Demands.all_pairs(fab)
    rows = {
        (fab.names[int(s)], fab.names[int(d)]): f
        for f, (s, d) in enumerate(zip(demands.src, demands.dst, strict=True))
    }
    routing = route("ecmp", fab, demands, seed=seed)
    net = name_peer(fab)
    paths = []
    for a, b in pairs:
        nodes = routing.node_path(fab, rows[(hosts[a], hosts[b])])
        arcs = [x for x in routing.arcs[rows[(hosts[a], hosts[b])]].tolist() if x >= 0]
        hops = tuple((fab.topology.arcs[x].src, fab.topology.arcs[x].src_port) for x in arcs[1:-1])
        assert len(hops) == len(nodes) - 3
        paths.append(PairPath(hosts[a], hosts[b], hops, float(a + b + 1)))
    done = fit(paths, table, net, edge, budget)
    if budget is not None:
        assert all(n <= budget for n in done.counts.values())
    assert done.counts == aggregate(list(done.admitted), table, net, edge).counts()
    assert len(done.admitted) + len(done.fallback) == len(paths)
    for p in done.admitted:
        assert trace(done.rules, table, net, edge, p.src, p.dst) == p.hops
    for x in hosts:  # every pair, of a job or not, still reaches its host
        for y in hosts:
            if x != y:
                assert trace(done.rules, table, net, edge, x, y) is not None, (x, y)


def test_the_default_table_is_the_controllers_encoding() -> None:
    topo = leaf_spine(2, 4, 2)
    fab = Fabric(topo)
    demands = Demands.all_pairs(fab)
    for router in ("dmodk", "ecmp"):
        routing = route(router, fab, demands)
        mine, _ = defaults_from_routing(fab, routing, demands)
        theirs = default_table(default_rules(routes_from_routing(fab, routing)))
        dpid: dict[Hashable, int] = {s.name: s.dpid for s in topo.switches}
        mac: dict[Hashable, str] = {h.name: h.mac for h in topo.hosts}
        assert {(dpid[s], mac[d]): p for (s, d), p in mine.dst.items()} == dict(theirs.dst)
        assert {(dpid[s], mac[a], mac[b]): p for (s, a, b), p in mine.pair.items()} == dict(
            theirs.pair
        )
    assert layout.PRIORITY_JOB_DST < layout.PRIORITY_DEFAULT_PAIR
    assert RuleSet({}, {}).counts() == {} and np.isfinite(1.0)
