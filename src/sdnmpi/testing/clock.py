"""A clock that moves only when told: pass ``clock.now()`` where the core wants ``now``."""

from __future__ import annotations


class FakeClock:
    """Seconds since an arbitrary origin, advanced by hand.

    >>> clock = FakeClock(10.0)
    >>> clock.advance(2.5)
    12.5
    >>> clock()
    12.5
    """

    def __init__(self, start_s: float = 0.0) -> None:
        self._now_s = float(start_s)

    def now(self) -> float:
        """The current time in seconds."""
        return self._now_s

    def __call__(self) -> float:
        return self._now_s

    def advance(self, duration_s: float) -> float:
        """Move forward by ``duration_s`` (>= 0) and return the new time."""
        if duration_s < 0:
            raise ValueError(f"a clock does not go back: advance({duration_s})")
        self._now_s += duration_s
        return self._now_s
