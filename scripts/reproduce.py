"""``make reproduce``: re-run the seed papers' experiments and write one report.

Run as root: ``.venv/bin/python scripts/reproduce.py [--quick] [--only EXP[,EXP]]
[--out DIR] [--calibration FILE] [--list]``.

First the calibration (``sdnmpi calibrate``, or ``--calibration FILE``; nominal figures
if neither works), then every experiment of :data:`REGISTRY` (a module in
``scripts/`` implementing ``reproduce(ctx) -> Sequence[Row]``, see
``sdnmpi.report.reproduce_api``) in turn, then ``DIR/report.md``, ``DIR/report.json``
and one plot per experiment (``DIR/*.png``).  Missing experiments and missing programs
give skipped rows, crashes give failed rows, fabrics left up are taken down; the report
is written anyway.  Exit code 0 when the report was written and at least one experiment
ran, 1 when none could, 2 for bad arguments (or not root), 130 on Ctrl-C (the report of
what ran is still written).  docs/reproduce.md describes the report.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from sdnmpi.emu.plan import DEFAULT_STATE_ROOT
from sdnmpi.errors import ConfigError, SdnMpiError
from sdnmpi.report.reproduce import summarize
from sdnmpi.report.reproduce_api import ENTRY_POINT, Row
from sdnmpi.report.reproduce_run import Entry, Figure, Options, rederive, run

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
LINK_SCALE = 0.01  # as scripts/demo_fabric.py: 10 Mbit/s links, so links and not CPUs limit
#: Per experiment: full runs take up to hours, quick ones minutes.
TIMEOUT_S = {"quick": 1200.0, "full": 4 * 3600.0}
#: Lines of each failure's traceback printed under --strict.
TRACEBACK_LINES = 40

#: The experiments, in the order they run, with the published figures each reproduces
#: and the papers' values (the seeds are in ../shared/seeds).  Adding an experiment:
#: a module scripts/exp_NAME.py with reproduce(ctx), and one Entry here.
REGISTRY: tuple[Entry, ...] = (
    Entry("exp_duplex", "issue 11 full-duplex exchanges", (
        Figure("bibw / bw (osu_bibw, osu_bw)", "bandwidth_ratio", None,
               "target >= 1.8 with the duplex settings", "both MPI libraries, 256 KiB-2 MiB"),
    )),
    Entry("exp_allreduce", "002 SDN_MPI_Allreduce", (
        Figure("Figs. 9-10 (8 nodes)", "speedup", 1 / (1 - 0.41), "41 % less time at most",
               "8 hosts, push mode vs default routes"),
        Figure("Figs. 11-12 (16 nodes)", "speedup", 1 / (1 - 0.56), "56 % less time at most",
               "16 hosts, push mode vs default routes"),
    )),
    Entry("exp_unisonflow", "000 UnisonFlow", (
        Figure("Figs. 9-10 (Bcast, proposed)", "on_intended_pct", None,
               "only spine1 carried MPI_Bcast", "Bcast bytes via spine1, tagged"),
        Figure("Figs. 9-10 (Reduce, proposed)", "on_intended_pct", None,
               "only spine2 carried MPI_Reduce", "Reduce bytes via spine2, tagged"),
        Figure("Figs. 7-8 (ECMP)", "on_intended_pct", None,
               "both spines carried both primitives", "ECMP"),
    )),
    Entry("exp_overhead", "000/004 tagging overhead", (
        Figure("000 Fig. 11, 004 Fig. 5 (osu_bw)", "bandwidth_ratio", None,
               "no visible difference", "tag mode vs plain, large messages"),
        Figure("000 Figs. 12-13, 004 Fig. 6 (osu_latency)", "latency_increase_pct", None,
               "practically negligible", "tag mode vs plain, small messages"),
    )),
    Entry("exp_miniapps", "001 interconnect manager: mini-apps", (
        Figure("Fig. 4 (CG)", "speedup", 1.29, "1.29x faster communication",
               "CG, ours vs D-mod-K"),
        Figure("Fig. 4 (Butterfly)", "speedup", 1.18, "1.18x faster communication",
               "Butterfly, ours vs D-mod-K"),
        Figure("Fig. 4 (SpMV)", "speedup", 2.56, "2.56x faster communication",
               "SpMV, ours vs D-mod-K"),
        Figure("Fig. 4 (FT)", "speedup", None, "no clear gain", "FT, ours vs D-mod-K"),
        Figure("Fig. 4 (Stencil2D)", "speedup", None, "no clear gain",
               "Stencil2D, ours vs D-mod-K"),
        Figure("Fig. 4 (Stencil3D)", "speedup", None, "no clear gain",
               "Stencil3D, ours vs D-mod-K"),
    )),
    Entry("exp_netsa", "003 NetSA", (
        Figure("Fig. 5c (6 hops, 512 B)", "latency_increase_pct", 49.8, "49.8 % over one hop",
               "osu_latency, 6 switches vs 1, 512 B"),
        Figure("Fig. 6c (6 hops, 4 KiB and up)", "bandwidth_ratio", 0.9,
               "less than 10 % lower above 2 KiB", "osu_bw, 6 switches vs 1"),
        Figure("Fig. 10a (Allreduce)", "latency_increase_pct", 25.0,
               "NetSA at most 25 % over one switch", "16 ranks, NetSA vs one switch"),
        Figure("Fig. 10a (Allreduce)", "latency_increase_pct", 200.0,
               "LACP nearly 200 % over one switch", "16 ranks, LACP vs one switch"),
        Figure("Fig. 10b (Allgather)", "latency_increase_pct", 57.0,
               "NetSA at most 57 % over one switch", "16 ranks, NetSA vs one switch"),
        Figure("Fig. 10b (Allgather)", "latency_increase_pct", 100.0,
               "LACP over 100 % over one switch", "16 ranks, LACP vs one switch"),
        Figure("Fig. 10c (Bcast)", "latency_increase_pct", 17.0,
               "NetSA at most 17 % over one switch", "16 ranks, NetSA vs one switch"),
        Figure("Fig. 10c (Bcast)", "latency_increase_pct", 100.0,
               "LACP over 100 % over one switch", "16 ranks, LACP vs one switch"),
        Figure("Fig. 11 (bt)", "time_increase_pct", 4.0, "4 % over one switch", "bt, NetSA"),
        Figure("Fig. 11 (bt)", "time_increase_pct", 14.0, "14 % over one switch", "bt, LACP"),
        Figure("Fig. 11 (cg)", "time_increase_pct", None, "close to one switch", "cg, NetSA"),
        Figure("Fig. 11 (cg)", "time_increase_pct", 52.0, "52 % over one switch", "cg, LACP"),
        Figure("Fig. 11 (ft)", "time_increase_pct", 36.0, "36 % over one switch", "ft, NetSA"),
        Figure("Fig. 11 (ft)", "time_increase_pct", 161.0, "161 % over one switch", "ft, LACP"),
        Figure("Fig. 11 (lu)", "time_increase_pct", None, "close to one switch", "lu, NetSA"),
        Figure("Fig. 11 (lu)", "time_increase_pct", 8.0, "8 % over one switch", "lu, LACP"),
        Figure("Sec. V-D (rule programming)", "time_s", 0.47, "0.47 s on average",
               "install_job to rules confirmed by barrier"),
        Figure("Fig. 12 (3D cylinder)", "time_increase_pct", 8.0,
               "8 % over one switch (LACP 17 %)", "OpenLB application, NetSA vs one switch"),
        Figure("Fig. 12 (backward-facing step)", "speedup", 1.27,
               "LACP takes 27 % longer than NetSA", "OpenLB application, NetSA vs LACP"),
    )),
    Entry("exp_apps", "issue 11 real applications", (
        Figure("LAMMPS in.lj (loop time)", "speedup", None,
               "issue 11: run-time change under ours vs D-mod-K and ECMP, with predictions",
               "LAMMPS LJ under Slurm, ours vs D-mod-K / ECMP"),
        Figure("HPCC (PTRANS)", "speedup", None,
               "issue 11: run-time change under ours vs D-mod-K and ECMP, with predictions",
               "HPCC PTRANS under Slurm, ours vs D-mod-K / ECMP"),
        Figure("HPCC (MPIFFT)", "speedup", None,
               "issue 11: run-time change under ours vs D-mod-K and ECMP, with predictions",
               "HPCC MPIFFT under Slurm, ours vs D-mod-K / ECMP"),
        Figure("HPCC (LatencyBandwidth)", "speedup", None,
               "issue 11: run-time change under ours vs D-mod-K and ECMP, with predictions",
               "HPCC b_eff under Slurm, ours vs D-mod-K / ECMP"),
    )),
)  # fmt: skip


def select(names: str | None, registry: Sequence[Entry] = REGISTRY) -> list[Entry]:
    """The entries named in ``--only`` (``exp_allreduce`` or ``allreduce``), in order."""
    if not names:
        return list(registry)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    by_name = {e.module: e for e in registry} | {e.module.removeprefix("exp_"): e
                                                 for e in registry}  # fmt: skip
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        known = ", ".join(e.module for e in registry)
        raise ConfigError(f"unknown experiment(s) {', '.join(unknown)} (known: {known})")
    chosen = {by_name[n].module for n in wanted}
    return [e for e in registry if e.module in chosen]


def describe(entries: Sequence[Entry]) -> str:
    """``--list``: each experiment, whether it is there yet, and its figures."""
    lines = []
    for e in entries:
        path = SCRIPTS / f"{e.module}.py"
        state = "missing" if not path.exists() else (
            "ready" if f"def {ENTRY_POINT}(" in path.read_text() else f"no {ENTRY_POINT}(ctx)"
        )  # fmt: skip
        lines.append(f"{e.module:<16} {e.experiment}  [{state}]")
        for f in e.figures:
            paper = "" if f.paper is None else f"{f.paper:.3g} "
            lines.append(f"    {f.figure}: {f.metric} {paper}({f.paper_text})")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="The short form (minutes; CI).")
    ap.add_argument("--only", help="Run only these experiments, e.g. allreduce,netsa.")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "reproduce", help="Report dir.")
    ap.add_argument("--calibration", type=Path, help="Use this sdnmpi calibrate output.")
    ap.add_argument("--list", action="store_true", help="List the experiments and exit.")
    ap.add_argument(
        "--link-scale",
        type=float,
        default=LINK_SCALE,
        help="Rate factor of the nominal calibration (when calibrate fails).",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        help="Seconds per experiment (default 1200 quick, 14400 full; 0: none).",
    )
    ap.add_argument(
        "--strict",
        action="store_true",
        help="Exit 1 when any experiment failed (make test uses it; skipped rows are fine).",
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="Keep the rows of experiments not run now from OUT/report.json (same mode): "
        "a full report assembled from --only runs.",
    )
    ap.add_argument(
        "--rederive",
        action="store_true",
        help="Rebuild the --only experiments' rows from the summaries their last run saved "
        "in OUT (this checkout's row logic, the same measurements); nothing runs.",
    )
    ap.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_ROOT,
        help="State root of the emulated fabrics (to find leftovers).",
    )
    return ap.parse_args(argv)


def interrupt_on_stop_signals() -> None:
    """SIGINT and SIGTERM stop a run as Ctrl-C does: the running experiment is
    interrupted, its fabric and daemons removed, the report written (exit code 130).
    A run started in the background by a non-interactive shell inherits SIGINT
    ignored (POSIX), so the handler is set again; SIGTERM (``kill``, a service
    manager) killed the run outright and left its fabric, Slurm and daemons up."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, stop)


def report_failures(rows: Sequence[Row], *, with_tracebacks: bool) -> None:
    """Name each failed row and why, last, where a CI log's tail shows it.

    With ``with_tracebacks`` (``--strict``, as ``make test`` runs it) the traceback each
    failure saved is printed too: a CI machine's output directory is gone afterwards.
    """
    for row in rows:
        if row.status != "failed":
            continue
        print(f"failed: {row.experiment}, {row.figure}: {row.reason}", file=sys.stderr)
        where = row.details.get("traceback")
        if with_tracebacks and isinstance(where, str):
            try:
                text = Path(where).read_text(errors="replace")
            except OSError:
                continue
            lines = text.rstrip().splitlines()[-TRACEBACK_LINES:]
            print("\n".join("  | " + line for line in lines), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        entries = select(args.only)
    except ConfigError as exc:
        print(f"reproduce: error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        print(describe(entries))
        return 0
    if os.geteuid() != 0 and not args.rederive:
        print("reproduce: needs root (the emulated cluster); --list works without", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="[reproduce %(asctime)s] %(message)s", datefmt="%H:%M:%S"
    )
    mode = "quick" if args.quick else "full"
    timeout = TIMEOUT_S[mode] if args.timeout is None else (args.timeout or None)
    sys.path.insert(0, str(SCRIPTS))  # the experiments and their harness
    options = Options(
        quick=args.quick, out=args.out, calibration=args.calibration,
        link_scale=args.link_scale, timeout_s=timeout, state_root=args.state_dir,
        command=" ".join(["scripts/reproduce.py", *(argv or sys.argv[1:])]), repo=ROOT,
        merge=args.merge,
    )  # fmt: skip
    interrupt_on_stop_signals()
    try:
        if args.rederive:
            if not args.only:
                raise ConfigError("--rederive needs --only (the experiments to rebuild)")
            outcome = rederive(entries, options, REGISTRY)
        else:
            outcome = run(entries, options, REGISTRY)
    except SdnMpiError as exc:
        print(f"reproduce: error: {exc}", file=sys.stderr)
        return 2
    counts = summarize(outcome.rows)["by_status"]
    print(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no rows")
    for label, path in outcome.paths.items():
        print(f"{label}: {path}")
    for experiment, plots in outcome.meta.get("plots", {}).items():
        print(f"plots of {experiment}: {', '.join(plots)}")
    if outcome.interrupted:
        return 130
    if counts.get("failed"):
        report_failures(outcome.rows, with_tracebacks=args.strict)
    if args.strict and counts.get("failed"):
        print(f"reproduce: {counts['failed']} row(s) failed (--strict)", file=sys.stderr)
        return 1
    return 0 if outcome.ran else 1


if __name__ == "__main__":
    sys.exit(main())
