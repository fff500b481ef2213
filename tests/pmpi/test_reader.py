"""The sdnmpi-trace reader (src/sdnmpi/formats/sdnmpitrace.py) on hand-written traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sdnmpi.catalog import load_pattern
from sdnmpi.core.collectives import expand
from sdnmpi.errors import FormatError
from sdnmpi.formats.sdnmpitrace import is_sdnmpi_trace, library_of, load_sdnmpi_trace

MPICH = "MPICH Version:\t4.0.2"
OMPI = "Open MPI v4.1.4, package: Debian OpenMPI"


def header(rank: int, nprocs: int, comms: list[list[int]], library: str = MPICH) -> dict:
    return {
        "schema": "sdnmpi-trace/1",
        "rank": rank,
        "nprocs": nprocs,
        "host": f"h{rank}",
        "pid": 100 + rank,
        "mpi_library": library,
        "job": "j",
        "t0_wall": 1000.0,
        "modes": "profile",
        "n_events": 0,
        "dropped_events": 0,
        "communicators": [{"id": i, "ranks": r} for i, r in enumerate(comms)],
    }


def ev(call: str, kind: str, t: float, **fields: Any) -> dict:
    return {"call": call, "kind": kind, "t_start": t, "t_end": t + 0.001, **fields}


def send(t: float, peer: int, nbytes: int, comm: int = 0) -> dict:
    return ev(
        "MPI_Send", "send", t, comm=comm, peer=peer, tag=0, count=nbytes, type_bytes=1, bytes=nbytes
    )


def coll(call: str, name: str, t: float, count: int, tb: int, comm: int = 0, **kw: Any) -> dict:
    return ev(
        call, "coll", t, comm=comm, coll=name, count=count, type_bytes=tb, bytes=count * tb, **kw
    )


def write(d: Path, rank: int, head: dict, events: list[dict]) -> None:
    lines = [json.dumps(head)] + [json.dumps(e) for e in events]
    (d / f"sdnmpi-trace-{rank}.jsonl").write_text("\n".join(lines) + "\n")


def world(n: int, rank: int) -> list[list[int]]:
    return [list(range(n)), [rank]]


def test_p2p_is_taken_from_the_sender_side(tmp_path):
    write(tmp_path, 0, header(0, 2, world(2, 0)), [send(0.1, 1, 100), send(0.2, 1, 50)])
    recv = ev("MPI_Recv", "recv", 0.1, comm=0, peer=0, tag=0, count=100, type_bytes=1, bytes=100)
    write(tmp_path, 1, header(1, 2, world(2, 1)), [recv])
    p = load_sdnmpi_trace(tmp_path)
    assert p.nprocs == 2
    assert p.dense().tolist() == [[0, 150], [0, 0]]
    assert p.total_messages == 2
    assert len(p.phases) == 1
    assert p.phases[0].label == "point-to-point (2 messages)"
    assert p.meta["p2p_bytes"] == 150
    assert p.meta["processor_names"] == ["h0", "h1"]
    assert p.meta["calls"] == {"MPI_Recv": 1, "MPI_Send": 2}


def test_collective_expanded_once_with_the_library_of_the_header(tmp_path):
    n = 4
    for r in range(n):
        events = [coll("MPI_Allreduce", "allreduce", 0.1, 1024, 8)]
        write(tmp_path, r, header(r, n, world(n, r), OMPI), events)
    p = load_sdnmpi_trace(tmp_path)
    expected = expand("allreduce", n, 1024, type_bytes=8, library="openmpi")
    assert p.total_bytes == expected.total_bytes
    assert p.meta["library"] == "openmpi"
    assert p.meta["expanded"] == {"MPI_Allreduce": 1}
    assert p.meta["collective_bytes"] == expected.total_bytes


def test_split_communicator_ranks_become_world_ranks(tmp_path):
    # world 4, sub-communicators {0, 2} and {1, 3}; bcast on each from sub rank 1
    n = 4
    for r in range(n):
        sub = [0, 2] if r % 2 == 0 else [1, 3]
        comms = [*world(n, r), sub]
        root = sub[1]
        write(
            tmp_path, r, header(r, n, comms), [coll("MPI_Bcast", "bcast", 0.1, 64, 1, 2, root=root)]
        )
    p = load_sdnmpi_trace(tmp_path)
    assert p.dense().tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [64, 0, 0, 0], [0, 64, 0, 0]]
    assert p.phases[0].label == "MPI_Bcast (2 calls)"


def test_v_variants_scan_and_reduce_scatter_are_approximated(tmp_path):
    n = 3
    for r in range(n):
        events = [
            ev(
                "MPI_Alltoallv",
                "collv",
                0.1,
                comm=0,
                coll="alltoallv",
                type_bytes=4,
                bytes=0,
                counts=[1, 2, 3],
            ),
            ev(
                "MPI_Allgatherv",
                "collv",
                0.2,
                comm=0,
                coll="allgatherv",
                type_bytes=2,
                count=0,  # as with MPI_IN_PLACE: the block is counts[r]
                bytes=0,
                counts=[1, 2, 3],
            ),
            ev(
                "MPI_Scatterv",
                "collv",
                0.3,
                comm=0,
                coll="scatterv",
                type_bytes=1,
                count=1,
                bytes=0,
                root=0,
                **({"counts": [0, 5, 7]} if r == 0 else {}),
            ),
            ev(
                "MPI_Reduce_scatter",
                "collv",
                0.4,
                comm=0,
                coll="reduce_scatter",
                type_bytes=1,
                bytes=0,
                counts=[1, 1, 2],
            ),
            coll("MPI_Scan", "scan", 0.5, 2, 4),
        ]
        write(tmp_path, r, header(r, n, world(n, r)), events)
    p = load_sdnmpi_trace(tmp_path)
    labels = [ph.label for ph in p.phases]
    assert labels == [
        "MPI_Alltoallv (3 calls)",
        "MPI_Allgatherv (3 calls)",
        "MPI_Scatterv (1 call)",
        "MPI_Reduce_scatter (1 call)",
        "MPI_Scan (1 call)",
    ]
    totals = [ph.total_bytes for ph in p.phases]
    # alltoallv: rank r sends counts[i]*4 to each i != r: 3 * (1+2+3)*4 - (1+2+3)*4
    assert totals[0] == 3 * 24 - 24
    # allgatherv: rank r sends counts[r]*2 bytes to 2 peers
    assert totals[1] == 2 * (2 + 4 + 6)
    assert totals[2] == 12
    # unequal reduce_scatter counts: every rank sends counts[j] to j != itself
    assert totals[3] == 2 * (1 + 1 + 2)
    # scan on 3 ranks: masks 1 (0<->1) and 2 (0<->2): 4 messages of 8 bytes
    assert totals[4] == 32
    assert p.meta["approximated"] == {
        "MPI_Allgatherv": 3,
        "MPI_Alltoallv": 3,
        "MPI_Reduce_scatter": 1,
        "MPI_Scan": 1,
        "MPI_Scatterv": 1,
    }


def test_collv_without_counts_is_listed_not_dropped(tmp_path):
    e = ev("MPI_Alltoallv", "collv", 0.1, comm=0, coll="alltoallv", type_bytes=4, bytes=0)
    for r in range(2):
        write(tmp_path, r, header(r, 2, world(2, r)), [e])
    p = load_sdnmpi_trace(tmp_path)
    assert p.meta["not_expanded"] == {"MPI_Alltoallv (counts not recorded)": 2}
    assert p.phases == ()


def test_runs_become_phases_and_too_many_runs_aggregate(tmp_path):
    events0, events1 = [], []
    for i in range(5):
        events0 += [send(i + 0.1, 1, 10), coll("MPI_Barrier", "barrier", i + 0.5, 0, 0)]
        events1 += [coll("MPI_Barrier", "barrier", i + 0.5, 0, 0)]
    write(tmp_path, 0, header(0, 2, world(2, 0)), events0)
    write(tmp_path, 1, header(1, 2, world(2, 1)), events1)
    runs = load_sdnmpi_trace(tmp_path)
    assert len(runs.phases) == 10
    assert runs.meta["grouping"] == "runs"
    agg = load_sdnmpi_trace(tmp_path, max_phases=4)
    assert [ph.label for ph in agg.phases] == [
        "point-to-point (5 messages in 5 steps)",
        "MPI_Barrier (5 calls)",
    ]
    assert [ph.repeat for ph in agg.phases] == [5, 5]
    assert agg.meta["grouping"] == "by_pairs"
    assert agg.total_bytes == runs.total_bytes == 50


def ring_benchmark(tmp_path: Path, n: int, rings: list[list[int]], reps: int) -> None:
    """Each rank sends to its successor on one ring after another, a barrier between
    (as b_eff times its rings)."""
    events: list[list[dict]] = [[] for _ in range(n)]
    t = 0.0
    for _ in range(reps):
        for ring in rings:
            for i, r in enumerate(ring):
                events[r].append(send(t + 0.01 * i, ring[(i + 1) % len(ring)], 100))
            for r in range(n):
                events[r].append(coll("MPI_Barrier", "barrier", t + 0.5, 0, 0))
            t += 1.0
    for r in range(n):
        write(tmp_path, r, header(r, n, world(n, r)), events[r])


def test_too_many_runs_keep_one_phase_per_ring(tmp_path):
    ring_benchmark(tmp_path, 4, [[0, 1, 2, 3], [0, 2, 1, 3]], reps=3)
    assert load_sdnmpi_trace(tmp_path).meta["grouping"] == "runs"  # 12 runs
    p = load_sdnmpi_trace(tmp_path, max_phases=8)
    assert p.meta["grouping"] == "by_pairs"
    assert [ph.label for ph in p.phases] == [
        "point-to-point (12 messages in 3 steps)",
        "MPI_Barrier (6 calls)",
        "point-to-point (12 messages in 3 steps)",
    ]
    first, _, second = p.phases
    assert set(zip(first.src.tolist(), first.dst.tolist(), strict=True)) == {
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 0),
    }
    assert set(zip(second.src.tolist(), second.dst.tolist(), strict=True)) == {
        (0, 2),
        (2, 1),
        (1, 3),
        (3, 0),
    }
    assert (first.repeat, first.total_bytes) == (second.repeat, second.total_bytes) == (3, 400)
    assert p.total_bytes == 2 * 3 * 4 * 100
    one = load_sdnmpi_trace(tmp_path, max_phases=2)
    assert one.meta["grouping"] == "by_call"
    assert [ph.label for ph in one.phases] == [
        "point-to-point (24 messages)",
        "MPI_Barrier (6 calls)",
    ]


def test_a_ping_pong_is_two_steps_an_exchange_one(tmp_path):
    """With more runs than phases allowed, a message back along a pair starts a new
    step when its sender had received the message it answers (a ping-pong), not when
    both sides sent first (an exchange)."""

    def call(name: str, kind: str, t: float, end: float, **kw: Any) -> dict:
        return {**ev(name, kind, t, **kw), "t_end": end}

    def msg(name: str, kind: str, t: float, end: float, peer: int, nbytes: int) -> dict:
        fields = {"comm": 0, "peer": peer, "tag": 0, "count": nbytes, "type_bytes": 1}
        return call(name, kind, t, end, **fields, bytes=nbytes)

    events: list[list[dict]] = [[], []]

    def ping_pong(t0: float) -> None:  # rank 1 answers once its MPI_Recv returned
        for t in (t0, t0 + 2):
            events[0] += [msg("MPI_Send", "send", t, t + 0.001, 1, 1000)]
            events[1] += [msg("MPI_Recv", "recv", t, t + 0.95, 0, 1000)]
            events[1] += [msg("MPI_Send", "send", t + 1, t + 1.001, 0, 1000)]
            events[0] += [msg("MPI_Recv", "recv", t + 0.001, t + 1.95, 1, 1000)]

    def barrier(t: float) -> None:
        for r in (0, 1):
            events[r].append(coll("MPI_Barrier", "barrier", t, 0, 0))

    def exchange(t0: float) -> None:  # Irecv, an eager Send (returns at once), Wait
        for t in (t0, t0 + 1, t0 + 2, t0 + 3):
            for r in (0, 1):
                start = t + 0.05 * r
                events[r] += [
                    msg("MPI_Irecv", "recv", start, start, 1 - r, 500),
                    msg("MPI_Send", "send", start, start + 0.001, 1 - r, 500),
                    call("MPI_Wait", "completion", start, t + 0.9),
                ]

    ping_pong(0)
    barrier(5)
    exchange(10)
    barrier(15)
    ping_pong(20)
    for r in (0, 1):
        write(tmp_path, r, header(r, 2, world(2, r)), events[r])
    assert load_sdnmpi_trace(tmp_path).meta["grouping"] == "runs"  # 5 runs, not cut
    p = load_sdnmpi_trace(tmp_path, max_phases=4)
    assert p.meta["grouping"] == "by_pairs"
    assert [(ph.label, ph.repeat, ph.total_bytes, len(ph)) for ph in p.phases] == [
        ("point-to-point (4 messages in 4 steps)", 4, 1000, 1),
        ("point-to-point (4 messages in 4 steps)", 4, 1000, 1),
        ("MPI_Barrier (2 calls)", 2, 0, 2),
        ("point-to-point (8 messages in 4 steps)", 4, 1000, 2),
    ]
    assert p.total_bytes == 3 * 4000


def test_beyond_max_phases_the_smallest_groups_are_summed(tmp_path):
    """Three rings by decreasing bytes and a barrier, two phases allowed: the largest
    ring keeps its phase, the other two are summed into one."""
    events: list[list[dict]] = [[] for _ in range(4)]
    rings = [([0, 1, 2, 3], 300), ([0, 2, 1, 3], 200), ([0, 3, 1, 2], 100)]
    for k, (ring, nbytes) in enumerate(rings):
        for i, r in enumerate(ring):
            events[r].append(send(k + 0.01 * i, ring[(i + 1) % 4], nbytes))
        for r in range(4):
            events[r].append(coll("MPI_Barrier", "barrier", k + 0.5, 0, 0))
    for r in range(4):
        write(tmp_path, r, header(r, 4, world(4, r)), events[r])
    p = load_sdnmpi_trace(tmp_path, max_phases=3)
    assert p.meta["grouping"] == "by_pairs"
    assert [(ph.label, ph.total_bytes) for ph in p.phases] == [
        ("point-to-point (4 messages)", 1200),
        ("MPI_Barrier (3 calls)", 0),
        ("point-to-point (other pairs, 8 messages)", 1200),
    ]


def test_detection_library_and_catalog(tmp_path):
    assert not is_sdnmpi_trace(tmp_path)
    write(tmp_path, 0, header(0, 1, world(1, 0)), [])
    assert is_sdnmpi_trace(tmp_path)
    assert is_sdnmpi_trace(tmp_path / "sdnmpi-trace-0.jsonl")
    assert library_of(OMPI) == "openmpi"
    assert library_of(MPICH) == "mpich"
    # a pfprof file beside it (as the library writes) does not change the dispatch
    (tmp_path / "oxton-result0.json").write_text("{}")
    p = load_pattern(str(tmp_path))
    assert p.meta["format"] == "sdnmpi-trace"
    assert load_sdnmpi_trace(tmp_path / "sdnmpi-trace-0.jsonl").nprocs == 1


def two_ranks(tmp_path: Path, events1: list[dict] | None = None, head1: dict | None = None):
    write(tmp_path, 0, header(0, 2, world(2, 0)), [send(0.1, 1, 10)])
    write(tmp_path, 1, head1 or header(1, 2, world(2, 1)), events1 or [])


@pytest.mark.parametrize(
    ("head1", "events1", "message"),
    [
        (header(1, 3, world(3, 1)), None, "disagree on nprocs"),
        (
            {**header(1, 2, world(2, 1)), "schema": "other/9"},
            None,
            "sdnmpi-trace-1.jsonl:1: schema must be",
        ),
        ({**header(1, 2, world(2, 1)), "rank": 0}, None, "file name says rank 1"),
        (None, [ev("MPI_X", "bogus", 0.1)], "sdnmpi-trace-1.jsonl:2: unknown kind 'bogus'"),
        (None, [send(0.1, 5, 1)], "sdnmpi-trace-1.jsonl:2: peer must be a world rank < 2"),
        (None, [send(0.1, 0, 1, comm=7)], "communicator 7 not in the header"),
        (
            None,
            [send(0.1, 0, 1), {**send(0.2, 0, 1), "bytes": -1}],
            "sdnmpi-trace-1.jsonl:3: bytes must be >= 0",
        ),
        (
            None,
            [coll("MPI_Bcast", "bcast", 0.1, 4, 1, root=1), {"call": "MPI_Send"}],
            "sdnmpi-trace-1.jsonl:3: unknown kind None",
        ),
        (
            None,
            [
                ev(
                    "MPI_Alltoallv",
                    "collv",
                    0.1,
                    comm=0,
                    coll="alltoallv",
                    type_bytes=1,
                    bytes=0,
                    counts=[1],
                )
            ],
            "counts must be one non-negative integer per member",
        ),
    ],
)
def test_malformed_traces_name_file_and_line(tmp_path, head1, events1, message):
    two_ranks(tmp_path, events1, head1)
    with pytest.raises(FormatError, match=message.replace(".", r"\.")):
        load_sdnmpi_trace(tmp_path)


def test_missing_rank_and_bad_json(tmp_path):
    write(tmp_path, 0, header(0, 3, world(3, 0)), [])
    write(tmp_path, 2, header(2, 3, world(3, 2)), [])
    with pytest.raises(FormatError, match=r"ranks \[1\] are missing"):
        load_sdnmpi_trace(tmp_path)
    write(tmp_path, 1, header(1, 3, world(3, 1)), [])
    with (tmp_path / "sdnmpi-trace-1.jsonl").open("a") as fh:
        fh.write('{"call": "MPI_Send", "kind": \n')
    with pytest.raises(FormatError, match=r"sdnmpi-trace-1\.jsonl:2: not valid JSON"):
        load_sdnmpi_trace(tmp_path)
    (tmp_path / "sdnmpi-trace-1.jsonl").write_text("")
    with pytest.raises(FormatError, match="empty file"):
        load_sdnmpi_trace(tmp_path)
    with pytest.raises(FormatError, match="not a directory"):
        load_sdnmpi_trace(tmp_path / "nothing")
