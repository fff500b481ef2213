"""``sdnmpi calibrate``: measure what the simulator needs on an emulated fabric.

Brings up a small loop-free fabric (one spine, two leaves of four hosts, MAC
learning, no controller) at ``link_scale``, runs ``sdnmpi-bench`` on it with
real MPI ranks, and derives a :class:`~sdnmpi.sim.calibration.Calibration`:

* **goodput**: one large one-way stream (``bw``, 1 MiB messages) over the
  shaped line rate;
* **latencies**: 8-byte ping-pong (``latency``) between hosts on one leaf (two
  arcs) and on different leaves (four arcs), split into a per-arc latency and
  the rest (:func:`~sdnmpi.sim.calibration.latency_split`);
* **eager limits**: for each MPI flavour asked for, the largest message that
  still flows both ways at once (``bibw`` at least 1.5 times ``bw``'s rate),
  by bisection between a size that does and one that does not; ``--quick``
  only checks the preset's limit from both sides;
* **duplex ratios**: for each flavour whose preset exchange is ``partial``
  (MPICH over UCX), ``bibw`` over ``bw`` of 1 MiB messages with default settings
  (:data:`~sdnmpi.sim.protocol.MPICH_UCX_DUPLEX_RATIO` documents the figure).

Everything it starts is stopped, also on error (``emu down``); the fabric is
named ``calib-<pid>``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdnmpi import artefacts
from sdnmpi.core.generators import leaf_spine
from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.emu import fabriclock, queues, runner
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT
from sdnmpi.errors import ConfigError, SdnMpiError
from sdnmpi.formats.replay import save_replay
from sdnmpi.node.duplex import duplex_env
from sdnmpi.sim.calibration import MAX_EXCHANGE_CV, Calibration, bisect_largest, latency_split
from sdnmpi.sim.protocol import PROTOCOLS

LINK_BPS = 1e9
#: ``bibw`` over ``bw``: at least this, the two directions ran at once.
CONCURRENT_RATIO = 1.5
#: Bytes in flight per direction for each bandwidth probe (the window is this / size).
WINDOW_BYTES = 512 * 1024
#: Bisection brackets (bytes) and step, per flavour's default protocol.
BRACKETS = {"openmpi": (32768, 131072, 16), "mpich": (8192, 65536, 64)}
PRESET = {"openmpi": "openmpi", "mpich": "mpich"}
CLI = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()"]

Progress = Callable[[str], None]


class CalibrationError(SdnMpiError):
    """A measurement failed (an MPI run, a fabric)."""


@dataclass
class Bench:
    """``sdnmpi-bench`` of each flavour, run with ``sdnmpi emu mpirun`` on one fabric."""

    fabric: str
    binaries: dict[str, Path]
    replay: Path
    state_root: Path = DEFAULT_STATE_ROOT
    timeout_s: float = 300.0
    runs: list[dict[str, Any]] = field(default_factory=list)

    def result(
        self, flavour: str, hosts: tuple[str, str], args: list[str], env: dict[str, str]
    ) -> dict[str, Any]:
        """The first result row of one ``sdnmpi-bench --json`` run."""
        doc = self.document(flavour, hosts, [str(self.binaries[flavour]), *args], env)
        row: dict[str, Any] = doc["results"][0]
        self.runs.append({"flavour": flavour, "hosts": list(hosts), "args": args, **row})
        return row

    def document(
        self, flavour: str, hosts: tuple[str, ...], program: list[str], env: dict[str, str]
    ) -> dict[str, Any]:
        """The JSON document a ``--json`` MPI program prints, one rank per host."""
        argv = [*CLI, "emu", "mpirun", "--name", self.fabric, "-n", str(len(hosts))]
        argv += ["--mpi", flavour, "--state-dir", str(self.state_root)]
        argv += ["--hosts", ",".join(hosts), "--timeout", str(round(self.timeout_s))]
        argv += [a for k, v in env.items() for a in ("--env", f"{k}={v}")]
        argv += ["--", *program, "--json"]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("{")), None)
        if proc.returncode != 0 or line is None:
            tail = proc.stderr.strip().splitlines()[-3:]
            raise CalibrationError(
                f"calibrate: {flavour} {Path(program[0]).name} "
                f"{' '.join(program[1:])} failed ({proc.returncode}): {' / '.join(tail)}"
            )
        doc: dict[str, Any] = json.loads(line)
        return doc


def rate_bps(
    bench: Bench, flavour: str, kind: str, size: int, env: dict[str, str], iters: int = 3
) -> float:
    """Payload bits per second of ``bw`` or ``bibw`` (both directions) between h1 and h2,
    over ``iters`` timed windows."""
    window = max(1, WINDOW_BYTES // size)
    args = [kind, "--size", str(size), "--window", str(window)]
    args += ["--iters", str(iters), "--warmup", "1"]
    return float(bench.result(flavour, ("h1", "h2"), args, env)["bandwidth_MBps"]) * 8e6


def concurrent(bench: Bench, flavour: str, size: int, one_way_bps: float) -> bool:
    """Whether messages of ``size`` ran both ways at once under the flavour's defaults."""
    return rate_bps(bench, flavour, "bibw", size, {}) >= CONCURRENT_RATIO * one_way_bps


def eager_limit(
    bench: Bench, flavour: str, one_way_bps: float, quick: bool, progress: Progress
) -> tuple[int, dict[str, Any]]:
    """The largest message the flavour's defaults still send both ways at once."""
    preset = PROTOCOLS[PRESET[flavour]].eager_limit_bytes
    assert preset is not None
    if quick:
        below, above = (
            concurrent(bench, flavour, preset, one_way_bps),
            concurrent(bench, flavour, 2 * preset, one_way_bps),
        )
        progress(f"{flavour}: {preset} B concurrent={below}, {2 * preset} B concurrent={above}")
        return preset, {"checked": [preset, 2 * preset], "concurrent": [below, above]}
    lo, hi, step = BRACKETS[flavour]
    if not concurrent(bench, flavour, lo, one_way_bps) or concurrent(
        bench, flavour, hi, one_way_bps
    ):
        raise CalibrationError(
            f"calibrate: {flavour} does not switch from concurrent to serialized between "
            f"{lo} and {hi} bytes; keeping no eager limit for it"
        )
    limit = bisect_largest(lambda s: concurrent(bench, flavour, s, one_way_bps), lo, hi, step)
    progress(f"{flavour}: largest message sent both ways at once: {limit} B")
    return limit, {"bracket": [lo, hi], "step": step}


#: Concurrent exchange pairs the efficiency is measured at (on disjoint leaf-local paths).
EXCHANGE_PAIRS = (1, 2, 4)
EXCHANGE_BYTES = 512 * 1024
#: Timed passes of the exchange replay (4 exchanges each, every rank timing its own).
EXCHANGE_ITERS = 8


#: Message size of the duplex ratio probe: well above every library's default limit.
DUPLEX_PROBE_BYTES = 1 << 20
#: Timed windows of the duplex ratio probe: under MPICH's defaults each window's
#: exchange is a race (both ways at once, or one after the other); 3 windows gave
#: x1.18 in one run and x1.86 in the next, 12 give the race's mean within about 0.2.
DUPLEX_PROBE_ITERS = 12


def duplex_ratio(bench: Bench, flavour: str, progress: Progress) -> float:
    """``bibw`` over ``bw`` of rendezvous messages under the flavour's defaults, in
    [1, 2]: how much of a second direction a rank pair's exchange gets."""
    one_way = rate_bps(bench, flavour, "bw", DUPLEX_PROBE_BYTES, {}, DUPLEX_PROBE_ITERS)
    both = rate_bps(bench, flavour, "bibw", DUPLEX_PROBE_BYTES, {}, DUPLEX_PROBE_ITERS)
    ratio = min(2.0, max(1.0, both / one_way))
    progress(f"{flavour}: 1 MiB exchanges move x{ratio:.2f} of one direction's rate")
    return ratio


def exchange_efficiency(
    bench: Bench, flavour: str, replay: Path, model_s: float, workdir: Path, progress: Progress
) -> tuple[dict[int, float], float, dict[str, Any]]:
    """``{k: e}``: a lone exchange's time under the model over the measured time of one
    exchange step when ``k`` rank pairs exchange at once (full duplex settings, so
    the exchanges are concurrent), each pair on its own leaf-local links; and how
    unevenly they progress with the most pairs (``sdnmpi-replay``'s ``wait_cv``: the
    coefficient of variation of one rank's exchange time over ranks and occurrences,
    0 if the replay did not report it)."""
    out: dict[int, float] = {}
    cv = 0.0
    raw: dict[str, Any] = {}
    for k in EXCHANGE_PAIRS:
        cells = [(r, r ^ 1, EXCHANGE_BYTES) for r in range(2 * k)]
        path = workdir / f"exchange-{k}.replay"
        save_replay(
            Pattern(f"exchange-{k}", 2 * k, (Phase.from_cells("x", cells, repeat=4),)), path
        )
        hosts = tuple(f"h{i + 1}" for i in range(2 * k))
        doc = bench.document(
            flavour,
            hosts,
            [str(replay), "--iters", str(EXCHANGE_ITERS), str(path)],
            duplex_env(flavour),
        )
        measured = float(doc["phases"][0]["time_s"])
        out[k] = min(1.0, model_s / measured)
        cv = min(MAX_EXCHANGE_CV, float(doc["phases"][0].get("wait_cv") or 0.0))
        raw[str(k)] = {"measured_s": measured, "model_s": model_s, "wait_cv": cv}
        progress(
            f"{k} exchange pair(s) at once: {measured * 1e3:.0f} ms per 512 KiB exchange "
            f"(alone on the links: {model_s * 1e3:.0f} ms): efficiency {out[k]:.2f}, "
            f"exchange times vary by {cv:.3f}"
        )
    return out, cv, raw


def one_way_latency_s(bench: Bench, flavour: str, hosts: tuple[str, str]) -> float:
    """Mean one-way latency of 8-byte messages (ping-pong)."""
    args = ["latency", "--size", "8", "--iters", "200", "--warmup", "20"]
    return float(bench.result(flavour, hosts, args, {})["latency_us"]) * 1e-6


def measure(
    bench: Bench, link_scale: float, flavours: tuple[str, ...], quick: bool, progress: Progress
) -> Calibration:
    """Every figure of the calibration, on the fabric ``bench`` runs on."""
    line_bps = LINK_BPS * link_scale
    first = flavours[0]
    one_way = rate_bps(bench, first, "bw", 1 << 20, {})
    goodput = min(1.0, one_way / line_bps)
    progress(f"goodput {one_way / 1e6:.2f} of {line_bps / 1e6:.2f} Mbit/s ({goodput:.3f})")
    near = one_way_latency_s(bench, first, ("h1", "h2"))
    far = one_way_latency_s(bench, first, ("h1", "h5"))
    arc, base = latency_split(near, far)
    progress(f"latency {near * 1e6:.0f} us (2 arcs), {far * 1e6:.0f} us (4 arcs)")
    duplex = rate_bps(bench, first, "bibw", 1 << 20, duplex_env(first))
    lone_s = near + EXCHANGE_BYTES * 8 / one_way
    with tempfile.TemporaryDirectory(prefix="sdnmpi-calib-") as tmp:
        efficiency, exchange_cv, exchange_raw = exchange_efficiency(
            bench, first, bench.replay, lone_s, Path(tmp), progress
        )
    limits: dict[str, int | None] = {}
    found: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    for flavour in flavours:
        try:
            limits[PRESET[flavour]], found[flavour] = eager_limit(
                bench, flavour, one_way, quick, progress
            )
        except CalibrationError as exc:
            progress(str(exc))
            found[flavour] = {"error": str(exc)}
        if PROTOCOLS[PRESET[flavour]].exchange == "partial":
            ratios[PRESET[flavour]] = duplex_ratio(bench, flavour, progress)
    return Calibration(
        link_scale=link_scale,
        goodput=goodput,
        arc_latency_s=arc,
        base_latency_s=base,
        eager_limits=limits,
        exchange_duplex=ratios,
        exchange_efficiency=efficiency,
        exchange_cv=exchange_cv,
        # the default queues (ecn): a busy host's backlog stays near its marking threshold
        host_queue_bytes=queues.mark_threshold_bytes(),
        source=f"sdnmpi calibrate {time.strftime('%Y-%m-%dT%H:%M:%S')} "
        f"({'quick' if quick else 'full'}, {', '.join(flavours)})",
        measurements={
            "line_bps": line_bps,
            "one_way_bps": one_way,
            "duplex_bibw_bps": duplex,
            "duplex_ratio": duplex / one_way,
            "latency_2_arcs_s": near,
            "latency_4_arcs_s": far,
            "eager": found,
            "exchange": exchange_raw,
            "runs": bench.runs,
        },
    )


def find_program(flavour: str, name: str = "sdnmpi-bench") -> Path:
    """``<flavour>/<name>`` of the artefact directory (:mod:`sdnmpi.artefacts`: an
    installation's, else the checkout's ``build/``, ``make mpibench replay``)."""
    path = artefacts.path(f"{flavour}/{name}")
    if not path.is_file():
        raise ConfigError(
            f"{path} not found (artefacts from {artefacts.describe()}): run `make mpibench replay`"
        )
    return path


def calibrate(
    link_scale: float,
    flavours: tuple[str, ...] = ("openmpi",),
    *,
    quick: bool = False,
    state_root: Path = DEFAULT_STATE_ROOT,
    progress: Progress = lambda _msg: None,
) -> Calibration:
    """Bring up the calibration fabric (holding the machine's fabric lock), measure, tear
    it down (also on error)."""
    if not link_scale > 0:
        raise ConfigError(f"--link-scale must be > 0, got {link_scale}")
    unknown = [f for f in flavours if f not in PRESET]
    if unknown or not flavours:
        raise ConfigError(f"unknown MPI flavour(s) {unknown} (want openmpi, mpich)")
    binaries = {f: find_program(f) for f in flavours}
    bench = Bench(
        f"calib-{os.getpid()}", binaries, find_program(flavours[0], "sdnmpi-replay"), state_root
    )
    topo = leaf_spine(1, 2, 4, host_bps=LINK_BPS, uplink_bps=LINK_BPS, name="calibration")
    mbps = LINK_BPS * link_scale / 1e6
    with fabriclock.fabric_lock(progress):  # one fabric per machine: queue behind others
        progress(f"fabric {bench.fabric}: 8 hosts on 2 leaves, {mbps:g} Mbit/s links")
        try:
            runner.up(
                topo, bench.fabric, link_scale=link_scale, state_root=state_root, l2_learning=True
            )
            return measure(bench, link_scale, flavours, quick, progress)
        finally:
            runner.down(bench.fabric, state_root=state_root)
