"""sdnmpi.sim.calibration: the document, its validation, and what it does to a simulation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import route
from sdnmpi.core.routing.model import Demands, Fabric
from sdnmpi.errors import ConfigError, FormatError
from sdnmpi.sim import simulate
from sdnmpi.sim.calibration import (
    HOST_QUEUE_BYTES,
    Calibration,
    bisect_largest,
    latency_split,
)

MIB = 1 << 20


def _one_flow() -> tuple[Fabric, Demands]:
    topo = leaf_spine(1, 2, 1, host_bps=1e9, uplink_bps=1e9)
    fabric = Fabric(topo)
    pat = Pattern("one", 2, (Phase.from_cells("p", [(0, 1, MIB)]),))
    return fabric, Demands.from_pattern(fabric, pat, Placement(("h1", "h2")))


def test_rate_factor_and_latency_scale_a_lone_flow() -> None:
    fabric, demands = _one_flow()
    routing = route("dmodk", fabric, demands)
    nominal = simulate(fabric, demands, routing).total_s
    cal = Calibration(link_scale=0.01, goodput=0.95, arc_latency_s=1e-3, base_latency_s=2e-3)
    got = cal.simulate(fabric, demands, routing).total_s
    # h1 -> leaf1 -> spine1 -> leaf2 -> h2: 4 arcs of 1 ms, plus 2 ms once;
    # 8 Mbit at 1 Gbit/s * 0.01 * 0.95 = 9.5 Mbit/s.
    expected = 4e-3 + 2e-3 + 8 * MIB / (1e9 * 0.01 * 0.95)
    assert got == pytest.approx(expected, rel=1e-9)
    assert nominal == pytest.approx(4e-6 + 8 * MIB / 1e9, rel=1e-9)  # topology latency 1 us


def test_measured_eager_limit_replaces_the_presets() -> None:
    cal = Calibration(eager_limits={"openmpi": 65024, "mpich": None})
    assert cal.protocol("openmpi").eager_limit_bytes == 65024
    assert cal.protocol("mpich").eager_limit_bytes is None
    assert cal.protocol("openmpi-duplex").eager_limit_bytes == 4 * MIB
    # an explicit spec is not a preset: the caller's value stays
    assert cal.protocol("openmpi:eager=1000").eager_limit_bytes == 1000


def test_json_round_trip_and_errors(tmp_path: Path) -> None:
    cal = Calibration(
        link_scale=0.01,
        goodput=0.956,
        arc_latency_s=26e-6,
        base_latency_s=466e-6,
        eager_limits={"openmpi": 65024},
        exchange_efficiency={1: 0.96, 4: 0.7},
        exchange_cv=0.15,
        host_queue_bytes=15140,
        source="test",
        measurements={"runs": [1]},
    )
    path = tmp_path / "cal.json"
    cal.save(path)
    assert Calibration.load(path) == cal
    doc = json.loads(path.read_text())
    older = {k: v for k, v in doc.items() if k != "host_queue_bytes"}
    assert Calibration.from_dict(older, "old").host_queue_bytes == HOST_QUEUE_BYTES
    for bad, message in (
        ({**doc, "extra": 1}, "unknown keys"),
        ({**doc, "schema": "x"}, "schema"),
        ({**doc, "goodput": 1.5}, "goodput"),
        ({**doc, "goodput": "fast"}, "goodput"),
        ({**doc, "eager_limits": {"openmpi": 1.5}}, "eager_limits"),
        ({**doc, "eager_limits": {"nompi": 1}}, "unknown protocol"),
        ({**doc, "arc_latency_s": -1}, "arc_latency_s"),
        ({**doc, "exchange_efficiency": {"two": 0.5}}, "pair count"),
        ({**doc, "exchange_efficiency": {"2": 1.5}}, "exchange efficiency"),
        ({**doc, "exchange_efficiency": {"0": 0.5}}, "pairs"),
        ({**doc, "exchange_cv": -0.1}, "exchange_cv"),
        ({**doc, "exchange_cv": 2.0}, "exchange_cv"),
        ({**doc, "exchange_cv": "uneven"}, "exchange_cv"),
        ({**doc, "host_queue_bytes": -1}, "host_queue_bytes"),
        ({**doc, "host_queue_bytes": 1.5}, "host_queue_bytes"),
        ({**doc, "host_queue_bytes": True}, "host_queue_bytes"),
        ([], "not a JSON object"),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(FormatError, match=message):
            Calibration.load(path)
    path.write_text("{")
    with pytest.raises(FormatError, match="not JSON"):
        Calibration.load(path)
    with pytest.raises(FormatError, match="No such file"):
        Calibration.load(tmp_path / "missing.json")


def test_bad_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="link_scale"):
        Calibration(link_scale=0)
    with pytest.raises(ConfigError, match="host_queue_bytes"):
        Calibration(host_queue_bytes=-1)
    with pytest.raises(ConfigError, match="goodput"):
        Calibration(goodput=float("nan"))


def test_bisect_finds_the_threshold_with_few_probes() -> None:
    calls: list[int] = []

    def passes(size: int) -> bool:
        calls.append(size)
        return size <= 65500

    assert bisect_largest(passes, 32768, 131072, 16) == 65488  # the last multiple of 16 <= 65500
    assert len(calls) <= int(np.ceil(np.log2((131072 - 32768) / 16))) + 1
    with pytest.raises(ConfigError):
        bisect_largest(passes, 10, 10, 1)


def test_latency_split() -> None:
    arc, base = latency_split(500e-6, 560e-6)
    assert arc == pytest.approx(30e-6) and base == pytest.approx(440e-6)
    assert latency_split(500e-6, 400e-6) == (0.0, 500e-6)  # noise: no negative latency


def test_exchange_efficiency_slows_concurrent_exchanges_only() -> None:
    # Two hosts on one leaf; ranks 0 and 1 exchange S both ways (one pair),
    # ranks 2 -> 3 send one way.  With e(1) = 0.5 the exchange takes twice as
    # long; the one-way flow is untouched; without a calibration both S/C.
    topo = leaf_spine(1, 1, 4, host_bps=1e9, uplink_bps=1e9)
    fabric = Fabric(topo)
    cells = [(0, 1, MIB), (1, 0, MIB), (2, 3, MIB)]
    pat = Pattern("x", 4, (Phase.from_cells("p", cells),))
    demands = Demands.from_pattern(fabric, pat, Placement(("h1", "h2", "h3", "h4")))
    routing = route("dmodk", fabric, demands)
    plain = Calibration(arc_latency_s=0.0)
    slowed = Calibration(arc_latency_s=0.0, exchange_efficiency={1: 0.5, 4: 0.25})
    t = 8 * MIB / 1e9
    assert plain.simulate(fabric, demands, routing).flow_finish_s.tolist() == pytest.approx([t] * 3)
    got = slowed.simulate(fabric, demands, routing).flow_finish_s.tolist()
    assert got == pytest.approx([2 * t, 2 * t, t])
    # serialized exchanges (above the eager limit) are not concurrent: not slowed
    serial = slowed.simulate(fabric, demands, routing, "openmpi:eager=1000", order="lower-first")
    assert serial.total_s == pytest.approx(2 * t)
    assert slowed.efficiency(2) == pytest.approx(0.5 - 0.25 / 3)
    assert slowed.efficiency(100) == 0.25 and slowed.efficiency(0) == 1.0


def test_uneven_exchanges_delay_eager_steps_that_lockstep_keeps_apart() -> None:
    # Four hosts on one leaf (no shared link but the hosts' own).  Step 1: pairs
    # (0,1) and (2,3) exchange S; step 2: pairs (0,2) and (1,3).  In lockstep every
    # flow of a step ends at S/C and the next starts on idle links: 2 S/C.  When
    # flow times vary, an eager message of step 2 leaves as soon as its sender is
    # done and shares a host's downlink with a step-1 flow still arriving there, so
    # the mean time is longer; the same every time (seeded); 0 is the lockstep model.
    topo = leaf_spine(1, 1, 4, host_bps=1e9, uplink_bps=1e9)
    fabric = Fabric(topo)
    steps = (((0, 1), (2, 3)), ((0, 2), (1, 3)))
    phases = tuple(
        Phase.from_cells(f"s{i}", [c for a, b in pairs for c in ((a, b, MIB), (b, a, MIB))])
        for i, pairs in enumerate(steps)
    )
    pat = Pattern("x", 4, phases)
    demands = Demands.from_pattern(fabric, pat, Placement(("h1", "h2", "h3", "h4")))
    routing = route("dmodk", fabric, demands)
    eager = "openmpi-duplex"  # every message eager: released by its sender alone
    lockstep = Calibration(arc_latency_s=0.0).simulate(
        fabric, demands, routing, eager, mode="ranks"
    )
    assert lockstep.total_s == pytest.approx(2 * 8 * MIB / 1e9)
    uneven = Calibration(arc_latency_s=0.0, exchange_cv=0.15)
    got = uneven.simulate(fabric, demands, routing, eager, mode="ranks")
    assert got.total_s > lockstep.total_s * 1.05
    assert uneven.simulate(fabric, demands, routing, eager, mode="ranks").total_s == got.total_s
    assert any("exchange_cv" in n for n in got.notes)
    assert Calibration(arc_latency_s=0.0, exchange_cv=0.0).simulate(
        fabric, demands, routing, eager, mode="ranks"
    ).total_s == pytest.approx(lockstep.total_s)


def test_the_default_host_queue_is_the_emulators_marking_threshold() -> None:
    from sdnmpi.emu import queues

    assert HOST_QUEUE_BYTES == queues.MARK_FRAMES * queues.FRAME_BYTES


def test_a_ring_of_rendezvous_messages_pays_each_receivers_queue() -> None:
    # Three ranks on three hosts of one leaf, a ring of 1 MiB messages (rendezvous
    # under Open MPI's 64 KiB limit): each receiver is sending too, so its reply to
    # the rendezvous waits behind its host's backlog, host_queue_bytes at the line
    # rate (10 Mbit/s).  Without the protocol, or with the queue at 0, nothing is added.
    topo = leaf_spine(1, 3, 1, host_bps=1e9, uplink_bps=1e9)
    fabric = Fabric(topo)
    cells = [(0, 1, MIB), (1, 2, MIB), (2, 0, MIB)]
    pat = Pattern("ring", 3, (Phase.from_cells("p", cells),))
    demands = Demands.from_pattern(fabric, pat, Placement(("h1", "h2", "h3")))
    routing = route("dmodk", fabric, demands)
    cal = Calibration(link_scale=0.01, goodput=0.9)
    plain = Calibration(link_scale=0.01, goodput=0.9, host_queue_bytes=0)
    queued = cal.simulate(fabric, demands, routing, "openmpi").total_s
    assert queued - plain.simulate(fabric, demands, routing, "openmpi").total_s == (
        pytest.approx(HOST_QUEUE_BYTES * 8 / 10e6)
    )
    assert cal.simulate(fabric, demands, routing).total_s == pytest.approx(
        plain.simulate(fabric, demands, routing).total_s
    )
    # an exchange (each rank sends to the other) is left to the protocol's exchange
    pair = Pattern("pair", 2, (Phase.from_cells("p", [(0, 1, MIB), (1, 0, MIB)]),))
    demands = Demands.from_pattern(fabric, pair, Placement(("h1", "h2")))
    routing = route("dmodk", fabric, demands)
    assert cal.simulate(fabric, demands, routing, "openmpi").total_s == pytest.approx(
        plain.simulate(fabric, demands, routing, "openmpi").total_s
    )
