"""What the simulator reads from measurements of the target fabric.

A flow model needs the rate a flow really gets out of a link, the latency a
message really pays per hop and the MPI library's real eager limits.  On the
emulated cluster, and on any real one, these differ from the topology's nominal
figures: TCP/IP and Ethernet headers take about 4.4 % of a 1500-byte frame,
the userspace switches add tens of microseconds per hop, and UCX picks its
rendezvous threshold from its own estimate of the transport.  ``sdnmpi
calibrate`` measures them with ``sdnmpi-bench`` and writes a
:class:`Calibration` (JSON, ``sdnmpi.calibration/1``); the experiments and
``sdnmpi evaluate --calibration`` read it.  Without a file,
:meth:`Calibration.nominal` is the topology as written.

Fields:

* ``link_scale``: the emulator's rate factor (``sdnmpi emu up --link-scale``):
  the shaped rate of a link is its capacity times this.  1.0 on real hardware.
* ``goodput``: MPI payload rate of one large one-way stream over the shaped
  line rate (``sdnmpi-bench bw``), e.g. 0.955 at 1500-byte frames.
* ``arc_latency_s``: one-way latency per arc (link direction), from the
  small-message latency difference between hosts 2 and 4 arcs apart.
* ``base_latency_s``: the rest of a small message's one-way latency (the MPI
  library and both hosts' stacks), paid once per flow.
* ``eager_limits``: per protocol preset of :mod:`sdnmpi.sim.protocol`, the
  largest message that still flowed both ways at once (``sdnmpi-bench bibw``
  bisection), replacing the preset's documented limit.
* ``exchange_duplex``: per protocol preset whose exchange is ``partial``
  (``mpich``), ``bibw`` over ``bw`` of messages above its eager limit with
  default settings, replacing the preset's ``duplex``.
* ``exchange_efficiency``: ``{k: e}``, the fraction of its max-min share that
  a flow gets while its rank pair sends both ways at once over one TCP
  connection, with ``k`` such pairs exchanging at the same time (measured with
  ``sdnmpi-replay`` on pairs that share no link).  A real cluster measures
  about 1; the emulated one less, and less as ``k`` grows, because two cores
  carry every rank and switch (one pair: 0.96, four: about 0.7).  A phase with
  ``m`` concurrent exchange pairs slows their flows by ``e(m)`` (interpolated,
  held constant beyond the measured range, see :meth:`Calibration.efficiency`).
* ``exchange_cv``: how unevenly concurrent exchanges progress: the coefficient of
  variation (standard deviation over mean) of one exchange's time over the
  exchanges of the largest ``k`` above and their occurrences (``sdnmpi-replay``'s
  ``wait_cv``).  The fluid model runs equal flows in lockstep; real ones do not, and
  where messages leave as soon as their sender is ready (eager, no barrier) a rank
  pair that finishes a step early sends its next step into hosts still receiving
  the last, a delay that spreads from step to step (and, since an eager send does
  not hold its sender, :mod:`sdnmpi.sim.protocol`, from rank to rank).  Measured on
  2026-11-28 (``scripts/probe_drift.py``: eight Open MPI ranks on contention-free
  routes, 1 MiB): the Allreduce took 2.35 s, the lockstep model said 1.77 s and
  with the calibrated 0.045 it says 2.22 s; routings with contention move by a few
  per cent.  ``sdnmpi calibrate`` measured 0.035-0.036 in three runs of eight
  passes, 0.032-0.052 in five of three.  With ``exchange_cv`` > 0,
  :meth:`Calibration.simulate` gives the mean
  time of :data:`NOISE_SAMPLES` runs whose flows' sizes are scaled by seeded
  lognormal factors of mean 1 and this coefficient of variation (deterministic:
  the same figures every time).  0 (a file without the key) is the lockstep model.
* ``host_queue_bytes``: the backlog TCP keeps in a busy host's interface queue (the
  emulator's hosts mark ECN above 20 full frames, 30,280 bytes:
  :func:`sdnmpi.emu.queues.mark_threshold_bytes`, the default, also for files without
  the key).  A rendezvous message waits for its receiver's reply, and a receiver that
  is itself sending at the time queues that reply behind this backlog
  (:func:`sdnmpi.sim.flowset.with_handshake_queues`): at 5 Mbit/s 48 ms per ring step
  of MPICH's Bcast, 1 s per 1 MiB call at 20 ranks, measured 2026-11-29
  (docs/bcast.md, "MPICH's own Bcast at 20 ranks").  0 turns it off.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sdnmpi.core.routing.model import Demands, Fabric, Routing
from sdnmpi.errors import ConfigError, FormatError
from sdnmpi.sim import simulate_workload
from sdnmpi.sim.flowset import FlowSet, concurrent_exchanges, with_handshake_queues
from sdnmpi.sim.platform import Platform
from sdnmpi.sim.protocol import IDEAL, PROTOCOLS, Protocol, resolve_protocol
from sdnmpi.sim.report import SimResult

SCHEMA = "sdnmpi.calibration/1"
#: Runs averaged when ``exchange_cv`` > 0 (seeds 0 .. NOISE_SAMPLES - 1).
NOISE_SAMPLES = 8
#: The emulated hosts' ECN marking threshold, 20 frames of 1514 bytes
#: (``sdnmpi.emu.queues``; tests/sim keep the two equal): the ``host_queue_bytes`` of a
#: calibration that does not say.
HOST_QUEUE_BYTES = 20 * 1514
#: The largest accepted ``exchange_cv`` (a measurement above it is a broken run).
MAX_EXCHANGE_CV = 1.0
_KEYS = {
    "schema",
    "link_scale",
    "goodput",
    "arc_latency_s",
    "base_latency_s",
    "host_queue_bytes",
    "eager_limits",
    "exchange_duplex",
    "exchange_efficiency",
    "exchange_cv",
    "source",
    "measurements",
}


@dataclass(frozen=True)
class Calibration:
    """Measured rates, latencies and eager limits of one fabric (see the module docstring).

    >>> cal = Calibration.nominal(0.01)
    >>> cal.rate_factor, cal.protocol("openmpi").eager_limit_bytes
    (0.01, 65536)
    """

    link_scale: float = 1.0
    goodput: float = 1.0
    arc_latency_s: float | None = None
    base_latency_s: float = 0.0
    eager_limits: dict[str, int | None] = field(default_factory=dict)
    exchange_duplex: dict[str, float] = field(default_factory=dict)
    exchange_efficiency: dict[int, float] = field(default_factory=dict)
    exchange_cv: float = 0.0
    host_queue_bytes: int = HOST_QUEUE_BYTES
    source: str = "nominal"
    measurements: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _fraction("link_scale", self.link_scale, upper=math.inf)
        _fraction("goodput", self.goodput)
        if (
            isinstance(self.host_queue_bytes, bool)
            or not isinstance(self.host_queue_bytes, int)
            or not 0 <= self.host_queue_bytes <= 1 << 30
        ):
            raise ConfigError(
                f"calibration: host_queue_bytes must be an integer in [0, 2^30], "
                f"got {self.host_queue_bytes!r}"
            )
        for name in ("arc_latency_s", "base_latency_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"calibration: {name} must be finite and >= 0, got {value!r}")
        for name, limit in self.eager_limits.items():
            if name not in PROTOCOLS:
                known = ", ".join(PROTOCOLS)
                raise ConfigError(
                    f"calibration: eager limit for unknown protocol {name!r} ({known})"
                )
            if limit is not None and (
                isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
            ):
                raise ConfigError(f"calibration: eager limit of {name} must be an integer >= 0")
        for name, ratio in self.exchange_duplex.items():
            if PROTOCOLS.get(name, IDEAL).exchange != "partial":
                partial = ", ".join(n for n, p in PROTOCOLS.items() if p.exchange == "partial")
                raise ConfigError(
                    f"calibration: duplex ratio for {name!r}, which is not a preset with a "
                    f"partial exchange ({partial})"
                )
            if isinstance(ratio, bool) or not isinstance(ratio, int | float):
                raise ConfigError(f"calibration: duplex ratio of {name} must be a number")
            if not 1.0 <= ratio <= 2.0:
                raise ConfigError(f"calibration: duplex ratio of {name} must be in [1, 2]")
        for k, e in self.exchange_efficiency.items():
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise ConfigError(f"calibration: exchange efficiency for {k!r} pairs (want k >= 1)")
            _fraction(f"exchange efficiency at {k} pairs", e)
        cv = self.exchange_cv
        if (
            isinstance(cv, bool)
            or not isinstance(cv, int | float)
            or not (math.isfinite(cv) and 0 <= cv <= MAX_EXCHANGE_CV)
        ):
            raise ConfigError(
                f"calibration: exchange_cv must be in [0, {MAX_EXCHANGE_CV}], got {cv!r}"
            )

    @property
    def rate_factor(self) -> float:
        """Capacity factor of the simulated platform: ``link_scale * goodput``."""
        return self.link_scale * self.goodput

    @classmethod
    def nominal(cls, link_scale: float = 1.0) -> Calibration:
        """The topology as written, at the emulator's rate factor."""
        return cls(link_scale=link_scale)

    def protocol(self, spec: Protocol | str) -> Protocol:
        """A protocol preset with this fabric's measured eager limit and duplex ratio, if
        any (a preset changed by its spec is kept as given).

        >>> Calibration(exchange_duplex={"mpich": 1.5}).protocol("mpich").duplex
        1.5
        """
        proto = resolve_protocol(spec)
        if PROTOCOLS.get(proto.name) != proto:
            return proto
        if proto.name in self.eager_limits:
            proto = dataclasses.replace(proto, eager_limit_bytes=self.eager_limits[proto.name])
        if proto.name in self.exchange_duplex:
            proto = dataclasses.replace(proto, duplex=float(self.exchange_duplex[proto.name]))
        return proto

    def efficiency(self, pairs: int) -> float:
        """Exchange efficiency with ``pairs`` concurrent exchange pairs (1.0 if unmeasured).

        >>> Calibration(exchange_efficiency={1: 0.96, 4: 0.72}).efficiency(2)
        0.88
        """
        if not self.exchange_efficiency or pairs < 1:
            return 1.0
        ks = sorted(self.exchange_efficiency)
        es = [self.exchange_efficiency[k] for k in ks]
        return float(np.interp(pairs, ks, es))

    def platform(self, fabric: Fabric) -> Platform:
        """The fabric's arcs at the calibrated rate and latency."""
        base = Platform.from_fabric(fabric)
        latency = base.latency_s
        if self.arc_latency_s is not None:
            latency = np.full(base.narcs, self.arc_latency_s)
        cap = base.capacity_bps * self.rate_factor
        return Platform(base.name, _ro(cap), _ro(latency), base.arc_names)

    def simulate(
        self,
        fabric: Fabric,
        demands: Demands,
        routing: Routing,
        protocol: Protocol | str | None = None,
        **kwargs: Any,
    ) -> SimResult:
        """:func:`sdnmpi.sim.simulate` on the calibrated platform, with ``base_latency_s``
        added to every flow's path latency.  With ``exchange_cv`` > 0 its ``total_s`` is
        the mean over :data:`NOISE_SAMPLES` runs with varying flow times (the module
        docstring); its other fields are the lockstep run's."""
        platform, flowset, proto = self.prepared(fabric, demands, routing, protocol)
        result = simulate_workload(platform, flowset, protocol=proto, **kwargs)
        if not self.exchange_cv or not len(flowset.size_bytes):
            return result
        totals = [
            simulate_workload(platform, varied, protocol=proto, **kwargs).total_s
            for varied in varied_flowsets(flowset, self.exchange_cv)
        ]
        note = (
            f"total_s: mean of {len(totals)} runs with flow times varying by "
            f"{self.exchange_cv:.3g} (calibration exchange_cv; {min(totals):.4g} to "
            f"{max(totals):.4g} s, lockstep {result.total_s:.4g} s)"
        )
        return dataclasses.replace(
            result, total_s=float(np.mean(totals)), notes=(*result.notes, note)
        )

    def prepared(
        self,
        fabric: Fabric,
        demands: Demands,
        routing: Routing,
        protocol: Protocol | str | None = None,
    ) -> tuple[Platform, FlowSet, Protocol | None]:
        """What :meth:`simulate` simulates: the calibrated platform, the flows (base
        latency added, exchanges slowed by their measured efficiency) and the protocol
        with this fabric's measured limits."""
        platform = self.platform(fabric)
        flowset = FlowSet.from_demands(platform, demands, routing)
        if self.base_latency_s:
            flowset = dataclasses.replace(
                flowset, latency_s=flowset.latency_s + self.base_latency_s
            )
        proto = self.protocol(protocol) if protocol is not None else None
        if self.exchange_efficiency:
            mask, pairs = concurrent_exchanges(flowset, proto or IDEAL)
            eff = np.array([self.efficiency(int(k)) for k in pairs])
            scale = np.where(mask, 1.0 / eff[flowset.phase], 1.0)
            flowset = dataclasses.replace(flowset, size_bytes=flowset.size_bytes * scale)
        if proto is not None and self.host_queue_bytes:
            drain_bps = platform.capacity_bps / self.goodput  # queues drain at line rate
            flowset = with_handshake_queues(flowset, proto, self.host_queue_bytes, drain_bps)
        return platform, flowset, proto

    # -- JSON --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The ``sdnmpi.calibration/1`` document."""
        return {
            "schema": SCHEMA,
            "link_scale": self.link_scale,
            "goodput": self.goodput,
            "arc_latency_s": self.arc_latency_s,
            "base_latency_s": self.base_latency_s,
            "eager_limits": dict(self.eager_limits),
            "exchange_duplex": dict(self.exchange_duplex),
            "exchange_efficiency": {str(k): e for k, e in sorted(self.exchange_efficiency.items())},
            "exchange_cv": self.exchange_cv,
            "host_queue_bytes": self.host_queue_bytes,
            "source": self.source,
            "measurements": self.measurements,
        }

    @classmethod
    def from_dict(cls, doc: Any, where: str = "calibration") -> Calibration:
        """Validate and read a document (unknown keys rejected)."""
        if not isinstance(doc, dict):
            raise FormatError(f"{where}: not a JSON object")
        if doc.get("schema") != SCHEMA:
            raise FormatError(f"{where}: schema {doc.get('schema')!r}, want {SCHEMA!r}")
        unknown = set(doc) - _KEYS
        if unknown:
            raise FormatError(f"{where}: unknown keys {sorted(unknown)}")
        try:
            return cls(
                link_scale=_number(doc, "link_scale", 1.0, where),
                goodput=_number(doc, "goodput", 1.0, where),
                arc_latency_s=_optional_number(doc, "arc_latency_s", where),
                base_latency_s=_number(doc, "base_latency_s", 0.0, where),
                eager_limits=_limits(doc.get("eager_limits", {}), where),
                exchange_duplex=_ratios(doc.get("exchange_duplex", {}), where),
                exchange_efficiency=_efficiencies(doc.get("exchange_efficiency", {}), where),
                exchange_cv=_number(doc, "exchange_cv", 0.0, where),
                host_queue_bytes=_count(doc, "host_queue_bytes", HOST_QUEUE_BYTES, where),
                source=str(doc.get("source", where)),
                measurements=dict(doc.get("measurements") or {}),
            )
        except ConfigError as exc:
            raise FormatError(f"{where}: {exc}") from None

    @classmethod
    def load(cls, path: Path) -> Calibration:
        """Read ``path`` (a clear :class:`FormatError` for a bad file)."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise FormatError(f"{path}: {exc.strerror or exc}") from None
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise FormatError(f"{path}: not JSON ({exc})") from None
        return cls.from_dict(doc, str(path))

    @classmethod
    def load_or_nominal(cls, path: Path | None, link_scale: float) -> Calibration:
        """:meth:`load` ``path`` if one is given, else :meth:`nominal` at ``link_scale``
        (the experiments' ``--calibration`` / ``--link-scale`` pair)."""
        return cls.load(path) if path else cls.nominal(link_scale)

    def save(self, path: Path) -> None:
        """Write the document (indented)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")


def varied_flowsets(flowset: FlowSet, cv: float, samples: int = NOISE_SAMPLES) -> list[FlowSet]:
    """``samples`` copies of ``flowset`` whose flow sizes are scaled by lognormal
    factors of mean 1 and coefficient of variation ``cv`` (seeds 0, 1, ...).

    >>> link = Platform("one link", np.array([1e9]), np.array([1e-6]), ("a",))
    >>> fs = FlowSet.from_paths(link, [[0], [0]], [1e6, 1e6])
    >>> [round(float(v.size_bytes.sum())) for v in varied_flowsets(fs, 0.0, 2)]
    [2000000, 2000000]
    >>> sizes = np.concatenate([v.size_bytes for v in varied_flowsets(fs, 0.2, 2000)])
    >>> round(float(sizes.mean() / 1e6), 2), round(float(sizes.std() / sizes.mean()), 1)
    (1.0, 0.2)
    """
    sigma2 = math.log1p(cv * cv)
    out = []
    for seed in range(samples):
        rng = np.random.default_rng(seed)
        factor = rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), len(flowset.size_bytes))
        out.append(dataclasses.replace(flowset, size_bytes=flowset.size_bytes * factor))
    return out


def _ro(values: Any) -> Any:
    arr = np.array(values, dtype=np.float64)
    arr.setflags(write=False)
    return arr


def _fraction(name: str, value: float, upper: float = 1.0) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"calibration: {name} must be a number, got {value!r}")
    if not (math.isfinite(value) and 0 < value <= upper):
        raise ConfigError(f"calibration: {name} must be in (0, {upper}], got {value!r}")


def _number(doc: dict[str, Any], key: str, default: float, where: str) -> float:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FormatError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def _count(doc: dict[str, Any], key: str, default: int, where: str) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FormatError(f"{where}: {key} must be an integer >= 0, got {value!r}")
    return value


def _optional_number(doc: dict[str, Any], key: str, where: str) -> float | None:
    return None if doc.get(key) is None else _number(doc, key, 0.0, where)


def _efficiencies(value: Any, where: str) -> dict[int, float]:
    if not isinstance(value, dict):
        raise FormatError(f"{where}: exchange_efficiency must be an object")
    out: dict[int, float] = {}
    for key, e in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) < 7):
            raise FormatError(f"{where}: exchange_efficiency key {key!r} is not a pair count")
        if isinstance(e, bool) or not isinstance(e, int | float):
            raise FormatError(f"{where}: exchange_efficiency.{key} must be a number")
        out[int(key)] = float(e)
    return out


def _ratios(value: Any, where: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise FormatError(f"{where}: exchange_duplex must be an object")
    out: dict[str, float] = {}
    for name, ratio in value.items():
        if isinstance(ratio, bool) or not isinstance(ratio, int | float):
            raise FormatError(f"{where}: exchange_duplex.{name} must be a number")
        out[str(name)] = float(ratio)
    return out


def _limits(value: Any, where: str) -> dict[str, int | None]:
    if not isinstance(value, dict):
        raise FormatError(f"{where}: eager_limits must be an object")
    out: dict[str, int | None] = {}
    for name, limit in value.items():
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise FormatError(f"{where}: eager_limits.{name} must be an integer or null")
        out[str(name)] = limit
    return out


# -- deriving a calibration from measurements (pure; sdnmpi.emu.calibrate measures) ----


def bisect_largest(passes: Any, lo: int, hi: int, step: int) -> int:
    """The largest size in ``[lo, hi)`` (a multiple of ``step`` above ``lo``) for which
    ``passes(size)`` holds, given that it holds at ``lo`` and not at ``hi`` and switches
    once in between (a threshold).  ``passes`` is called about ``log2((hi - lo) / step)``
    times.

    >>> bisect_largest(lambda s: s <= 20480, 16384, 32768, 1024)
    20480
    """
    if not lo < hi or step < 1:
        raise ConfigError(f"bisect: need lo < hi and step >= 1, got {lo}, {hi}, {step}")
    while hi - lo > step:
        mid = lo + ((hi - lo) // 2 // step) * step or lo + step
        if passes(mid):
            lo = mid
        else:
            hi = mid
    return lo


def latency_split(two_arcs_s: float, four_arcs_s: float) -> tuple[float, float]:
    """``(arc_latency_s, base_latency_s)`` from one-way small-message latencies between
    hosts two and four arcs apart: each extra pair of arcs is one more switch hop.

    >>> [round(x * 1e6, 3) for x in latency_split(100e-6, 140e-6)]
    [20.0, 60.0]
    """
    arc = max(0.0, (four_arcs_s - two_arcs_s) / 2)
    return arc, max(0.0, two_arcs_s - 2 * arc)
