"""gen_wrappers.py (csrc/pmpi): spec parsing, error messages, one wrapper per entry."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
PMPI = REPO / "csrc" / "pmpi"
SPEC = PMPI / "mpi_calls.spec"
REQUIRED = [
    "Send",
    "Isend",
    "Ssend",
    "Bsend",
    "Rsend",
    "Issend",
    "Recv",
    "Irecv",
    "Sendrecv",
    "Sendrecv_replace",
    "Bcast",
    "Reduce",
    "Allreduce",
    "Alltoall",
    "Alltoallv",
    "Allgather",
    "Allgatherv",
    "Gather",
    "Gatherv",
    "Scatter",
    "Scatterv",
    "Reduce_scatter",
    "Reduce_scatter_block",
    "Scan",
    "Exscan",
    "Barrier",
    "Ibcast",
    "Ireduce",
    "Iallreduce",
    "Ialltoall",
    "Ialltoallv",
    "Iallgather",
    "Iallgatherv",
    "Igather",
    "Igatherv",
    "Iscatter",
    "Iscatterv",
    "Ireduce_scatter",
    "Ireduce_scatter_block",
    "Iscan",
    "Iexscan",
    "Ibarrier",
    "Comm_split",
    "Comm_dup",
    "Comm_create",
    "Comm_split_type",
    "Cart_create",
    "Comm_free",
    "Init",
    "Init_thread",
    "Finalize",
    "Wait",
    "Waitall",
    "Test",
]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_wrappers", PMPI / "gen_wrappers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_wrappers"] = module
    spec.loader.exec_module(module)
    return module


def test_spec_covers_the_required_calls_and_each_entry_gets_a_wrapper(gen):
    entries = gen.parse_spec(SPEC.read_text(), "mpi_calls.spec")
    names = [e.name for e in entries]
    assert sorted(set(names)) == sorted(names)
    assert {f"MPI_{n}" for n in REQUIRED} <= set(names)
    code = gen.generate(entries, "mpi_calls.spec")
    defined = re.findall(r"^SDN_EXPORT int (MPI_\w+)\(", code, re.M)
    assert defined == names
    waitall = code[code.index("int MPI_Waitall(") :].split("\n}\n")[0]
    assert "if (array_of_statuses == MPI_STATUSES_IGNORE) {" in waitall
    assert "sdn_status_scratch(count)" in waitall
    assert "c.requests = array_of_requests;\n    c.nreq = count;" in waitall
    for e in entries:
        assert f"rc = {e.via or 'P' + e.name}(" in code
        assert f"return P{e.name}(" in code  # the re-entry path: always the library's
    # bcast mode: MPI_Bcast goes through the core's sdn_bcast (csrc/pmpi/bcast.c)
    assert [e.name for e in entries if e.via] == ["MPI_Bcast"]
    assert "rc = sdn_bcast(buffer, count, datatype, root, comm);" in code


def test_wrapper_shape(gen):
    entries = gen.parse_spec(
        "MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, "
        "MPI_Comm comm, MPI_Status *status)\n"
        "    recv peer=source count=count type=datatype tag=tag comm=comm status=status\n"
        "MPI_Alltoallv(const void *sendbuf, const int sendcounts[], MPI_Comm comm)\n"
        "    collv alltoallv counts=sendcounts type=sendcounts comm=comm\n"
    )
    code = gen.wrapper(entries[0])
    assert "if (sdn_depth > 0)" in code
    assert "sdn_depth++;" in code and "sdn_depth--;" in code
    assert "if (status == MPI_STATUS_IGNORE)\n        status = &c.local_status;" in code
    assert code.index("sdn_enter(&c)") < code.index("rc = PMPI_Recv(") < code.index("sdn_leave")
    code = gen.wrapper(entries[1])
    assert "const int *sendcounts" in code
    assert 'sdn_call_init(&c, "MPI_Alltoallv", SDN_KIND_COLLV, "alltoallv");' in code


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("MPI_X(int a)\n    sned peer=a\n", "spec:2: unknown class 'sned'"),
        (
            "MPI_X(int a)\n    send peer=b count=a type=a tag=a comm=a\n",
            "spec:2: peer=b: MPI_X has no parameter 'b'",
        ),
        ("MPI_X(int a)\n    send peer=a\n", "spec:2: class send needs key(s)"),
        ("MPI_X(int a)\n    init\nMPI_X(int a)\n    init\n", "spec:3: MPI_X is listed twice"),
        ("MPI_X(int a)\nMPI_Y(void)\n    init\n", "spec:1: MPI_X has no class line"),
        ("    init\n", "spec:1: class line without a prototype"),
        ("MPI_X int a\n    init\n", "spec:1: expected a prototype"),
        ("MPI_X(int)\n    init\n", "spec:1: cannot parse parameter 'int'"),
        ("MPI_X(int a)\n    coll bogus comm=a\n", "spec:2: unknown coll collective 'bogus'"),
        ("MPI_X(int a)\n    completion flag=a flag=a\n", "spec:2: key 'flag' given twice"),
        ("MPI_X(int a)\n    init peer\n", "spec:2: expected key=arg"),
        ("MPI_X(int a)\n    init via=a-b\n", "spec:2: via needs one C function name"),
        ("MPI_X(int a)\n    init via=f via=g\n", "spec:2: via needs one C function name"),
        ("# nothing\n", "spec: no functions"),
    ],
)
def test_spec_errors_name_the_line(gen, text, message):
    with pytest.raises(gen.SpecError) as info:
        gen.parse_spec(text, "spec")
    assert message in str(info.value)


def test_command_line(tmp_path):
    bad = tmp_path / "bad.spec"
    bad.write_text("MPI_Send(int a)\n    send\n")
    out = tmp_path / "w.c"
    proc = subprocess.run(
        [sys.executable, str(PMPI / "gen_wrappers.py"), str(bad), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "gen_wrappers: bad.spec:2: class send needs key(s)" in proc.stderr
    assert not out.exists()
    proc = subprocess.run(
        [sys.executable, str(PMPI / "gen_wrappers.py"), str(SPEC), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("/* Generated by csrc/pmpi/gen_wrappers.py")
