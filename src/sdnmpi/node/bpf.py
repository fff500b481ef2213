"""Loader for the eBPF TC egress tagger (``csrc/bpf/tagger.bpf.c``), over libbpf.so.1.

:class:`Tagger` opens and loads the compiled object with its settings, attaches it
to an interface's clsact egress hook in the current network namespace, and gives the
node agent the map operations it needs: register or remove a TCP connection, create
a rank's mmapable context map and install it in ``ctx_slots``, read the counters.
``close()`` (or leaving the ``with`` block) detaches and destroys exactly what this
object created: its filter, the clsact qdisc only if it created it, its inner maps
and the object. ctypes only, no bcc. The structs below mirror ``csrc/bpf/tagger.h``
(checked by ``tests/bpf/test_abi.py``).
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
from typing import Any, ClassVar, Final

from sdnmpi.errors import SdnMpiError
from sdnmpi.wire.tag import MAX_JOB_SLOT, MAX_RANK

log = logging.getLogger(__name__)

DEFAULT_OBJECT: Final = Path(__file__).resolve().parents[3] / "build" / "bpf" / "tagger.bpf.o"
PROGRAM_NAME: Final = "sdnmpi_tagger"
MAX_CTX_SLOTS: Final = 1024  # SDNMPI_TAGGER_MAX_CTX_SLOTS
DEFAULT_HANDLE: Final = 0x5D4D
DEFAULT_PRIORITY: Final = 1
VERIFIER_LOG_BYTES: Final = 1 << 20

_BPF_MAP_TYPE_ARRAY: Final = 2
_BPF_F_MMAPABLE: Final = 1 << 10
_BPF_ANY: Final = 0
_BPF_TC_INGRESS: Final = 1
_BPF_TC_EGRESS: Final = 2
_CLONE_NEWNET: Final = 0x40000000


class TaggerError(SdnMpiError):
    """The tagger cannot be loaded, attached or updated."""


class ProgramRejectedError(TaggerError):
    """The kernel refused the program; ``verifier_log`` holds the verifier's output."""

    TAIL_LINES: ClassVar[int] = 40

    def __init__(self, message: str, verifier_log: str) -> None:
        tail = "\n".join(verifier_log.rstrip().splitlines()[-self.TAIL_LINES :])
        super().__init__(f"{message}\n--- verifier log (last lines) ---\n{tail}")
        self.verifier_log = verifier_log


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


# --- libbpf option structs (libbpf 1.1 layouts, x86-64) ---
class _OpenOpts(ctypes.Structure):
    _fields_: ClassVar = [
        ("sz", ctypes.c_size_t),
        ("object_name", ctypes.c_char_p),
        ("relaxed_maps", ctypes.c_bool),
        ("pin_root_path", ctypes.c_char_p),
        ("_stub", ctypes.c_uint32),
        ("kconfig", ctypes.c_char_p),
        ("btf_custom_path", ctypes.c_char_p),
        ("kernel_log_buf", ctypes.c_void_p),
        ("kernel_log_size", ctypes.c_size_t),
        ("kernel_log_level", ctypes.c_uint32),
        ("_end", ctypes.c_uint32),
    ]


class _TcHook(ctypes.Structure):
    _fields_: ClassVar = [
        ("sz", ctypes.c_size_t),
        ("ifindex", ctypes.c_int),
        ("attach_point", ctypes.c_int),
        ("parent", ctypes.c_uint32),
        ("_end", ctypes.c_uint32),
    ]


class _TcOpts(ctypes.Structure):
    _fields_: ClassVar = [
        ("sz", ctypes.c_size_t),
        ("prog_fd", ctypes.c_int),
        ("flags", ctypes.c_uint32),
        ("prog_id", ctypes.c_uint32),
        ("handle", ctypes.c_uint32),
        ("priority", ctypes.c_uint32),
        ("_end", ctypes.c_uint32),
    ]


class _TestRunOpts(ctypes.Structure):
    _fields_: ClassVar = [
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p),
        ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p),
        ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


class _MapCreateOpts(ctypes.Structure):
    _fields_: ClassVar = [
        ("sz", ctypes.c_size_t),
        ("btf_fd", ctypes.c_uint32),
        ("btf_key_type_id", ctypes.c_uint32),
        ("btf_value_type_id", ctypes.c_uint32),
        ("btf_vmlinux_value_type_id", ctypes.c_uint32),
        ("inner_map_fd", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("map_extra", ctypes.c_uint64),
        ("numa_node", ctypes.c_uint32),
        ("map_ifindex", ctypes.c_uint32),
    ]


def _sized(opts: ctypes.Structure) -> Any:
    opts.sz = ctypes.sizeof(opts)
    return opts


_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_LEVELS: Final = (logging.WARNING, logging.INFO, logging.DEBUG)
_lib: ctypes.CDLL | None = None
_libc = ctypes.CDLL(None, use_errno=True)
_libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]


def _libbpf_print(level: int, fmt: bytes, args: int) -> int:
    """Route libbpf's messages (va_list formatted by libc) to this module's logger."""
    py_level = _LEVELS[level] if 0 <= level < len(_LEVELS) else logging.DEBUG
    if log.isEnabledFor(py_level):
        buf = ctypes.create_string_buffer(4096)
        _libc.vsnprintf(buf, len(buf), fmt, args)
        log.log(py_level, "libbpf: %s", buf.value.decode(errors="replace").rstrip())
    return 0


_LIBBPF_PRINT_CB = _PRINT_FN(_libbpf_print)  # kept alive for libbpf


def _declare(lib: ctypes.CDLL) -> None:
    p, i, u32, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_size_t
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "bpf_object__open_file": (p, [ctypes.c_char_p, p]),
        "bpf_object__load": (i, [p]),
        "bpf_object__close": (None, [p]),
        "bpf_object__find_map_by_name": (p, [p, ctypes.c_char_p]),
        "bpf_object__find_program_by_name": (p, [p, ctypes.c_char_p]),
        "bpf_map__fd": (i, [p]),
        "bpf_map__initial_value": (p, [p, ctypes.POINTER(sz)]),
        "bpf_program__fd": (i, [p]),
        "bpf_map_create": (i, [i, ctypes.c_char_p, u32, u32, u32, p]),
        "bpf_map_update_elem": (i, [i, p, p, ctypes.c_uint64]),
        "bpf_map_lookup_elem": (i, [i, p, p]),
        "bpf_map_delete_elem": (i, [i, p]),
        "bpf_obj_get_info_by_fd": (i, [i, p, ctypes.POINTER(u32)]),
        "bpf_prog_test_run_opts": (i, [i, p]),
        "bpf_tc_hook_create": (i, [p]),
        "bpf_tc_hook_destroy": (i, [p]),
        "bpf_tc_attach": (i, [p, p]),
        "bpf_tc_detach": (i, [p, p]),
        "bpf_tc_query": (i, [p, p]),
        "libbpf_num_possible_cpus": (i, []),
        "libbpf_set_print": (p, [_PRINT_FN]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def libbpf() -> ctypes.CDLL:
    """libbpf.so.1, loaded once, with its messages sent to logging."""
    global _lib  # noqa: PLW0603 - one process-wide library handle
    if _lib is None:
        try:
            lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
        except OSError as exc:
            raise TaggerError(f"cannot load libbpf.so.1 ({exc}); apt-get install libbpf1") from exc
        _declare(lib)
        lib.libbpf_set_print(_LIBBPF_PRINT_CB)
        _lib = lib
    return _lib


def _check(ret: int, what: str) -> int:
    """libbpf 1.x calls return -errno on failure (never -1 with errno set)."""
    if ret < 0:
        err = -ret
        raise TaggerError(f"{what}: {os.strerror(err)} (errno {err})")
    return ret


def _obj_id(fd: int) -> int:
    """Kernel id of a map or program fd (bpf_{map,prog}_info both start with type, id)."""
    info = (ctypes.c_uint32 * 64)()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    _check(libbpf().bpf_obj_get_info_by_fd(fd, info, ctypes.byref(size)), "bpf_obj_get_info")
    return int(info[1])


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
                raise TaggerError(f"{name}={getattr(self, name)!r}: not an IPv4 address") from exc
        for name in ("sport", "dport"):
            port = getattr(self, name)
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 0xFFFF:
                raise TaggerError(f"{name}={port!r}: not a TCP port (0..65535)")

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
                raise TaggerError(f"{name}={value!r} is outside {low}..{high}")

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


def open_object(path: Path, log_buf: ctypes.Array[ctypes.c_char]) -> int:
    """``bpf_object__open_file`` with the verifier's log going to ``log_buf``."""
    opts = _sized(_OpenOpts())
    opts.kernel_log_buf = ctypes.cast(log_buf, ctypes.c_void_p)
    opts.kernel_log_size = len(log_buf)
    obj = libbpf().bpf_object__open_file(str(path).encode(), ctypes.byref(opts))
    if not obj:
        err = ctypes.get_errno()
        raise TaggerError(f"cannot open BPF object {path}: {os.strerror(err)}")
    return int(obj)


def load_object(obj: int, path: Path, log_buf: ctypes.Array[ctypes.c_char]) -> None:
    """``bpf_object__load``; a refusal is a :class:`ProgramRejectedError` with the log."""
    ret = libbpf().bpf_object__load(obj)
    if ret < 0:
        text = log_buf.value.decode(errors="replace")
        raise ProgramRejectedError(
            f"the kernel refused {path}: {os.strerror(-ret)}", text or "(empty)"
        )


def attach_egress(
    prog_fd: int, ifname: str, ifindex: int, handle: int, priority: int
) -> tuple[_TcHook, _TcOpts, bool]:
    """Attach ``prog_fd`` to ``ifindex``'s clsact egress hook in this thread's namespace,
    creating the clsact qdisc if there is none (and removing it again if the attach
    fails).  Returns the hook, the options and whether the qdisc was created."""
    lib = libbpf()
    hook = _sized(_TcHook())
    hook.ifindex, hook.attach_point = ifindex, _BPF_TC_EGRESS
    ret = lib.bpf_tc_hook_create(ctypes.byref(hook))
    if ret < 0 and ret != -errno.EEXIST:  # a clsact qdisc is there already: keep it
        _check(ret, f"create clsact qdisc on {ifname}")
    created = ret == 0
    opts = _sized(_TcOpts())
    opts.prog_fd, opts.handle, opts.priority = prog_fd, handle, priority
    ret = lib.bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts))
    if ret < 0:
        if created:
            _destroy_qdisc(hook)
        _check(ret, f"attach to {ifname} egress (handle {handle:#x}, priority {priority})")
    return hook, opts, created


def _destroy_qdisc(hook: _TcHook) -> None:
    hook.attach_point = _BPF_TC_INGRESS | _BPF_TC_EGRESS
    ret = libbpf().bpf_tc_hook_destroy(ctypes.byref(hook))
    if ret < 0:
        log.warning("could not remove the clsact qdisc: %s", os.strerror(-ret))


def _netns_fd() -> int:
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


class _Netns:
    """Run a block in a saved network namespace (for detaching from where we attached)."""

    def __init__(self, target_fd: int) -> None:
        self._target = target_fd
        self._back: int | None = None

    def __enter__(self) -> None:
        here = os.stat("/proc/thread-self/ns/net")
        there = os.fstat(self._target)
        if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
            self._back = _netns_fd()
            _check(_libc.setns(self._target, _CLONE_NEWNET), "setns to the attach namespace")

    def __exit__(self, *exc: object) -> None:
        if self._back is not None:
            _libc.setns(self._back, _CLONE_NEWNET)
            os.close(self._back)


@dataclass
class _Attachment:
    ifname: str
    hook: _TcHook
    opts: _TcOpts
    created_qdisc: bool
    netns_fd: int


class Tagger:
    """The loaded tagger program and its maps; see the module docstring.

    >>> with Tagger(enabled=True) as tagger:  # doctest: +SKIP
    ...     tagger.attach("eth0")
    ...     fd = tagger.create_context(0)
    ...     tagger.add_connection(FourTuple("10.0.0.1", "10.0.0.2", 40000, 5000),
    ...                           ConnContext(job_slot=1, src_rank=0, dst_rank=1, ctx_slot=0))
    """

    def __init__(self, obj_path: Path | str | None = None, *, enabled: bool = True) -> None:
        self.path = Path(obj_path) if obj_path is not None else DEFAULT_OBJECT
        if not self.path.is_file():
            raise TaggerError(f"BPF object {self.path} not found (build it with `make bpf`)")
        self._lib = libbpf()
        self._log_buf = ctypes.create_string_buffer(VERIFIER_LOG_BYTES)
        self._obj: int | None = None
        self._contexts: dict[int, int] = {}
        self._attachment: _Attachment | None = None
        self._open(enabled)
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    # --- open / load ---
    def _open(self, enabled: bool) -> None:
        self._obj = open_object(self.path, self._log_buf)
        self._set_settings(Settings(enabled=int(enabled)))

    def _set_settings(self, settings: Settings) -> None:
        rodata = self._lib.bpf_object__find_map_by_name(self._obj, b".rodata")
        size = ctypes.c_size_t(0)
        ptr = self._lib.bpf_map__initial_value(rodata, ctypes.byref(size)) if rodata else None
        if not ptr or size.value != ctypes.sizeof(Settings):
            raise TaggerError(
                f"{self.path}: .rodata is not one struct sdnmpi_tagger_settings "
                f"({size.value} bytes); object and loader disagree"
            )
        ctypes.memmove(ptr, ctypes.byref(settings), ctypes.sizeof(settings))

    def _load(self) -> None:
        assert self._obj is not None
        load_object(self._obj, self.path, self._log_buf)
        prog = self._lib.bpf_object__find_program_by_name(self._obj, PROGRAM_NAME.encode())
        if not prog:
            raise TaggerError(f"{self.path}: no program {PROGRAM_NAME}")
        self.prog_fd = _check(self._lib.bpf_program__fd(prog), "program fd")
        self._maps = {name: self._map_fd(name) for name in ("conns", "ctx_slots", "counters")}
        log.info("loaded %s (program id %d)", self.path, self.prog_id)

    def _map_fd(self, name: str) -> int:
        m = self._lib.bpf_object__find_map_by_name(self._obj, name.encode())
        if not m:
            raise TaggerError(f"{self.path}: no map {name}")
        return _check(self._lib.bpf_map__fd(m), f"fd of map {name}")

    @property
    def prog_id(self) -> int:
        return _obj_id(self.prog_fd)

    def map_ids(self) -> dict[str, int]:
        """Kernel ids of the object's maps and of the inner context maps (ctx:N)."""
        ids = {name: _obj_id(fd) for name, fd in self._maps.items()}
        ids.update({f"ctx:{slot}": _obj_id(fd) for slot, fd in self._contexts.items()})
        return ids

    # --- attach / detach ---
    def attach(
        self, ifname: str, *, handle: int = DEFAULT_HANDLE, priority: int = DEFAULT_PRIORITY
    ) -> None:
        """Attach to ``ifname``'s clsact egress hook in the current network namespace."""
        if self._attachment is not None:
            raise TaggerError(f"already attached to {self._attachment.ifname}")
        try:
            ifindex = socket.if_nametoindex(ifname)
        except OSError as exc:
            raise TaggerError(
                f"interface {ifname!r} does not exist in this network namespace"
            ) from exc
        hook, opts, created = attach_egress(self.prog_fd, ifname, ifindex, handle, priority)
        self._attachment = _Attachment(ifname, hook, opts, created, _netns_fd())
        log.info("attached to %s egress (clsact %s)", ifname, "created" if created else "existing")

    def detach(self) -> None:
        """Remove our filter, and the clsact qdisc if (and only if) we created it."""
        att, self._attachment = self._attachment, None
        if att is None:
            return
        try:
            with _Netns(att.netns_fd):
                opts = _sized(_TcOpts())
                opts.handle, opts.priority = att.opts.handle, att.opts.priority
                ret = self._lib.bpf_tc_detach(ctypes.byref(att.hook), ctypes.byref(opts))
                if ret < 0:
                    log.warning("detach from %s: %s", att.ifname, os.strerror(-ret))
                if att.created_qdisc:
                    _destroy_qdisc(att.hook)
        finally:
            os.close(att.netns_fd)
        log.info("detached from %s", att.ifname)

    @property
    def attached_to(self) -> str | None:
        return self._attachment.ifname if self._attachment else None

    # --- connections ---
    def add_connection(self, conn: FourTuple, ctx: ConnContext) -> None:
        """Register (or replace) a connection the tagger should tag."""
        key, value = conn.key(), ctx.value()
        ret = self._lib.bpf_map_update_elem(
            self._maps["conns"], ctypes.byref(key), ctypes.byref(value), _BPF_ANY
        )
        _check(ret, f"add connection {conn}")

    def remove_connection(self, conn: FourTuple) -> bool:
        """Forget a connection; False if it was not registered."""
        key = conn.key()
        ret = self._lib.bpf_map_delete_elem(self._maps["conns"], ctypes.byref(key))
        if ret == -errno.ENOENT:
            return False
        _check(ret, f"remove connection {conn}")
        return True

    def connection(self, conn: FourTuple) -> ConnContext | None:
        key, value = conn.key(), ConnValue()
        ret = self._lib.bpf_map_lookup_elem(
            self._maps["conns"], ctypes.byref(key), ctypes.byref(value)
        )
        if ret < 0:
            return None
        return ConnContext(value.job_slot, value.src_rank, value.dst_rank, value.ctx_slot)

    # --- rank contexts ---
    def create_context(self, ctx_slot: int) -> int:
        """Create a rank's mmapable context map, install it at ``ctx_slot``; return its fd.

        The fd stays owned by this Tagger (closed by :meth:`remove_context` or
        :meth:`close`); hand a dup of it to the rank.
        """
        if not 0 <= ctx_slot < MAX_CTX_SLOTS:
            raise TaggerError(f"ctx_slot={ctx_slot} is outside 0..{MAX_CTX_SLOTS - 1}")
        if ctx_slot in self._contexts:
            raise TaggerError(f"context slot {ctx_slot} is already in use")
        opts = _sized(_MapCreateOpts())
        opts.map_flags = _BPF_F_MMAPABLE
        name = f"sdnmpi_ctx{ctx_slot}".encode()
        size = ctypes.sizeof(RankCtx)
        fd = _check(
            self._lib.bpf_map_create(_BPF_MAP_TYPE_ARRAY, name, 4, size, 1, ctypes.byref(opts)),
            f"create context map for slot {ctx_slot}",
        )
        try:
            key, value = ctypes.c_uint32(ctx_slot), ctypes.c_uint32(fd)
            ret = self._lib.bpf_map_update_elem(
                self._maps["ctx_slots"], ctypes.byref(key), ctypes.byref(value), _BPF_ANY
            )  # map-in-map arrays accept only BPF_ANY; occupancy is in self._contexts
            _check(ret, f"install context map at slot {ctx_slot}")
        except TaggerError:
            os.close(fd)
            raise
        self._contexts[ctx_slot] = fd
        return fd

    def remove_context(self, ctx_slot: int) -> None:
        """Uninstall and release the context map at ``ctx_slot`` (created by us)."""
        fd = self._contexts.pop(ctx_slot, None)
        if fd is None:
            raise TaggerError(f"context slot {ctx_slot} was not created by this tagger")
        key = ctypes.c_uint32(ctx_slot)
        ret = self._lib.bpf_map_delete_elem(self._maps["ctx_slots"], ctypes.byref(key))
        os.close(fd)
        _check(ret, f"remove context slot {ctx_slot}")

    def context(self, ctx_slot: int) -> RankContext:
        """An mmap view of a context map we created (what a rank would write)."""
        fd = self._contexts.get(ctx_slot)
        if fd is None:
            raise TaggerError(f"context slot {ctx_slot} was not created by this tagger")
        return RankContext(fd)

    # --- counters, test runs ---
    def counters(self) -> Counters:
        ncpus = _check(self._lib.libbpf_num_possible_cpus(), "number of CPUs")
        totals = []
        for idx in range(len(Counters.names())):
            key, values = ctypes.c_uint32(idx), (ctypes.c_uint64 * ncpus)()
            ret = self._lib.bpf_map_lookup_elem(
                self._maps["counters"], ctypes.byref(key), ctypes.byref(values)
            )
            _check(ret, f"read counter {idx}")
            totals.append(sum(values))
        return Counters(*totals)

    def test_run(self, frame: bytes, *, repeat: int = 1) -> TestRun:
        """Run the program ``repeat`` times on ``frame`` (BPF_PROG_TEST_RUN, no interface).

        Counters and the context map see every run; ``frame`` is the output of the last.
        """
        if not 1 <= repeat <= 10_000_000:
            raise TaggerError(f"repeat={repeat} is outside 1..10000000")
        if len(frame) < 14:
            raise TaggerError(f"test_run needs at least an Ethernet header, got {len(frame)} B")
        data_in = ctypes.create_string_buffer(frame, len(frame))
        data_out = ctypes.create_string_buffer(len(frame) + 256)
        opts = _sized(_TestRunOpts())
        opts.data_in = ctypes.cast(data_in, ctypes.c_void_p)
        opts.data_size_in = len(frame)
        opts.data_out = ctypes.cast(data_out, ctypes.c_void_p)
        opts.data_size_out = len(data_out)
        opts.repeat = repeat
        _check(self._lib.bpf_prog_test_run_opts(self.prog_fd, ctypes.byref(opts)), "test run")
        return TestRun(int(opts.retval), data_out.raw[: opts.data_size_out], int(opts.duration))

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
                self._lib.bpf_object__close(self._obj)
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
