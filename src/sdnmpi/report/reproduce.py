"""The report of ``make reproduce``: the seed papers' figures beside ours, as values.

One :class:`Row` per published value an experiment reproduces: the paper's value,
ours measured with real MPI on the emulated cluster, ours predicted by the flow
simulator, the best value the LP lower bound allows, and how they agree.  The
model is pure (plain values in, plain values out); only :func:`write_json` and
:func:`~sdnmpi.report.reproduce_md.write_markdown` write files, and
:mod:`sdnmpi.report.reproduce_plots` draws.
docs/reproduce.md describes the report and how to add an experiment.

A metric (:data:`METRICS`) fixes a row's unit, which direction is better and how
its numbers are printed:

>>> METRICS["speedup"].higher_is_better, METRICS["speedup"].format(1 / (1 - 0.41))
(True, 'x1.69')
>>> METRICS["time_s"].format(0.0123)
'12.3 ms'
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sdnmpi.errors import ConfigError, FormatError

SCHEMA = "sdnmpi.reproduce/1"
#: Measured and predicted agree when they differ by at most this fraction of measured.
TOLERANCE = 0.15
Status = Literal["ok", "failed", "skipped", "cpu-bound"]
STATUSES: tuple[Status, ...] = ("ok", "cpu-bound", "failed", "skipped")
Domain = Literal["positive", "nonnegative", "any"]
Style = Literal["ratio", "percent", "seconds"]


@dataclass(frozen=True)
class Metric:
    """What a row's numbers mean: unit, better direction, allowed values, printing."""

    name: str
    unit: str
    higher_is_better: bool
    domain: Domain
    style: Style
    description: str

    def allows(self, value: float) -> bool:
        """Whether ``value`` is in the metric's domain (finite, and > 0 or >= 0 if asked).

        >>> METRICS["speedup"].allows(0.0), METRICS["latency_increase_pct"].allows(-3.0)
        (False, True)
        """
        if not math.isfinite(value):
            return False
        if self.domain == "positive":
            return value > 0
        return value >= 0 if self.domain == "nonnegative" else True

    def better_or_equal(self, value: float, reference: float) -> bool:
        """``value`` is at least as good as ``reference`` in this metric's direction.

        >>> METRICS["time_s"].better_or_equal(0.9, 1.0)
        True
        """
        return value >= reference if self.higher_is_better else value <= reference

    def format(self, value: float | None) -> str:
        """The value as the report prints it (``"-"`` for none)."""
        if value is None:
            return "-"
        if self.style == "ratio":
            return f"x{value:.2f}"
        if self.style == "percent":
            return f"{value:.1f} %"
        return seconds_text(value)


def seconds_text(value: float) -> str:
    """Seconds in the unit that reads best.

    >>> seconds_text(2.5), seconds_text(0.0004), seconds_text(0.25)
    ('2.50 s', '400 us', '250.0 ms')
    """
    if abs(value) >= 1:
        return f"{value:.2f} s"
    if abs(value) >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} us"


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("speedup", "x", True, "positive", "ratio", "baseline time / our time"),
        Metric("bandwidth_ratio", "x", True, "positive", "ratio", "our bandwidth / baseline"),
        Metric("time_s", "s", False, "nonnegative", "seconds", "time per operation or run"),
        Metric("latency_overhead_s", "s", False, "any", "seconds", "latency added over baseline"),
        Metric("time_reduction_pct", "%", True, "any", "percent", "time saved over baseline"),
        Metric("time_increase_pct", "%", False, "any", "percent", "time added over baseline"),
        Metric("latency_increase_pct", "%", False, "any", "percent", "latency added over baseline"),
        Metric("on_intended_pct", "%", True, "nonnegative", "percent", "bytes on intended links"),
        Metric("comm_share_pct", "%", False, "nonnegative", "percent", "share of run in MPI"),
    )
}

#: Percentages of a baseline's time, and the sign that turns one into the time
#: relative to the baseline (``1 + sign * v / 100``); agreement compares those times.
_OF_BASELINE = {"time_increase_pct": 1, "latency_increase_pct": 1, "time_reduction_pct": -1}

_REQUIRED = ("experiment", "figure", "case", "metric")
_OPTIONAL_DEFAULTS: dict[str, Any] = {
    "paper": None,
    "paper_text": "",
    "measured": None,
    "predicted": None,
    "bound": None,
    "settings": {},
    "status": "ok",
    "reason": "",
    "network_limited": None,
    "details": {},
    "paper_role": "target",
}
#: What a row's ``paper`` value is: a ``target`` ours is judged against (the paper's
#: result for its system), or a ``baseline`` (the paper's figure for what it compared
#: against, e.g. LACP's increase over one switch): shown beside ours, not judged.
PAPER_ROLES = ("target", "baseline")
#: Keys :meth:`Row.to_dict` adds from the derived properties; :meth:`Row.from_dict` ignores them.
DERIVED_KEYS = frozenset({"agreement_pct", "within_tolerance", "meets_paper"})
_VALUES = ("paper", "measured", "predicted", "bound")


@dataclass(frozen=True)
class Row:
    """One published value reproduced (or not); see the module docstring.

    >>> r = Row("002 SDN_MPI_Allreduce", "Fig. 9 (8 nodes)", "1 MiB", "speedup",
    ...         paper=1.69, measured=1.5, predicted=1.62)
    >>> round(r.agreement_pct, 1), r.within(), r.meets_paper
    (8.0, True, False)
    """

    experiment: str
    figure: str
    case: str
    metric: str
    paper: float | None = None
    paper_text: str = ""
    measured: float | None = None
    predicted: float | None = None
    bound: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    status: Status = "ok"
    reason: str = ""
    network_limited: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)
    paper_role: str = "target"

    def __post_init__(self) -> None:
        for name in ("experiment", "figure", "case", "metric"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise self._error(name, "must be a non-empty string", value)
        if self.metric not in METRICS:
            raise self._error("metric", f"must be one of {', '.join(METRICS)}", self.metric)
        for name in _VALUES:
            object.__setattr__(self, name, self._value(name))
        for name in ("paper_text", "reason"):
            if not isinstance(getattr(self, name), str):
                raise self._error(name, "must be a string", getattr(self, name))
        if self.paper_role not in PAPER_ROLES:
            raise self._error("paper_role", f"must be one of {', '.join(PAPER_ROLES)}",
                              self.paper_role)  # fmt: skip
        self._check_status()
        for name in ("settings", "details"):
            self._check_json_object(name)

    @property
    def key(self) -> str:
        """``experiment / figure / case``: names the row in messages and the summary."""
        return f"{self.experiment} / {self.figure} / {self.case}"

    @property
    def metric_def(self) -> Metric:
        """The row's :class:`Metric`."""
        return METRICS[self.metric]

    @property
    def agreement_pct(self) -> float | None:
        """``|measured - predicted| / |measured| * 100``; None without both (or measured 0).

        A percentage of a baseline's time (``*_increase_pct``, ``time_reduction_pct``)
        is compared as the time it stands for, relative to the baseline (``1 + v/100``,
        ``1 - v/100``): a 0.4 % increase predicted as 0.0 % is 0.4 % apart, not 100 %.

        >>> r = Row("x", "f", "c", "latency_increase_pct", measured=0.4, predicted=0.0)
        >>> round(r.agreement_pct, 2)
        0.4
        """
        if self.measured is None or self.predicted is None:
            return None
        measured, predicted = self.measured, self.predicted
        if self.metric in _OF_BASELINE:
            sign = _OF_BASELINE[self.metric]
            measured, predicted = 1 + sign * measured / 100, 1 + sign * predicted / 100
        if measured == 0:
            return None
        return abs(measured - predicted) / abs(measured) * 100.0

    def within(self, tolerance: float = TOLERANCE) -> bool:
        """Measured and predicted differ by at most ``tolerance`` of measured."""
        agreement = self.agreement_pct
        return agreement is not None and agreement <= tolerance * 100.0 + 1e-9

    @property
    def meets_paper(self) -> bool | None:
        """Measured at least as good as the paper's value (None without both, and for a
        ``baseline`` row: the paper's figure of what it compared against, shown beside
        ours but not a target).

        >>> Row("x", "f", "c", "latency_increase_pct", paper=200.0, measured=40.0,
        ...     paper_role="baseline").meets_paper is None
        True
        """
        if self.measured is None or self.paper is None or self.paper_role == "baseline":
            return None
        return self.metric_def.better_or_equal(self.measured, self.paper)

    # -- validation ------------------------------------------------------------------
    def _error(self, name: str, problem: str, value: Any) -> ConfigError:
        who = self.key if all(isinstance(getattr(self, k), str) for k in _REQUIRED[:3]) else "?"
        return ConfigError(f"reproduce row {who!r}: {name} {problem}, got {value!r}")

    def _value(self, name: str) -> float | None:
        value = getattr(self, name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._error(name, "must be a number or null", value)
        metric = self.metric_def
        if not metric.allows(float(value)):
            raise self._error(name, f"is outside {metric.name}'s domain ({metric.domain})", value)
        return float(value)

    def _check_status(self) -> None:
        if self.status not in STATUSES:
            raise self._error("status", f"must be one of {', '.join(STATUSES)}", self.status)
        if self.network_limited is not None and not isinstance(self.network_limited, bool):
            raise self._error(
                "network_limited", "must be true, false or null", self.network_limited
            )
        if self.status != "ok" and not self.reason.strip():
            raise self._error("reason", f"must say why the row is {self.status}", self.reason)
        if self.status == "ok" and self.measured is None:
            raise self._error("measured", "is required for an ok row", self.measured)
        if self.status == "cpu-bound" and self.network_limited:
            raise self._error("network_limited", "cannot be true for a cpu-bound row", True)

    def _check_json_object(self, name: str) -> None:
        value = getattr(self, name)
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise self._error(name, "must be an object with string keys", value)
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise self._error(name, f"must be JSON-ready ({exc})", value) from None

    # -- JSON ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every field, then the derived agreement_pct, within_tolerance and meets_paper."""
        out: dict[str, Any] = {k: getattr(self, k) for k in (*_REQUIRED, *_OPTIONAL_DEFAULTS)}
        out["settings"], out["details"] = dict(self.settings), dict(self.details)
        out["agreement_pct"] = self.agreement_pct
        out["within_tolerance"] = self.within()
        out["meets_paper"] = self.meets_paper
        return out

    @classmethod
    def from_dict(cls, doc: Any, where: str = "row") -> Row:
        """Read :meth:`to_dict`'s object back; unknown keys are rejected, derived ones ignored."""
        if not isinstance(doc, dict):
            raise FormatError(f"{where}: not a JSON object")
        unknown = set(doc) - set(_REQUIRED) - set(_OPTIONAL_DEFAULTS) - DERIVED_KEYS
        missing = [k for k in _REQUIRED if k not in doc]
        if unknown or missing:
            raise FormatError(f"{where}: unknown keys {sorted(unknown)}, missing keys {missing}")
        fields = {k: doc[k] for k in _REQUIRED}
        fields.update({k: doc.get(k, default) for k, default in _OPTIONAL_DEFAULTS.items()})
        try:
            return cls(**fields)
        except ConfigError as exc:
            raise FormatError(f"{where}: {exc}") from None


def check_rows(rows: Sequence[Any], where: str = "rows") -> list[Row]:
    """``rows`` as a list of :class:`Row`, each ``experiment / figure / case`` once."""
    seen: set[str] = set()
    out: list[Row] = []
    for i, row in enumerate(rows):
        if not isinstance(row, Row):
            raise ConfigError(f"{where}[{i}]: not a reproduce Row but {type(row).__name__}")
        if row.key in seen:
            raise ConfigError(f"{where}[{i}]: row {row.key!r} appears twice")
        seen.add(row.key)
        out.append(row)
    return out


# -- summary ---------------------------------------------------------------------------
def summarize(rows: Sequence[Row], tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Counts by status, prediction agreement, rows that meet the paper and the others.

    >>> ok = Row("e", "f", "a", "speedup", paper=2.0, measured=2.1, predicted=2.0,
    ...          network_limited=True)
    >>> low = Row("e", "f", "b", "speedup", paper=2.0, measured=1.2, reason="one core")
    >>> s = summarize([ok, low])
    >>> s["by_status"]["ok"], s["network_limited"], s["meets_paper"], s["misses_paper"][0]["reason"]
    (2, {'rows': 1, 'within_tolerance': 1, 'outside': []}, ['e / f / a'], 'one core')
    """
    by_status = {s: sum(r.status == s for r in rows) for s in STATUSES}
    limited = [
        r for r in rows if r.network_limited and r.status == "ok" and r.agreement_pct is not None
    ]
    outside = [_brief(r) for r in limited if not r.within(tolerance)]
    judged = [r for r in rows if r.meets_paper is not None and r.status in ("ok", "cpu-bound")]
    return {
        "rows": len(rows),
        "by_status": by_status,
        "tolerance_pct": tolerance * 100.0,
        "network_limited": {
            "rows": len(limited),
            "within_tolerance": len(limited) - len(outside),
            "outside": outside,
        },
        "with_paper_value": len(judged),
        "meets_paper": [r.key for r in judged if r.meets_paper],
        "misses_paper": [_brief(r) for r in judged if not r.meets_paper],
        "failed": [_brief(r) for r in rows if r.status == "failed"],
        "skipped": [_brief(r) for r in rows if r.status == "skipped"],
    }


def _brief(row: Row) -> dict[str, Any]:
    return {
        "row": row.key,
        "experiment": row.experiment,
        "figure": row.figure,
        "case": row.case,
        "metric": row.metric,
        "paper": row.paper,
        "measured": row.measured,
        "predicted": row.predicted,
        "agreement_pct": row.agreement_pct,
        "reason": row.reason,
    }


# -- JSON report -----------------------------------------------------------------------
def report_dict(rows: Sequence[Row], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The ``sdnmpi.reproduce/1`` document."""
    checked = check_rows(rows)
    return {
        "schema": SCHEMA,
        "meta": dict(meta),
        "rows": [r.to_dict() for r in checked],
        "summary": summarize(checked),
    }


def write_json(rows: Sequence[Row], meta: Mapping[str, Any], path: Path) -> Path:
    """Write ``report.json`` (indented, no NaN) and return its path."""
    text = json.dumps(report_dict(rows, meta), indent=1, allow_nan=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path


def load_json(path: Path) -> tuple[dict[str, Any], list[Row]]:
    """Read a report back: its meta and rows (a clear FormatError for a bad file)."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise FormatError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise FormatError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise FormatError(f"{path}: not an {SCHEMA} report")
    rows = doc.get("rows")
    if not isinstance(rows, list) or not isinstance(doc.get("meta"), dict):
        raise FormatError(f"{path}: rows must be a list and meta an object")
    return doc["meta"], [Row.from_dict(r, f"{path}: rows[{i}]") for i, r in enumerate(rows)]
