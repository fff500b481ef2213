"""The driver of ``make reproduce`` with fake experiments: statuses, reasons, leftovers.

Fake experiment modules are written to a temporary directory put on ``sys.path``; the
state root of the emulated fabrics is a temporary directory too, so nothing here
touches /run/sdnmpi, OVS or MPI.  A fabric "left behind" is a state file listing only
its own directory, which the real ``sdnmpi emu down --state-dir`` removes without root.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu.plan import Resource
from sdnmpi.emu.state import FabricState, save_state
from sdnmpi.errors import ConfigError, FormatError
from sdnmpi.report.reproduce import load_json
from sdnmpi.report.reproduce_run import Entry, Figure, Options, list_fabrics, rederive, run
from sdnmpi.sim.calibration import Calibration

ROOT = Path(__file__).resolve().parents[2]
EXP = "099 Fake"


def make_fabric(state_root: Path, name: str) -> None:
    """A state file as ``emu up`` writes it, owning nothing but its directory."""
    topo = leaf_spine(1, 1, 1, host_bps=1e9, uplink_bps=1e9, name="tiny")
    state = FabricState(name, state_root, topo, 0.01, None, False, complete=True,
                        resources=(Resource("dir", str(state_root / name)),))  # fmt: skip
    save_state(state)


MODULES = {
    "ok": """
        from sdnmpi.report.reproduce_api import Row

        def reproduce(ctx):
            (ctx.out / "own.png").write_bytes(b"not really a png")
            ctx.log.info("quick=%s", ctx.quick)
            return [
                Row("099 Fake", "Fig. 1", "a", "speedup", paper=1.5, measured=1.6,
                    predicted=1.5, bound=2.0, network_limited=True,
                    settings={"quick": ctx.quick, "link_scale": ctx.link_scale}),
                Row("099 Fake", "Fig. 1", "b", "time_s", measured=0.2, predicted=0.3),
            ]
    """,
    "boom": """
        def reproduce(ctx):
            raise RuntimeError("sdnmpi emu mpirun failed (1):\\nrank 3 hung\\nkilled by timeout")
    """,
    "skip": """
        from sdnmpi.report.reproduce_api import require_programs

        def reproduce(ctx):
            require_programs({"no-such-hpcc-program": "apt-get install hpcc"})
    """,
    "leaky": """
        import sys
        from pathlib import Path
        from sdnmpi.report.reproduce_api import Row
        sys.path.insert(0, {tests!r})
        from tests.reproduce.test_driver import make_fabric

        def reproduce(ctx):
            make_fabric(Path({root!r}), "leak1")
            return [Row("099 Leaky", "Fig. 2", "c", "speedup", measured=1.1)]
    """,
    "slow": """
        import time

        def reproduce(ctx):
            try:
                time.sleep(60)
            except Exception:  # the driver's time limit is not an Exception
                pass
    """,
    "noentry": """
        def rows():
            return []
    """,
    "needsdep": """
        import no_such_package_for_sdnmpi_tests

        def reproduce(ctx):
            return []
    """,
    "exits": """
        import sys

        def reproduce(ctx):
            sys.exit(3)
    """,
    "dupes": """
        from sdnmpi.report.reproduce_api import Row

        def reproduce(ctx):
            r = Row("099 Fake", "Fig. 1", "a", "speedup", measured=1.0)
            return [r, r]
    """,
    "empty": """
        def reproduce(ctx):
            return []
    """,
    "importskip": """
        from sdnmpi.report.reproduce_api import require_python_modules

        require_python_modules({"no_such_module_x": "pip install x"})
    """,
    "syntax": """
        def reproduce(ctx) -> :
    """,
    "interrupt": """
        def reproduce(ctx):
            raise KeyboardInterrupt
    """,
    "saved": """
        import json
        from sdnmpi.report.reproduce_api import Row

        def _row(doc, reason):
            return Row("099 Saved", "Fig. 4", "s", "speedup", measured=doc["measured"],
                       predicted=1.5, reason=reason)

        def reproduce(ctx):
            doc = {"measured": 1.25}
            (ctx.out / "summary.json").write_text(json.dumps(doc))
            return [_row(doc, "the row logic of the run")]

        def rows_from_saved(out):
            return [_row(json.loads((out / "summary.json").read_text()), "newer row logic")]
    """,
}

FAKE_CLI = """
import json, shutil, sys
from pathlib import Path
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[0] == "calibrate":
    mode = {mode!r}
    if mode == "missing":
        print("Error: No such command 'calibrate'.", file=sys.stderr)
        sys.exit(2)
    if mode == "fails":
        print("emu up failed\\nsomething broke", file=sys.stderr)
        sys.exit(1)
    out = Path(args[args.index("--out") + 1])
    out.write_text(json.dumps({{"schema": "sdnmpi.calibration/1", "link_scale": 0.02,
                               "goodput": 0.95, "source": "fake calibrate"}}))
    if mode == "leaky":
        sys.path.insert(0, {tests!r})
        from tests.reproduce.test_driver import make_fabric
        make_fabric(Path({root!r}), "calib1")
elif args[:2] == ["emu", "down"]:
    name = args[args.index("--name") + 1]
    shutil.rmtree(Path(args[args.index("--state-dir") + 1]) / name)
"""


def entry(name: str, experiment: str = EXP) -> Entry:
    return Entry(f"{name}", experiment, (
        Figure("Fig. 1", "speedup", 1.5, "1.5x", "a"),
        Figure("Fig. 3", "time_s", 0.47, "0.47 s", "d"),
    ))  # fmt: skip


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A directory of fake experiment modules on sys.path (unique names), a state root."""
    mods = tmp_path / "mods"
    mods.mkdir()
    root = tmp_path / "state"
    root.mkdir()
    prefix = f"fake_{tmp_path.name.replace('-', '_')}_"
    for name, template in MODULES.items():
        src = template.replace("{tests!r}", repr(str(ROOT))).replace("{root!r}", repr(str(root)))
        (mods / f"{prefix}{name}.py").write_text(textwrap.dedent(src))
    monkeypatch.syspath_prepend(str(mods))
    yield prefix, root, tmp_path
    for name in list(sys.modules):
        if name.startswith(prefix):
            del sys.modules[name]


def options(tmp_path: Path, root: Path, **kw: Any) -> Options:
    cal = tmp_path / "cal.json"
    Calibration.nominal(0.01).save(cal)
    base: dict[str, Any] = {"out": tmp_path / "out", "calibration": cal, "state_root": root}
    base["lock"] = tmp_path / "fabric.lock"  # not the machine's: experiments may run
    base["timeout_s"] = 20.0
    base.update(kw)
    return Options(**base)


def fake_cli(tmp_path: Path, root: Path, mode: str) -> tuple[tuple[str, ...], Path]:
    log = tmp_path / "cli.log"
    script = tmp_path / "fake_cli.py"
    script.write_text(FAKE_CLI.format(log=str(log), mode=mode, tests=str(ROOT), root=str(root)))
    return (sys.executable, str(script)), log


def by_module(rows):
    out: dict[str, list] = {}
    for r in rows:
        out.setdefault(r.details.get("module", r.experiment), []).append(r)
    return out


def test_statuses_reasons_and_leftover(lab):
    prefix, root, tmp = lab
    make_fabric(root, "lead")  # up before the run: must be left alone
    names = ["ok", "boom", "skip", "leaky", "missing", "noentry", "needsdep", "exits"]
    entries = [entry(prefix + n, "099 Leaky" if n == "leaky" else f"{EXP} {n}") for n in names]
    outcome = run(entries, options(tmp, root))  # the real `sdnmpi emu down`
    assert outcome.ran == 2  # ok and leaky
    assert not outcome.interrupted
    meta, rows = load_json(outcome.paths["json"])
    assert rows == outcome.rows
    got = {n: [(r.status, r.reason) for r in rows if r.experiment.endswith(f" {n}")] for n in names}

    ok = [r for r in rows if r.experiment == EXP]  # the module's own rows, unchanged
    assert [(r.case, r.status) for r in ok] == [("a", "ok"), ("b", "ok")]
    assert ok[0].settings == {"quick": False, "link_scale": 0.01}

    (boom,) = [r for r in rows if r.experiment == f"{EXP} boom"]
    assert boom.status == "failed"
    assert boom.reason.startswith("RuntimeError: sdnmpi emu mpirun failed (1): ... killed by")
    assert f"{prefix}boom/traceback.txt" in boom.reason
    assert "RuntimeError" in Path(boom.details["traceback"]).read_text()
    assert not (tmp / "out" / f"{prefix}missing").exists()  # empty directories are removed

    skip = [r for r in rows if r.experiment == f"{EXP} skip"]
    assert [(r.figure, r.status, r.paper) for r in skip] == [
        ("Fig. 1", "skipped", 1.5), ("Fig. 3", "skipped", 0.47)]  # fmt: skip
    assert {r.reason for r in skip} == {"no-such-hpcc-program not installed: apt-get install hpcc"}

    (leaky,) = [r for r in rows if r.experiment == "099 Leaky"]
    assert leaky.status == "ok"
    assert "fabric leak1 was left up; removed with `sdnmpi emu down --name leak1`" in leaky.reason
    assert list_fabrics(root) == {"lead"}
    assert not (root / "leak1").exists()
    assert any("leak1" in c for c in meta["cleanup"])
    assert any("lead were up before the run" in n for n in meta["notes"])

    assert {r.reason for r in rows if r.experiment == f"{EXP} missing"} == {
        f"scripts/{prefix}missing.py not found"}  # fmt: skip
    assert {r.reason for r in rows if r.experiment == f"{EXP} noentry"} == {
        f"scripts/{prefix}noentry.py has no reproduce(ctx) yet"}  # fmt: skip
    assert {r.reason for r in rows if r.experiment == f"{EXP} needsdep"} == {
        "needs the Python module no_such_package_for_sdnmpi_tests: not installed"}  # fmt: skip
    (exits,) = [r for r in rows if r.experiment == f"{EXP} exits"]
    assert exits.status == "failed" and exits.reason.startswith("exited with code 3")
    assert got["missing"][0][0] == got["noentry"][0][0] == "skipped"

    outcomes = {e["module"].removeprefix(prefix): e["outcome"] for e in meta["experiments"]}
    assert outcomes == {"ok": "ok", "boom": "failed", "skip": "skipped", "leaky": "ok",
                        "missing": "skipped", "noentry": "skipped", "needsdep": "skipped",
                        "exits": "failed"}  # fmt: skip
    assert meta["calibration"]["file"] == str(tmp / "cal.json")
    assert meta["calibration"]["source"] == "given with --calibration (nominal)"
    assert meta["mode"] == "full"

    md = outcome.paths["markdown"].read_text()
    assert "failed: RuntimeError: sdnmpi emu mpirun failed (1)" in md
    assert "skipped: no-such-hpcc-program not installed: apt-get install hpcc" in md
    # the summary says a reason once per experiment, with the figures it concerns
    assert f"- Skipped: {EXP} missing (Fig. 1, Fig. 3): scripts/{prefix}missing.py not found" in md
    assert "fabric leak1 was left up" in md
    assert f"({prefix}ok/own.png)" in md  # the experiment's own plot is linked
    assert (tmp / "out" / "099-fake.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads(outcome.paths["json"].read_text())["summary"]
    # skipped: 2 figures each of skip, missing, noentry, needsdep; ok: 2 + leaky
    assert summary["by_status"] == {"ok": 3, "cpu-bound": 0, "failed": 2, "skipped": 8}


def test_time_limit_and_bad_results(lab):
    prefix, root, tmp = lab
    names = ("slow", "dupes", "empty", "importskip", "syntax", "ok")
    entries = [entry(prefix + n, f"{EXP} {n}") for n in names]
    outcome = run(entries, options(tmp, root, timeout_s=1.0, quick=True))
    status = {r.experiment: (r.status, r.reason) for r in outcome.rows if r.experiment != EXP}
    assert status[f"{EXP} slow"][0] == "failed"
    assert status[f"{EXP} slow"][1].startswith("timed out after 1 s")
    assert status[f"{EXP} dupes"][0] == "failed"
    assert "appears twice" in status[f"{EXP} dupes"][1]
    assert status[f"{EXP} empty"] == ("failed", "reproduce() returned no rows")
    assert status[f"{EXP} importskip"] == (
        "skipped", "Python module no_such_module_x missing: pip install x")  # fmt: skip
    assert status[f"{EXP} syntax"][0] == "failed"
    assert status[f"{EXP} syntax"][1].startswith("import failed: SyntaxError: ")
    ok = [r for r in outcome.rows if r.experiment == EXP]
    assert ok[0].settings["quick"] is True  # the run after the time limit still works
    assert outcome.ran == 1


def test_merge_keeps_the_experiments_not_run(lab):
    """--merge: a report assembled from --only runs; the other mode is refused first."""
    prefix, root, tmp = lab
    ok, skip = entry(prefix + "ok"), entry(prefix + "skip", f"{EXP} skip")
    first = run([ok, skip], options(tmp, root))
    _, rows1 = load_json(first.paths["json"])
    meta1 = json.loads(first.paths["json"].read_text())["meta"]

    second = run([skip], options(tmp, root, merge=True), registry=[skip, ok])
    meta, rows = load_json(second.paths["json"])
    assert [r.experiment for r in rows] == [f"{EXP} skip"] * 2 + [EXP] * 2  # registry order
    assert rows[2:] == [r for r in rows1 if r.experiment == EXP]  # kept as they were
    assert [e["module"] for e in meta["experiments"]] == [skip.module, ok.module]
    kept = meta["experiments"][1]["from_run"]
    assert kept["date"] == meta1["date"] and kept["calibration"] == meta1["calibration"]["source"]
    assert "from_run" not in meta["experiments"][0]
    md = second.paths["markdown"].read_text()
    assert f"Kept from an earlier run (`--merge`): {ok.module}, 2 rows of {meta1['date']}" in md
    assert f"({prefix}ok/own.png)" in md  # the kept experiment's own plot stays linked

    third = run([skip, ok], options(tmp, root, merge=True))  # all re-run: nothing kept
    assert "from_run" not in json.dumps(json.loads(third.paths["json"].read_text())["meta"])

    before = third.paths["json"].read_text()
    with pytest.raises(ConfigError, match="holds a full report: a quick run cannot merge"):
        run([skip], options(tmp, root, merge=True, quick=True))
    assert third.paths["json"].read_text() == before  # refused before anything ran
    (tmp / "out" / "report.json").write_text("{not json")
    with pytest.raises(FormatError, match="not JSON"):
        run([skip], options(tmp, root, merge=True))
    alone = run([skip], options(tmp, root, out=tmp / "fresh", merge=True))  # no report yet
    assert {r.experiment for r in alone.rows} == {f"{EXP} skip"}


def test_rederive_rebuilds_rows_from_the_saved_summary_and_keeps_the_rest(lab):
    """--rederive: one experiment's rows rebuilt by its rows_from_saved from what its run
    saved, the others as they were; the report says so; bad requests change nothing."""
    prefix, root, tmp = lab
    ok, saved = entry(prefix + "ok"), entry(prefix + "saved", "099 Saved")
    first = run([ok, saved], options(tmp, root))
    meta1, rows1 = load_json(first.paths["json"])
    assert [r.reason for r in rows1 if r.experiment == "099 Saved"] == ["the row logic of the run"]

    again = rederive([saved], options(tmp, root, calibration=None), [ok, saved])
    meta, rows = load_json(again.paths["json"])
    assert [r for r in rows if r.experiment == EXP] == [r for r in rows1 if r.experiment == EXP]
    (row,) = [r for r in rows if r.experiment == "099 Saved"]
    assert (row.measured, row.reason) == (1.25, "newer row logic")
    assert meta["calibration"] == meta1["calibration"]  # that of the run that measured
    exp = {e["module"]: e for e in meta["experiments"]}[saved.module]
    assert exp["from_run"]["date"] == meta1["date"] and exp["rederived"]["date"] == meta["date"]
    md = again.paths["markdown"].read_text()
    assert f"{saved.module}, 1 rows of {meta1['date']}" in md
    assert "its rows re-derived from that run's saved summary (`--rederive`)" in md
    # the run that saved the summary names itself, also when its report was never
    # written (a later run saved a newer summary, then crashed before its report)
    run_file = tmp / "out" / saved.module / "run.json"
    own = json.loads(run_file.read_text())
    assert own["commit"] == meta1["git"]["commit"] and own["outcome"] == "ok"
    assert own["calibration"] == meta1["calibration"]["source"]
    later = {**own, "date": "2026-11-26T19:32:08+00:00", "commit": "aeb872c"}
    run_file.write_text(json.dumps(later))
    newer = rederive([saved], options(tmp, root, calibration=None), [ok, saved])
    exp = {e["module"]: e for e in load_json(newer.paths["json"])[0]["experiments"]}
    assert exp[saved.module]["from_run"] == later
    assert "from_run" in exp[ok.module]  # the others keep theirs
    again = newer

    before = again.paths["json"].read_text()
    for bad, needle in (
        ([ok], "cannot re-derive its rows"),
        ([entry(prefix + "boom")], "has no rows of"),
    ):
        with pytest.raises(ConfigError, match=needle):
            rederive(bad, options(tmp, root), [ok, saved])
    with pytest.raises(ConfigError, match="quick run cannot merge"):
        rederive([saved], options(tmp, root, quick=True), [ok, saved])
    with pytest.raises(ConfigError, match="does not exist"):
        rederive([saved], options(tmp, root, out=tmp / "none"), [ok, saved])
    (tmp / "out" / saved.module / "summary.json").write_text("{}")
    with pytest.raises(ConfigError, match="saved summary unusable"):
        rederive([saved], options(tmp, root), [ok, saved])
    assert again.paths["json"].read_text() == before


def test_interrupt_stops_the_run_but_writes_the_report(lab):
    prefix, root, tmp = lab
    entries = [entry(prefix + n, f"{EXP} {n}") for n in ("interrupt", "ok")]
    outcome = run(entries, options(tmp, root))
    assert outcome.interrupted
    _, rows = load_json(outcome.paths["json"])
    first = [r for r in rows if r.experiment == f"{EXP} interrupt"]
    assert [(r.status, r.reason.split(" (")[0]) for r in first] == [
        ("failed", "interrupted")]  # fmt: skip
    rest = [r for r in rows if r.experiment == f"{EXP} ok"]
    assert {(r.status, r.reason) for r in rest} == {("skipped", "not run: the run was interrupted")}


@pytest.mark.parametrize(
    ("mode", "source", "note"),
    [
        ("missing", "nominal", "`sdnmpi calibrate` is not available: Error: No such command"),
        ("fails", "nominal", "`sdnmpi calibrate` failed (rc=1): something broke"),
        ("works", "measured by sdnmpi calibrate (fake calibrate)", ""),
        ("leaky", "measured by sdnmpi calibrate (fake calibrate)", ""),
    ],
)
def test_calibration_first(lab, mode, source, note):
    prefix, root, tmp = lab
    cli, log = fake_cli(tmp, root, mode)
    opts = options(tmp, root, calibration=None, cli=cli, quick=True, link_scale=0.05)
    outcome = run([entry(prefix + "ok")], opts)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    out = str(tmp / "out" / "calibration.json")
    assert calls[0] == ["calibrate", "--out", out, "--link-scale", "0.05",
                        "--state-dir", str(root), "--quick"]  # fmt: skip
    cal = outcome.meta["calibration"]
    assert cal["source"] == source
    assert cal["note"].startswith(note)
    # nominal at --link-scale, or what calibrate measured; the experiment sees the same
    scale = 0.05 if source == "nominal" else 0.02
    assert cal["link_scale"] == scale
    assert outcome.rows[0].settings["link_scale"] == scale
    if mode == "leaky":
        assert calls[1] == ["emu", "down", "--name", "calib1", "--state-dir", str(root)]
        assert list_fabrics(root) == set()
        assert any("calib1" in c for c in outcome.meta["cleanup"])
    else:
        assert len(calls) == 1


def test_bad_calibration_file_is_an_error(lab):
    prefix, root, tmp = lab
    bad = tmp / "bad.json"
    bad.write_text("{}")
    with pytest.raises(FormatError, match="schema"):
        run([entry(prefix + "ok")], options(tmp, root, calibration=bad))


def test_registry_entries_are_checked():
    with pytest.raises(ConfigError, match="lists no figures"):
        Entry("exp_x", "x", ())
    with pytest.raises(ConfigError, match="unknown metric"):
        Entry("exp_x", "x", (Figure("Fig. 1", "furlongs"),))
    with pytest.raises(ConfigError, match="not a module name"):
        Entry("exp-x", "x", (Figure("Fig. 1", "speedup"),))


def _script():
    spec = importlib.util.spec_from_file_location(
        "reproduce_script", ROOT / "scripts" / "reproduce.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_registry_and_selection():
    script = _script()
    modules = [e.module for e in script.REGISTRY]
    assert modules[:3] == ["exp_duplex", "exp_allreduce", "exp_unisonflow"]
    assert {"exp_miniapps", "exp_netsa", "exp_apps"} <= set(modules)
    assert [e.module for e in script.select("netsa,exp_allreduce")] == [
        "exp_allreduce",
        "exp_netsa",
    ]
    with pytest.raises(ConfigError, match="unknown experiment"):
        script.select("allreduce,nope")
    (ar,) = script.select("allreduce")
    assert ar.figures[0].paper == pytest.approx(1 / 0.59)  # 41 % less time


def test_script_list_and_bad_only_need_no_root():
    argv = [sys.executable, str(ROOT / "scripts" / "reproduce.py")]
    res = subprocess.run([*argv, "--list"], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert "exp_allreduce" in res.stdout and "002 SDN_MPI_Allreduce" in res.stdout
    assert "Fig. 4 (SpMV): speedup 2.56 (2.56x faster communication)" in res.stdout
    res = subprocess.run([*argv, "--only", "nope", "--list"], capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert res.returncode == 2
    assert "unknown experiment(s) nope" in res.stderr


def test_stop_signals_interrupt_a_run_like_ctrl_c():
    """SIGTERM, and SIGINT even when the shell that started the run in the
    background ignored it, raise KeyboardInterrupt: the interrupted run removes its
    fabric and writes its report (test_interrupt_stops_the_run_but_writes_the_report)."""
    import os
    import signal

    script = _script()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `cmd &` in a script gives
        script.interrupt_on_stop_signals()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), sig)  # the handler runs as kill returns
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_failures_are_named_last_with_their_tracebacks(tmp_path, capsys):
    """A CI log keeps only its tail and the machine's out/ is gone: under --strict
    each failed row is named, with the end of the traceback it saved."""
    from sdnmpi.report.reproduce_api import Row

    script = _script()
    tb = tmp_path / "traceback.txt"
    tb.write_text("Traceback (most recent call last):\n  File x\nValueError: boom\n")
    rows = [
        Row("e", "Fig. 1", "c", "speedup", status="ok", measured=1.0),
        Row("e", "Fig. 2", "whole", "speedup", status="failed", reason="ValueError: boom",
            details={"traceback": str(tb)}),
        Row("e", "Fig. 3", "whole", "speedup", status="failed", reason="gone",
            details={"traceback": str(tmp_path / "missing.txt")}),
    ]  # fmt: skip
    script.report_failures(rows, with_tracebacks=True)
    err = capsys.readouterr().err
    assert "failed: e, Fig. 2: ValueError: boom" in err
    assert "  | ValueError: boom" in err
    assert "failed: e, Fig. 3: gone" in err and "Fig. 1" not in err
    script.report_failures(rows, with_tracebacks=False)
    assert "  | " not in capsys.readouterr().err
