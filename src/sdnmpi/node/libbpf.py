"""ctypes binding of libbpf.so.1: what sdnmpi's eBPF programs need, and no more.

The loaders (:mod:`sdnmpi.node.bpf`, the MPI tagger; :mod:`sdnmpi.emu.ecn`, the
emulator's ECN marker) open, load and attach their objects through the functions
below and never touch a libbpf struct themselves.  The option structs mirror libbpf
1.1's layouts on x86-64 (each starts with its own size, so a newer libbpf reads them
as the older version it was given).  libbpf's messages go to this module's logger.

Compiled objects are found by :func:`object_path`: ``$SDNMPI_BPF_DIR`` when set, else
``bpf/`` of :func:`sdnmpi.artefacts.root` (an installation's, else the checkout's build).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

from sdnmpi import artefacts
from sdnmpi.errors import SdnMpiError

log = logging.getLogger(__name__)

OBJECT_DIR_ENV: Final = "SDNMPI_BPF_DIR"
VERIFIER_LOG_BYTES: Final = 1 << 20

BPF_MAP_TYPE_ARRAY: Final = 2
BPF_F_MMAPABLE: Final = 1 << 10
BPF_ANY: Final = 0
_BPF_TC_INGRESS: Final = 1
_BPF_TC_EGRESS: Final = 2
_CLONE_NEWNET: Final = 0x40000000


class BpfError(SdnMpiError):
    """An eBPF object cannot be opened, loaded, attached or updated."""


class ProgramRejectedError(BpfError):
    """The kernel refused the program; ``verifier_log`` holds the verifier's output."""

    TAIL_LINES: ClassVar[int] = 40

    def __init__(self, message: str, verifier_log: str) -> None:
        tail = "\n".join(verifier_log.rstrip().splitlines()[-self.TAIL_LINES :])
        super().__init__(f"{message}\n--- verifier log (last lines) ---\n{tail}")
        self.verifier_log = verifier_log


def object_path(name: str, env: dict[str, str] | None = None) -> Path:
    """The compiled object ``name`` (``tagger.bpf.o``, ``ecn.bpf.o``): in
    ``$SDNMPI_BPF_DIR`` when set, else ``bpf/`` of the artefact directory
    (:mod:`sdnmpi.artefacts`: ``$SDNMPI_LIBDIR``, the installation, the checkout).

    >>> object_path("tagger.bpf.o", {"SDNMPI_BPF_DIR": "/usr/lib/sdnmpi/bpf"})
    PosixPath('/usr/lib/sdnmpi/bpf/tagger.bpf.o')
    """
    environ = os.environ if env is None else env
    where = environ.get(OBJECT_DIR_ENV)
    return Path(where) / name if where else artefacts.path(f"bpf/{name}", environ)


# --- option structs (libbpf 1.1 layouts, x86-64) ---
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
            raise BpfError(f"cannot load libbpf.so.1 ({exc}); apt-get install libbpf1") from exc
        _declare(lib)
        lib.libbpf_set_print(_LIBBPF_PRINT_CB)
        _lib = lib
    return _lib


def check(ret: int, what: str) -> int:
    """libbpf 1.x calls return -errno on failure (never -1 with errno set)."""
    if ret < 0:
        err = -ret
        raise BpfError(f"{what}: {os.strerror(err)} (errno {err})")
    return ret


def obj_id(fd: int) -> int:
    """Kernel id of a map or program fd (bpf_{map,prog}_info both start with type, id)."""
    info = (ctypes.c_uint32 * 64)()
    size = ctypes.c_uint32(ctypes.sizeof(info))
    check(libbpf().bpf_obj_get_info_by_fd(fd, info, ctypes.byref(size)), "bpf_obj_get_info")
    return int(info[1])


def open_object(path: Path, log_buf: ctypes.Array[ctypes.c_char]) -> int:
    """``bpf_object__open_file`` with the verifier's log going to ``log_buf``."""
    opts = _sized(_OpenOpts())
    opts.kernel_log_buf = ctypes.cast(log_buf, ctypes.c_void_p)
    opts.kernel_log_size = len(log_buf)
    obj = libbpf().bpf_object__open_file(str(path).encode(), ctypes.byref(opts))
    if not obj:
        err = ctypes.get_errno()
        raise BpfError(f"cannot open BPF object {path}: {os.strerror(err)}")
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
        check(ret, f"create clsact qdisc on {ifname}")
    created = ret == 0
    opts = _sized(_TcOpts())
    opts.prog_fd, opts.handle, opts.priority = prog_fd, handle, priority
    ret = lib.bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts))
    if ret < 0:
        if created:
            _destroy_qdisc(hook)
        check(ret, f"attach to {ifname} egress (handle {handle:#x}, priority {priority})")
    return hook, opts, created


def _destroy_qdisc(hook: _TcHook) -> None:
    hook.attach_point = _BPF_TC_INGRESS | _BPF_TC_EGRESS
    ret = libbpf().bpf_tc_hook_destroy(ctypes.byref(hook))
    if ret < 0:
        log.warning("could not remove the clsact qdisc: %s", os.strerror(-ret))


def netns_fd() -> int:
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


class Netns:
    """Run a block in a saved network namespace (for detaching from where we attached)."""

    def __init__(self, target_fd: int) -> None:
        self._target = target_fd
        self._back: int | None = None

    def __enter__(self) -> None:
        here = os.stat("/proc/thread-self/ns/net")
        there = os.fstat(self._target)
        if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
            self._back = netns_fd()
            check(_libc.setns(self._target, _CLONE_NEWNET), "setns to the attach namespace")

    def __exit__(self, *exc: object) -> None:
        if self._back is not None:
            _libc.setns(self._back, _CLONE_NEWNET)
            os.close(self._back)


# --- what the loaders use ---
def close_object(obj: int) -> None:
    """``bpf_object__close``: the object's programs and maps go with their last fd."""
    libbpf().bpf_object__close(obj)


def program_fd(obj: int, name: str, path: Path) -> int:
    """The fd of the loaded object's program ``name``."""
    prog = libbpf().bpf_object__find_program_by_name(obj, name.encode())
    if not prog:
        raise BpfError(f"{path}: no program {name}")
    return check(libbpf().bpf_program__fd(prog), "program fd")


def map_fd(obj: int, name: str, path: Path) -> int:
    """The fd of the loaded object's map ``name``."""
    m = libbpf().bpf_object__find_map_by_name(obj, name.encode())
    if not m:
        raise BpfError(f"{path}: no map {name}")
    return check(libbpf().bpf_map__fd(m), f"fd of map {name}")


def set_rodata(obj: int, value: ctypes.Structure, path: Path, what: str) -> None:
    """Write ``value`` as the opened (not yet loaded) object's ``.rodata``, which must be
    exactly one ``what`` (the loader's settings struct)."""
    lib = libbpf()
    rodata = lib.bpf_object__find_map_by_name(obj, b".rodata")
    size = ctypes.c_size_t(0)
    ptr = lib.bpf_map__initial_value(rodata, ctypes.byref(size)) if rodata else None
    if not ptr or size.value != ctypes.sizeof(value):
        raise BpfError(
            f"{path}: .rodata is not one {what} ({size.value} bytes); object and loader disagree"
        )
    ctypes.memmove(ptr, ctypes.byref(value), ctypes.sizeof(value))


def update_elem(fd: int, key: Any, value: Any, what: str, flags: int = BPF_ANY) -> None:
    """``bpf_map_update_elem`` of two ctypes objects."""
    check(libbpf().bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(value), flags), what)


def lookup_elem(fd: int, key: Any, value: Any) -> int:
    """``bpf_map_lookup_elem`` into the ctypes object ``value``; returns libbpf's result
    (negative errno: no such key, or an error) for the caller to judge."""
    return int(libbpf().bpf_map_lookup_elem(fd, ctypes.byref(key), ctypes.byref(value)))


def delete_elem(fd: int, key: Any) -> int:
    """``bpf_map_delete_elem``; returns libbpf's result (negative errno) for the caller
    to check once it has released what it must release either way."""
    return int(libbpf().bpf_map_delete_elem(fd, ctypes.byref(key)))


def create_mmapable_array(name: str, value_size: int, what: str) -> int:
    """A new one-entry ``BPF_MAP_TYPE_ARRAY`` the user side can mmap; returns its fd."""
    opts = _sized(_MapCreateOpts())
    opts.map_flags = BPF_F_MMAPABLE
    return check(
        libbpf().bpf_map_create(
            BPF_MAP_TYPE_ARRAY, name.encode(), 4, value_size, 1, ctypes.byref(opts)
        ),
        what,
    )


def possible_cpus() -> int:
    """How many per-CPU slots a per-CPU map's value has."""
    return check(libbpf().libbpf_num_possible_cpus(), "number of CPUs")


def test_run(prog_fd: int, frame: bytes, repeat: int) -> tuple[int, bytes, int]:
    """BPF_PROG_TEST_RUN: (return value, output frame, mean duration in ns)."""
    data_in = ctypes.create_string_buffer(frame, len(frame))
    data_out = ctypes.create_string_buffer(len(frame) + 256)
    opts = _sized(_TestRunOpts())
    opts.data_in = ctypes.cast(data_in, ctypes.c_void_p)
    opts.data_size_in = len(frame)
    opts.data_out = ctypes.cast(data_out, ctypes.c_void_p)
    opts.data_size_out = len(data_out)
    opts.repeat = repeat
    check(libbpf().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts)), "test run")
    return int(opts.retval), data_out.raw[: opts.data_size_out], int(opts.duration)


@dataclass
class Attachment:
    """A filter attached by :func:`attach`: where, and whether it created the qdisc."""

    ifname: str
    hook: _TcHook
    opts: _TcOpts
    created_qdisc: bool
    netns_fd: int


def attach(prog_fd: int, ifname: str, ifindex: int, handle: int, priority: int) -> Attachment:
    """:func:`attach_egress`, remembering this thread's namespace for :func:`detach`."""
    hook, opts, created = attach_egress(prog_fd, ifname, ifindex, handle, priority)
    return Attachment(ifname, hook, opts, created, netns_fd())


def detach(att: Attachment) -> None:
    """Remove the filter, and the clsact qdisc if (and only if) it was created for it,
    in the namespace it was attached in; closes the namespace fd."""
    try:
        with Netns(att.netns_fd):
            opts = _sized(_TcOpts())
            opts.handle, opts.priority = att.opts.handle, att.opts.priority
            ret = libbpf().bpf_tc_detach(ctypes.byref(att.hook), ctypes.byref(opts))
            if ret < 0:
                log.warning("detach from %s: %s", att.ifname, os.strerror(-ret))
            if att.created_qdisc:
                _destroy_qdisc(att.hook)
    finally:
        os.close(att.netns_fd)
