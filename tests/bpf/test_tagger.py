"""The tagger program on crafted frames (BPF_PROG_TEST_RUN through the loader).

Needs root to load BPF programs; skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.node.bpf import ConnContext, Counters, FourTuple, Tagger
from sdnmpi.node.libbpf import BpfError, ProgramRejectedError
from sdnmpi.wire import MAX_JOB_SLOT, MAX_RANK, Primitive, Tag, decode
from tests.bpf import frames
from tests.bpf.conftest import REPO

TC_ACT_UNSPEC = 0xFFFFFFFF  # -1 as the run's u32 retval: the next filter, or pass
A, B = "10.9.0.1", "10.9.0.2"
CONN = FourTuple(A, B, 41000, 5001)
CTX = ConnContext(job_slot=9, src_rank=1, dst_rank=2, ctx_slot=4)


def registered(tagger: Tagger, primitive: int | None = Primitive.ALLREDUCE) -> None:
    tagger.create_context(CTX.ctx_slot)
    tagger.add_connection(CONN, CTX)
    if primitive is not None:
        ctx = tagger.context(CTX.ctx_slot)
        ctx.set_primitive(primitive)
        ctx.close()


def run_unchanged(tagger: Tagger, frame: bytes) -> None:
    result = tagger.test_run(frame)
    assert result.retval == TC_ACT_UNSPEC
    assert result.frame == frame


def only(**counts: int) -> Counters:
    """Counters after len(counts) packets: seen plus the named outcomes."""
    return Counters(seen=sum(counts.values()), **counts)


@pytest.mark.parametrize(
    "primitive", [Primitive.P2P, Primitive.BCAST, Primitive.ALLREDUCE, Primitive.OTHER, 20]
)
def test_listed_connection_is_tagged(tagger: Tagger, primitive: int) -> None:
    registered(tagger, primitive)
    frame = frames.tcp_frame(A, B, 41000, 5001)
    result = tagger.test_run(frame)
    assert result.retval == TC_ACT_UNSPEC
    assert decode(result.frame[:6]) == Tag(9, int(primitive), 1, 2)
    assert result.frame[6:] == frame[6:]
    assert tagger.counters() == only(tagged=1)


def test_ipv4_options_are_skipped_by_ihl(tagger: Tagger) -> None:
    registered(tagger)
    segment = frames.tcp(41000, 5001, b"z" * 8)
    frame = frames.eth(frames.ETH_IP, frames.ipv4(A, B, frames.TCP, segment, options=b"\x01" * 8))
    result = tagger.test_run(frame)
    assert result.frame[:6] == Tag(9, Primitive.ALLREDUCE, 1, 2).encode()
    assert result.frame[6:] == frame[6:]


def test_ports_are_read_after_the_options_not_at_offset_20(tagger: Tagger) -> None:
    registered(tagger)
    # options hold the listed ports; the real TCP header (after IHL*4) does not
    decoy = (41000).to_bytes(2, "big") + (5001).to_bytes(2, "big")
    segment = frames.tcp(41001, 5001)
    frame = frames.eth(frames.ETH_IP, frames.ipv4(A, B, frames.TCP, segment, options=decoy))
    run_unchanged(tagger, frame)
    assert tagger.counters() == only(not_mpi=1)


@pytest.mark.parametrize(
    "frame",
    [
        frames.tcp_frame(B, A, 5001, 41000),  # the reverse direction
        frames.tcp_frame(A, B, 41000, 5002),
        frames.tcp_frame(A, "10.9.0.3", 41000, 5001),
    ],
    ids=["reverse", "other-port", "other-host"],
)
def test_unlisted_tuples_pass_unchanged(tagger: Tagger, frame: bytes) -> None:
    registered(tagger)
    run_unchanged(tagger, frame)
    assert tagger.counters() == only(not_mpi=1)


TCP_SEGMENT = frames.tcp(41000, 5001)
UNPARSABLE = {
    "udp": frames.eth(frames.ETH_IP, frames.ipv4(A, B, frames.UDP, frames.udp(41000, 5001))),
    "arp": frames.arp_request(A, B),
    "ipv6": frames.ipv6_tcp(41000, 5001),
    # BPF_PROG_TEST_RUN itself refuses IPv4 frames shorter than Ethernet + 20 bytes
    # (EINVAL on kernel 6.18), so the shortest truncations tested are these:
    "eth-only": frames.eth(0x88B5, b""),
    "ip-header-only": frames.tcp_frame(A, B, 41000, 5001)[: 14 + 20],
    "truncated-tcp": frames.tcp_frame(A, B, 41000, 5001)[: 14 + 20 + 19],
    "options-cut": frames.eth(
        frames.ETH_IP, frames.ipv4(A, B, frames.TCP, TCP_SEGMENT, options=b"\x01" * 40)
    )[: 14 + 60 + 10],
    "ihl-4": frames.eth(frames.ETH_IP, frames.ipv4(A, B, frames.TCP, TCP_SEGMENT, ihl=4)),
    "more-fragments": frames.eth(
        frames.ETH_IP, frames.ipv4(A, B, frames.TCP, TCP_SEGMENT, frag_off=0x2000)
    ),
    "fragment-offset": frames.eth(
        frames.ETH_IP, frames.ipv4(A, B, frames.TCP, TCP_SEGMENT, frag_off=0x0010)
    ),
}


@pytest.mark.parametrize("frame", UNPARSABLE.values(), ids=UNPARSABLE.keys())
def test_unparsable_frames_pass_unchanged(tagger: Tagger, frame: bytes) -> None:
    registered(tagger)
    run_unchanged(tagger, frame)
    assert tagger.counters() == only(unparsable=1)


def test_dont_fragment_flag_is_not_a_fragment(tagger: Tagger) -> None:
    registered(tagger)
    frame = frames.eth(frames.ETH_IP, frames.ipv4(A, B, frames.TCP, TCP_SEGMENT, frag_off=0x4000))
    assert tagger.test_run(frame).frame[:6] == Tag(9, Primitive.ALLREDUCE, 1, 2).encode()


def test_idle_rank_passes_unchanged(tagger: Tagger) -> None:
    registered(tagger, primitive=None)  # context map exists, primitive 0
    run_unchanged(tagger, frames.tcp_frame(A, B, 41000, 5001))
    ctx = tagger.context(CTX.ctx_slot)
    ctx.set_primitive(Primitive.BCAST)
    ctx.set_primitive(0)  # left the call again
    assert ctx.seq == 2
    ctx.close()
    run_unchanged(tagger, frames.tcp_frame(A, B, 41000, 5001))
    assert tagger.counters() == only(idle=2)


def test_primitive_changes_without_syscalls_are_seen(tagger: Tagger) -> None:
    registered(tagger, primitive=None)
    ctx = tagger.context(CTX.ctx_slot)
    frame = frames.tcp_frame(A, B, 41000, 5001)
    seen = []
    for code in (Primitive.BCAST, Primitive.REDUCE, Primitive.P2P):
        ctx.set_primitive(code)
        seen.append(decode(tagger.test_run(frame).frame[:6]).primitive)
    ctx.close()
    assert seen == [3, 4, 1]


def test_missing_context_passes_unchanged(tagger: Tagger) -> None:
    tagger.add_connection(CONN, CTX)  # no context map at slot 4
    run_unchanged(tagger, frames.tcp_frame(A, B, 41000, 5001))
    assert tagger.counters() == only(no_context=1)


def test_out_of_range_primitive_passes_unchanged(tagger: Tagger) -> None:
    registered(tagger, primitive=32)
    run_unchanged(tagger, frames.tcp_frame(A, B, 41000, 5001))
    assert tagger.counters() == only(invalid=1)


def test_remove_connection_and_context(tagger: Tagger) -> None:
    registered(tagger)
    frame = frames.tcp_frame(A, B, 41000, 5001)
    assert tagger.connection(CONN) == CTX
    assert tagger.remove_connection(CONN) is True
    assert tagger.remove_connection(CONN) is False
    assert tagger.connection(CONN) is None
    run_unchanged(tagger, frame)
    tagger.add_connection(CONN, CTX)
    tagger.remove_context(CTX.ctx_slot)
    run_unchanged(tagger, frame)
    assert tagger.counters() == only(not_mpi=1, no_context=1)
    tagger.create_context(CTX.ctx_slot)  # the slot can be reused
    with pytest.raises(BpfError, match="not created"):
        tagger.remove_context(7)


def test_contexts_are_separate_per_slot(tagger: Tagger) -> None:
    registered(tagger, Primitive.BCAST)
    other = FourTuple(A, B, 41001, 5001)
    tagger.create_context(5)
    tagger.add_connection(other, ConnContext(9, 3, 2, ctx_slot=5))
    ctx5 = tagger.context(5)
    ctx5.set_primitive(Primitive.ALLTOALL)
    ctx5.close()
    tag_a = decode(tagger.test_run(frames.tcp_frame(A, B, 41000, 5001)).frame[:6])
    tag_b = decode(tagger.test_run(frames.tcp_frame(A, B, 41001, 5001)).frame[:6])
    assert (tag_a.primitive, tag_a.src_rank) == (Primitive.BCAST, 1)
    assert (tag_b.primitive, tag_b.src_rank) == (Primitive.ALLTOALL, 3)


@pytest.mark.root
def test_disabled_setting_tags_nothing(bpf_build: Path) -> None:
    with Tagger(bpf_build / "tagger.bpf.o", enabled=False) as tagger:
        registered(tagger)
        run_unchanged(tagger, frames.tcp_frame(A, B, 41000, 5001))
        assert tagger.counters() == only(disabled=1)


def test_counters_add_up(tagger: Tagger) -> None:
    registered(tagger)
    batch = [frames.tcp_frame(A, B, 41000, 5001)] * 3 + list(UNPARSABLE.values())
    batch.append(frames.tcp_frame(B, A, 5001, 41000))
    for frame in batch:
        tagger.test_run(frame)
    counts = tagger.counters()
    assert counts == only(tagged=3, unparsable=len(UNPARSABLE), not_mpi=1)


def test_repeated_runs_count_every_run(tagger: Tagger) -> None:
    registered(tagger)
    result = tagger.test_run(frames.tcp_frame(A, B, 41000, 5001), repeat=1000)
    assert result.frame[:6] == Tag(9, Primitive.ALLREDUCE, 1, 2).encode()
    assert result.duration_ns > 0
    assert tagger.counters() == only(tagged=1000)
    with pytest.raises(BpfError, match="repeat=0"):
        tagger.test_run(frames.tcp_frame(A, B, 41000, 5001), repeat=0)


def test_bad_inputs_are_clear_errors(tagger: Tagger) -> None:
    with pytest.raises(BpfError, match="does not exist"):
        tagger.attach("sdnmpi-no-such0")
    with pytest.raises(BpfError, match="ctx_slot=1024"):
        tagger.create_context(1024)
    tagger.create_context(1)
    with pytest.raises(BpfError, match="already in use"):
        tagger.create_context(1)
    with pytest.raises(BpfError, match="not an IPv4 address"):
        FourTuple("10.0.0.300", B, 1, 2)
    with pytest.raises(BpfError, match="not a TCP port"):
        FourTuple(A, B, 70000, 2)
    with pytest.raises(BpfError, match="job_slot=0"):
        ConnContext(0, 1, 2, 3)
    with pytest.raises(BpfError, match="src_rank=4096"):
        ConnContext(1, 4096, 2, 3)
    with pytest.raises(BpfError, match="Ethernet header"):
        tagger.test_run(b"\x00" * 10)


def test_missing_object_file(tmp_path: Path) -> None:
    with pytest.raises(BpfError, match="not found"):
        Tagger(tmp_path / "nope.bpf.o")


@pytest.mark.root
def test_close_twice_is_harmless(bpf_build: Path) -> None:
    tagger = Tagger(bpf_build / "tagger.bpf.o")
    tagger.create_context(0)
    tagger.close()
    tagger.close()


@pytest.mark.root
@pytest.mark.toolchain
def test_rejected_program_reports_the_verifier_log(tmp_path: Path) -> None:
    if shutil.which("clang") is None:
        pytest.fail("clang not found")
    obj = tmp_path / "rejected.bpf.o"
    arch = subprocess.run(["cc", "-dumpmachine"], capture_output=True, text=True, check=True)
    subprocess.run(
        [
            "clang",
            "-O2",
            "-g",
            "-target",
            "bpf",
            f"-I/usr/include/{arch.stdout.strip()}",
            f"-I{REPO / 'csrc' / 'include'}",
            "-c",
            str(REPO / "csrc" / "bpf" / "tests" / "rejected.bpf.c"),
            "-o",
            str(obj),
        ],
        check=True,
        timeout=60,
    )
    with pytest.raises(ProgramRejectedError) as err:
        Tagger(obj)
    assert "invalid access to packet" in err.value.verifier_log
    assert "verifier log" in str(err.value)
    assert os.path.exists(obj)


@pytest.fixture(scope="module")
def shared_tagger(bpf_build: Path) -> Iterator[Tagger]:
    with Tagger(bpf_build / "tagger.bpf.o") as loaded:
        loaded.create_context(0)
        yield loaded


@settings(max_examples=300, deadline=None)
@given(
    job_slot=st.integers(1, MAX_JOB_SLOT),
    primitive=st.integers(1, 31),
    src_rank=st.integers(0, MAX_RANK),
    dst_rank=st.integers(0, MAX_RANK),
)
def test_program_encodes_like_the_python_codec(
    shared_tagger: Tagger, job_slot: int, primitive: int, src_rank: int, dst_rank: int
) -> None:
    shared_tagger.add_connection(CONN, ConnContext(job_slot, src_rank, dst_rank, ctx_slot=0))
    ctx = shared_tagger.context(0)
    ctx.set_primitive(primitive)
    ctx.close()
    frame = frames.tcp_frame(A, B, 41000, 5001)
    out = shared_tagger.test_run(frame).frame
    assert out[:6] == Tag(job_slot, primitive, src_rank, dst_rank).encode()
    assert out[6:] == frame[6:]
