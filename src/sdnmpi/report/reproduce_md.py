"""The report of ``make reproduce`` as Markdown: provenance, summary, one table per
experiment (:func:`render_markdown`); the rows and their summary come from
:mod:`sdnmpi.report.reproduce`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sdnmpi.report.reproduce import (
    METRICS,
    TOLERANCE,
    Row,
    check_rows,
    seconds_text,
    summarize,
)


def write_markdown(
    rows: Sequence[Row],
    meta: Mapping[str, Any],
    plots: Mapping[str, Sequence[Path]],
    path: Path,
) -> Path:
    """Write ``report.md`` (:func:`render_markdown`) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(rows, meta, plots, path.parent))
    return path


def render_markdown(
    rows: Sequence[Row],
    meta: Mapping[str, Any],
    plots: Mapping[str, Sequence[Path]],
    base: Path,
) -> str:
    """The report: how it was produced, the summary, one table per experiment.

    ``plots`` maps an experiment to its plot files; links are made relative to ``base``
    (the report's directory).
    """
    checked = check_rows(rows)
    lines = ["# The seed papers' experiments, reproduced", ""]
    lines += _provenance(meta)
    lines += ["", "## Summary", ""]
    lines += _summary_lines(summarize(checked))
    lines += ["", _LEGEND]
    for experiment in dict.fromkeys(r.experiment for r in checked):
        mine = [r for r in checked if r.experiment == experiment]
        lines += ["", f"## {experiment}", ""]
        lines += _table(mine)
        lines += _common_settings(mine)
        links = [_link(p, base) for p in plots.get(experiment, ())]
        if links:
            lines += ["", "Plots: " + ", ".join(links)]
    return "\n".join(lines) + "\n"


def _provenance(meta: Mapping[str, Any]) -> list[str]:
    out = []
    if meta.get("command"):
        out.append(f"- Command: `{meta['command']}`")
    for key, label in (("mode", "Mode"), ("date", "Date")):
        if meta.get(key):
            out.append(f"- {label}: {meta[key]}")
    machine = meta.get("machine")
    if isinstance(machine, Mapping):
        out.append(
            f"- Machine: {machine.get('hostname', '?')}, {machine.get('cpus', '?')} CPUs, "
            f"{machine.get('system', '')} {machine.get('kernel', '')}".rstrip()
        )
    git = meta.get("git")
    if isinstance(git, Mapping):
        dirty = " (with uncommitted changes)" if git.get("dirty") else ""
        out.append(f"- Commit: {git.get('commit') or 'unknown'}{dirty}")
    fabric = meta.get("fabric")
    if isinstance(fabric, Mapping):
        out.append(
            f"- Emulated fabric: switch queues {fabric.get('queues', '?')}"
            + (f" ({fabric['marking']})" if fabric.get("marking") else "")
            + ", TCP "
            f'{fabric.get("tcp_congestion", "?")} (docs/emulator-fidelity.md, "Queues")'
        )
    cal = meta.get("calibration")
    if isinstance(cal, Mapping):
        out.append(f"- Calibration: {_calibration(cal)}")
    for exp in meta.get("experiments", ()):
        origin = exp.get("from_run") if isinstance(exp, Mapping) else None
        if isinstance(origin, Mapping):
            commit = str(origin.get("commit") or "unknown")[:12]
            dirty = " with uncommitted changes" if origin.get("dirty") else ""
            out.append(
                f"- Kept from an earlier run (`--merge`): {exp.get('module')}, "
                f"{exp.get('rows', '?')} rows of {origin.get('date') or '?'}, commit "
                f"{commit}{dirty}, calibration {origin.get('calibration') or '?'}"
            )
            again = exp.get("rederived")
            if isinstance(again, Mapping):
                out[-1] += (
                    f"; its rows re-derived from that run's saved summary (`--rederive`) on "
                    f"{again.get('date') or '?'} by commit {str(again.get('commit'))[:12]}"
                )
    out += [f"- Note: {n}" for n in meta.get("notes", ())]
    out += [f"- Cleanup: {c}" for c in meta.get("cleanup", ())]
    return out


def _calibration(cal: Mapping[str, Any]) -> str:
    parts = [f"{cal.get('source', '?')}"]
    if cal.get("file"):
        parts[0] += f" (`{cal['file']}`)"
    figures = []
    if cal.get("link_scale") is not None:
        figures.append(f"link scale {cal['link_scale']:g}")
    if cal.get("goodput") is not None:
        figures.append(f"goodput {cal['goodput']:.3f}")
    for key, label in (("arc_latency_s", "per-arc latency"), ("base_latency_s", "base latency")):
        if cal.get(key) is not None:
            figures.append(f"{label} {seconds_text(cal[key])}")
    text = parts[0] + (": " + ", ".join(figures) if figures else "")
    return text + (f"; {cal['note']}" if cal.get("note") else "")


def _summary_lines(s: Mapping[str, Any]) -> list[str]:
    counts = ", ".join(f"{n} {status}" for status, n in s["by_status"].items() if n)
    tol = f"{s['tolerance_pct']:g} %"
    lim = s["network_limited"]
    out = [
        f"- {s['rows']} rows: {counts or 'none'}.",
        f"- Prediction: {lim['within_tolerance']} of {lim['rows']} network-limited rows "
        f"within {tol} of the measurement.",
    ]
    out += [f"  - outside: {_item(b)}" for b in lim["outside"]]
    out.append(
        f"- Paper: {len(s['meets_paper'])} of {s['with_paper_value']} rows with a "
        "published value meet it."
    )
    out += [f"  - meets: {k}" for k in s["meets_paper"]]
    out += [f"  - below: {_item(b)}" for b in s["misses_paper"]]
    for status in ("failed", "skipped"):
        out += _grouped(status.capitalize(), s[status])
    return out


def _grouped(label: str, briefs: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per experiment and reason, naming its figures (a missing experiment
    skips all its figures for one reason)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for b in briefs:
        groups.setdefault((b["experiment"], _one_line(b["reason"])), []).append(b["figure"])
    return [
        f"- {label}: {experiment} ({', '.join(dict.fromkeys(figures))}): {reason}"
        for (experiment, reason), figures in groups.items()
    ]


def _item(brief: Mapping[str, Any]) -> str:
    metric = METRICS[brief["metric"]]
    text = (
        f"{brief['row']}: measured {metric.format(brief['measured'])}, "
        f"paper {metric.format(brief['paper'])}, predicted {metric.format(brief['predicted'])}"
    )
    if brief["agreement_pct"] is not None:
        text += f" ({brief['agreement_pct']:.1f} % apart)"
    return text + (f": {_one_line(brief['reason'])}" if brief["reason"] else "")


_LEGEND = (
    "Columns: *paper* is the published value (and how the paper states it), *measured* "
    "ours with real MPI on the emulated cluster, *predicted* the flow simulator's value "
    "for the same case, *agreement* |measured - predicted| / measured (a percentage of a "
    "baseline compared as the time it stands for; a paper value marked as the paper's "
    "baseline is what it compared against, shown and not judged), *bound* the best "
    f"value the LP lower bound allows. Rows within {TOLERANCE * 100:g} % count as agreeing; "
    "a cpu-bound row measured the emulator's CPUs rather than its links, so the "
    "simulator is not expected to match it (docs/reproduce.md)."
)
_HEADER = (
    "| figure | case | paper | measured | predicted | agreement | bound | status / notes |",
    "|---|---|---|---:|---:|---:|---:|---|",
)


def _table(rows: Sequence[Row]) -> list[str]:
    varying = _varying_settings(rows)
    out = list(_HEADER)
    for r in rows:
        m = r.metric_def
        paper = m.format(r.paper) if r.paper is not None else ""
        if r.paper_text:
            paper = f"{paper} ({r.paper_text})" if paper else r.paper_text
        if paper and r.paper_role == "baseline":
            paper += ", the paper's baseline"
        cells = [
            r.figure,
            r.case,
            paper or "-",
            m.format(r.measured),
            m.format(r.predicted),
            _agreement(r),
            m.format(r.bound),
            _notes(r, varying),
        ]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return out


def _agreement(row: Row) -> str:
    if row.agreement_pct is None:
        return "-"
    over = "" if row.within() else f" (over {TOLERANCE * 100:g} %)"
    return f"{row.agreement_pct:.1f} %{over}"


def _notes(row: Row, varying: Sequence[str]) -> str:
    parts: list[str] = [row.status]
    if row.meets_paper is not None and row.status in ("ok", "cpu-bound"):
        parts[0] += ", meets paper" if row.meets_paper else ", below paper"
    if row.network_limited is False and row.status == "ok":
        parts[0] += ", not network-limited"
    if row.reason:
        parts.append(row.reason)
    settings = [f"{k}={_short(row.settings[k])}" for k in varying if k in row.settings]
    if settings:
        parts.append(", ".join(settings))
    return ": ".join(parts[:2]) + "".join(f"; {p}" for p in parts[2:])


def _varying_settings(rows: Sequence[Row]) -> list[str]:
    keys = dict.fromkeys(k for r in rows for k in r.settings)
    common = _common(rows)
    return [k for k in keys if k not in common]


def _common(rows: Sequence[Row]) -> dict[str, Any]:
    if not rows:
        return {}
    first = rows[0].settings
    return {k: v for k, v in first.items() if all(r.settings.get(k, _MISSING) == v for r in rows)}


_MISSING = object()


def _common_settings(rows: Sequence[Row]) -> list[str]:
    common = _common(rows)
    if not common:
        return []
    text = ", ".join(f"{k}={_short(v)}" for k, v in common.items())
    return ["", f"Settings of every row: {_cell(text)}"]


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell.

    >>> _cell("a|b\\nc")
    'a\\\\|b c'
    """
    return _one_line(text).replace("|", "\\|")


def _link(path: Path, base: Path) -> str:
    try:
        rel = Path(path).resolve().relative_to(base.resolve())
    except ValueError:
        rel = Path(path)
    return f"[{rel.as_posix()}]({rel.as_posix()})"
