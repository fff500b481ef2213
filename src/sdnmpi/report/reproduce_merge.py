"""A report assembled from several runs (``reproduce.py --merge``, ``--rederive``):
the experiments an earlier report holds, kept beside this run's, and the summary each
experiment saved for its rows to be derived again.  Pure apart from reading files."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdnmpi.errors import ConfigError, FormatError
from sdnmpi.report.reproduce import Row, load_json

#: The function of an experiment module that rebuilds its rows from what its
#: ``reproduce(ctx)`` saved in its directory (``--rederive``).
REDERIVE_POINT = "rows_from_saved"
#: Beside what an experiment saved: the run that saved it (date, commit, calibration),
#: written when the experiment ends, so that ``--rederive`` names the run that measured
#: even when the report of that run was never written (a later experiment crashed).
RUN_FILE = "run.json"


def saved_run(out: Path) -> dict[str, Any] | None:
    """The :data:`RUN_FILE` in ``out``, if there is a readable one."""
    try:
        doc = json.loads((out / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("date"), str) else None


@dataclass
class Kept:
    """An experiment's rows kept from an earlier report (``Options.merge``)."""

    rows: list[Row]
    meta: dict[str, Any]


def previous_experiments(out: Path, quick: bool, running: set[str]) -> dict[str, Kept]:
    """The experiments of ``OUT/report.json`` not among ``running`` (modules), by module."""
    path = out / "report.json"
    if not path.exists():
        return {}
    meta, rows = load_json(path)
    mode = "quick" if quick else "full"
    if meta.get("mode") != mode:
        raise ConfigError(
            f"{path} holds a {meta.get('mode')} report: a {mode} run cannot merge into it "
            "(choose another --out, or run without --merge)"
        )
    git: dict[str, Any] = meta["git"] if isinstance(meta.get("git"), dict) else {}
    cal: dict[str, Any] = meta["calibration"] if isinstance(meta.get("calibration"), dict) else {}
    origin = {"date": meta.get("date"), "commit": git.get("commit"),
              "dirty": git.get("dirty"), "calibration": cal.get("source"),
              "calibration_file": cal.get("file")}  # fmt: skip
    kept: dict[str, Kept] = {}
    for exp in meta.get("experiments") or ():
        if not isinstance(exp, dict) or not isinstance(exp.get("module"), str):
            raise FormatError(f"{path}: meta.experiments holds {exp!r}")
        if exp["module"] in running:
            continue
        tables = set(exp.get("tables") or ())
        kept[exp["module"]] = Kept(
            [r for r in rows if r.experiment in tables],
            {**exp, "from_run": exp.get("from_run") or origin},
        )
    return kept


def merge(
    new: list[Row], meta: dict[str, Any], kept: Mapping[str, Kept], registry: Sequence[str]
) -> list[Row]:
    """This run's rows ``new`` with the kept experiments' rows, in ``registry`` order (a
    kept row whose key a new row has is dropped); ``meta["experiments"]`` likewise."""
    new_keys = {r.key for r in new}
    fresh = {e["module"]: e for e in meta["experiments"]}
    order = list(registry)
    order += [m for m in [*fresh, *kept] if m not in order]
    rows: list[Row] = []
    experiments = []
    for module in order:
        if module in fresh:
            tables = set(fresh[module]["tables"])
            rows += [r for r in new if r.experiment in tables and r not in rows]
            experiments.append(fresh[module])
        elif module in kept:
            rows += [r for r in kept[module].rows if r.key not in new_keys and r not in rows]
            experiments.append(kept[module].meta)
    rows += [r for r in new if r not in rows]  # rows of no listed table
    meta["experiments"] = experiments
    return rows
