"""Listing commands' ``--json``, topology generator specs, and the text of ``sdnmpi routes``
and ``sdnmpi controller status`` against a fake controller socket (no OVS)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdnmpi import catalog
from sdnmpi.core import topospecs
from sdnmpi.core.generators import fat_tree, leaf_spine, xgft
from sdnmpi.errors import TopologyError
from tests.cliutil import run_cli as run


# -- topology generator specs ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "same_as"),
    [
        ("fat-tree:k=4", fat_tree(4)),
        ("fat_tree:k=4,hosts_per_edge=1", fat_tree(4, hosts_per_edge=1)),
        ("leaf-spine:leaves=4,spines=2,hosts=8", leaf_spine(2, 4, 8)),
        ("leaf-spine:leaves=2,spines=2,hosts=2,uplinks=2,lag=1",
         leaf_spine(2, 2, 2, uplinks_per_pair=2, lag=True)),
        ("leaf-spine:leaves=2,spines=1,hosts=2,uplink_gbps=10",
         leaf_spine(1, 2, 2, uplink_bps=10e9)),
        ("xgft:m=4x4,w=1x2", xgft(2, [4, 4], [1, 2])),
    ],
)  # fmt: skip
def test_generator_specs_build_the_generators_topology(spec: str, same_as: Any) -> None:
    topo = catalog.load_topology(spec)
    assert (topo.name, topo.hosts, topo.switches, topo.links) == (
        same_as.name,
        same_as.hosts,
        same_as.switches,
        same_as.links,
    )
    meta = dict(topo.meta)
    assert meta.pop("spec").split(":")[0] in topospecs.GENERATORS  # where it came from
    assert meta == same_as.meta


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("foo:k=1", "unknown topology generator 'foo'"),
        ("fat-tree:q=1", "unknown parameter(s) q; known: k,"),
        ("fat-tree", "parameter k is required"),
        ("fat-tree:k=3", "even number"),
        ("leaf-spine:leaves=x,spines=2,hosts=1", "leaves='x' is not int"),
        ("leaf-spine:leaves=2,spines=2", "parameter hosts is required"),
        ("leaf-spine:leaves=2,spines=2,hosts=2,lag=maybe", "lag='maybe' is not 0 or 1"),
        ("xgft:m=4.4,w=1x2", "is not integers joined by x"),
        ("fat-tree:k=4,k=6", "'k' given twice"),
        ("no-such-thing", "neither a topology preset"),
    ],
)
def test_bad_generator_specs_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], spec: str, why: str
) -> None:
    code, out, err = run(capsys, "topology", "show", spec)
    assert code == 2 and not out
    assert why in err and len(err.strip().splitlines()) == 1, err


def test_a_generator_spec_where_a_topology_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "topology", "show", "fat-tree:k=4", "--json")
    assert code == 0
    assert json.loads(out)["counts"] == {"hosts": 16, "switches": 20, "links": 48, "cores": 16}


# -- --json on listing commands ------------------------------------------------------------
def test_topology_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "topology", "list", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "sdnmpi.topology-list/1"
    milk = next(p for p in doc["presets"] if p["name"] == "milk")
    assert (milk["hosts"], milk["switches"], milk["links"]) == (20, 6, 28)
    assert [g["name"] for g in doc["generators"]] == ["leaf-spine", "fat-tree", "xgft"]
    code, out, _ = run(capsys, "topology", "list")
    assert code == 0 and "fat-tree" in out and "allreduce28" in out


def test_pattern_list_and_routers_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "pattern", "list", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "sdnmpi.pattern-specs/1"
    assert {"allreduce", "bcast"} <= {s["name"] for s in doc["specs"]}
    code, out, _ = run(capsys, "routers", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "sdnmpi.routers/1"
    dmodk = next(r for r in doc["routers"] if r["name"] == "dmodk")
    assert dmodk["description"] and dmodk["source"]


# -- sdnmpi routes / controller status against a fake controller -----------------------------
HOP = {"switch": "leaf1", "dpid": 1, "in_port": 1, "out_port": 4, "priority": 300,
       "cookie": "0x5d0400000000002a", "kind": "job", "job": 42, "rule": "r"}  # fmt: skip
REPLIES: dict[str, dict[str, Any]] = {
    "route_trace": {"ok": True, "src": "h1", "dst": "h3", "src_mac": "m1", "eth_dst": "m3",
                    "source": "switch", "agrees": True,
                    "trace": {"hops": [HOP], "end": "delivered", "reached": "h3"}},
    "route_table": {"ok": True, "switch": "leaf1", "dpid": 1, "intended": ["a", "b"],
                    "held": ["a"], "clean": False,
                    "diff": {"same": 1, "missing": ["b"], "extra": [], "differing": [],
                             "foreign": []}},
    "status": {"ok": True, "synced": True, "uptime_s": 12.5, "last_sync_ago_s": 3.0,
               "switches": 4, "links": 4, "hosts": 4, "hosts_seen": 2, "routable_hosts": 4,
               "router": "dmodk", "job_rules": "exact", "jobs": {"42": 2},
               "tagged_jobs": {}, "measuring": [],
               "rules": {"leaf1": {"dpid": 1, "rules": 10, "by_kind": {"base": 5, "job": 1}}}},
}  # fmt: skip


@pytest.fixture
def fake_api(tmp_path: Path) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    """A Unix socket answering inspection requests with canned replies; the requests."""
    path = tmp_path / "api.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    seen: list[dict[str, Any]] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn, conn.makefile("rwb") as stream:
                for line in stream:
                    req = json.loads(line)
                    seen.append(req)
                    reply = REPLIES.get(req["op"], {"ok": False, "error": "no such thing"})
                    if req.get("src") == "h9":
                        reply = {"ok": False, "error": "no host 'h9' known"}
                    stream.write(json.dumps(reply).encode() + b"\n")
                    stream.flush()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path, seen
    server.close()


def test_routes_path_asks_and_prints(capsys: pytest.CaptureFixture[str], fake_api: Any) -> None:
    path, seen = fake_api
    code, out, _ = run(capsys, "routes", "path", "h1", "h3", "-a", str(path))
    assert code == 0
    assert seen[-1] == {"op": "route_trace", "src": "h1", "dst": "h3", "source": "switch"}
    assert "leaf1" in out and "job 42" in out and "-> delivered to h3 after 1 switch" in out
    code, out, _ = run(capsys, "routes", "path", "0", "1", "--job", "7", "-p", "bcast",
                       "--intended", "--json", "-a", str(path))  # fmt: skip
    assert code == 0 and json.loads(out)["schema"] == "sdnmpi.route-trace/1"
    assert seen[-1] == {"op": "route_trace", "src": 0, "dst": 1, "job": "7",
                        "primitive": "bcast", "source": "intended"}  # fmt: skip


def test_routes_errors_exit_2(capsys: pytest.CaptureFixture[str], fake_api: Any,
                              tmp_path: Path) -> None:  # fmt: skip
    path, _ = fake_api
    code, _, err = run(capsys, "routes", "path", "h9", "h3", "-a", str(path))
    assert code == 2 and "no host 'h9' known" in err and len(err.splitlines()) == 1
    code, _, err = run(capsys, "routes", "path", "h1", "h3", "-p", "bcast", "-a", str(path))
    assert code == 2 and "--primitive needs --job" in err
    code, _, err = run(capsys, "routes", "table", "leaf1", "-a", str(tmp_path / "none.sock"))
    assert code == 2 and "controller API" in err and len(err.splitlines()) == 1


def test_routes_table_check_exits_3_on_a_difference(
    capsys: pytest.CaptureFixture[str], fake_api: Any
) -> None:
    path, _ = fake_api
    code, out, _ = run(capsys, "routes", "table", "leaf1", "-a", str(path))
    assert code == 0 and "missing on the switch (1):\n  b" in out
    code, out, _ = run(capsys, "routes", "table", "leaf1", "--check", "--json", "-a", str(path))
    assert code == 3 and json.loads(out)["diff"]["missing"] == ["b"]


def test_controller_status_text_and_json(capsys: pytest.CaptureFixture[str], fake_api: Any) -> None:
    path, _ = fake_api
    code, out, _ = run(capsys, "controller", "status", "-a", str(path))
    assert code == 0
    assert "up 12.5 s; synced, last sync 3.0 s ago" in out
    assert "4 switches, 4 links, 4 hosts" in out and "42 (2 pairs)" in out
    assert "leaf1" in out and "base 5, job 1" in out
    code, out, _ = run(capsys, "controller", "status", "--json", "-a", str(path))
    assert code == 0 and json.loads(out)["rules"]["leaf1"]["rules"] == 10


@pytest.mark.parametrize(
    ("short", "long"),
    [
        ("fat_tree:4", "fat-tree:k=4"),
        ("leaf-spine:4,2,8", "leaf-spine:leaves=4,spines=2,hosts=8"),
        ("leaf-spine:4,2,hosts=8", "leaf-spine:leaves=4,spines=2,hosts=8"),
    ],
)
def test_values_in_order_without_names(short: str, long: str) -> None:
    a, b = catalog.load_topology(short), catalog.load_topology(long)
    assert (a.hosts, a.switches, a.links) == (b.hosts, b.switches, b.links)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("leaf-spine:leaves=4,2", "values without names come first"),
        ("fat-tree:4,2,1,1,1,1", "takes 5 values"),
        ("fat-tree:3", "even number"),
    ],
)
def test_bad_values_in_order(spec: str, why: str) -> None:
    with pytest.raises(TopologyError, match=why):
        catalog.load_topology(spec)


def test_ranks_of_a_manager_job_are_traced_as_their_hosts(
    capsys: pytest.CaptureFixture[str], fake_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sdnmpi.cli import routes

    path, seen = fake_api
    monkeypatch.setattr(routes, "job_nodes", lambda manager, job: {0: "h1", 1: "h3"})
    code, out, _ = run(capsys, "routes", "path", "0", "1", "--job", "5", "-m", "x.sock",
                       "--json", "-a", str(path))  # fmt: skip
    assert code == 0
    assert seen[-1] == {"op": "route_trace", "src": "h1", "dst": "h3", "source": "switch"}
    reply = json.loads(out)
    assert (reply["job"], reply["src_rank"], reply["dst_rank"]) == ("5", 0, 1)
    assert reply["rank_table"] == "manager"
    code, _, err = run(capsys, "routes", "path", "0", "7", "--job", "5", "-m", "x.sock",
                       "-a", str(path))  # fmt: skip
    assert code == 2 and "no rank 7 registered" in err
    code, _, err = run(capsys, "routes", "path", "0", "1", "-m", "x.sock", "-a", str(path))
    assert code == 2 and "--manager needs --job" in err
