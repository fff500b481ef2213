"""libsdnmpi.so under LD_PRELOAD with real MPICH and Open MPI on localhost.

tests/pmpi/mpiprog.c makes known point-to-point and collective calls on 4 ranks
(including a split communicator and a nonblocking collective).  The traces must
hold exactly those events with their byte counts; the pfprof files load with
sdnmpi.formats.pfprof, the sdnmpi traces with sdnmpi.formats.sdnmpitrace, and the
expanded pattern's bytes equal what the collectives' schedules say.  The program's
output and exit status must be unchanged by the library.  MPICH runs with
``UCX_TLS=sm,self`` (see tests/mpibench), Open MPI with ``--mca btl self,vader``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from sdnmpi.core.collectives import expand
from sdnmpi.formats.pfprof import load_pfprof
from sdnmpi.formats.sdnmpitrace import load_sdnmpi_trace

REPO = Path(__file__).resolve().parents[2]
FLAVOURS = ("mpich", "openmpi")
NP = 4
RUN_TIMEOUT_S = 90

pytestmark = [pytest.mark.toolchain, pytest.mark.integration]


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libsdnmpi.so and mpiprog for both flavours, in a temporary build directory."""
    missing = [w for w in ("mpicc.mpich", "mpicc.openmpi") if shutil.which(w) is None]
    if missing:
        pytest.fail(f"MPI compiler wrappers not found: {missing}")
    build = tmp_path_factory.mktemp("pmpi-build")
    proc = subprocess.run(
        ["make", "-C", str(REPO / "csrc" / "pmpi"), f"BUILD={build}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for flavour in FLAVOURS:
        cc = subprocess.run(
            [
                f"mpicc.{flavour}",
                "-O1",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-o",
                str(build / flavour / "mpiprog"),
                str(Path(__file__).with_name("mpiprog.c")),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert cc.returncode == 0, cc.stderr
    return build


def run(
    build: Path, flavour: str, *, preload: bool, env: dict[str, str], status: int = 0
) -> subprocess.CompletedProcess[str]:
    lib = str(build / flavour / "libsdnmpi.so")
    prog = [str(build / flavour / "mpiprog"), str(status)]
    full = dict(os.environ)
    full.update(env)
    if flavour == "mpich":
        full["UCX_TLS"] = "sm,self"
        cmd = ["mpiexec.mpich", "-n", str(NP)]
        cmd += ["-genv", "LD_PRELOAD", lib] if preload else []
    else:
        full.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe"]
        cmd += ["--mca", "btl", "self,vader", "-n", str(NP)]
        cmd += ["-x", f"LD_PRELOAD={lib}"] if preload else []
        cmd += [arg for k in env for arg in ("-x", k)]
    return subprocess.run(
        cmd + prog, capture_output=True, text=True, env=full, timeout=RUN_TIMEOUT_S, check=False
    )


def expected_events(rank: int) -> list[tuple[Any, ...]]:
    """(call, comm, peer or root, bytes, extra) of every event rank ``rank`` records."""
    left, right, partner = (rank + NP - 1) % NP, (rank + 1) % NP, rank ^ 1
    sub_root = 2 if rank % 2 == 0 else 3
    first = {0: [("MPI_Send", 0, 1, 400, None)], 1: [("MPI_Recv", 0, 0, 400, None)]}
    # MPI_Irecv events carry the actual source and size once a wrapped completion
    # call (MPI_Test polling, MPI_Waitany with MPI_STATUS_IGNORE) completed them
    done = (None, None, None, None)
    posted = {
        0: [("MPI_Isend", 0, 2, 7, None), ("MPI_Wait", *done)],
        1: [],
        2: [("MPI_Irecv", 0, 0, 7, None), ("MPI_Test", *done), ("MPI_Send", 0, 3, 20, None)],
        3: [("MPI_Irecv", 0, 2, 20, None), ("MPI_Waitany", *done)],
    }
    return [
        *first.get(rank, []),
        ("MPI_Irecv", 0, left, 80, None),
        ("MPI_Isend", 0, right, 80, None),
        ("MPI_Waitall", *done),
        ("MPI_Sendrecv", 0, partner, 3, (partner, 3)),
        *posted[rank],
        ("MPI_Bcast", 0, 1, 1000, (1000, 1)),
        ("MPI_Allreduce", 0, None, 2048, (256, 8)),
        ("MPI_Iallreduce", 0, None, 32, (8, 4)),
        ("MPI_Wait", *done),
        ("MPI_Alltoall", 0, None, 16, (4, 4)),
        ("MPI_Alltoallv", 0, None, 40, (1, 2, 3, 4)),
        ("MPI_Gather", 0, 0, 8, (2, 4)),
        ("MPI_Scan", 0, None, 4, (1, 4)),
        ("MPI_Barrier", 0, None, 0, None),
        ("MPI_Comm_split", 0, None, None, 2),
        ("MPI_Allreduce", 2, None, 64, (16, 4)),
        ("MPI_Bcast", 2, sub_root, 64, (64, 1)),
        ("MPI_Comm_free", 2, None, None, None),
    ]


def observed(event: dict[str, Any]) -> tuple[Any, ...]:
    kind = event["kind"]
    peer = event.get("root", event.get("peer"))
    extra: Any = None
    if kind == "sendrecv":
        extra = (event["recv_peer"], event["recv_bytes"])
    elif kind == "collv":
        extra = tuple(event["counts"])
    elif kind == "coll" and "count" in event:
        extra = (event["count"], event["type_bytes"])
    elif kind == "comm_new":
        extra = event["new_comm"]
    return (event["call"], event.get("comm"), peer, event.get("bytes"), extra)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module", params=FLAVOURS)
def traced(request, built, tmp_path_factory):
    """One traced run (exit status 3) and one plain run of mpiprog per flavour."""
    flavour = request.param
    out = tmp_path_factory.mktemp(f"trace-{flavour}")
    env = {"SDNMPI_TRACE_DIR": str(out), "SDNMPI_JOB": f"test-{flavour}"}
    with_lib = run(built, flavour, preload=True, env=env, status=3)
    plain = run(built, flavour, preload=False, env={}, status=3)
    return flavour, out, with_lib, plain


def test_output_and_exit_status_unchanged(traced):
    _, _, with_lib, plain = traced
    assert plain.returncode == 3, plain.stdout + plain.stderr
    assert with_lib.returncode == plain.returncode, with_lib.stdout + with_lib.stderr
    lines = sorted(with_lib.stdout.splitlines())
    assert lines == sorted(plain.stdout.splitlines())
    assert len([ln for ln in lines if ln.startswith("mpiprog: rank ")]) == NP
    assert "sdnmpi:" not in with_lib.stderr


def test_traces_hold_exactly_the_calls(traced):
    flavour, out, _, _ = traced
    for rank in range(NP):
        lines = read_jsonl(out / f"sdnmpi-trace-{rank}.jsonl")
        head, events = lines[0], lines[1:]
        assert head["schema"] == "sdnmpi-trace/1"
        assert (head["rank"], head["nprocs"], head["pid"] > 0) == (rank, NP, True)
        assert head["job"] == f"test-{flavour}"
        assert head["mpi_library"].startswith("MPICH" if flavour == "mpich" else "Open MPI")
        sub = [0, 2] if rank % 2 == 0 else [1, 3]
        comms = [[0, 1, 2, 3], [rank], sub]
        assert [c["ranks"] for c in head["communicators"]] == comms
        assert head["n_events"] == len(events)
        assert [observed(e) for e in events] == expected_events(rank)
        for e in events:
            assert 0 <= e["t_start"] <= e["t_end"]
        starts = [e["t_start"] for e in events]
        assert starts == sorted(starts)


def test_pfprof_files(traced):
    _, out, _, _ = traced
    tx = load_pfprof(out)
    expected = [[0] * NP for _ in range(NP)]
    expected[0][1] += 400
    for r in range(NP):
        expected[r][(r + 1) % NP] += 80
        expected[r][r ^ 1] += 3
    expected[0][2] += 7
    expected[2][3] += 20
    assert tx.dense().tolist() == expected
    # the receive side sees the same messages (ANY_SOURCE and the actual sizes of
    # MPI_Recv and of completed MPI_Irecv resolved from the statuses)
    assert load_pfprof(out, side="rx").dense().tolist() == expected
    assert tx.meta["tx_message_sizes"][0] == [[3, 1], [7, 1], [80, 1], [400, 1]]
    assert tx.meta["rx_message_sizes"][3] == [[3, 1], [20, 1], [80, 1]]
    assert "not visible" in tx.meta["description"]


def test_reader_expands_collectives(traced):
    flavour, out, _, _ = traced
    p = load_sdnmpi_trace(out)
    assert p.nprocs == NP
    assert p.meta["library"] == flavour
    assert p.meta["p2p_bytes"] == 400 + NP * 80 + NP * 3 + 7 + 20

    def sched(coll: str, n: int, count: int, root: int = 0, tb: int = 1) -> int:
        return expand(coll, n, count, root=root, type_bytes=tb, library=flavour).total_bytes

    collectives = (
        sched("bcast", NP, 1000, root=1)
        + sched("allreduce", NP, 256, tb=8)
        + sched("allreduce", NP, 8, tb=4)
        + sched("alltoall", NP, 4, tb=4)
        + sched("gather", NP, 2, root=0, tb=4)
        + sched("barrier", NP, 0)
        + 2 * sched("allreduce", 2, 16, tb=4)
        + 2 * sched("bcast", 2, 64, root=1)
    )
    alltoallv = sum((10 - (r + 1)) * 4 for r in range(NP))  # direct approximation
    scan = 2 * NP * 4  # recursive doubling, 2 rounds of NP messages of 4 bytes
    assert p.meta["collective_bytes"] == collectives + alltoallv + scan
    assert p.total_bytes == p.meta["p2p_bytes"] + collectives + alltoallv + scan
    assert p.meta["approximated"] == {"MPI_Alltoallv": NP, "MPI_Scan": 1}
    assert p.meta["not_expanded"] == {}
    assert p.meta["expanded"]["MPI_Allreduce"] == 3  # world + the two sub-communicators


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_unwritable_trace_dir_and_bad_mode(built, flavour, tmp_path):
    env = {"SDNMPI_TRACE_DIR": "/proc/sdnmpi-unwritable", "SDNMPI_MODE": "profile"}
    proc = run(built, flavour, preload=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("sdnmpi:")]
    assert len(ours) == 1, proc.stderr
    assert "cannot write traces to /proc/sdnmpi-unwritable" in ours[0]
    assert len(proc.stdout.splitlines()) == NP
    env = {"SDNMPI_TRACE_DIR": str(tmp_path), "SDNMPI_MODE": "profile,bogus"}
    proc = run(built, flavour, preload=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("sdnmpi:")]
    assert ours == [
        "sdnmpi: unknown mode 'bogus' in SDNMPI_MODE ignored "
        "(valid: profile, register, push, tag, bcast)"
    ]
    assert len(list(tmp_path.glob("sdnmpi-trace-*.jsonl"))) == NP


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_exit_without_finalize_still_writes(built, flavour, tmp_path):
    """A singleton (no launcher) that exits without MPI_Finalize: the atexit writer."""
    env = dict(os.environ, SDNMPI_TRACE_DIR=str(tmp_path), UCX_TLS="sm,self")
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env["LD_PRELOAD"] = str(built / flavour / "libsdnmpi.so")
    proc = subprocess.run(
        [str(built / flavour / "mpiprog"), "0", "nofinalize"],
        capture_output=True,
        text=True,
        env=env,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "mpiprog: rank 0 exits without MPI_Finalize\n"
    lines = read_jsonl(tmp_path / "sdnmpi-trace-0.jsonl")
    assert lines[0]["nprocs"] == 1
    assert [(e["call"], e["kind"]) for e in lines[1:]] == [("MPI_Barrier", "coll")]
    assert load_pfprof(tmp_path).nprocs == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_tag_mode_without_an_agent_runs_untagged(built, flavour, tmp_path):
    """No agent listening: every rank says so once, the program's output and status stand."""
    env = {"SDNMPI_MODE": "tag,push", "SDNMPI_AGENT_SOCKET": str(tmp_path / "no-agent-%h.sock")}
    proc = run(built, flavour, preload=True, env=env, status=3)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("sdnmpi:")]
    assert len(ours) == NP, proc.stderr
    assert all("running untagged" in ln and "no-agent-" in ln for ln in ours)
    assert len(proc.stdout.splitlines()) == NP


class ScriptedAgent:
    """A node agent on a Unix socket that answers ``register`` with the job slot
    :attr:`slots` gives the rank (``None``: no slot) and records the ``ranks`` tables."""

    def __init__(self, path: Path, slots: dict[int, int | None]) -> None:
        self.slots: dict[int, int | None] = slots
        self.tables: list[list[Any]] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(16)
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                req = json.loads(line)
                reply: dict[str, Any] = {"ok": True}
                if req["op"] == "register":
                    reply |= {"ctx_slot": req["rank"], "job_slot": self.slots[req["rank"]]}
                    reply |= {"ip": "127.0.0.1", "listen_ports": []}
                elif req["op"] == "ranks":
                    with self.lock:
                        self.tables.append(req["table"])
                stream.write(json.dumps(reply).encode() + b"\n")
                stream.flush()

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("missing", [None, 2])
def test_a_job_tags_whole_or_not_at_all(built, flavour, tmp_path, missing):
    """Every rank registered with slot 5: every rank sends its table.  One rank without
    a slot (its join lost on the way to the controller): no rank does, and rank 0 names
    the rank in one line; the program's output and status stand either way."""
    slots: dict[int, int | None] = dict.fromkeys(range(NP), 5)
    if missing is not None:
        slots[missing] = None
    agent = ScriptedAgent(tmp_path / "agent.sock", slots)
    env = {"SDNMPI_MODE": "tag,push", "SDNMPI_AGENT_SOCKET": str(tmp_path / "agent.sock")}
    try:
        proc = run(built, flavour, preload=True, env=env, status=3)
    finally:
        agent.close()
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert len(proc.stdout.splitlines()) == NP
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("sdnmpi:")]
    if missing is None:
        assert ours == [], proc.stderr
        assert len(agent.tables) == NP
        assert all([row[0] for row in t] == list(range(NP)) for t in agent.tables)
    else:
        assert agent.tables == []
        assert len(ours) == 1, proc.stderr
        assert ours[0].startswith("sdnmpi: rank 0:")
        assert f"rank {missing} has no job slot" in ours[0] and "no rank tags" in ours[0]
