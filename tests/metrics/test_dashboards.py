"""The shipped Grafana dashboards read only metrics the daemons export.

The exported names come from the daemons' real registries (every family, with the
sample names its type adds: ``_total``, ``_bucket``, ...), not from a list kept here:
renaming a metric in the code without the dashboards fails this test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdnmpi.controller.metrics import ControllerMetrics
from sdnmpi.manager.metrics import ManagerMetrics
from sdnmpi.metrics.promql import dashboard_exprs, exported_names, metric_names

GRAFANA = Path(__file__).resolve().parents[2] / "packaging" / "grafana"
DASHBOARDS: dict[str, type[ControllerMetrics] | type[ManagerMetrics]] = {
    "sdnmpi-controller.json": ControllerMetrics,
    "sdnmpi-manager.json": ManagerMetrics,
}


def unknown_metrics(dashboard: dict, exported: set[str]) -> list[str]:
    """``panel: name`` for every metric a panel reads that is not exported."""
    return sorted(
        f"{title}: {name}"
        for title, expr in dashboard_exprs(dashboard)
        for name in metric_names(expr)
        if name not in exported
    )


def test_every_dashboard_is_checked():
    assert sorted(p.name for p in GRAFANA.glob("*.json")) == sorted(DASHBOARDS)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_panel_reads_exported_metrics(name: str):
    dashboard = json.loads((GRAFANA / name).read_text())
    exported = exported_names(DASHBOARDS[name]().registry)
    exprs = list(dashboard_exprs(dashboard))
    panels = [p for p in dashboard["panels"] if p.get("type") != "row"]
    assert {t for t, _ in exprs} == {p["title"] for p in panels}  # every panel queries
    assert all(metric_names(e) for _, e in exprs)  # and names a metric
    assert unknown_metrics(dashboard, exported) == []


def test_a_renamed_metric_fails_the_check():
    dashboard = json.loads((GRAFANA / "sdnmpi-controller.json").read_text())
    exported = exported_names(ControllerMetrics().registry)
    exported.discard("sdnmpi_switch_rules")  # as if the code had renamed it
    assert unknown_metrics(dashboard, exported) == ["Rules per switch: sdnmpi_switch_rules"]
    dashboard["panels"][0]["targets"][0]["expr"] = "rate(sdnmpi_gone_total[5m])"
    assert "sdnmpi_gone_total" in " ".join(unknown_metrics(dashboard, exported))


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (dpid) (rate(a_total{kind="x",dpid=~"0x.*"}[$__rate_interval]))', {"a_total"}),
        ("histogram_quantile(0.99, sum by (le, op) (rate(b_bucket[5m])))", {"b_bucket"}),
        ("rate(c_sum[1m]) / rate(c_count[1m]) * 60", {"c_sum", "c_count"}),
        ("topk(10, d) or on (dpid) e offset 5m", {"d", "e"}),
        ('label_replace(f, "x", "$1", "y", "(.*)")', {"f"}),
        ("g > bool 0.5 unless ignoring (port) h", {"g", "h"}),
    ],
)
def test_metric_names_of_promql(expr: str, names: set[str]):
    assert metric_names(expr) == names
