"""The agent's pure state machine: registration rules, scans, hub resolution, cleanup."""

from __future__ import annotations

import pytest

from sdnmpi.node.agentcore import AddConn, AgentCore, AgentError, DelConn
from sdnmpi.node.peers import Conn, RankEndpoints
from sdnmpi.node.procnet import Endpoint, TcpSocket

H1, H2 = "10.0.0.1", "10.0.0.2"
# ranks 0, 1 on h1 (listening on 1024, 1025), ranks 2, 3 on h2 (1024, 1025)
TABLE = RankEndpoints.build(
    [(0, H1, 100, [1024]), (1, H1, 101, [1025]), (2, H2, 200, [1024]), (3, H2, 201, [1025])]
)


def sock(local: tuple[str, int], remote: tuple[str, int], state: str = "ESTABLISHED") -> TcpSocket:
    return TcpSocket(Endpoint(*local), Endpoint(*remote), state, 0, 1)


def no_hub(job: str, rank: int, conn: Conn) -> int | None:
    return None


def registered(core: AgentCore, pid: int = 100, rank: int = 0) -> None:
    core.register(pid, 1000, "job7", rank, 4)
    core.set_ranks(pid, TABLE)
    core.set_job_slot("job7", 5)


def test_connecting_side_is_tagged_at_once() -> None:
    core = AgentCore(ctx_slots=4)
    registered(core)
    out = (H1, 40000), (H2, 1025)  # rank 0 connected to rank 3
    listen = sock((H1, 1024), ("0.0.0.0", 0), "LISTEN")
    ops = core.scan(100, [sock(*out), listen], no_hub)
    conn = (Endpoint(*out[0]), Endpoint(*out[1]))
    assert ops == [AddConn(conn, job_slot=5, src_rank=0, dst_rank=3, ctx_slot=0)]
    assert core.scan(100, [sock(*out), listen], no_hub) == []  # nothing new
    assert core.scan(100, [listen], no_hub) == [DelConn(conn)]  # closed


def test_accepted_connection_from_a_shared_host_needs_the_hub() -> None:
    core = AgentCore(ctx_slots=4)
    registered(core)
    accepted = sock((H1, 1024), (H2, 50000))  # from rank 2 or 3: both live on h2
    asked: list[tuple[str, int, Conn]] = []

    def hub(job: str, rank: int, conn: Conn) -> int | None:
        asked.append((job, rank, conn))
        return 2 if len(asked) > 1 else None  # the mirror report arrives later

    assert core.scan(100, [accepted], hub) == []
    ops = core.scan(100, [accepted], hub)
    assert [(o.src_rank, o.dst_rank) for o in ops if isinstance(o, AddConn)] == [(0, 2)]
    assert asked[0] == ("job7", 0, (Endpoint(H1, 1024), Endpoint(H2, 50000)))


def test_nothing_is_tagged_without_rank_table_or_job_slot() -> None:
    core = AgentCore(ctx_slots=4)
    core.register(100, 1000, "job7", 0, 4)
    out = sock((H1, 40000), (H2, 1025))
    assert core.scan(100, [out], no_hub) == []  # no table yet
    core.set_ranks(100, TABLE)
    assert core.scan(100, [out], no_hub) == []  # no slot yet
    core.set_job_slot("job7", 9)
    assert len(core.scan(100, [out], no_hub)) == 1
    core.set_job_slot("job7", None)  # slot revoked: untag
    assert [type(o) for o in core.scan(100, [out], no_hub)] == [DelConn]


def test_registration_rules() -> None:
    core = AgentCore(ctx_slots=2)
    reg = core.register(100, 1000, "job7", 0, 4)
    assert reg.ctx_slot == 0
    cases = [
        ((100, 1000, "job7", 1, 4), "already registered"),
        ((101, 1000, "job7", 0, 4), "rank 0 of job job7 is process 100"),
        ((101, 2000, "job7", 1, 4), "belongs to uid 1000"),
        ((101, 1000, "job7", 1, 8), "has 4 ranks, not 8"),
        ((101, 1000, "job7", 4, 4), "out of range"),
        ((101, 1000, "", 0, 4), "printable"),
        ((101, 1000, "job8", 0, 5000), "at most 4096"),
    ]
    for args, needle in cases:
        with pytest.raises(AgentError, match=needle):
            core.register(*args)
    assert core.register(101, 1000, "job7", 1, 4).ctx_slot == 1
    with pytest.raises(AgentError, match="no free context slot"):
        core.register(102, 1000, "job8", 0, 1)
    with pytest.raises(AgentError, match="not registered"):
        core.set_ranks(999, TABLE)
    with pytest.raises(AgentError, match="another PID"):
        core.set_ranks(101, RankEndpoints.build([(r, H1, 7 + r, []) for r in range(4)]))
    with pytest.raises(AgentError, match="rank table has 2 ranks"):
        core.set_ranks(101, RankEndpoints.build([(0, H1, 100, []), (1, H1, 101, [])]))
    with pytest.raises(AgentError, match=r"out of range 1\.\.127"):
        core.set_job_slot("job7", 128)


def test_unregister_frees_the_slot_and_untags_and_releases_the_job() -> None:
    core = AgentCore(ctx_slots=1)
    registered(core)
    core.scan(100, [sock((H1, 40000), (H2, 1025))], no_hub)
    reg, ops = core.unregister(100)
    assert reg is not None and reg.rank == 0
    assert ops == [DelConn((Endpoint(H1, 40000), Endpoint(H2, 1025)))]
    assert core.unregister(100) == (None, [])
    # the job is gone from this host: another uid may now use the name, slot 0 is free
    assert core.register(300, 2000, "job7", 0, 2).ctx_slot == 0
    assert core.jobs() == {"job7"}
