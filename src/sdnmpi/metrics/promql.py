"""Metric names a PromQL expression reads, and the names a registry exports (pure).

Enough PromQL for the dashboards we ship: string literals, label matchers
(``{dpid="1"}``), range and subquery selectors (``[5m]``), Grafana variables
(``$__rate_interval``), grouping clauses (``by (dpid)``) and numbers are removed; what
is left that is an identifier not followed by ``(`` (a function or aggregation) and
not a keyword is a metric name.

>>> sorted(metric_names('sum by (dpid) (rate(sdnmpi_x_total{kind="a"}[$__rate_interval]))'))
['sdnmpi_x_total']
>>> sorted(metric_names('histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) / b'))
['a_bucket', 'b']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_VARIABLE = re.compile(r"\$\{?\w+(?::\w+)?\}?")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENT = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"bool", "offset", "inf", "nan"}
)


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (see the module docstring)."""
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _VARIABLE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    return {
        m.group(1)
        for m in _IDENT.finditer(text)
        if m.group(2) is None and m.group(1).lower() not in _KEYWORDS
    }


def dashboard_exprs(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, expression) of every target of every panel (rows' panels too)."""
    for panel in _panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if isinstance(expr, str) and expr.strip():
                yield str(panel.get("title", "?")), expr


def _panels(panels: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


#: Sample names each metric type exposes, after its family name.
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}


def exported_names(registry: Any) -> set[str]:
    """Every sample name ``registry`` (a ``prometheus_client`` registry) can expose,
    including those of families that have no samples yet."""
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        names.update(family.name + s for s in _SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names
