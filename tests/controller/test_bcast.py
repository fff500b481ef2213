"""Switch-replicated broadcast trees (issue 14) on the fake fabric: the API's
``tag_bcast_open`` / ``tag_bcast_close`` over a tagged job, what the switches then do
with a datagram from the root (every receiving host once, nobody else), what other
hosts cannot do, what close, job end, caps, switch errors, restarts and bad requests
leave behind."""

from __future__ import annotations

import doctest
import json
import random
from collections import Counter
from typing import Any

import pytest

from sdnmpi.controller import bcasttrees, flows, layout, packets, portstats
from sdnmpi.controller.api import Answer, ApiHandler
from sdnmpi.controller.bcasttrees import BcastConfig
from sdnmpi.controller.flows import IP_PROTO_UDP, GroupMod
from sdnmpi.controller.jobstore import StoredState
from sdnmpi.controller.packets import Packet, ipv4, multicast_mac
from sdnmpi.controller.planner import Planner, PlannerConfig
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.topology import Topology
from sdnmpi.testing import FakeOFNetwork, Spread, discover
from tests.controller.conftest import Setup

TOPOS = {"leaf_spine": lambda: leaf_spine(2, 4, 2), "fat_tree": lambda: fat_tree(4)}
JOB = "4711"


def line(**req: Any) -> bytes:
    return json.dumps(req).encode() + b"\n"


def fabric_setup(
    topo: Topology, bcast: BcastConfig | None = None, max_groups: int | None = None
) -> tuple[Setup, ApiHandler]:
    """A planner at steady state on a fake fabric (whose switches hold ``max_groups``)."""
    planner = Planner(topo, PlannerConfig(bcast=bcast or BcastConfig()))
    fabric = FakeOFNetwork(topo, max_groups=max_groups)
    messages = discover(planner, topo)
    fabric.apply(messages)
    api = ApiHandler(planner)
    api.synced = True
    return Setup(topo, planner, fabric, messages), api


def run(setup: Setup, api: ApiHandler, **req: Any) -> dict[str, Any]:
    """One request as the shim carries it out: send, and if a switch refused one of the
    messages, send the answer's undo instead and reply with that."""
    answer = api.handle(line(**req))
    seen = len(setup.fabric.errors)
    setup.send(answer.messages)
    errors = setup.fabric.errors[seen:]
    if errors and answer.undo is not None:
        why = "; ".join(f"switch {m.dpid:#x} refused: {e}" for m, e in errors)
        answer = answer.undo(why)
        setup.send(answer.messages)
    assert isinstance(answer, Answer)
    return answer.complete(True, 0.01)


def join(setup: Setup, api: ApiHandler, job: str = JOB, per_host: int = 1) -> list[str]:
    """Every host runs ``per_host`` ranks of ``job`` (rank r on host r // per_host);
    the rank -> host list."""
    hosts = [h.name for h in setup.topo.hosts for _ in range(per_host)]
    for rank, host in enumerate(hosts):
        reply = run(setup, api, op="tag_join", job=job, rank=rank, nprocs=len(hosts), host=host)
        assert reply["ok"], reply
    return hosts


def datagram(topo: Topology, host: str, group: str, src_ip: str | None = None) -> Packet:
    """A UDP datagram ``host`` sends to ``group`` (from its own IP unless given)."""
    h = topo.host(host)
    return ipv4(h.mac, multicast_mac(group), IP_PROTO_UDP, 47000, src_ip or h.ip, group)


def spread_from(setup: Setup, host: str, group: str, src_ip: str | None = None) -> Spread:
    return setup.fabric.spread(host, datagram(setup.topo, host, group, src_ip))


def bcast_state(setup: Setup) -> tuple[object, ...]:
    """The fabric's broadcast-tree rules and its groups."""
    rules = frozenset(r for r in setup.fabric.rules() if layout.kind_of(r.cookie) == "bcast")
    groups = {d: g for d, g in setup.fabric.group_snapshot().items() if g}
    return rules, groups


@pytest.mark.parametrize("name", sorted(TOPOS))
def test_a_datagram_from_the_root_reaches_every_receiver_once(name: str) -> None:
    setup, api = fabric_setup(TOPOS[name]())
    hosts = join(setup, api, per_host=2)
    rng = random.Random(14)
    for _ in range(6):
        comm = sorted(rng.sample(range(len(hosts)), rng.randint(2, len(hosts))))
        root = rng.choice(comm)
        reply = run(setup, api, op="tag_bcast_open", job=JOB, root=root, ranks=comm)
        assert reply["ok"] and reply["port"] == 47000 and not reply["cached"], reply
        want = Counter({hosts[r]: 1 for r in comm} | {hosts[root]: 0})
        got = spread_from(setup, hosts[root], reply["group"])
        assert got.delivered == +want  # each receiving host once; never the root's
        assert (got.dropped, got.controller, got.loop) == (0, 0, False)
        assert not setup.fabric.errors


@pytest.mark.parametrize("name", sorted(TOPOS))
def test_nobody_else_can_send_into_a_tree(name: str) -> None:
    setup, api = fabric_setup(TOPOS[name]())
    hosts = join(setup, api)
    comm = list(range(0, len(hosts), 2))
    group = run(setup, api, op="tag_bcast_open", job=JOB, root=0, ranks=comm)["group"]
    root_ip = setup.topo.host(hosts[0]).ip
    for other in hosts[1:]:  # members and others, honest or spoofing the root's address
        for src_ip in (None, root_ip):
            got = spread_from(setup, other, group, src_ip)
            assert not got.delivered and got.dropped == 1, (other, src_ip)
    stray = spread_from(setup, hosts[0], "239.192.9.9")  # the root, another group
    assert not stray.delivered and stray.dropped == 1


def test_the_same_request_gets_the_same_tree_and_others_their_own() -> None:
    setup, api = fabric_setup(leaf_spine(2, 4, 2))
    join(setup, api)
    join(setup, api, job="other")
    first = run(setup, api, op="tag_bcast_open", job=JOB, root=1, ranks=[0, 1, 5])
    answer = api.handle(line(op="tag_bcast_open", job=JOB, root=1, ranks=[5, 1, 0]))
    assert answer.messages == [] and answer.undo is None
    again = answer.complete(True, 0.0)
    assert again == {**first, "cached": True}
    groups = {
        run(setup, api, op="tag_bcast_open", job=JOB, root=0, ranks=[0, 1, 5])["group"],
        run(setup, api, op="tag_bcast_open", job=JOB, root=1, ranks=[0, 1, 6])["group"],
        run(setup, api, op="tag_bcast_open", job="other", root=1, ranks=[0, 1, 5])["group"],
        first["group"],
    }
    assert len(groups) == 4 and all(g.startswith("239.192.") for g in groups)


def test_close_removes_exactly_its_tree() -> None:
    setup, api = fabric_setup(fat_tree(4))
    hosts = join(setup, api)
    before = setup.fabric.snapshot(), setup.fabric.group_snapshot()
    keep = run(setup, api, op="tag_bcast_open", job=JOB, root=3, ranks=[3, 9, 14])
    kept = bcast_state(setup)
    gone = run(setup, api, op="tag_bcast_open", job=JOB, root=0, ranks=[0, 5, 10, 15])
    assert run(setup, api, op="tag_bcast_close", job=JOB, group=gone["group"]) == {"ok": True}
    assert bcast_state(setup) == kept
    assert spread_from(setup, hosts[3], keep["group"]).delivered == Counter(
        {hosts[9]: 1, hosts[14]: 1}
    )
    assert not spread_from(setup, hosts[0], gone["group"]).delivered
    assert run(setup, api, op="tag_bcast_close", job=JOB, group=keep["group"])["ok"]
    assert (setup.fabric.snapshot(), setup.fabric.group_snapshot()) == before
    again = run(setup, api, op="tag_bcast_close", job=JOB, group=keep["group"])
    assert not again["ok"] and "no broadcast tree" in again["error"]


def test_the_end_of_a_job_removes_all_its_trees_and_only_its() -> None:
    setup, api = fabric_setup(leaf_spine(2, 4, 2))
    hosts = join(setup, api)
    join(setup, api, job="other")
    other = run(setup, api, op="tag_bcast_open", job="other", root=0, ranks=[0, 7])
    kept = bcast_state(setup)
    for root in range(4):
        assert run(setup, api, op="tag_bcast_open", job=JOB, root=root, ranks=[root, 4, 6])["ok"]
    assert len(setup.planner.bcast.trees) == 5
    for rank in range(len(hosts)):
        run(setup, api, op="tag_leave", job=JOB, rank=rank)
    assert bcast_state(setup) == kept
    assert [t.group for t in setup.planner.bcast.trees.values()] == [other["group"]]
    assert JOB not in api.tags.snapshot()


def test_caps_are_refused_with_nothing_half_applied() -> None:
    setup, api = fabric_setup(leaf_spine(2, 4, 2), BcastConfig(max_trees_per_job=2))
    join(setup, api)
    for root in (0, 1):
        assert run(setup, api, op="tag_bcast_open", job=JOB, root=root, ranks=[root, 7])["ok"]
    before = setup.fabric.snapshot(), setup.fabric.group_snapshot(), api.tags.snapshot()
    reply = run(setup, api, op="tag_bcast_open", job=JOB, root=2, ranks=[2, 7])
    assert not reply["ok"] and "2 broadcast trees, the most allowed" in reply["error"]
    assert (setup.fabric.snapshot(), setup.fabric.group_snapshot(), api.tags.snapshot()) == before

    setup, api = fabric_setup(leaf_spine(2, 4, 2), BcastConfig(max_groups_per_switch=1))
    join(setup, api)
    assert run(setup, api, op="tag_bcast_open", job=JOB, root=0, ranks=[0, 1])["ok"]  # leaf1
    before = setup.fabric.snapshot(), setup.fabric.group_snapshot(), api.tags.snapshot()
    reply = run(setup, api, op="tag_bcast_open", job=JOB, root=1, ranks=[0, 1, 7])
    assert not reply["ok"] and "switch leaf1 carries 1 broadcast groups" in reply["error"]
    assert (setup.fabric.snapshot(), setup.fabric.group_snapshot(), api.tags.snapshot()) == before
    assert run(setup, api, op="tag_bcast_open", job=JOB, root=2, ranks=[2, 3])["ok"]  # leaf2


def test_a_switch_out_of_groups_fails_the_request_and_takes_the_tree_back() -> None:
    setup, api = fabric_setup(leaf_spine(2, 4, 2), max_groups=1)
    hosts = join(setup, api)
    first = run(setup, api, op="tag_bcast_open", job=JOB, root=0, ranks=[0, 2, 4])
    assert first["ok"]
    before = setup.fabric.snapshot(), setup.fabric.group_snapshot(), api.tags.snapshot()
    trees = dict(setup.planner.bcast.trees)
    reply = run(setup, api, op="tag_bcast_open", job=JOB, root=2, ranks=[0, 2, 6])
    assert not reply["ok"], reply
    assert "out of groups" in reply["error"] and "removed again" in reply["error"]
    assert (setup.fabric.snapshot(), setup.fabric.group_snapshot(), api.tags.snapshot()) == before
    assert setup.planner.bcast.trees == trees
    got = spread_from(setup, hosts[0], first["group"])
    assert got.delivered == Counter({hosts[2]: 1, hosts[4]: 1})


def test_a_restarted_controller_takes_its_trees_back_and_sends_nothing() -> None:
    topo = fat_tree(4)
    setup, api = fabric_setup(topo)
    hosts = join(setup, api)
    tree = run(setup, api, op="tag_bcast_open", job=JOB, root=5, ranks=[1, 5, 9, 13])
    stored = StoredState(*api.snapshot())
    assert stored.tagged[JOB]["bcast"][0]["group"] == tree["group"]

    planner = Planner(topo)  # the restart: switches report what they hold
    for sw in topo.switches:
        held = setup.fabric.rules(sw.dpid)
        groups = {
            g: GroupMod(sw.dpid, g, "add", p) for g, p in setup.fabric.groups[sw.dpid].items()
        }
        planner.switch_up(sw.dpid, held, groups=groups, sync=False)
    for arc in topo.arcs:  # LLDP finds the links; the model's hosts are expected
        if not (topo.is_host(arc.src) or topo.is_host(arc.dst)):
            ends = (
                (topo.switch(arc.src).dpid, arc.src_port),
                (topo.switch(arc.dst).dpid, arc.dst_port),
            )
            planner.link_up(*ends, sync=False)
    restarted = ApiHandler(planner)
    msgs, changed = restarted.restore(stored)  # before the first sync, as the shim does
    assert not changed
    assert msgs + planner.sync() == []
    assert restarted.snapshot() == api.snapshot()
    restarted.synced = True
    again = restarted.handle(line(op="tag_bcast_open", job=JOB, root=5, ranks=[13, 9, 5, 1]))
    assert again.messages == [] and again.reply["group"] == tree["group"]
    got = spread_from(setup, hosts[5], tree["group"])
    assert got.delivered == Counter({hosts[1]: 1, hosts[9]: 1, hosts[13]: 1})


def test_a_restarted_switch_gets_its_groups_back_and_stale_groups_go() -> None:
    setup, api = fabric_setup(leaf_spine(2, 4, 2))
    hosts = join(setup, api)
    tree = run(setup, api, op="tag_bcast_open", job=JOB, root=0, ranks=[0, 3, 5])
    before = setup.fabric.snapshot(), setup.fabric.group_snapshot()
    spine = setup.topo.switch("spine1").dpid
    setup.send(setup.planner.switch_down(spine))
    setup.fabric.tables[spine], setup.fabric.groups[spine] = {}, {}  # restarted empty
    setup.send(setup.planner.switch_up(spine))
    for arc in setup.topo.out_arcs["spine1"]:
        peer = (setup.topo.switch(arc.dst).dpid, arc.dst_port)
        setup.send(setup.planner.link_up((spine, arc.src_port), peer))
        setup.send(setup.planner.link_up(peer, (spine, arc.src_port)))
    assert (setup.fabric.snapshot(), setup.fabric.group_snapshot()) == before
    assert spread_from(setup, hosts[0], tree["group"]).delivered == Counter(
        {hosts[3]: 1, hosts[5]: 1}
    )
    leaf = setup.topo.switch("leaf1").dpid
    stale = layout.bcast_group_id(999)
    foreign = 77
    setup.fabric.groups[leaf] |= {stale: (1,), foreign: (2,)}
    held = {g: GroupMod(leaf, g, "add", p) for g, p in setup.fabric.groups[leaf].items()}
    setup.send(setup.planner.switch_up(leaf, setup.fabric.rules(leaf), groups=held))
    assert stale not in setup.fabric.groups[leaf] and foreign in setup.fabric.groups[leaf]


def test_a_tree_over_a_dead_link_is_withdrawn_until_it_comes_back() -> None:
    setup, api = fabric_setup(leaf_spine(2, 4, 2))
    hosts = join(setup, api)
    tree = run(setup, api, op="tag_bcast_open", job=JOB, root=0, ranks=[0, 7])
    arc = next(a for a in setup.planner.bcast.trees[tree["group"]].arcs if a[0] == "leaf1")
    ends = (setup.topo.switch(arc[0]).dpid, arc[1]), (setup.topo.switch(arc[2]).dpid, arc[3])
    setup.send(setup.planner.link_down(*ends))
    assert bcast_state(setup) == (frozenset(), {})
    setup.send(setup.planner.link_up(*ends))
    assert spread_from(setup, hosts[0], tree["group"]).delivered == Counter({hosts[7]: 1})


def test_all_ranks_on_the_root_host_need_no_switch() -> None:
    setup, api = fabric_setup(leaf_spine(2, 4, 2))
    join(setup, api, per_host=2)
    reply = run(setup, api, op="tag_bcast_open", job=JOB, root=1, ranks=[0, 1])
    assert reply["ok"] and reply["switches"] == 0 and bcast_state(setup) == (frozenset(), {})


@pytest.mark.parametrize(
    ("req", "needle"),
    [
        ({"job": "nope", "root": 0, "ranks": [0, 1]}, "job nope is not known"),
        ({"job": JOB, "root": 0, "ranks": [0, 8]}, "rank 8 is not a world rank 0..7"),
        ({"job": JOB, "root": 0, "ranks": [0, -1]}, "rank -1 is not a world rank"),
        ({"job": JOB, "root": 3, "ranks": [0, 1]}, "root 3 is not one of the ranks"),
        ({"job": JOB, "root": "0", "ranks": [0, 1]}, "root '0' is not one of the ranks"),
        ({"job": JOB, "root": True, "ranks": [0, 1]}, "is not one of the ranks"),
        ({"job": JOB, "root": 0, "ranks": []}, "a list of 1..4096 world ranks"),
        ({"job": JOB, "root": 0, "ranks": list(range(5000))}, "a list of 1..4096"),
        ({"job": JOB, "root": 0, "ranks": "0,1"}, "a list of 1..4096"),
        ({"job": JOB, "root": 0, "ranks": [0, 1.0]}, "rank 1.0 is not a world rank"),
        ({"job": JOB, "root": 0, "ranks": [0, 1, 1]}, "named twice"),
        ({"job": 7, "root": 0, "ranks": [0, 1]}, "job must be a string"),
        ({"job": JOB, "root": 0}, "takes keys"),
        ({"job": JOB, "root": 0, "ranks": [0, 1], "x": 1}, "takes keys"),
    ],
)
def test_bad_open_requests_are_refused_with_one_clear_line(
    req: dict[str, Any], needle: str
) -> None:
    setup, api = fabric_setup(leaf_spine(2, 4, 2))
    join(setup, api)
    before = setup.fabric.snapshot(), setup.fabric.group_snapshot(), api.tags.snapshot()
    answer = api.handle(line(op="tag_bcast_open", **req))
    assert answer.messages == [] and answer.undo is None
    reply = answer.complete(True, 0.0)
    assert reply["ok"] is False and needle in reply["error"], reply
    assert "\n" not in reply["error"] and len(reply["error"]) < 300
    assert (setup.fabric.snapshot(), setup.fabric.group_snapshot(), api.tags.snapshot()) == before


def test_a_rank_that_has_not_joined_and_bad_closes_are_refused() -> None:
    setup, api = fabric_setup(leaf_spine(2, 4, 2))
    run(setup, api, op="tag_join", job=JOB, rank=0, nprocs=4, host="h1")
    reply = run(setup, api, op="tag_bcast_open", job=JOB, root=0, ranks=[0, 2])
    assert not reply["ok"] and "rank(s) [2] have not joined" in reply["error"]
    join(setup, api, job="other")
    group = run(setup, api, op="tag_bcast_open", job="other", root=0, ranks=[0, 2])["group"]
    for req, needle in [
        ({"job": JOB, "group": group}, "has no broadcast tree"),  # another job's
        ({"job": "nope", "group": group}, "not known"),
        ({"job": JOB, "group": 5}, "not an IPv4 address"),
        ({"job": JOB, "group": "x" * 100}, "not an IPv4 address"),
    ]:
        reply = run(setup, api, op="tag_bcast_close", **req)
        assert not reply["ok"] and needle in reply["error"], (req, reply)
    assert group in setup.planner.bcast.trees


def test_the_pool_runs_out_and_says_so() -> None:
    setup, api = fabric_setup(leaf_spine(2, 4, 2), BcastConfig(pool="239.1.1.0/30"))
    join(setup, api)
    got = [
        run(setup, api, op="tag_bcast_open", job=JOB, root=0, ranks=[0, r]) for r in (1, 2, 3, 4)
    ]
    assert [g.get("group") for g in got[:3]] == ["239.1.1.1", "239.1.1.2", "239.1.1.3"]
    assert not got[3]["ok"] and "every group address of 239.1.1.0/30" in got[3]["error"]


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"pool": "10.0.0.0/8"}, "want IPv4 multicast"),
        ({"pool": "224.0.0.0/4"}, "/8 or longer"),
        ({"pool": "239.1.1.1/32"}, "no address"),
        ({"pool": "nope"}, "not an IPv4 network"),
        ({"port": 0}, "port 0"),
        ({"max_trees_per_job": 0}, "max_trees_per_job"),
        ({"max_groups_per_switch": True}, "max_groups_per_switch"),
    ],
)
def test_bad_configs_are_refused(config: dict[str, Any], needle: str) -> None:
    from sdnmpi.errors import ConfigError

    with pytest.raises(ConfigError, match=needle):
        BcastConfig(**config)


@pytest.mark.parametrize("module", [bcasttrees, flows, layout, packets, portstats])
def test_doctests(module: object) -> None:
    assert doctest.testmod(module).failed == 0  # type: ignore[arg-type]
