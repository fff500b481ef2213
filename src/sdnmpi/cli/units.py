"""Human-readable units for CLI tables."""

from __future__ import annotations


def bps(value: float) -> str:
    """A bit rate with an SI prefix.

    >>> bps(4e9), bps(125e6)
    ('4 Gbit/s', '125 Mbit/s')
    """
    for factor, unit in ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if abs(value) >= factor:
            return f"{value / factor:.4g} {unit}"
    return f"{value:.4g} bit/s"


def size(value: float) -> str:
    """A byte count with a binary prefix.

    >>> size(1536), size(75000)
    ('1.5 KiB', '73.24 KiB')
    """
    for factor, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(value) >= factor:
            return f"{value / factor:.4g} {unit}"
    return f"{int(value)} B"
