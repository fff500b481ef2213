"""Record a host-level traffic matrix from the switches (the controller's measurement ops).

A client of the controller's API socket (``measure_*``, docs/controller-api.md):
start a measurement job on the hosts, wait, read the per-pair byte counters,
stop it (always, also on errors and Ctrl-C), and return the matrix as a
one-phase pattern whose rank i is the i-th host.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sdnmpi.controller.measure import FIRST_ID
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.errors import ConfigError
from sdnmpi.wire import controller_api


def record(api: Path, hosts: list[str], duration_s: float, name: str) -> Pattern:
    """Measure ``duration_s`` seconds of traffic between ``hosts``; :class:`ConfigError`
    when the controller cannot be asked or refuses."""
    if not 0 < duration_s <= 86400:
        raise ConfigError(f"--duration must be in (0, 86400] s, got {duration_s}")
    client = controller_api.Client(api, timeout_s=60.0)
    job_id = FIRST_ID + os.getpid()
    try:
        started = client.measure_start(job_id, hosts)
        try:
            time.sleep(duration_s)
            counted = client.measure_read(job_id)
        finally:
            client.measure_stop(job_id)
    except controller_api.ControllerApiError as exc:
        raise ConfigError(str(exc)) from None
    rank = {h: i for i, h in enumerate(hosts)}
    cells = []
    for (src, dst), nbytes in counted.items():
        if nbytes > 0:
            cells.append((rank[src], rank[dst], int(nbytes)))
    meta = {"source": "switch flow statistics", "hosts": ",".join(hosts),
            "skipped_pairs": ",".join(started.get("skipped", []))}  # fmt: skip
    phase = Phase.from_cells(f"{duration_s:g} s of traffic", cells)
    return Pattern(name, len(hosts), (phase,), meta=meta)
