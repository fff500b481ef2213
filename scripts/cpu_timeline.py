"""The emulated fabric's CPU figures over any window of a run (``demo_fabric.CpuMonitor``
sampled every second in a thread): what says whether a run was CPU-bound."""

from __future__ import annotations

import threading
import time

import demo_fabric as harness


class CpuTimeline:
    """``CpuMonitor`` samples every second in a thread, for figures over any window."""

    def __init__(self, fabric: str) -> None:
        self.mon = harness.CpuMonitor(fabric)
        self.samples: list[tuple[float, tuple[float, int, int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), self.mon.sample()))
            if self._stop.wait(1.0):
                self.samples.append((time.time(), self.mon.sample()))
                return

    def __enter__(self) -> CpuTimeline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def window(self, begin: float | None = None, end: float | None = None) -> dict[str, float]:
        """CPU figures between the samples nearest ``begin`` and ``end`` (wall clock)."""
        pts = self.samples
        a = min(pts, key=lambda p: abs(p[0] - begin)) if begin is not None else pts[0]
        b = min(pts, key=lambda p: abs(p[0] - end)) if end is not None else pts[-1]
        if b[0] <= a[0]:
            a, b = pts[0], pts[-1]
        fig = harness.CpuMonitor.figures(a[1], b[1])
        return {**fig, "cpu_bound": float(harness.CpuMonitor.bound(fig))}
