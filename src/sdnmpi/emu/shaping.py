"""Link shaping of the emulated fabric: HTB on every veth end, and host socket buffers
scaled like the links (docs/emulator-fidelity.md)."""

from __future__ import annotations


def tc_rate(rate_bps: float) -> str:
    """A rate as ``tc`` reads it, in whole bit/s.

    >>> tc_rate(5e7)
    '50000000bit'
    """
    return f"{max(1, round(rate_bps))}bit"


def htb_burst_bytes(rate_bps: float) -> int:
    """HTB burst: 0.1 ms at the rate, at least one full frame.

    A real link never sends faster than its rate; a token bucket lets ``burst``
    bytes through at once after an idle spell.  Ten frames (the former value)
    made a 64 KiB message cross a 10 Mbit/s link in 43 ms, faster than the 54 ms
    the link allows; one frame gives 54 ms and the same streaming rate.

    >>> htb_burst_bytes(1e7), htb_burst_bytes(1e9)
    (1514, 12500)
    """
    return max(1514, round(rate_bps / 8 * 1e-4))


def shaping_argvs(dev: str, rate_bps: float, netns: str | None) -> list[tuple[str, ...]]:
    """``tc`` commands that shape egress of ``dev`` to ``rate_bps`` with one HTB class."""
    tc = ("tc", "-n", netns) if netns else ("tc",)
    rate, burst = tc_rate(rate_bps), str(htb_burst_bytes(rate_bps))
    htb = ("rate", rate, "ceil", rate, "burst", burst, "cburst", burst, "quantum", "1514")
    return [
        (*tc, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"),
        (*tc, "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb", *htb),
    ]


def tcp_wmem_max(link_scale: float) -> int:
    """A host's largest autotuned TCP send buffer, and its largest unsent backlog,
    scaled like its links.

    Linux lets a socket buffer up to 4 MiB: 32 ms at 1 Gbit/s, but 640 ms at the
    50 Mbit/s that stands for it here.  Scaling the buffer with the link keeps the
    time data waits in it what it would be on the real host (what an MPI call
    leaves behind when it returns drains as fast), with a 64 KiB floor.  The same
    bound applies as ``tcp_notsent_lowat`` to the data not yet sent, also on
    sockets whose buffers the application sets itself: the full-duplex MPI
    settings (``sdnmpi.node.duplex``) set them, because an exchange needs more
    than this in flight (docs/mpi-duplex.md, "Socket buffers").

    >>> tcp_wmem_max(0.05), tcp_wmem_max(0.001)
    (209715, 65536)
    """
    return max(65536, round(4 * 2**20 * link_scale))
