"""Reading a process's TCP sockets from /proc, and attributing connections to ranks."""

from __future__ import annotations

import doctest
import os
import socket

import pytest

from sdnmpi.errors import ConfigError, FormatError
from sdnmpi.node import peers, procnet
from sdnmpi.node.peers import MirrorResolver, RankEndpoints
from sdnmpi.node.procnet import Endpoint, parse_tcp_table

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  inode"


@pytest.mark.parametrize("module", [procnet, peers])
def test_doctests(module: object) -> None:
    assert doctest.testmod(module).failed == 0  # type: ignore[arg-type]


def test_parse_v4_v6_mapped_and_skip_pure_v6() -> None:
    rows = [
        "   0: 00000000:0400 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 11 1",
        "   1: 0100000A:0400 0200000A:C350 01 00000000:00000000 00:00000000 00000000  1000 0 12 1",
    ]
    v6 = [
        "   0: 0000000000000000FFFF00000100000A:0401 0000000000000000FFFF00000300000A:8000 01"
        " 00000000:00000000 00:00000000 00000000 0 0 13 1",
        "   1: 000080FE00000000FF005450B6AC0EFE:0016 000080FE00000000FF005450B6AC0EFF:8000 01"
        " 00000000:00000000 00:00000000 00000000 0 0 14 1",
    ]
    got = parse_tcp_table("\n".join([HEADER, *rows])) + parse_tcp_table("\n".join([HEADER, *v6]))
    assert [(s.local, s.remote, s.state, s.uid, s.inode) for s in got] == [
        (Endpoint("0.0.0.0", 1024), Endpoint("0.0.0.0", 0), "LISTEN", 0, 11),
        (Endpoint("10.0.0.1", 1024), Endpoint("10.0.0.2", 50000), "ESTABLISHED", 1000, 12),
        (Endpoint("10.0.0.1", 1025), Endpoint("10.0.0.3", 32768), "ESTABLISHED", 0, 13),
    ]


@pytest.mark.parametrize(
    "row",
    [
        "   0: 0100000A 0200000A:C350 01 0 0 0 0 0 12 1",  # no port
        "   0: 0100000A:0400 0200000A:C350 FF 0 0 0 0 0 12 1",  # unknown state
        "   0: 01000A:0400 0200000A:C350 01 0 0 0 0 0 12 1",  # short address
        "   0: 0100000A:0400",  # truncated
    ],
)
def test_malformed_rows_are_errors(row: str) -> None:
    with pytest.raises(FormatError, match="line 2"):
        parse_tcp_table(f"{HEADER}\n{row}")


def test_process_sockets_sees_only_our_own_connection() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    try:
        mine = procnet.process_sockets(os.getpid())
        ends = {(s.local, s.remote, s.state) for s in mine}
        c_local = Endpoint(*client.getsockname())
        s_local = Endpoint(*server.getsockname())
        assert (c_local, s_local, "ESTABLISHED") in ends
        assert (s_local, c_local, "ESTABLISHED") in ends
        assert (s_local, Endpoint("0.0.0.0", 0), "LISTEN") in ends
        # a process that does not exist
        with pytest.raises(FileNotFoundError):
            procnet.process_sockets(2**22 + 12345)
    finally:
        for s in (accepted, client, server):
            s.close()


def test_rule_one_connecting_side_and_single_rank_hosts() -> None:
    table = RankEndpoints.build(
        [
            (0, "10.0.0.1", 10, [1024]),
            (1, "10.0.0.2", 20, [1024]),
            (2, "10.0.0.2", 21, [1025]),
        ]
    )
    # rank 0 connected to rank 2's listening port
    assert table.peer((Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 1025))) == 2
    # rank 2 accepted it: the remote port is ephemeral, but 10.0.0.1 holds one rank
    assert table.peer((Endpoint("10.0.0.2", 1025), Endpoint("10.0.0.1", 40000))) == 0
    # rank 0 accepted from 10.0.0.2 (two ranks there): only the hub can tell
    assert table.peer((Endpoint("10.0.0.1", 1024), Endpoint("10.0.0.2", 41000))) is None
    # neither end is an MPI listening port (ssh, say)
    assert table.peer((Endpoint("10.0.0.1", 40001), Endpoint("10.0.0.2", 22))) is None


def test_rank_table_rejects_inconsistent_rows() -> None:
    with pytest.raises(ConfigError, match="entry 1 is rank 2"):
        RankEndpoints.build([(0, "10.0.0.1", 1, []), (2, "10.0.0.1", 2, [])])
    with pytest.raises(ConfigError, match="both listen"):
        RankEndpoints.build([(0, "10.0.0.1", 1, [1024]), (1, "10.0.0.1", 2, [1024])])


def test_mirror_resolver_pairs_both_ends_per_job() -> None:
    hub = MirrorResolver()
    a, b = Endpoint("10.0.0.1", 1024), Endpoint("10.0.0.2", 41000)
    assert hub.report("7", 0, (a, b)) is None  # the other end has not reported yet
    assert hub.report("8", 5, (b, a)) is None  # another job: never paired with job 7
    assert hub.report("7", 2, (b, a)) == 0
    assert hub.peer_of("7", (a, b)) == 2
    assert hub.report("7", 0, (a, b)) == 2  # repeated report: idempotent
    with pytest.raises(ConfigError, match="reported by ranks 0 and 3"):
        hub.report("7", 3, (a, b))
    assert hub.forget("7", rank=2) == 1
    assert hub.peer_of("7", (a, b)) is None
    assert hub.forget("7") == 1
    assert hub.forget("8") == 1


def test_tcp_counters_parse_and_reject_garbage() -> None:
    from sdnmpi.errors import FormatError
    from sdnmpi.node.procnet import parse_tcp_counters, tcp_counters

    active, passive, resets, estab = tcp_counters()  # this machine's own namespace
    assert min(active, passive, resets, estab) >= 0
    for bad in ("", "Tcp: ActiveOpens\n", "Tcp: ActiveOpens PassiveOpens\nTcp: 1 x\n"):
        with pytest.raises(FormatError):
            parse_tcp_counters(bad)
