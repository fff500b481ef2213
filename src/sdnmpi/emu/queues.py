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

#: Marking threshold in full frames: DCTCP's K for 1 Gbit/s ports (Alizadeh et al.,
#: SIGCOMM 2010).  In frames the threshold does not depend on the rate, as TCP's
#: windows do not.
MARK_FRAMES: Final = 20
FRAME_BYTES: Final = 1514

#: Linux's floor of the retransmission timer (TCP_RTO_MIN) and the most ``emu`` sets.
LINUX_RTO_MIN_S: Final = 0.2
MAX_RTO_MIN_S: Final = 2.0
RTO_MIN_SYSCTL: Final = Path("/proc/sys/net/ipv4/tcp_rto_min_us")


def queues_in_use() -> str:
    """The mode ``emu up`` uses without ``--queues``: :data:`QUEUES_ENV` or the default."""
    return os.environ.get(QUEUES_ENV) or DEFAULT_QUEUES


def mark_threshold_bytes() -> int:
    """Backlog above which a port marks: :data:`MARK_FRAMES` full frames.

    >>> mark_threshold_bytes()
    30280
    """
    return MARK_FRAMES * FRAME_BYTES


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
