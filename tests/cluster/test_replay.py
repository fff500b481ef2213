"""The job-stream replay: hand-checked cases and invariants on a small fat-tree."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from sdnmpi.cli.main import main
from sdnmpi.cluster import summary
from sdnmpi.cluster.jobs import StreamJob, Synthetic, synthetic
from sdnmpi.cluster.replay import ROUTERS, Replay, ReplayConfig, replay
from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.errors import ConfigError


def _clock() -> float:
    return 0.0


def _by_id(rep: Replay) -> dict[int, object]:
    return {j.job_id: j for j in rep.jobs}


def test_two_jobs_share_one_uplink_hand_checked() -> None:
    # leaf1: h1 h2, leaf2: h3 h4, one spine; every link as fast as a NIC.
    # A (1 rank, no traffic, 10 s) takes h1; B (2 ranks) takes h2 h3: its pair
    # exchange crosses leaf1 -> spine at its NIC rate, so alone it runs at speed 1
    # and does 10 % of its 100 s by t = 10.  D (2 ranks) arrives at 1 and waits for
    # A's host: at 10 it gets h1 h4 (no two free hosts in a row), crossing the same
    # uplink.  Both now run at speed 1/2: 100 * (0.5 + 0.5 / 0.5) = 150 s per job,
    # so B's last 90 % takes 135 s (ends at 145) while D does 135/150 = 90 %, and D's
    # last 10 % alone takes 10 s (ends at 155).  Slowdowns: both 145/100.
    topo = leaf_spine(1, 2, 2)
    jobs = [
        StreamJob(1, 0.0, 1, 10.0, 0.0, ""),
        StreamJob(2, 0.0, 2, 100.0, 0.5, "alltoall:nprocs=2,bytes=1000000"),
        StreamJob(3, 1.0, 2, 100.0, 0.5, "alltoall:nprocs=2,bytes=1000000"),
    ]
    for router in ROUTERS:
        rep = replay(topo, jobs, ReplayConfig(router), _clock)
        a, b, d = rep.jobs
        assert (a.start_s, a.end_s, a.hosts) == (0.0, 10.0, (0,))
        assert (b.start_s, b.hosts, b.alone_speed) == (0.0, (1, 2), 1.0)
        assert b.end_s == pytest.approx(145.0)
        assert (d.start_s, d.hosts) == (10.0, (0, 3))
        assert d.end_s == pytest.approx(155.0)
        assert b.slowdown == pytest.approx(1.45) and d.slowdown == pytest.approx(1.45)
        # two pair rules (one per direction) on each leaf and the spine per crossing job
        assert max(s.max_rules for s in rep.rules) == 4


def test_own_contention_and_fcfs_hand_checked() -> None:
    # A 4-rank alltoall (MPICH's scattered algorithm: one phase of 12 messages) on
    # 2 leaves of 2 hosts: each NIC sends 3 messages, each uplink carries 4 (two
    # hosts to two hosts): speed 3/4 alone, so 100 s with half
    # communication takes 100 * (0.5 + 0.5 / 0.75) = 116.67 s.  It arrives at 1
    # behind a 2-rank job of 50 s that holds h1 h2 (FCFS: it starts at 50).
    topo = leaf_spine(1, 2, 2)
    jobs = [
        StreamJob(1, 0.0, 2, 50.0, 0.5, "alltoall:nprocs=2,bytes=1000"),
        StreamJob(2, 1.0, 4, 100.0, 0.5, "alltoall:nprocs=4,bytes=1000"),
    ]
    rep = replay(topo, jobs, ReplayConfig("ours"), _clock)
    first, big = rep.jobs
    assert (first.end_s, first.slowdown) == (50.0, 1.0)
    assert big.start_s == 50.0 and big.wait_s == 49.0
    assert big.alone_speed == pytest.approx(0.75)
    assert big.end_s == pytest.approx(50.0 + 100.0 * (0.5 + 0.5 / 0.75))


def test_phases_count_apart() -> None:
    # 4 ranks on 2 leaves of 2 hosts, recursive-doubling Allreduce: step 1 pairs
    # rank r with r^1 (same leaf: 1 unit, the NIC), step 2 with r^2 (across: each
    # uplink carries its 2 hosts' messages, 2 units).  Ideal 1 + 1, alone 1 + 2: speed
    # 2/3.  Merging the phases would hide it (2 units on every NIC and every uplink).
    topo = leaf_spine(1, 2, 2)
    spec = "allreduce:nprocs=4,bytes=1000000,algorithm=recursive_doubling"
    rep = replay(topo, [StreamJob(1, 0.0, 4, 100.0, 0.5, spec)], ReplayConfig("dmodk"), _clock)
    assert rep.jobs[0].alone_speed == pytest.approx(2 / 3)
    assert rep.jobs[0].end_s == pytest.approx(100.0 * (0.5 + 0.5 * 1.5))


def test_alone_on_idle_fabric_slowdown_one() -> None:
    topo = fat_tree(4)
    for spec in ("cg:nprocs=8", "stencil3d:nprocs=8", "alltoall:nprocs=8,bytes=65536"):
        rep = replay(topo, [StreamJob(1, 5.0, 8, 300.0, 0.6, spec)], ReplayConfig("ours"), _clock)
        (job,) = rep.jobs
        assert job.slowdown == pytest.approx(1.0) and job.end_s == pytest.approx(305.0)


@pytest.fixture(scope="module")
def stream() -> tuple[StreamJob, ...]:
    return synthetic(Synthetic(njobs=24, load=1.2, max_size=8), hosts=16, seed=5)


@pytest.fixture(scope="module")
def replays(stream: tuple[StreamJob, ...]) -> dict[str, Replay]:
    topo = fat_tree(4)
    return {
        f"{r}/{a}": replay(topo, stream, ReplayConfig(r, a, seed=2), _clock)
        for r in ROUTERS
        for a in ("contiguous", "random")
    }


def test_invariants(stream: tuple[StreamJob, ...], replays: dict[str, Replay]) -> None:
    nominal = {j.job_id: j for j in stream}
    for name, rep in replays.items():
        assert sorted(_by_id(rep)) == sorted(nominal), name  # every job finished
        for j in rep.jobs:
            assert j.slowdown >= 1.0 and j.start_s >= j.arrival_s, (name, j)
            assert 0.0 < j.mean_speed <= 1.0 + 1e-9
            assert j.end_s - j.start_s >= nominal[j.job_id].duration_s * (1 - 1e-9)
            assert len(j.hosts) == j.nprocs == len(set(j.hosts))
        # no host held by two jobs at once
        for a, b in itertools.combinations(rep.jobs, 2):
            if set(a.hosts) & set(b.hosts):
                assert a.end_s <= b.start_s + 1e-9 or b.end_s <= a.start_s + 1e-9, (name, a, b)
        # FCFS without backfilling: jobs start in arrival order
        order = sorted(rep.jobs, key=lambda j: (j.arrival_s, j.job_id))
        starts = [j.start_s for j in order]
        assert starts == sorted(starts), name


def test_routers_on_the_same_stream(replays: dict[str, Replay]) -> None:
    sums = {name: summary.summarize(rep) for name, rep in replays.items()}
    for s in sums.values():
        assert s["jobs"] == 24 and s["slowdown_median"] <= s["slowdown_p99"]
        assert 0 < s["throughput"] <= 1.0
    # ours routes every job at least as well alone as D-mod-K does on its hosts
    for alloc in ("contiguous", "random"):
        ours, dmodk = replays[f"ours/{alloc}"], replays[f"dmodk/{alloc}"]
        first_ours, first_dmodk = ours.jobs[0], dmodk.jobs[0]
        assert first_ours.hosts == first_dmodk.hosts
        assert first_ours.alone_speed >= first_dmodk.alone_speed - 1e-9
    ratios = summary.compare([s for n, s in sums.items() if n.endswith("/random")])
    assert ratios["dmodk"]["throughput_gain"] == 0.0 and set(ratios) == set(ROUTERS)


def test_bad_streams() -> None:
    topo = fat_tree(4)
    with pytest.raises(ConfigError, match="more than the 16 hosts"):
        replay(topo, [StreamJob(1, 0.0, 17, 1.0, 0.0, "")], ReplayConfig(), _clock)
    with pytest.raises(ConfigError, match="unique"):
        replay(topo, [StreamJob(1, 0.0, 1, 1.0, 0.0, "")] * 2, ReplayConfig(), _clock)
    with pytest.raises(ConfigError, match="choose one of"):
        ReplayConfig(router="minhop")


def test_cli_replay_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "stream.json"
    argv = ["stream", "replay", "-t", "fat_tree:4", "--jobs", "6", "--max-size", "4"]
    with pytest.raises(SystemExit) as done:
        main([*argv, "-r", "dmodk,ours", "--seed", "7", "-o", str(out)])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "dmodk" in printed and "ours" in printed
    doc = json.loads(out.read_text())
    assert doc["stream"]["seed"] == 7
    assert [s["router"] for s in doc["summary"]] == ["dmodk", "ours"]
    assert len(doc["runs"][1]["jobs"]) == 6
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--comm-share", "x"])
    assert exit_.value.code == 2
