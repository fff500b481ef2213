"""The driver of ``make reproduce``: calibrate, run each registered experiment, report.

``scripts/reproduce.py`` is the command line around :func:`run`.  For every
:class:`Entry` of its registry, :func:`run` imports the experiment module, calls
its ``reproduce(ctx)`` (:mod:`sdnmpi.report.reproduce_api`) under a time limit,
and turns what happens into rows:

- the module is missing, or raises :class:`~sdnmpi.report.reproduce_api.Skipped`
  (or lacks a Python package it imports): one ``skipped`` row per published figure
  of the entry, with the reason and the paper's value;
- it raises, times out or is interrupted: one ``failed`` row with the reason (the
  traceback goes to ``OUT/MODULE/traceback.txt``);
- it returns rows: those rows.

Before and after each step (calibration included) the driver lists the emulated
fabrics in the state root (``/run/sdnmpi``: one ``NAME/state.json`` per fabric that
is up).  A fabric that appeared during the step and is still up is taken down with
``sdnmpi emu down --name NAME`` (never by killing processes by name), and the rows
of that step say so.  The report (JSON, Markdown, plots) is written even when
experiments failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from sdnmpi.emu.fabriclock import FABRIC_LOCK, fabric_lock
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT, DEFAULT_TCP_CONGESTION
from sdnmpi.emu.queues import describe as describe_queues
from sdnmpi.emu.queues import queues_in_use
from sdnmpi.errors import ConfigError, SdnMpiError
from sdnmpi.report.reproduce import (
    METRICS,
    Row,
    Status,
    check_rows,
    load_json,
    write_json,
)
from sdnmpi.report.reproduce_api import ENTRY_POINT, Context, Skipped
from sdnmpi.report.reproduce_md import write_markdown
from sdnmpi.report.reproduce_merge import (
    REDERIVE_POINT,
    RUN_FILE,
    Kept,
    merge,
    previous_experiments,
    saved_run,
)
from sdnmpi.sim.calibration import Calibration

log = logging.getLogger(__name__)
#: The sdnmpi command line, run with this interpreter (as scripts/demo_fabric.py does).
CLI: tuple[str, ...] = (sys.executable, "-c", "from sdnmpi.cli.main import main; main()")


@dataclass(frozen=True)
class Figure:
    """A published figure (or value) an experiment reproduces, with the paper's value."""

    figure: str
    metric: str
    paper: float | None = None
    paper_text: str = ""
    case: str = "as published"


@dataclass(frozen=True)
class Entry:
    """One registered experiment: its module in ``scripts/``, its name, its figures."""

    module: str
    experiment: str
    figures: tuple[Figure, ...]

    def __post_init__(self) -> None:
        if not self.module.isidentifier():
            raise ConfigError(f"reproduce registry: module {self.module!r} is not a module name")
        if not self.figures:
            raise ConfigError(f"reproduce registry: {self.module} lists no figures")
        for f in self.figures:
            if f.metric not in METRICS:
                raise ConfigError(
                    f"reproduce registry: {self.module}, {f.figure}: unknown metric {f.metric!r}"
                )

    def rows(self, status: Status, reason: str) -> list[Row]:
        """One row per figure with ``status`` and ``reason`` (the paper's values kept)."""
        return [self._row(f, status, reason) for f in self.figures]

    def _row(self, f: Figure, status: Status, reason: str) -> Row:
        return Row(
            self.experiment, f.figure, f.case, f.metric, paper=f.paper,
            paper_text=f.paper_text, status=status, reason=reason,
            details={"module": self.module},
        )  # fmt: skip

    def failed_row(self, reason: str, details: dict[str, Any]) -> Row:
        """The one row of an experiment that did not finish."""
        first = self.figures[0]
        figures = "; ".join(dict.fromkeys(f.figure for f in self.figures))
        return Row(
            self.experiment, figures, "the whole experiment", first.metric,
            status="failed", reason=reason, details={"module": self.module, **details},
        )  # fmt: skip


@dataclass(frozen=True)
class Options:
    """How to run: the command line's choices, and where things are."""

    quick: bool = False
    out: Path = Path("out/reproduce")
    calibration: Path | None = None
    link_scale: float = 0.01
    timeout_s: float | None = None
    calibrate_timeout_s: float = 3600.0
    state_root: Path = DEFAULT_STATE_ROOT
    cli: tuple[str, ...] = CLI
    command: str = ""
    repo: Path | None = None
    #: Held for the whole run, so no other program's fabric runs between (or during)
    #: the experiments; they and ``sdnmpi calibrate`` inherit the hold.
    lock: Path = FABRIC_LOCK
    #: Keep, from ``OUT/report.json``, the rows of the experiments not run this time:
    #: a full report assembled from ``--only`` runs (a full run takes hours), or a run
    #: resumed after one experiment failed.  Kept experiments name the run they came
    #: from (date, commit, calibration) in the report.
    merge: bool = False


@dataclass
class Outcome:
    """What a run produced: the rows, the meta, the files written, how many ran."""

    rows: list[Row]
    meta: dict[str, Any]
    paths: dict[str, Path] = field(default_factory=dict)
    ran: int = 0
    interrupted: bool = False


class ExperimentTimeout(BaseException):
    """The driver's time limit expired (a BaseException: ``except Exception`` in an
    experiment does not swallow it, as with KeyboardInterrupt)."""


# -- fabrics ---------------------------------------------------------------------------
def list_fabrics(state_root: Path) -> set[str]:
    """Names of the emulated fabrics that are up: those with ``NAME/state.json``."""
    try:
        return {d.name for d in state_root.iterdir() if (d / "state.json").is_file()}
    except FileNotFoundError:
        return set()
    except OSError as exc:
        log.warning("cannot list fabrics in %s: %s", state_root, exc)
        return set()


def take_down(name: str, options: Options) -> str:
    """``sdnmpi emu down --name NAME``; a sentence for the report."""
    argv = [*options.cli, "emu", "down", "--name", name, "--state-dir", str(options.state_root)]
    rc, _, err = run_cli(argv, 300)
    if rc == 0:
        return f"fabric {name} was left up; removed with `sdnmpi emu down --name {name}`"
    return f"fabric {name} was left up; `sdnmpi emu down --name {name}` failed (rc={rc}: " + (
        f"{_last_line(err)})"
    )


@contextlib.contextmanager
def fabric_guard(options: Options, notes: list[str]) -> Iterator[None]:
    """Take down, after the block, every fabric that appeared during it; notes say so."""
    before = list_fabrics(options.state_root)
    try:
        yield
    finally:
        for name in sorted(list_fabrics(options.state_root) - before):
            note = take_down(name, options)
            log.warning("%s", note)
            notes.append(note)


def run_cli(argv: Sequence[str], timeout_s: float) -> tuple[int, str, str]:
    """Run a command; on timeout or Ctrl-C, SIGINT it (it cleans up), then SIGKILL."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        return 124, "", f"timed out after {timeout_s:g} s"
    except BaseException:
        _stop(proc)
        raise
    return proc.returncode, out, err


def _stop(proc: subprocess.Popen[str]) -> None:
    for sig, wait_s in ((signal.SIGINT, 20.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=wait_s)
            return


# -- calibration -----------------------------------------------------------------------
def calibrate(options: Options) -> tuple[Calibration, Path | None, str, str]:
    """The calibration to use, its file, where it came from, and a note on a fallback.

    ``--calibration FILE`` is read (a bad file raises FormatError); otherwise
    ``sdnmpi calibrate --out OUT/calibration.json --link-scale S [--quick]`` runs (it
    brings up a small fabric of its own), and if it is not there or fails,
    :meth:`Calibration.nominal` at ``options.link_scale``.
    """
    if options.calibration is not None:
        cal = Calibration.load(options.calibration)
        return cal, options.calibration, f"given with --calibration ({cal.source})", ""
    path = options.out / "calibration.json"
    args = ["calibrate", "--out", str(path), "--link-scale", f"{options.link_scale:g}"]
    args += ["--state-dir", str(options.state_root), *(["--quick"] if options.quick else [])]
    log.info("calibrating: sdnmpi %s", " ".join(args))
    rc, _, err = run_cli([*options.cli, *args], options.calibrate_timeout_s)
    nominal = Calibration.nominal(options.link_scale)
    if rc != 0:
        why = "is not available" if "No such command" in err else f"failed (rc={rc})"
        return nominal, None, "nominal", f"`sdnmpi calibrate` {why}: {_last_line(err)}"
    try:
        cal = Calibration.load(path)
    except SdnMpiError as exc:
        return nominal, None, "nominal", f"`sdnmpi calibrate` wrote no usable file ({exc})"
    return cal, path, f"measured by sdnmpi calibrate ({cal.source})", ""


def _calibration_meta(
    cal: Calibration, path: Path | None, origin: str, note: str
) -> dict[str, Any]:
    doc = cal.to_dict()
    doc.pop("measurements", None)
    doc.pop("schema", None)
    return {**doc, "source": origin, "file": None if path is None else str(path), "note": note}


# -- one experiment --------------------------------------------------------------------
@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`ExperimentTimeout` in the block after ``seconds`` (main thread only)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _alarm(signum: int, frame: FrameType | None) -> None:
        raise ExperimentTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_entry(entry: Entry, ctx: Context) -> tuple[list[Row], str]:
    """Rows of one experiment and its outcome (ok, skipped or failed).

    KeyboardInterrupt is not caught here: :func:`run` stops the run on it.
    """
    try:
        module = importlib.import_module(entry.module)
    except ModuleNotFoundError as exc:
        if exc.name == entry.module:
            return entry.rows("skipped", f"scripts/{entry.module}.py not found"), "skipped"
        why = f"needs the Python module {exc.name}: not installed"
        return entry.rows("skipped", why), "skipped"
    except Skipped as exc:  # a check at import time
        return entry.rows("skipped", _one_line(str(exc)) or "skipped"), "skipped"
    except Exception as exc:
        why = f"import failed: {type(exc).__name__}: {_summary(str(exc))}"
        return [_failure(entry, ctx, exc, why)], "failed"
    function = getattr(module, ENTRY_POINT, None)
    if not callable(function):
        why = f"scripts/{entry.module}.py has no {ENTRY_POINT}(ctx) yet"
        return entry.rows("skipped", why), "skipped"
    try:
        with deadline(ctx.timeout_s):
            result = function(ctx)
        rows = check_rows(list(result), f"{entry.module}.{ENTRY_POINT}()")
    except Skipped as exc:
        return entry.rows("skipped", _one_line(str(exc)) or "skipped"), "skipped"
    except ExperimentTimeout as exc:
        return [_failure(entry, ctx, exc, str(exc))], "failed"
    except Exception as exc:
        return [_failure(entry, ctx, exc)], "failed"
    except SystemExit as exc:
        return [_failure(entry, ctx, exc, f"exited with code {exc.code}")], "failed"
    if not rows:
        return [entry.failed_row(f"{ENTRY_POINT}() returned no rows", {})], "failed"
    return rows, "ok"


def _failure(entry: Entry, ctx: Context, exc: BaseException, why: str | None = None) -> Row:
    text = "".join(traceback.format_exception(exc))
    where = ctx.out / "traceback.txt"
    with contextlib.suppress(OSError):
        where.write_text(text)
    reason = why or f"{type(exc).__name__}: {_summary(str(exc))}"
    return entry.failed_row(f"{reason} (traceback: {entry.module}/traceback.txt)",
                            {"traceback": str(where)})  # fmt: skip


def _summary(message: str) -> str:
    """The first line of an exception's message, and its last if there are more."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    if len(lines) <= 1:
        return lines[0][:300] if lines else "(no message)"
    return f"{lines[0][:200]} ... {lines[-1][:200]}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no message"


def _with_note(rows: list[Row], notes: Sequence[str]) -> list[Row]:
    if not notes:
        return rows
    extra = "; ".join(notes)
    return [dataclasses.replace(r, reason=f"{r.reason}; {extra}" if r.reason else extra)
            for r in rows]  # fmt: skip


# -- the run ---------------------------------------------------------------------------
def run(
    entries: Sequence[Entry], options: Options, registry: Sequence[Entry] | None = None
) -> Outcome:
    """Calibrate, run every entry, write ``report.json``, ``report.md`` and plots; all of
    it holding the machine's fabric lock (other fabric programs wait).

    With ``options.merge`` the rows of experiments not in ``entries`` are kept from the
    report already in ``options.out``, ordered as in ``registry`` (all experiments); a
    report of the other mode there is a :class:`ConfigError` before anything runs.
    """
    options.out.mkdir(parents=True, exist_ok=True)
    running = {e.module for e in entries}
    kept = previous_experiments(options.out, options.quick, running) if options.merge else {}
    with fabric_lock(lambda msg: log.info("%s", msg), path=options.lock):
        return _run(entries, options, kept, registry or entries)


def _run(
    entries: Sequence[Entry],
    options: Options,
    kept: dict[str, Kept],
    registry: Sequence[Entry],
) -> Outcome:
    meta = base_meta(options)
    already = sorted(list_fabrics(options.state_root))
    if already:
        meta["notes"].append(
            f"fabric(s) {', '.join(already)} were up before the run (one fabric per "
            "machine: experiments that bring up their own fail)"
        )
    outcome = Outcome([], meta)
    cal_notes: list[str] = []
    try:
        with fabric_guard(options, cal_notes):
            cal, cal_path, origin, note = calibrate(options)
    except KeyboardInterrupt:
        outcome.interrupted = True
        cal, cal_path = Calibration.nominal(options.link_scale), None
        origin, note = "nominal", "calibration interrupted"
    meta["calibration"] = _calibration_meta(cal, cal_path, origin, note)
    meta["cleanup"] += cal_notes
    for entry in entries:
        if outcome.interrupted:
            outcome.rows += entry.rows("skipped", "not run: the run was interrupted")
            continue
        _run_one(entry, options, cal, cal_path, outcome)
    if kept:
        outcome.rows = merge(outcome.rows, meta, kept, [e.module for e in registry])
    shown = list(registry) if kept else list(entries)
    outcome.paths = write_report(outcome.rows, meta, options.out, shown)
    return outcome


def rederive(entries: Sequence[Entry], options: Options, registry: Sequence[Entry]) -> Outcome:
    """Rebuild the rows of ``entries`` from the summaries their last run saved in
    ``OUT/MODULE/`` (the module's :data:`REDERIVE_POINT`), with this checkout's row logic;
    every other experiment of ``OUT/report.json`` is kept as it is.  Nothing is run and
    no fabric is used; the measurements stay those of the run that made them, and the
    report says which rows were re-derived, when and by which commit.
    """
    path = options.out / "report.json"
    if not path.exists():
        raise ConfigError(f"{path} does not exist: --rederive rebuilds rows of a report")
    old_meta, _ = load_json(path)
    kept = previous_experiments(options.out, options.quick, set())
    meta = base_meta(options)
    meta["calibration"] = old_meta.get("calibration")
    for entry in entries:
        if entry.module not in kept:
            raise ConfigError(f"{path} has no rows of {entry.module} to re-derive")
        module = importlib.import_module(entry.module)
        function = getattr(module, REDERIVE_POINT, None)
        if not callable(function):
            raise ConfigError(f"scripts/{entry.module}.py cannot re-derive its rows "
                              f"(no {REDERIVE_POINT}(out))")  # fmt: skip
        try:
            rows = check_rows(list(function(options.out / entry.module)), entry.module)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{entry.module}: saved summary unusable: {exc}") from None
        was = kept[entry.module]
        was.rows = rows
        saved_by = saved_run(options.out / entry.module)
        was.meta = {
            **was.meta,
            **({"from_run": saved_by} if saved_by is not None else {}),
            "rows": len(rows),
            "tables": list(dict.fromkeys(r.experiment for r in rows)),
            "rederived": {"date": meta["date"], "commit": meta["git"].get("commit")},
        }
    outcome = Outcome([], meta)
    outcome.rows = merge(outcome.rows, meta, kept, [e.module for e in registry])
    outcome.paths = write_report(outcome.rows, meta, options.out, registry)
    outcome.ran = len(entries)
    return outcome


def _run_one(
    entry: Entry, options: Options, cal: Calibration, cal_path: Path | None, outcome: Outcome
) -> None:
    out = options.out / entry.module
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(
        quick=options.quick, out=out, calibration=cal, calibration_path=cal_path,
        log=logging.getLogger(f"sdnmpi.reproduce.{entry.module}"), timeout_s=options.timeout_s,
    )  # fmt: skip
    log.info("%s (%s): starting", entry.experiment, entry.module)
    t0 = time.monotonic()
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    notes: list[str] = []
    try:
        with fabric_guard(options, notes):
            rows, result = run_entry(entry, ctx)
    except KeyboardInterrupt as exc:
        outcome.interrupted = True
        rows, result = [_failure(entry, ctx, exc, "interrupted (Ctrl-C)")], "interrupted"
    elapsed = time.monotonic() - t0
    with contextlib.suppress(OSError):
        out.rmdir()  # only if the experiment left nothing there
    if out.is_dir():  # what it saved there belongs to this run, report or not (--rederive)
        cal_meta = outcome.meta.get("calibration") or {}
        provenance = {"date": started, "commit": outcome.meta["git"].get("commit"),
                      "dirty": outcome.meta["git"].get("dirty"), "outcome": result,
                      "calibration": cal_meta.get("source"),
                      "calibration_file": cal_meta.get("file")}  # fmt: skip
        with contextlib.suppress(OSError):
            (out / RUN_FILE).write_text(json.dumps(provenance, indent=1) + "\n")
    rows = _with_note(rows, notes)
    outcome.rows += rows
    outcome.ran += result == "ok"
    outcome.meta["cleanup"] += notes
    outcome.meta["experiments"].append(
        {"module": entry.module, "experiment": entry.experiment, "outcome": result,
         "rows": len(rows), "duration_s": round(elapsed, 1),
         "tables": list(dict.fromkeys(r.experiment for r in rows))}
    )  # fmt: skip
    log.info("%s: %s, %d rows in %.0f s%s", entry.module, result, len(rows), elapsed,
             "" if result == "ok" else f": {rows[0].reason}")  # fmt: skip


def write_report(
    rows: Sequence[Row], meta: dict[str, Any], out: Path, entries: Sequence[Entry]
) -> dict[str, Path]:
    """Plots, ``report.md`` and ``report.json`` in ``out``; their paths.

    The experiments' own PNGs (``out/MODULE/*.png``) are linked beside ours.
    """
    plots: dict[str, list[Path]] = {}
    try:
        from sdnmpi.report.reproduce_plots import write_plots

        for experiment, png in write_plots(rows, out).items():
            plots.setdefault(experiment, []).append(png)
    except Exception as exc:  # a plot must not cost the report
        meta["notes"].append(f"plots failed: {type(exc).__name__}: {exc}")
    tables = {e["module"]: e["tables"] for e in meta.get("experiments", ())}
    for entry in entries:
        own = sorted((out / entry.module).glob("*.png"))
        if own:  # linked under the first table the module's rows made
            first = (tables.get(entry.module) or [entry.experiment])[0]
            plots.setdefault(first, []).extend(own)
    meta["plots"] = {e: [str(p) for p in ps] for e, ps in plots.items()}
    paths = {
        "markdown": write_markdown(rows, meta, plots, out / "report.md"),
        "json": write_json(rows, meta, out / "report.json"),
    }
    return paths


def base_meta(options: Options) -> dict[str, Any]:
    """How the report was produced: command, date, machine, commit, mode."""
    return {
        "command": options.command or " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "mode": "quick" if options.quick else "full",
        "machine": {
            "hostname": platform.node(),
            "cpus": os.cpu_count(),
            "system": platform.system(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "git": git_info(options.repo),
        "fabric": {
            "queues": queues_in_use(),
            "marking": describe_queues(queues_in_use()),
            "tcp_congestion": DEFAULT_TCP_CONGESTION,
        },
        "timeout_s": options.timeout_s,
        "experiments": [],
        "cleanup": [],
        "notes": [],
    }


def git_info(repo: Path | None) -> dict[str, Any]:
    """The commit checked out in ``repo`` and whether tracked files differ from it."""
    if repo is None:
        return {"commit": None, "dirty": None}
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()  # fmt: skip
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(status.strip())}
