"""ECN-marking switch ports for the emulated fabric (``sdnmpi emu up --queues ecn``).

Why: an emulated link runs at ``link_scale`` times the real rate, so a queue of
1000 frames (the HTB class's FIFO) holds 1.2 s at 10 Mbit/s where the 1 GbE port
it stands for holds 12 ms; TCP's timers are not scaled.  When many ranks send to
one host at once (SpMV's exchange: 78 connections into one port) the queues grow
to 0.5-0.9 s, retransmission timers (200 ms at least) fire for data that was only
waiting, and the few real overflows cost a timeout each: 1000-1200 timeouts and
23 000-26 000 retransmitted segments per 40-rank SpMV run, 28-35 % slower than
the flow model predicts (docs/emulator-fidelity.md, "Queues").

What: :data:`OBJECT_NAME` (``csrc/bpf/ecn.bpf.c``) runs on every switch port's and host
interface's egress, keeps the port's backlog as a queue drained at the port's rate,
and sets CE on ECN-capable packets that arrive above the port's threshold, as an
ECN-marking switch does: a switch port's is what it drains in a quarter of the hosts'
timer floor (:func:`~sdnmpi.emu.queues.switch_mark_bytes`), a host interface's 20
frames (:func:`~sdnmpi.emu.queues.mark_threshold_bytes`).  The hosts negotiate ECN
(``net.ipv4.tcp_ecn=1``) and halve their windows on a mark instead of a loss, and
their retransmission timer's floor is scaled like the links (:func:`tcp_rto_min_s`),
so a queue that is only slow is not taken for a loss.

:func:`attach` loads the program once per fabric, writes each port's rate and
threshold into its ``ports`` map and attaches it to the ports' clsact egress hooks
in the current network namespace; the filters keep the program and its map alive
after the loading process exits, and deleting a port removes its filter.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar, Final

from sdnmpi.emu.queues import mark_threshold_bytes
from sdnmpi.errors import ConfigError
from sdnmpi.node import libbpf

log = logging.getLogger(__name__)

#: Found by :func:`sdnmpi.node.libbpf.object_path`.
OBJECT_NAME: Final = "ecn.bpf.o"
PROGRAM_NAME: Final = "sdnmpi_ecn"
MAP_NAME: Final = "ports"
MAX_PORTS: Final = 4096  # SDNMPI_ECN_MAX_PORTS
HANDLE: Final = 0xEC1
#: After the MPI tagger (``sdnmpi.node.bpf``, priority 1) on a host's interface; the
#: tagger hands packets on (TC_ACT_UNSPEC) so that this filter sees them too.
PRIORITY: Final = 2


class Port(ctypes.Structure):
    """``struct sdnmpi_ecn_port`` (``csrc/bpf/ecn.h``)."""

    _fields_: ClassVar = [
        ("lock", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("t_ns", ctypes.c_uint64),
        ("backlog", ctypes.c_uint64),
        ("rate_Bps", ctypes.c_uint64),
        ("mark_bytes", ctypes.c_uint64),
        ("seen", ctypes.c_uint64),
        ("marked", ctypes.c_uint64),
    ]


def attach(
    ports: Mapping[str, float],
    mark_bytes: Mapping[str, int] | None = None,
    obj: Path | None = None,
    netns: str | None = None,
) -> dict[str, int]:
    """Mark on ``ports`` (device name -> shaped rate in bit/s) of network namespace
    ``netns`` (``ip netns`` name; None: this thread's), above ``mark_bytes`` (device
    -> threshold; None: :func:`mark_threshold_bytes` for every device).

    Each call loads its own program and map (keys are ifindexes, which are unique
    only within a namespace).  Returns each device's ifindex.  Raises
    :class:`ConfigError` when the object is not built,
    :class:`~sdnmpi.node.libbpf.BpfError` when the kernel refuses a step; filters
    attached before a failure stay, and go with their devices.
    """
    if len(ports) > MAX_PORTS:
        raise ConfigError(f"{len(ports)} ports to mark; the marker holds {MAX_PORTS}")
    thresholds = dict(mark_bytes or dict.fromkeys(ports, mark_threshold_bytes()))
    missing = sorted(set(ports) - set(thresholds))
    if missing:
        raise ConfigError(f"no marking threshold for {', '.join(missing[:5])}")
    obj = obj or libbpf.object_path(OBJECT_NAME)
    if not obj.is_file():
        raise ConfigError(
            f"ECN marker {obj} not found: build it with `make bpf`, or use --queues droptail"
        )
    with _inside(netns):
        return _load_and_attach(ports, thresholds, obj)


@contextlib.contextmanager
def _inside(netns: str | None) -> Iterator[None]:
    if netns is None:
        yield
        return
    try:
        target = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"network namespace {netns!r}: {exc.strerror}") from None
    try:
        with libbpf.Netns(target):
            yield
    finally:
        os.close(target)


def _load_and_attach(
    ports: Mapping[str, float], thresholds: Mapping[str, int], obj: Path
) -> dict[str, int]:
    log_buf = ctypes.create_string_buffer(libbpf.VERIFIER_LOG_BYTES)
    handle = libbpf.open_object(obj, log_buf)
    try:
        libbpf.load_object(handle, obj, log_buf)
        prog_fd = libbpf.program_fd(handle, PROGRAM_NAME, obj)
        map_fd = libbpf.map_fd(handle, MAP_NAME, obj)
        indexes = {dev: _ifindex(dev) for dev in ports}
        for dev, rate_bps in ports.items():
            value = Port(rate_Bps=max(1, round(rate_bps / 8)), mark_bytes=thresholds[dev])
            libbpf.update_elem(map_fd, ctypes.c_uint32(indexes[dev]), value,
                               f"set the marker's rate for {dev}")  # fmt: skip
            libbpf.attach_egress(prog_fd, dev, indexes[dev], HANDLE, PRIORITY)
    finally:
        libbpf.close_object(handle)
    shown = ", ".join(f"{dev} above {thresholds[dev]} B" for dev in ports)
    log.info("ECN marking on %s", shown)
    return indexes


def _ifindex(dev: str) -> int:
    try:
        return socket.if_nametoindex(dev)
    except OSError:
        raise ConfigError(f"no interface {dev!r} in this network namespace") from None
