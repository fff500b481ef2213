"""The exception hierarchy: one root, a few kinds.

Every error raised on purpose by sdnmpi derives from :class:`SdnMpiError`, so an
adapter (CLI, daemon) can catch it at its edge and report it without a traceback.
Messages name the offending value and, where known, where it came from.
"""

from __future__ import annotations

from typing import Any


class SdnMpiError(Exception):
    """Root of all sdnmpi errors."""


class ConfigError(SdnMpiError):
    """Bad settings or command-line arguments."""


class TopologyError(SdnMpiError):
    """A topology that is malformed or does not fit the request."""


class PatternError(SdnMpiError):
    """A communication pattern, placement or collective request that is invalid."""


class FormatError(SdnMpiError):
    """A file that cannot be parsed; the message names the file and the problem."""


class RoutingError(SdnMpiError):
    """No valid route, or a routing request that cannot be satisfied."""


class StoreError(SdnMpiError):
    """A persistent store that is unavailable or inconsistent."""


def quoted(value: Any, limit: int = 80) -> str:
    """``value`` as an error message quotes an untrusted input: its ``repr`` cut to
    ``limit`` characters, a huge integer named rather than printed.

    >>> quoted("x" * 100, 10), quoted(10**300)
    ("'xxxxxx...", 'a huge integer')
    """
    huge = isinstance(value, int) and value.bit_length() >= 200
    text = "a huge integer" if huge else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
