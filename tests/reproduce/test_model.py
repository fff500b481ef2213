"""The reproduce report model: metrics, validation, derived fields, summary, JSON round trip."""

from __future__ import annotations

import doctest
import importlib
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.errors import ConfigError, FormatError
from sdnmpi.report.reproduce import (
    METRICS,
    STATUSES,
    Row,
    check_rows,
    report_dict,
    summarize,
)

EXP = "002 SDN_MPI_Allreduce"


def row(**kw: Any) -> Row:
    base: dict[str, Any] = {"experiment": EXP, "figure": "Fig. 9 (8 nodes)", "case": "1 MiB"}
    base.update(metric="speedup", measured=1.5)
    base.update(kw)
    return Row(**base)


@pytest.mark.parametrize(
    "module", ["reproduce", "reproduce_api", "reproduce_plots", "reproduce_run"]
)
def test_doctests(module):
    mod = importlib.import_module(f"sdnmpi.report.{module}")
    failed, _ = doctest.testmod(mod)
    assert failed == 0


def test_agreement_within_and_paper_by_hand():
    # 41 % less time is a speedup of 1 / 0.59 = 1.6949...; measured 1.5 is below it.
    # |1.5 - 1.62| / 1.5 = 0.08 -> 8 %, within 15 %, not within 5 %.
    r = row(paper=1 / (1 - 0.41), predicted=1.62)
    assert r.agreement_pct == pytest.approx(8.0)
    assert r.within() is True
    assert r.within(0.05) is False
    assert r.meets_paper is False
    # 1.8 >= 1.6949: meets; |1.8 - 1.2| / 1.8 = 33.3 %: outside 15 %
    r2 = row(paper=1.6949, measured=1.8, predicted=1.2)
    assert r2.agreement_pct == pytest.approx(100 / 3)
    assert r2.within() is False
    assert r2.meets_paper is True


def test_lower_is_better_metrics_compare_the_other_way():
    # NetSA programs the rules in 0.47 s; 0.30 s is better, 0.60 s worse.
    fast = row(metric="time_s", paper=0.47, measured=0.30, predicted=0.33)
    slow = row(metric="time_s", paper=0.47, measured=0.60)
    assert fast.meets_paper is True
    assert slow.meets_paper is False
    assert fast.agreement_pct == pytest.approx(10.0)  # |0.30 - 0.33| / 0.30
    assert METRICS["latency_increase_pct"].better_or_equal(17.0, 25.0)
    assert not METRICS["bandwidth_ratio"].better_or_equal(0.97, 1.0)


def test_percentages_of_a_baseline_agree_as_the_times_they_stand_for():
    # 0.4 % more latency predicted as 0 %: times 1.004 and 1.000 of the baseline
    near_zero = row(metric="latency_increase_pct", measured=0.4, predicted=0.0)
    assert near_zero.agreement_pct == pytest.approx(0.004 / 1.004 * 100)
    assert near_zero.within()
    # 510 % over one hop predicted as 18 %: 6.10 against 1.18 times the baseline
    hops = row(metric="time_increase_pct", measured=510.0, predicted=18.0)
    assert hops.agreement_pct == pytest.approx((6.10 - 1.18) / 6.10 * 100)
    assert not hops.within()
    # 41 % less time predicted as 50 % less: 0.59 against 0.50 of the baseline
    cut = row(metric="time_reduction_pct", measured=41.0, predicted=50.0)
    assert cut.agreement_pct == pytest.approx(0.09 / 0.59 * 100)
    assert row(metric="time_reduction_pct", measured=100.0, predicted=90.0).agreement_pct is None


def test_missing_values_give_none():
    r = row(status="skipped", measured=None, reason="hpcc not installed", paper=2.0)
    assert (r.agreement_pct, r.meets_paper, r.within()) == (None, None, False)
    assert row(predicted=1.0, measured=0.0, metric="time_s").agreement_pct is None


def test_metric_formats():
    assert METRICS["speedup"].format(2.5555) == "x2.56"
    assert METRICS["latency_increase_pct"].format(49.8) == "49.8 %"
    assert METRICS["time_s"].format(0.47) == "470.0 ms"
    assert METRICS["time_s"].format(12.0) == "12.00 s"
    assert METRICS["latency_overhead_s"].format(3.5e-6) == "4 us"
    assert METRICS["time_s"].format(None) == "-"


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"metric": "furlongs"}, "metric"),
        ({"experiment": ""}, "experiment"),
        ({"case": "  "}, "case"),
        ({"measured": math.nan}, "measured"),
        ({"measured": math.inf}, "measured"),
        ({"measured": -1.0}, "measured"),  # a speedup is > 0
        ({"metric": "time_s", "measured": -0.1}, "measured"),
        ({"paper": True}, "paper"),
        ({"predicted": "1.2"}, "predicted"),
        ({"bound": 0.0}, "bound"),
        ({"status": "maybe"}, "status"),
        ({"status": "failed", "reason": ""}, "reason"),
        ({"status": "skipped", "measured": None, "reason": " "}, "reason"),
        ({"measured": None}, "measured"),  # an ok row has a measurement
        ({"status": "cpu-bound", "reason": "2 cores", "network_limited": True}, "network_limited"),
        ({"network_limited": "yes"}, "network_limited"),
        ({"settings": {"mpi": object()}}, "settings"),
        ({"details": {1: "x"}}, "details"),
        ({"details": {"x": math.nan}}, "details"),
        ({"paper_text": None}, "paper_text"),
    ],
)
def test_validation_names_row_and_field(kw, field):
    with pytest.raises(ConfigError) as err:
        row(**kw)
    assert f" {field} " in str(err.value)
    if field not in ("experiment", "case"):
        assert f"{EXP} / Fig. 9 (8 nodes) / 1 MiB" in str(err.value)


def test_valid_edge_values():
    assert row(metric="latency_increase_pct", measured=-2.5).measured == -2.5
    assert row(metric="time_s", measured=0).measured == 0.0
    assert isinstance(row(measured=2).measured, float)
    assert row(status="cpu-bound", reason="2 cores", network_limited=False).status == "cpu-bound"
    assert row(status="failed", measured=None, reason="boom").status == "failed"


def test_check_rows_rejects_duplicates_and_other_objects():
    a = row()
    with pytest.raises(ConfigError, match="appears twice"):
        check_rows([a, row(measured=2.0)])
    with pytest.raises(ConfigError, match=r"rows\[1\]: not a reproduce Row but dict"):
        check_rows([a, {"experiment": EXP}])
    assert check_rows([a, row(case="2 MiB")]) == [a, row(case="2 MiB")]


def test_summarize_counts_and_reasons():
    rows = [
        # network-limited, agrees (4 %), meets the paper
        row(case="a", paper=1.2, measured=1.25, predicted=1.30, network_limited=True),
        # network-limited, 50 % apart, below the paper, with a reason
        row(case="b", paper=2.0, measured=1.0, predicted=1.5, network_limited=True,
            reason="rendezvous serializes the pair"),
        # cpu-bound: judged against the paper, not counted for agreement
        row(case="c", paper=2.0, measured=1.1, predicted=1.9, status="cpu-bound",
            reason="16 ranks on 2 cores", network_limited=False),
        row(case="d", status="failed", measured=None, reason="mpirun hung; killed"),
        row(case="e", status="skipped", measured=None, paper=1.3, reason="hpcc not installed"),
        # no paper value: not judged
        row(case="f", measured=1.0, predicted=1.0, network_limited=True),
    ]  # fmt: skip
    s = summarize(rows)
    assert s["rows"] == 6
    assert s["by_status"] == {"ok": 3, "cpu-bound": 1, "failed": 1, "skipped": 1}
    assert s["network_limited"]["rows"] == 3
    assert s["network_limited"]["within_tolerance"] == 2
    assert [o["row"] for o in s["network_limited"]["outside"]] == [rows[1].key]
    assert s["with_paper_value"] == 3
    assert s["meets_paper"] == [rows[0].key]
    misses = {m["row"]: m["reason"] for m in s["misses_paper"]}
    assert misses == {
        rows[1].key: "rendezvous serializes the pair",
        rows[2].key: "16 ranks on 2 cores",
    }
    assert s["failed"][0]["reason"] == "mpirun hung; killed"
    assert s["skipped"][0]["row"] == rows[4].key
    assert set(STATUSES) == set(s["by_status"])


def test_report_dict_shape():
    doc = report_dict([row(predicted=1.2)], {"mode": "quick"})
    assert doc["schema"] == "sdnmpi.reproduce/1"
    assert doc["meta"] == {"mode": "quick"}
    (r,) = doc["rows"]
    for key in (
        "experiment",
        "figure",
        "case",
        "metric",
        "paper",
        "measured",
        "predicted",
        "bound",
        "settings",
        "status",
        "reason",
        "network_limited",
        "details",
    ):
        assert key in r  # fmt: skip
    assert r["agreement_pct"] == pytest.approx(20.0)  # |1.5 - 1.2| / 1.5
    assert r["within_tolerance"] is False
    assert doc["summary"]["rows"] == 1


def test_from_dict_rejects_unknown_and_missing_keys():
    doc = row().to_dict()
    with pytest.raises(FormatError, match="unknown keys"):
        Row.from_dict({**doc, "colour": "red"})
    del doc["metric"]
    with pytest.raises(FormatError, match=r"missing keys \['metric'\]"):
        Row.from_dict(doc)
    with pytest.raises(FormatError, match=r"r1: .*measured"):
        Row.from_dict({**row().to_dict(), "measured": -3}, "r1")
    with pytest.raises(FormatError, match="not a JSON object"):
        Row.from_dict([1, 2])


finite = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)
text = st.text(min_size=1, max_size=20).filter(lambda s: s.strip() != "")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | finite | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def rows(draw):
    status = draw(st.sampled_from(STATUSES))
    measured = draw(finite) if status == "ok" else draw(st.none() | finite)
    return Row(
        experiment=draw(text), figure=draw(text), case=draw(text),
        metric=draw(st.sampled_from(sorted(METRICS))),
        paper=draw(st.none() | finite), paper_text=draw(st.text(max_size=20)),
        measured=measured, predicted=draw(st.none() | finite), bound=draw(st.none() | finite),
        settings=draw(st.dictionaries(st.text(max_size=6), json_values, max_size=3)),
        status=status,
        reason=draw(text) if status != "ok" else draw(st.text(max_size=10)),
        network_limited=False if status == "cpu-bound" else draw(st.none() | st.booleans()),
        details=draw(st.dictionaries(st.text(max_size=6), json_values, max_size=3)),
    )  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(rows())
def test_json_round_trip(r):
    doc = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    back = Row.from_dict(doc)
    assert back == r
    assert doc["agreement_pct"] == r.agreement_pct
    assert doc["meets_paper"] == r.meets_paper
