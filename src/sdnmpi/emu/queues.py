"""Queue settings of the emulated fabric (``sdnmpi emu up --queues``), pure.

The reasons and the measurements are in :mod:`sdnmpi.emu.ecn` (the marker's
loader) and docs/emulator-fidelity.md, "Queues".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from sdnmpi.errors import ConfigError

#: The queue modes of ``emu up --queues``: ``ecn`` (:mod:`sdnmpi.emu.ecn`), ``droptail`` (the
#: bare FIFO, and the hosts' TCP as the kernel sets it).
QUEUE_MODES: Final = ("ecn", "droptail")
DEFAULT_QUEUES: Final = "ecn"
#: Environment variable that sets ``emu up``'s default (experiments run ``emu up``
#: themselves; their reports name the mode they ran with: :func:`queues_in_use`).
QUEUES_ENV: Final = "SDNMPI_EMU_QUEUES"

#: A host interface's marking threshold in full frames: DCTCP's K for 1 Gbit/s ports
#: (Alizadeh et al., SIGCOMM 2010).  In frames the threshold does not depend on the
#: rate, as TCP's windows do not.  It keeps a host's own backlog (every connection it
#: sends on, behind one shaped interface) short; docs/emulator-fidelity.md, "Queues",
#: has the measurements that chose it over marking hosts like switch ports.
MARK_FRAMES: Final = 20
FRAME_BYTES: Final = 1514
#: Environment variable that overrides :data:`MARK_FRAMES` (to compare thresholds).
MARK_FRAMES_ENV: Final = "SDNMPI_EMU_MARK_FRAMES"
#: A switch port marks when its backlog would delay a packet by this share of the
#: hosts' retransmission-timer floor: the data's wait and its acknowledgement's wait
#: on the way back each stay well below the timer, as a real port's (1000 frames,
#: 12 ms at 1 Gbit/s) stay below Linux's 200 ms.
SWITCH_MARK_SHARE: Final = 0.25

#: Linux's floor of the retransmission timer (TCP_RTO_MIN) and the most ``emu`` sets.
LINUX_RTO_MIN_S: Final = 0.2
MAX_RTO_MIN_S: Final = 2.0
RTO_MIN_SYSCTL: Final = Path("/proc/sys/net/ipv4/tcp_rto_min_us")


def queues_in_use() -> str:
    """The mode ``emu up`` uses without ``--queues``: :data:`QUEUES_ENV` or the default."""
    return os.environ.get(QUEUES_ENV) or DEFAULT_QUEUES


def describe(mode: str) -> str:
    """What queues of ``mode`` do, for reports.

    >>> describe("ecn")
    "ECN marks at switch ports above 0.25 of the hosts' timer floor, at hosts above 20 frames"
    """
    if mode != "ecn":
        return "tail-drop FIFOs of 1000 frames, the kernel's timer floor"
    frames = mark_threshold_bytes() // FRAME_BYTES
    return (
        f"ECN marks at switch ports above {SWITCH_MARK_SHARE:g} of the hosts' timer floor, "
        f"at hosts above {frames} frames"
    )


def mark_threshold_bytes() -> int:
    """Backlog above which a host's interface marks: :data:`MARK_FRAMES` full frames,
    or :data:`MARK_FRAMES_ENV`'s.

    >>> mark_threshold_bytes()
    30280
    """
    raw = os.environ.get(MARK_FRAMES_ENV, "")
    if not raw:
        return MARK_FRAMES * FRAME_BYTES
    if not raw.isdigit() or not 1 <= int(raw) <= 10_000:
        raise ConfigError(f"{MARK_FRAMES_ENV}={raw!r}: want a number of frames, 1..10000")
    return int(raw) * FRAME_BYTES


def switch_mark_bytes(rate_bps: float, rto_min_s: float) -> int:
    """Backlog above which a switch port of ``rate_bps`` marks: what it drains in
    :data:`SWITCH_MARK_SHARE` of the hosts' timer floor ``rto_min_s``.

    At 10 Mbit/s with the 2 s floor (link scale 0.01) that is 0.5 s, 412 full frames;
    at 1 Gbit/s with Linux's 200 ms, 4128 frames, more than the port's FIFO holds, so
    a port at real rates never marks (as the seeds' switches did not).

    >>> switch_mark_bytes(10e6, 2.0), switch_mark_bytes(10e6, 2.0) // FRAME_BYTES
    (625000, 412)
    """
    if not rate_bps > 0 or not rto_min_s > 0:
        raise ConfigError(f"want a rate and a timer floor > 0, got {rate_bps}, {rto_min_s}")
    return max(FRAME_BYTES, round(rate_bps / 8 * rto_min_s * SWITCH_MARK_SHARE))


def hosts_rto_min_s(link_scale: float, supported: bool) -> float:
    """The floor the hosts run with: :func:`tcp_rto_min_s` where the kernel lets
    ``emu`` set it (``supported``: :func:`rto_min_supported`), else Linux's.

    >>> hosts_rto_min_s(0.01, True), hosts_rto_min_s(0.01, False)
    (2.0, 0.2)
    """
    return tcp_rto_min_s(link_scale) if supported else LINUX_RTO_MIN_S


def tcp_rto_min_s(link_scale: float) -> float:
    """The hosts' retransmission-timer floor: Linux's 200 ms scaled like the links,
    capped at :data:`MAX_RTO_MIN_S`.

    Scaled, a queue that delays a segment as long (in link time) as a real port
    would does not fire the timer early.  The cap bounds what a real loss costs:
    with the full scaling (20 s at 10 Mbit/s) one lost retransmission would stall a
    run for longer than most runs last.

    >>> tcp_rto_min_s(0.01), tcp_rto_min_s(0.5), tcp_rto_min_s(1.0)
    (2.0, 0.4, 0.2)
    """
    if not link_scale > 0:
        raise ConfigError(f"link scale must be > 0, got {link_scale}")
    return max(LINUX_RTO_MIN_S, min(MAX_RTO_MIN_S, LINUX_RTO_MIN_S / link_scale))


def rto_min_supported() -> bool:
    """Whether this kernel has the per-namespace ``net.ipv4.tcp_rto_min_us`` (6.11+)."""
    return RTO_MIN_SYSCTL.exists()
