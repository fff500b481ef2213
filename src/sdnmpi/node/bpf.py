"""Loader for the eBPF TC egress tagger (``csrc/bpf/tagger.bpf.c``).

:class:`Tagger` opens and loads the compiled object with its settings, attaches it
to an interface's clsact egress hook in the current network namespace, and gives the
node agent the map operations it needs: register or remove a TCP connection, create
a rank's mmapable context map and install it in ``ctx_slots``, read the counters.
``close()`` (or leaving the ``with`` block) detaches and destroys exactly what this
object created: its filter, the clsact qdisc only if it created it, its inner maps
and the object.  libbpf is reached through :mod:`sdnmpi.node.libbpf` (ctypes, no
bcc); the object is found by :func:`~sdnmpi.node.libbpf.object_path`.  The structs
below mirror ``csrc/bpf/tagger.h`` (checked by ``tests/bpf/test_abi.py``).
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import logging
import mmap
import os
import socket
import struct
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Final

from sdnmpi.node import libbpf
from sdnmpi.node.libbpf import BPF_ANY, VERIFIER_LOG_BYTES, BpfError
from sdnmpi.wire.tag import MAX_JOB_SLOT, MAX_RANK

log = logging.getLogger(__name__)

OBJECT_NAME: Final = "tagger.bpf.o"
PROGRAM_NAME: Final = "sdnmpi_tagger"
MAX_CTX_SLOTS: Final = 1024  # SDNMPI_TAGGER_MAX_CTX_SLOTS
DEFAULT_HANDLE: Final = 0x5D4D
DEFAULT_PRIORITY: Final = 1


# --- C structs (csrc/bpf/tagger.h, csrc/include/sdnmpi/rank_ctx.h) ---
class ConnKey(ctypes.Structure):
    _fields_: ClassVar = [
        ("saddr", ctypes.c_uint32),
        ("daddr", ctypes.c_uint32),
        ("sport", ctypes.c_uint16),
        ("dport", ctypes.c_uint16),
    ]


class ConnValue(ctypes.Structure):
    _fields_: ClassVar = [
        ("ctx_slot", ctypes.c_uint32),
        ("src_rank", ctypes.c_uint16),
        ("dst_rank", ctypes.c_uint16),
        ("job_slot", ctypes.c_uint8),
        ("pad", ctypes.c_uint8 * 3),
    ]


class RankCtx(ctypes.Structure):
    _fields_: ClassVar = [
        ("primitive", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("seq", ctypes.c_uint64),
    ]


class Settings(ctypes.Structure):
    _fields_: ClassVar = [("enabled", ctypes.c_uint32), ("reserved", ctypes.c_uint32)]


@dataclass(frozen=True)
class FourTuple:
    """A TCP connection as the sender's packets carry it."""

    saddr: str
    daddr: str
    sport: int
    dport: int

    def __post_init__(self) -> None:
        for name in ("saddr", "daddr"):
            try:
                ipaddress.IPv4Address(getattr(self, name))
            except ValueError as exc:
                raise BpfError(f"{name}={getattr(self, name)!r}: not an IPv4 address") from exc
        for name in ("sport", "dport"):
            port = getattr(self, name)
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 0xFFFF:
                raise BpfError(f"{name}={port!r}: not a TCP port (0..65535)")

    def key(self) -> ConnKey:
        """The conns map key, every field in network byte order."""
        raw = socket.inet_aton(self.saddr) + socket.inet_aton(self.daddr)
        raw += struct.pack("!HH", self.sport, self.dport)
        return ConnKey.from_buffer_copy(raw)


@dataclass(frozen=True)
class ConnContext:
    """What the tagger writes for a connection: job slot, ranks, the sender's ctx slot."""

    job_slot: int
    src_rank: int
    dst_rank: int
    ctx_slot: int

    def __post_init__(self) -> None:
        limits = {
            "job_slot": (1, MAX_JOB_SLOT),
            "src_rank": (0, MAX_RANK),
            "dst_rank": (0, MAX_RANK),
            "ctx_slot": (0, MAX_CTX_SLOTS - 1),
        }
        for name, (low, high) in limits.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise BpfError(f"{name}={value!r} is outside {low}..{high}")

    def value(self) -> ConnValue:
        return ConnValue(self.ctx_slot, self.src_rank, self.dst_rank, self.job_slot)


@dataclass(frozen=True)
class Counters:
    """Packet counters summed over CPUs, in the order of enum sdnmpi_tagger_counter."""

    seen: int = 0
    tagged: int = 0
    not_mpi: int = 0
    no_context: int = 0
    unparsable: int = 0
    idle: int = 0
    invalid: int = 0
    store_failed: int = 0
    disabled: int = 0

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class TestRun:
    """Result of running the program once on a frame (BPF_PROG_TEST_RUN)."""

    __test__: ClassVar[bool] = False  # not a pytest class
    retval: int
    frame: bytes
    duration_ns: int  # mean time per run, as the kernel measured it


class RankContext:
    """A rank's view of its context map: mmap of the inner map fd, no syscalls per write.

    This is what the PMPI library does in C (csrc/include/sdnmpi/rank_ctx.h); the
    agent and the tests use it to set a primitive.
    """

    def __init__(self, map_fd: int) -> None:
        self._mem = mmap.mmap(map_fd, mmap.PAGESIZE, mmap.MAP_SHARED)
        self._view = RankCtx.from_buffer(self._mem)

    @property
    def primitive(self) -> int:
        return int(self._view.primitive)

    @property
    def seq(self) -> int:
        return int(self._view.seq)

    def set_primitive(self, code: int) -> None:
        """Publish the current primitive (0: not inside an MPI call)."""
        self._view.primitive = code
        self._view.seq += 1

    def close(self) -> None:
        del self._view
        self._mem.close()


class Tagger:
    """The loaded tagger program and its maps; see the module docstring.

    >>> with Tagger(enabled=True) as tagger:  # doctest: +SKIP
    ...     tagger.attach("eth0")
    ...     fd = tagger.create_context(0)
    ...     tagger.add_connection(FourTuple("10.0.0.1", "10.0.0.2", 40000, 5000),
    ...                           ConnContext(job_slot=1, src_rank=0, dst_rank=1, ctx_slot=0))
    """

    def __init__(self, obj_path: Path | str | None = None, *, enabled: bool = True) -> None:
        self.path = Path(obj_path) if obj_path is not None else libbpf.object_path(OBJECT_NAME)
        if not self.path.is_file():
            raise BpfError(f"BPF object {self.path} not found (build it with `make bpf`)")
        libbpf.libbpf()
        self._log_buf = ctypes.create_string_buffer(VERIFIER_LOG_BYTES)
        self._obj: int | None = None
        self._contexts: dict[int, int] = {}
        self._attachment: libbpf.Attachment | None = None
        self._open(enabled)
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    # --- open / load ---
    def _open(self, enabled: bool) -> None:
        self._obj = libbpf.open_object(self.path, self._log_buf)
        settings = Settings(enabled=int(enabled))
        libbpf.set_rodata(self._obj, settings, self.path, "struct sdnmpi_tagger_settings")

    def _load(self) -> None:
        assert self._obj is not None
        libbpf.load_object(self._obj, self.path, self._log_buf)
        self.prog_fd = libbpf.program_fd(self._obj, PROGRAM_NAME, self.path)
        self._maps = {
            name: libbpf.map_fd(self._obj, name, self.path)
            for name in ("conns", "ctx_slots", "counters")
        }
        log.info("loaded %s (program id %d)", self.path, self.prog_id)

    @property
    def prog_id(self) -> int:
        return libbpf.obj_id(self.prog_fd)

    def map_ids(self) -> dict[str, int]:
        """Kernel ids of the object's maps and of the inner context maps (ctx:N)."""
        ids = {name: libbpf.obj_id(fd) for name, fd in self._maps.items()}
        ids.update({f"ctx:{slot}": libbpf.obj_id(fd) for slot, fd in self._contexts.items()})
        return ids

    # --- attach / detach ---
    def attach(
        self, ifname: str, *, handle: int = DEFAULT_HANDLE, priority: int = DEFAULT_PRIORITY
    ) -> None:
        """Attach to ``ifname``'s clsact egress hook in the current network namespace."""
        if self._attachment is not None:
            raise BpfError(f"already attached to {self._attachment.ifname}")
        try:
            ifindex = socket.if_nametoindex(ifname)
        except OSError as exc:
            raise BpfError(
                f"interface {ifname!r} does not exist in this network namespace"
            ) from exc
        att = libbpf.attach(self.prog_fd, ifname, ifindex, handle, priority)
        self._attachment = att
        log.info("attached to %s egress (clsact %s)", ifname,
                 "created" if att.created_qdisc else "existing")  # fmt: skip

    def detach(self) -> None:
        """Remove our filter, and the clsact qdisc if (and only if) we created it."""
        att, self._attachment = self._attachment, None
        if att is None:
            return
        libbpf.detach(att)
        log.info("detached from %s", att.ifname)

    @property
    def attached_to(self) -> str | None:
        return self._attachment.ifname if self._attachment else None

    # --- connections ---
    def add_connection(self, conn: FourTuple, ctx: ConnContext) -> None:
        """Register (or replace) a connection the tagger should tag."""
        libbpf.update_elem(self._maps["conns"], conn.key(), ctx.value(), f"add connection {conn}")

    def remove_connection(self, conn: FourTuple) -> bool:
        """Forget a connection; False if it was not registered."""
        ret = libbpf.delete_elem(self._maps["conns"], conn.key())
        if ret == -errno.ENOENT:
            return False
        libbpf.check(ret, f"remove connection {conn}")
        return True

    def connection(self, conn: FourTuple) -> ConnContext | None:
        value = ConnValue()
        if libbpf.lookup_elem(self._maps["conns"], conn.key(), value) < 0:
            return None
        return ConnContext(value.job_slot, value.src_rank, value.dst_rank, value.ctx_slot)

    # --- rank contexts ---
    def create_context(self, ctx_slot: int) -> int:
        """Create a rank's mmapable context map, install it at ``ctx_slot``; return its fd.

        The fd stays owned by this Tagger (closed by :meth:`remove_context` or
        :meth:`close`); hand a dup of it to the rank.
        """
        if not 0 <= ctx_slot < MAX_CTX_SLOTS:
            raise BpfError(f"ctx_slot={ctx_slot} is outside 0..{MAX_CTX_SLOTS - 1}")
        if ctx_slot in self._contexts:
            raise BpfError(f"context slot {ctx_slot} is already in use")
        fd = libbpf.create_mmapable_array(
            f"sdnmpi_ctx{ctx_slot}", ctypes.sizeof(RankCtx),
            f"create context map for slot {ctx_slot}",
        )  # fmt: skip
        try:
            # map-in-map arrays accept only BPF_ANY; occupancy is in self._contexts
            libbpf.update_elem(
                self._maps["ctx_slots"], ctypes.c_uint32(ctx_slot), ctypes.c_uint32(fd),
                f"install context map at slot {ctx_slot}", BPF_ANY,
            )  # fmt: skip
        except BpfError:
            os.close(fd)
            raise
        self._contexts[ctx_slot] = fd
        return fd

    def remove_context(self, ctx_slot: int) -> None:
        """Uninstall and release the context map at ``ctx_slot`` (created by us)."""
        fd = self._contexts.pop(ctx_slot, None)
        if fd is None:
            raise BpfError(f"context slot {ctx_slot} was not created by this tagger")
        ret = libbpf.delete_elem(self._maps["ctx_slots"], ctypes.c_uint32(ctx_slot))
        os.close(fd)
        libbpf.check(ret, f"remove context slot {ctx_slot}")

    def context(self, ctx_slot: int) -> RankContext:
        """An mmap view of a context map we created (what a rank would write)."""
        fd = self._contexts.get(ctx_slot)
        if fd is None:
            raise BpfError(f"context slot {ctx_slot} was not created by this tagger")
        return RankContext(fd)

    # --- counters, test runs ---
    def counters(self) -> Counters:
        ncpus = libbpf.possible_cpus()
        totals = []
        for idx in range(len(Counters.names())):
            values = (ctypes.c_uint64 * ncpus)()
            ret = libbpf.lookup_elem(self._maps["counters"], ctypes.c_uint32(idx), values)
            libbpf.check(ret, f"read counter {idx}")
            totals.append(sum(values))
        return Counters(*totals)

    def test_run(self, frame: bytes, *, repeat: int = 1) -> TestRun:
        """Run the program ``repeat`` times on ``frame`` (BPF_PROG_TEST_RUN, no interface).

        Counters and the context map see every run; ``frame`` is the output of the last.
        """
        if not 1 <= repeat <= 10_000_000:
            raise BpfError(f"repeat={repeat} is outside 1..10000000")
        if len(frame) < 14:
            raise BpfError(f"test_run needs at least an Ethernet header, got {len(frame)} B")
        retval, data, duration = libbpf.test_run(self.prog_fd, frame, repeat)
        return TestRun(retval, data, duration)

    # --- teardown ---
    def close(self) -> None:
        """Detach, release the context maps and the object; safe to call twice."""
        try:
            self.detach()
        finally:
            for fd in self._contexts.values():
                os.close(fd)
            self._contexts.clear()
            if self._obj is not None:
                libbpf.close_object(self._obj)
                self._obj = None

    def __enter__(self) -> Tagger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
