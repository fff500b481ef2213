"""The point-to-point protocol model: spec parsing and hand-solved exchanges.

Engine-level cases use two arcs, ``0`` (host A -> host B) and ``1`` (B -> A),
of ``8 * c`` bit/s each, so that a size in bytes over ``c`` gives seconds:
one full-duplex link of capacity C = 8c.  An exchange of S bytes each way then
takes 8S/C = S/c when both directions flow at once (each has its own arc) and
2S/c when one direction runs after the other.
"""

from __future__ import annotations

import numpy as np
import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.errors import ConfigError
from sdnmpi.sim import (
    IDEAL,
    PROTOCOLS,
    FlowSet,
    Platform,
    Protocol,
    SimResult,
    parse_protocol,
    simulate,
    simulate_workload,
)
from sdnmpi.sim.engine import run_ranks
from sdnmpi.sim.flowset import exchange_deps, sender_fifo_deps
from sdnmpi.sim.protocol import FIFO_MAX_BYTES, resolve_protocol
from tests.sim.routes import host_demands, shortest_routing

C = 1000.0  # bytes/s: the link is 8000 bit/s each way
S = 100_000  # bytes each way: S / C = 100 s
OPENMPI = PROTOCOLS["openmpi"]  # eager limit 65536 bytes, serialized

# -- spec parsing ---------------------------------------------------------------


def test_presets_have_the_documented_limits_and_ideal_is_concurrent():
    assert {n: (p.eager_limit_bytes, p.exchange) for n, p in PROTOCOLS.items()} == {
        "ideal": (None, "concurrent"),
        "openmpi": (65536, "serialized"),
        "openmpi-duplex": (4194304, "serialized"),
        "mpich": (20480, "partial"),
        "mpich-duplex": (None, "serialized"),
    }
    assert {n for n, p in PROTOCOLS.items() if p.release == "pair"} == {"ideal"}
    assert IDEAL is PROTOCOLS["ideal"] and not IDEAL.serializes
    assert OPENMPI.serializes and not PROTOCOLS["mpich-duplex"].serializes
    assert PROTOCOLS["mpich"].duplex == 1.39 and PROTOCOLS["mpich"].slows_exchanges
    assert not PROTOCOLS["mpich"].serializes and not OPENMPI.slows_exchanges


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("openmpi", Protocol("openmpi", 65536, "serialized", release="sender")),
        (" mpich ", Protocol("mpich", 20480, "partial", 1.39, "sender")),
        ("mpich:exchange=serialized", Protocol("mpich", 20480, "serialized", release="sender")),
        ("mpich:duplex=1.5", Protocol("mpich", 20480, "partial", 1.5, "sender")),
        ("custom:eager=0,exchange=partial,duplex=2", Protocol("custom", 0, "partial", 2.0)),
        ("openmpi:eager=1048576", Protocol("openmpi", 1048576, "serialized", release="sender")),
        ("openmpi:exchange=concurrent", Protocol("openmpi", 65536, "concurrent", release="sender")),
        ("mpich:eager=inf", Protocol("mpich", None, "partial", 1.39, "sender")),
        ("custom:eager=65536,exchange=serialized", Protocol("custom", 65536, "serialized")),
        ("custom: exchange = serialized , eager = 0", Protocol("custom", 0, "serialized")),
        ("custom", Protocol("custom", None, "concurrent")),
    ],
)
def test_parse_protocol(spec, expected):
    assert parse_protocol(spec) == expected


@pytest.mark.parametrize(
    "protocol",
    [
        *PROTOCOLS.values(),
        Protocol("openmpi", 1, "serialized"),
        Protocol("custom", 7),
        Protocol("mpich", 20480, "partial", 1.234),
    ],
)
def test_spec_reads_back(protocol):
    assert parse_protocol(protocol.spec) == protocol


def test_spec_of_a_changed_preset_names_every_key():
    assert parse_protocol("openmpi:eager=1048576").spec == (
        "openmpi:eager=1048576,exchange=serialized"
    )
    assert OPENMPI.to_dict() == {
        "name": "openmpi",
        "spec": "openmpi",
        "eager_limit_bytes": 65536,
        "exchange": "serialized",
        "release": "sender",
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lampi", "unknown protocol 'lampi'"),
        ("", "unknown protocol ''"),
        ("openmpi:", "nothing after ':'"),
        ("openmpi:eagr=5", "unknown key 'eagr'"),
        ("openmpi:eager", "'eager' is not key=value"),
        ("openmpi:eager=", "'eager=' is not key=value"),
        ("openmpi:eager=64k", "eager='64k'"),
        ("openmpi:eager=-1", "eager='-1'"),
        ("openmpi:eager=1.5", "eager='1.5'"),
        ("openmpi:exchange=sometimes", "exchange 'sometimes'"),
        ("openmpi:eager=1,eager=2", "key 'eager' given twice"),
        ("custom:exchange=partial", "exchange=partial needs duplex"),
        ("openmpi:duplex=1.5", "duplex=1.5 applies to exchange=partial only"),
        ("mpich:duplex=2.5", "duplex 2.5 is not in [1, 2]"),
        ("mpich:duplex=0.9", "duplex 0.9 is not in [1, 2]"),
        ("mpich:duplex=inf", "duplex='inf' is not a number"),
        ("mpich:duplex=fast", "duplex='fast' is not a number"),
    ],
)
def test_bad_specs_are_config_errors_naming_the_value(spec, message):
    with pytest.raises(ConfigError) as err:
        parse_protocol(spec)
    assert message in str(err.value) and repr(spec) in str(err.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", 1), "is empty"),
        (("a:b", 1), "'a:b'"),
        (("x", -1), "eager limit -1 is negative"),
        (("x", 1.5), "eager limit 1.5 is not an integer"),
        (("x", True), "eager limit True is not an integer"),
        (("x", 1, "maybe"), "exchange 'maybe'"),
        (("x", 1, "partial"), "needs duplex"),
        (("x", 1, "partial", "1.5"), "duplex '1.5' is not a number"),
        (("x", 1, "serialized", 1.5), "applies to exchange=partial only"),
    ],
)
def test_bad_protocol_values_are_config_errors(args, message):
    with pytest.raises(ConfigError, match=message):
        Protocol(*args)


def test_resolve_protocol():
    assert resolve_protocol(None) is IDEAL
    assert resolve_protocol("openmpi") == OPENMPI
    assert resolve_protocol(OPENMPI) is OPENMPI


def test_rendezvous_is_strictly_above_the_limit():
    assert OPENMPI.rendezvous([0, 65535, 65536, 65536.5, 1e9]).tolist() == [
        False,
        False,
        False,
        True,
        True,
    ]
    assert not IDEAL.rendezvous([1e12]).any()


# -- hand-solved exchanges --------------------------------------------------------


def duplex(
    paths: list[list[int]],
    sizes: list[float],
    ranks: tuple[list[int], list[int]],
    *,
    phase: list[int] | None = None,
    repeat: list[int] | None = None,
    messages: list[int] | None = None,
) -> tuple[Platform, FlowSet]:
    """Flows on the two arcs of one full-duplex link of C bytes/s each way."""
    platform = Platform.from_arrays([8 * C, 8 * C], names=["A->B", "B->A"])
    flowset = FlowSet.from_paths(
        platform,
        paths,
        sizes,
        phase=phase,
        ranks=ranks,
        phase_repeat=repeat,
        messages=messages,
    )
    return platform, flowset


def exchange(size: float, messages: int = 1, **kw: object) -> SimResult:
    """Rank 0 on host A and rank 1 on host B send ``size`` bytes to each other."""
    platform, flowset = duplex(
        [[0], [1]], [size, size], ([0, 1], [1, 0]), messages=[messages, messages]
    )
    return simulate_workload(platform, flowset, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["phases", "ranks"])
def test_exchange_above_the_limit_takes_twice_as_long(mode):
    # Ideal: each direction alone on its arc, S/c = 100 s.  Serialized: 0->1
    # first (the lower rank), 100 s; 1->0 is released then, 100 s more: 200 s,
    # the measured x2 (3.49 s against 1.73 s for one direction).
    assert exchange(S, mode=mode).total_s == pytest.approx(S / C)
    r = exchange(S, mode=mode, protocol=OPENMPI)
    assert r.total_s == pytest.approx(2 * S / C)
    assert r.flow_finish_s.tolist() == pytest.approx([S / C, 2 * S / C])
    assert r.flow_release_s.tolist() == pytest.approx([0.0, S / C])
    assert "1 rank-pair exchange(s)" in r.notes[0]


def test_exchange_at_the_limit_stays_concurrent():
    # 65536 bytes is at most the eager limit: both directions at once, 65.536 s.
    # One byte more and the exchange serializes: 2 * 65.537 s.
    assert exchange(65536, protocol=OPENMPI).total_s == pytest.approx(65536 / C)
    assert exchange(65537, protocol=OPENMPI).total_s == pytest.approx(2 * 65537 / C)


def test_message_count_sets_the_message_size():
    # A window of k messages each way.  k = 2: 50000-byte messages, eager, both
    # ways at once: 100 s.  k = 1 with the limit lowered to 40000: 100000-byte
    # messages above it, serialized as a whole: 200 s (measured: a window
    # serializes like one message).
    assert exchange(S, messages=2, protocol=OPENMPI).total_s == pytest.approx(S / C)
    low = parse_protocol("openmpi:eager=40000")
    assert exchange(S, messages=2, protocol=low).total_s == pytest.approx(2 * S / C)
    assert exchange(S, messages=3, protocol=low).total_s == pytest.approx(S / C)


def test_exchange_with_one_direction_eager_is_concurrent():
    # 0->1 sends S (rendezvous), 1->0 sends 1000 bytes (eager): no ordering, so
    # the 1000 bytes take 1 s on their own arc and the S bytes 100 s.
    platform, flowset = duplex([[0], [1]], [S, 1000], ([0, 1], [1, 0]))
    r = simulate_workload(platform, flowset, protocol=OPENMPI)
    assert r.flow_finish_s.tolist() == pytest.approx([S / C, 1.0])
    assert r.flow_release_s.tolist() == [0.0, 0.0]


def test_concurrent_exchange_protocol_never_orders():
    r = exchange(S, protocol=parse_protocol("openmpi:exchange=concurrent"))
    assert r.total_s == pytest.approx(S / C) and r.notes == ()


MPICH = PROTOCOLS["mpich"]  # eager limit 20480 bytes, partial exchange at x1.39


@pytest.mark.parametrize("mode", ["phases", "ranks"])
def test_partial_exchange_moves_its_duplex_ratio(mode):
    # Both directions at once, each sending 2 / 1.39 times its S bytes on its own
    # arc: 2 S / (1.39 c) each, so bibw over bw is 1.39, the measured MPICH figure.
    r = exchange(S, mode=mode, protocol=MPICH)
    assert r.total_s == pytest.approx(2 * S / (1.39 * C))
    assert r.flow_release_s.tolist() == [0.0, 0.0]
    assert r.flow_finish_s.tolist() == pytest.approx([2 * S / (1.39 * C)] * 2)
    assert "move x1.39 of one direction's rate" in r.notes[-1]
    # at the eager limit, and for duplex 2, the plain concurrent exchange
    assert exchange(20480, mode=mode, protocol=MPICH).total_s == pytest.approx(20480 / C)
    full = parse_protocol("mpich:duplex=2")
    assert exchange(S, mode=mode, protocol=full).total_s == pytest.approx(S / C)


def test_partial_exchange_shares_a_link_by_max_min():
    # 0->1 and 1->0 exchange S (partial, x1.6: each sends 1.25 S); 2->3 sends S/2 on
    # B->A beside 1->0.  B->A at c/2 each until 2->3 ends at S/c; 1->0 has 0.75 S
    # left, alone: ends at 1.75 S/c.  0->1 alone on A->B: 1.25 S/c.
    paths, sizes, ranks = [[0], [1], [1]], [S, S, S / 2], ([0, 1, 2], [1, 0, 3])
    r = simulate_workload(*duplex(paths, sizes, ranks), protocol=parse_protocol("mpich:duplex=1.6"))
    assert r.flow_finish_s.tolist() == pytest.approx([1.25 * S / C, 1.75 * S / C, S / C])


def test_partial_exchange_needs_both_directions_and_one_phase():
    # one direction eager, or the two directions in different phases: not slowed
    platform, flowset = duplex([[0], [1]], [S, 1000], ([0, 1], [1, 0]))
    r = simulate_workload(platform, flowset, protocol=MPICH)
    assert r.flow_finish_s.tolist() == pytest.approx([S / C, 1.0]) and len(r.notes) == 0
    platform, flowset = duplex([[0], [1]], [S, S], ([0, 1], [1, 0]), phase=[0, 1])
    r = simulate_workload(platform, flowset, protocol=MPICH)
    assert r.total_s == pytest.approx(2 * S / C)


def test_lower_rank_goes_first_whatever_the_input_order():
    # The flow 5->2 is listed first and 2->5 second; 2->5 (from the lower rank)
    # goes first: it ends at 100 s, 5->2 is released then and ends at 200 s.
    platform, flowset = duplex([[1], [0]], [S, S], ([5, 2], [2, 5]))
    r = simulate_workload(platform, flowset, protocol=OPENMPI)
    assert r.flow_finish_s.tolist() == pytest.approx([2 * S / C, S / C])
    assert r.flow_release_s.tolist() == pytest.approx([S / C, 0.0])


def test_serialized_reverse_direction_competes_with_a_third_flow():
    # Flows: 0->1 (S, arc A->B), 1->0 (S, arc B->A), 2->3 (S/2, arc B->A, ranks
    # 2 on B and 3 on A, no exchange).
    # Ideal: B->A shared by 1->0 and 2->3 at c/2 each; 2->3 ends at S/c (its S/2
    # sent), 1->0 has S/2 left, alone: ends at 1.5 S/c.  Total 150 s.
    # Serialized: 1->0 waits for 0->1 (ends S/c); meanwhile 2->3 is alone on
    # B->A, ends at 0.5 S/c.  1->0 then runs alone from S/c: ends at 2 S/c.
    paths, sizes, ranks = [[0], [1], [1]], [S, S, S / 2], ([0, 1, 2], [1, 0, 3])
    ideal = simulate_workload(*duplex(paths, sizes, ranks))
    assert ideal.flow_finish_s.tolist() == pytest.approx([S / C, 1.5 * S / C, S / C])
    serial = simulate_workload(*duplex(paths, sizes, ranks), protocol=OPENMPI, order="lower-first")
    assert serial.flow_finish_s.tolist() == pytest.approx([S / C, 2 * S / C, 0.5 * S / C])
    assert serial.total_s == pytest.approx(2 * S / C)


def test_random_order_averages_the_race_over_samples():
    # The same flows, 1->0 first instead: it shares B->A with 2->3 at c/2 until
    # 2->3's S/2 are sent (S/c), then has S/2 left alone (1.5 S/c); 0->1 runs
    # after it: 2.5 S/c.  Either order is a coin toss in the library, so the
    # expected time is (2 + 2.5) / 2 = 2.25 S/c; one sample is one of the two.
    paths, sizes, ranks = [[0], [1], [1]], [S, S, S / 2], ([0, 1, 2], [1, 0, 3])
    flipped = simulate_workload(
        *duplex(paths, sizes, ([1, 0, 2], [0, 1, 3])), protocol=OPENMPI, order="lower-first"
    )
    assert flipped.total_s == pytest.approx(2.5 * S / C)
    one = {
        round(simulate_workload(*duplex(paths, sizes, ranks), protocol=OPENMPI, samples=1,
                                seed=s).total_s / (S / C), 9)
        for s in range(16)
    }  # fmt: skip
    assert one == {2.0, 2.5}
    many = simulate_workload(*duplex(paths, sizes, ranks), protocol=OPENMPI, samples=400)
    assert many.total_s == pytest.approx(2.25 * S / C, rel=0.03)
    again = simulate_workload(*duplex(paths, sizes, ranks), protocol=OPENMPI, samples=400)
    assert again.total_s == many.total_s  # seeded: reproducible
    with pytest.raises(ConfigError, match="order"):
        simulate_workload(*duplex(paths, sizes, ranks), protocol=OPENMPI, order="fifo")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="samples"):
        simulate_workload(*duplex(paths, sizes, ranks), protocol=OPENMPI, samples=0)


def test_exchanges_in_different_phases_are_not_paired():
    # 0->1 in phase 0 and 1->0 in phase 1: never at the same time, no ordering
    # needed; each phase takes S/c.
    platform, flowset = duplex([[0], [1]], [S, S], ([0, 1], [1, 0]), phase=[0, 1])
    r = simulate_workload(platform, flowset, protocol=OPENMPI)
    assert [p.duration_s for p in r.phases] == pytest.approx([S / C, S / C])
    assert "0 rank-pair exchange(s)" in r.notes[0]


@pytest.mark.parametrize("mode", ["phases", "ranks"])
def test_repeated_exchange_serializes_in_every_occurrence(mode):
    # Repeat 3: three exchanges one after the other, 2S/c each = 600 s; the same
    # as the phase written out three times with repeat 1.
    platform, rep = duplex([[0], [1]], [S, S], ([0, 1], [1, 0]), repeat=[3])
    _, unrolled = duplex(
        [[0], [1]] * 3, [S] * 6, ([0, 1] * 3, [1, 0] * 3), phase=[0, 0, 1, 1, 2, 2]
    )
    r = simulate_workload(platform, rep, mode=mode, protocol=OPENMPI)
    assert r.total_s == pytest.approx(6 * S / C)
    u = simulate_workload(platform, unrolled, mode=mode, protocol=OPENMPI)
    assert u.total_s == pytest.approx(r.total_s, rel=1e-12)
    assert simulate_workload(platform, rep, mode=mode).total_s == pytest.approx(3 * S / C)


def test_ranks_mode_adds_a_third_wait_edge():
    # Step 0: 0<->1 exchange; step 1: 0->1 again (S).  Ideal: step 0 ends at S/c,
    # step 1 at 2 S/c.  Serialized: 1->0 waits for 0->1 (released at S/c, ends at
    # 2 S/c); step 1 waits for both ranks' step 0, so starts at 2 S/c and ends at
    # 3 S/c.
    platform, flowset = duplex([[0], [1], [0]], [S, S, S], ([0, 1, 0], [1, 0, 1]), phase=[0, 0, 1])
    assert simulate_workload(platform, flowset, mode="ranks").total_s == pytest.approx(2 * S / C)
    steps, trace = run_ranks(platform, flowset, max_flows=100, protocol=OPENMPI)
    assert steps.deps.wait.shape[1] == 3 and steps.deps.member.shape[1] == 3
    assert steps.deps.prerequisites(1).tolist() == [0]
    assert steps.deps.prerequisites(2).tolist() == [0, 1]
    assert trace.finish_s.tolist() == pytest.approx([S / C, 2 * S / C, 3 * S / C])
    ideal_steps, _ = run_ranks(platform, flowset, max_flows=100)
    assert ideal_steps.deps.wait.shape[1] == 2


def test_serializing_can_shorten_a_ranks_mode_run():
    # Not a bug: dependency-driven runs have scheduling anomalies.  Step 0:
    # 0<->1 exchange (S each way) and 2->3 (S, B->A; rank 2 on B, 3 on A); step 1:
    # 3->2 (S, A->B).
    # Ideal: B->A shared by 1->0 and 2->3, both end at 2 S/c; 3->2 starts then,
    # ends at 3 S/c.  Serialized: 2->3 is alone on B->A and ends at S/c, so 3->2
    # starts at S/c (A->B is free: 0->1 also ended at S/c) and ends at 2 S/c;
    # 1->0 runs from S/c to 2 S/c.  Total 2 S/c < 3 S/c.
    platform, flowset = duplex(
        [[0], [1], [1], [0]], [S] * 4, ([0, 1, 2, 3], [1, 0, 3, 2]), phase=[0, 0, 0, 1]
    )
    ideal = simulate_workload(platform, flowset, mode="ranks")
    serial = simulate_workload(platform, flowset, mode="ranks", protocol=OPENMPI)
    assert ideal.total_s == pytest.approx(3 * S / C)
    assert serial.total_s == pytest.approx(2 * S / C)


def test_host_level_demands_are_unchanged_with_a_note():
    # Ranks -1: no rank pairs, so nothing to serialize; said in the notes.
    platform = Platform.from_arrays([8 * C, 8 * C])
    flowset = FlowSet.from_paths(platform, [[0], [1]], [S, S])
    for mode in ("phases", "ranks"):
        r = simulate_workload(platform, flowset, mode=mode, protocol=OPENMPI)
        assert r.total_s == pytest.approx(S / C)
        assert "no rank pairs: protocol openmpi not applied" in r.notes[-1]
    ranks = simulate_workload(platform, flowset, mode="ranks", protocol=OPENMPI)
    assert ranks.notes[0].startswith("host-level demands have no ranks")
    assert simulate_workload(platform, flowset, protocol=IDEAL).notes == ()


def test_exchange_deps_pairs_only_both_directions():
    a = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    # Pair (0, 1) in key 0 both ways; pair (0, 1) in key 1 one way only; pair
    # (2, 3) both ways but 3->2 not serialized: one group.
    d = exchange_deps(
        a([0, 1, 0, 2, 3, 1]),
        a([1, 0, 1, 3, 2, 0]),
        a([0, 0, 1, 0, 0, 0]),
        np.array([True, True, True, True, False, True]),
    )
    assert d.ngroups == 1
    assert d.member[:, 0].tolist() == [0, -1, -1, -1, -1, -1]
    # both 1->0 flows of key 0 wait for the group of 0->1
    assert d.wait[:, 0].tolist() == [-1, 0, -1, -1, -1, 0]


def test_messages_come_from_the_pattern_cells():
    # Two hosts on one switch, 10 Mbit/s NICs, no latency.  2 MiB each way in one
    # message per direction: ideal 8 * 2 MiB / 10 Mbit/s = 1.6777 s; openmpi
    # twice that.  In 64 messages of 32 KiB (eager): concurrent again.
    topo = leaf_spine(1, 1, 2, host_bps=1e7, uplink_bps=1e7, latency_s=0.0)
    fabric = Fabric(topo)
    size = 2 * 2**20
    one_way = 8 * size / 1e7
    hosts = Placement(tuple(h.name for h in topo.hosts))
    for k, expected in ((1, 2 * one_way), (64, one_way)):
        phase = Phase.from_arrays("x", [0, 1], [1, 0], [size, size], [k, k])
        demands = Demands.from_pattern(fabric, Pattern("x", 2, (phase,)), hosts)
        assert demands.message_counts.tolist() == [k, k]
        routing = shortest_routing(fabric, demands)
        r = simulate(fabric, demands, routing, protocol=OPENMPI)
        assert r.total_s == pytest.approx(expected)
        assert simulate(fabric, demands, routing).total_s == pytest.approx(one_way)


def test_simulate_keeps_ideal_by_default():
    # Demands without message counts are one message per flow.
    topo = leaf_spine(1, 1, 2, host_bps=8 * C, uplink_bps=8 * C, latency_s=0.0)
    fabric = Fabric(topo)
    demands = host_demands([(0, 1, S, 0), (1, 0, S, 0)], ranks=[(0, 1), (1, 0)])
    routing = shortest_routing(fabric, demands)
    assert simulate(fabric, demands, routing).total_s == pytest.approx(S / C)
    assert simulate(fabric, demands, routing, protocol=OPENMPI).total_s == pytest.approx(2 * S / C)


# -- goodput ----------------------------------------------------------------------


def test_scaled_platform_multiplies_capacities_only():
    p = Platform.from_arrays([1e9, 4e9], [1e-6, 2e-6], ["x", "y"], name="two")
    q = p.scaled(0.95)
    assert q.capacity_bps.tolist() == pytest.approx([0.95e9, 3.8e9])
    assert q.latency_s.tolist() == [1e-6, 2e-6]
    assert (q.name, q.arc_names) == ("two", ("x", "y"))
    assert p.scaled(1) is p
    assert not q.capacity_bps.flags.writeable


@pytest.mark.parametrize("factor", [0, -0.5, 1.5, float("nan"), float("inf"), True])
def test_bad_capacity_factors_are_config_errors(factor):
    with pytest.raises(ConfigError, match="capacity factor"):
        Platform.from_arrays([1e9]).scaled(factor)


def test_goodput_stretches_transfers_not_latency():
    # One flow of S bytes over one host->switch->host path (2 arcs of 8c bit/s,
    # 1 ms latency each): 2 ms + S/c at full goodput, 2 ms + S/(0.5 c) at 0.5.
    topo = leaf_spine(1, 1, 2, host_bps=8 * C, uplink_bps=8 * C, latency_s=1e-3)
    fabric = Fabric(topo)
    demands = host_demands([(0, 1, S, 0)])
    routing = shortest_routing(fabric, demands)
    assert simulate(fabric, demands, routing).total_s == pytest.approx(2e-3 + S / C)
    half = simulate(fabric, demands, routing, goodput=0.5)
    assert half.total_s == pytest.approx(2e-3 + 2 * S / C)
    with pytest.raises(ConfigError, match="capacity factor 2"):
        simulate(fabric, demands, routing, goodput=2)


def test_protocol_doctests_pass():
    import doctest

    from sdnmpi.sim import protocol

    failed, tried = doctest.testmod(protocol)
    assert failed == 0 and tried > 0


def test_flowset_doctests_pass():
    import doctest

    from sdnmpi.sim import flowset

    failed, tried = doctest.testmod(flowset)
    assert failed == 0 and tried > 0


def test_an_eager_message_leaves_when_its_sender_is_there():
    # Rank 1 on host A sends 2S to rank 2 on B (step 0, A->B); then rank 0 on B sends
    # S to rank 1 (its first step, B->A).  Released with the pair (the plain model),
    # 0->1 waits for rank 1's step 0: 2S/c + S/c.  Eager with release=sender, it
    # leaves at once on the free B->A: the run ends with 1->2 at 2S/c.  A rendezvous
    # message (eager limit 0) waits for both ranks under either release.
    platform, flowset = duplex([[0], [1]], [2 * S, S], ([1, 0], [2, 1]), phase=[0, 1])
    pair = parse_protocol("custom:eager=inf")
    sender = parse_protocol("custom:eager=inf,release=sender")
    rendezvous = parse_protocol("custom:eager=0,release=sender")
    assert simulate_workload(platform, flowset, mode="ranks", protocol=pair).total_s == (
        pytest.approx(3 * S / C)
    )
    assert simulate_workload(platform, flowset, mode="ranks", protocol=sender).total_s == (
        pytest.approx(2 * S / C)
    )
    assert simulate_workload(
        platform, flowset, mode="ranks", protocol=rendezvous
    ).total_s == pytest.approx(3 * S / C)
    steps, trace = run_ranks(platform, flowset, max_flows=100, protocol=sender)
    assert steps.deps.prerequisites(1).tolist() == []
    assert trace.finish_s.tolist() == pytest.approx([2 * S / C, S / C])
    # phases mode has a barrier between phases: the release does not matter there
    for proto in (pair, sender):
        r = simulate_workload(platform, flowset, mode="phases", protocol=proto)
        assert r.total_s == pytest.approx(3 * S / C)


def test_release_key_round_trips_and_is_checked():
    assert PROTOCOLS["openmpi"].release == "sender" and PROTOCOLS["ideal"].release == "pair"
    p = parse_protocol("custom:eager=65536,release=sender")
    assert p.spec == "custom:eager=65536,exchange=concurrent,release=sender"
    assert parse_protocol(p.spec) == p
    assert p.to_dict()["release"] == "sender"
    plain = parse_protocol("openmpi:release=pair")
    assert plain.spec == "openmpi:eager=65536,exchange=serialized,release=pair"
    assert parse_protocol(plain.spec) == plain
    assert parse_protocol("openmpi:eager=1").spec == "openmpi:eager=1,exchange=serialized"
    with pytest.raises(ConfigError, match="release 'receiver' \\(want one of pair, sender\\)"):
        parse_protocol("openmpi:release=receiver")
    with pytest.raises(ConfigError, match="release"):
        Protocol("x", None, release="both")  # type: ignore[arg-type]


def test_an_eager_send_is_done_for_its_sender_when_handed_over():
    # Arcs: 0 h0 up, 1 h0 down, 2 h1 down, 3 h2 up, 4 h3 down.  Step 0: rank 0 sends
    # S to rank 1 (arcs 0, 2) and receives S/4 from rank 2 (arcs 3, 1); step 1:
    # rank 0 sends S to rank 3 (arcs 0, 4).  Released with the pair, 0->3 waits for
    # rank 0's whole step 0: it starts when 0->1 ends at S/c.  Eager with
    # release=sender, rank 0's step 0 ends with its receive at S/4c: 0->3 starts then
    # and shares h0's uplink with 0->1, which ends at S/4c + 2 (3S/4)/c = 1.75 S/c;
    # 0->3 ends at 2 S/c either way (h0's uplink carries 2S).
    platform = Platform.from_arrays([8 * C] * 5)
    flowset = FlowSet.from_paths(
        platform, [[0, 2], [3, 1], [0, 4]], [S, S / 4, S], phase=[0, 0, 1],
        ranks=([0, 2, 0], [1, 0, 3]),
    )  # fmt: skip
    pair = parse_protocol("custom:eager=inf")
    sender = parse_protocol("custom:eager=inf,release=sender")
    rendezvous = parse_protocol("custom:eager=0,release=sender")
    _, trace = run_ranks(platform, flowset, max_flows=100, protocol=pair)
    assert trace.finish_s.tolist() == pytest.approx([S / C, S / (4 * C), 2 * S / C])
    _, trace = run_ranks(platform, flowset, max_flows=100, protocol=sender)
    assert trace.finish_s.tolist() == pytest.approx([1.75 * S / C, S / (4 * C), 2 * S / C])
    _, trace = run_ranks(platform, flowset, max_flows=100, protocol=rendezvous)
    assert trace.finish_s.tolist() == pytest.approx([S / C, S / (4 * C), 2 * S / C])


def test_a_ranks_small_eager_messages_leave_in_order():
    # Arcs: 0 h0 up, 1 h1 down, 2 h2 down.  Rank 0 (the root of a broadcast: it
    # receives nothing) sends to rank 1 in step 0 and to rank 2 in step 1.  Eager with
    # release=sender, rank 0's steps are empty, so both messages are released at once;
    # a message within TCP's initial window (FIFO_MAX_BYTES) enters the host's queue
    # whole, so the second follows the first: s/c, then 2 s/c.  Larger ones share the
    # uplink as flows do (both end at 2 b/c), and so does everything without FIFO.
    platform = Platform.from_arrays([8 * C] * 3)
    sender = parse_protocol("custom:eager=inf,release=sender")
    for size, fifo in ((10_000, True), (FIFO_MAX_BYTES, True), (FIFO_MAX_BYTES + 1, False)):
        flowset = FlowSet.from_paths(
            platform, [[0, 1], [0, 2]], [size, size], phase=[0, 1], ranks=([0, 0], [1, 2])
        )
        steps, trace = run_ranks(platform, flowset, max_flows=100, protocol=sender)
        if fifo:
            assert steps.deps.prerequisites(1).tolist() == [0]
            assert trace.finish_s.tolist() == pytest.approx([size / C, 2 * size / C])
        else:
            assert steps.deps.prerequisites(1).tolist() == []
            assert trace.finish_s.tolist() == pytest.approx([2 * size / C, 2 * size / C])
    # one step's messages (concurrent MPI_Isend calls) stay concurrent
    flowset = FlowSet.from_paths(
        platform, [[0, 1], [0, 2]], [10_000, 10_000], phase=[0, 0], ranks=([0, 0], [1, 2])
    )
    _, trace = run_ranks(platform, flowset, max_flows=100, protocol=sender)
    assert trace.finish_s.tolist() == pytest.approx([20.0, 20.0])
    # a rendezvous or background flow is not ordered by it
    deps = sender_fifo_deps(np.array([0, 0, 0]), np.array([0, 1, 2]), np.array([True, False, True]))
    assert deps.member[:, 0].tolist() == [0, -1, 1] and deps.wait[:, 0].tolist() == [-1, -1, 0]
