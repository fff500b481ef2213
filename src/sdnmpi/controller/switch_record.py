"""Record a host-level traffic matrix from the switches (the controller's measurement ops).

A client of the controller's API socket (see :mod:`~sdnmpi.controller.measure`):
start a measurement job on the hosts, wait, read the per-pair byte counters,
stop it (always, also on errors and Ctrl-C), and return the matrix as a
one-phase pattern whose rank i is the i-th host.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from sdnmpi.controller.measure import FIRST_ID
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.errors import ConfigError


def call(api: Path, request: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
    """One request line to the controller's API; the reply if ``ok``, else ConfigError."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(str(api))
            s.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise ConfigError(f"controller API {api}: {exc}") from None
    reply: dict[str, Any] = json.loads(data) if data else {"ok": False, "error": "no reply"}
    if not reply.get("ok"):
        raise ConfigError(f"controller refused {request['op']}: {reply.get('error', reply)}")
    return reply


def record(api: Path, hosts: list[str], duration_s: float, name: str) -> Pattern:
    """Measure ``duration_s`` seconds of traffic between ``hosts``."""
    if not 0 < duration_s <= 86400:
        raise ConfigError(f"--duration must be in (0, 86400] s, got {duration_s}")
    job_id = FIRST_ID + os.getpid()
    started = call(api, {"op": "measure_start", "job_id": job_id, "hosts": hosts})
    try:
        time.sleep(duration_s)
        counted = call(api, {"op": "measure_read", "job_id": job_id})["bytes"]
    finally:
        call(api, {"op": "measure_stop", "job_id": job_id})
    rank = {h: i for i, h in enumerate(hosts)}
    cells = []
    for key, nbytes in counted.items():
        src, _, dst = key.partition(">")
        if nbytes > 0:
            cells.append((rank[src], rank[dst], int(nbytes)))
    meta = {"source": "switch flow statistics", "hosts": ",".join(hosts),
            "skipped_pairs": ",".join(started.get("skipped", []))}  # fmt: skip
    phase = Phase.from_cells(f"{duration_s:g} s of traffic", cells)
    return Pattern(name, len(hosts), (phase,), meta=meta)
