"""The command line: JSON outputs, plots, conversions, and errors without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cliutil import run_cli as run


def test_topology_show_milk_json(capsys):
    code, out, _ = run(capsys, "topology", "show", "milk", "--json")
    assert code == 0
    s = json.loads(out)
    assert s["schema"] == "sdnmpi.topology-summary/1"
    assert s["counts"] == {"hosts": 20, "switches": 6, "links": 28, "cores": 160}
    assert s["bisection_bandwidth_bps"] == pytest.approx(4e9)
    assert s["oversubscription"] == [{"level": 1, "ratio": pytest.approx(2.5)}]
    assert {h["switch"] for h in s["hosts"]} == {"edge1", "edge2", "edge3", "edge4"}


def test_topology_show_prints_macs_as_written(capsys):
    """milk03's MAC holds ":cd:", which rich turned into an emoji before."""
    code, out, _ = run(capsys, "topology", "show", "milk")
    assert code == 0
    assert "00:30:48:cd:a5:61" in out


def test_pattern_show_cg_trace_json(capsys, workloads_dir: Path):
    code, out, _ = run(capsys, "pattern", "show", str(workloads_dir / "cg-c-128.tar.gz"), "--json")
    assert code == 0
    s = json.loads(out)
    assert s["schema"] == "sdnmpi.pattern-summary/1"
    assert (s["nprocs"], s["level"], s["total_bytes"]) == (128, "rank", 94_852_203_096)
    assert sum(s["sent_bytes"]) == s["total_bytes"]
    # heaviest cell of the trace: 1976 x 75000-byte row sums plus small reduction messages
    assert s["top_pairs"][0]["bytes"] == 148_232_840
    assert [p["bytes"] for p in s["top_pairs"]] == sorted(
        (p["bytes"] for p in s["top_pairs"]), reverse=True
    )


def test_pattern_show_aggregated_to_recorded_hosts_with_plot(
    capsys, tmp_path: Path, workloads_dir: Path
):
    png = tmp_path / "cg.png"
    trace = str(workloads_dir / "cg-c-128.tar.gz")
    code, out, _ = run(
        capsys,
        "pattern",
        "show",
        trace,
        "--json",
        "--topology",
        "milk",
        "--placement",
        "recorded",
        "--plot",
        str(png),
    )
    assert code == 0
    s = json.loads(out)
    assert s["level"] == "host" and s["nprocs"] == 16
    assert s["total_bytes"] < 94_852_203_096  # intra-host traffic is gone
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pattern_show_collective_spec(capsys):
    code, out, _ = run(
        capsys,
        "pattern",
        "show",
        "allreduce:nprocs=16,bytes=1048576,algorithm=recursive_doubling",
        "--json",
    )
    assert code == 0
    s = json.loads(out)
    assert s["phase_count"] == 4
    assert s["total_bytes"] == 16 * 4 * 1048576  # log2(16) full-vector exchanges per rank
    assert s["meta"]["algorithm"] == "recursive_doubling"


def test_pattern_convert_round_trip(capsys, tmp_path: Path):
    spec = "cg:nprocs=16,klass=S"
    assert run(capsys, "pattern", "convert", spec, str(tmp_path / "cg.json"))[0] == 0
    assert (
        run(capsys, "pattern", "convert", str(tmp_path / "cg.json"), str(tmp_path / "cg.tar.gz"))[0]
        == 0
    )
    code, out, _ = run(capsys, "pattern", "show", str(tmp_path / "cg.tar.gz"), "--json")
    direct = json.loads(run(capsys, "pattern", "show", spec, "--json")[1])
    assert code == 0 and json.loads(out)["total_bytes"] == direct["total_bytes"]
    code, _, _ = run(
        capsys,
        "pattern",
        "convert",
        spec,
        str(tmp_path / "cg.xml"),
        "--topology",
        "netsa",
        "--classify",
    )
    assert code == 0
    code, out, _ = run(capsys, "pattern", "show", str(tmp_path / "cg.xml"), "--json")
    s = json.loads(out)
    assert s["level"] == "host" and s["annotations"]["bandwidth"] > 0


def test_topology_export_and_reimport(capsys, tmp_path: Path):
    for fmt in ("graphml", "json"):
        path = tmp_path / f"u.{fmt}"
        assert (
            run(capsys, "topology", "export", "unisonflow", "--format", fmt, "-o", str(path))[0]
            == 0
        )
        code, out, _ = run(capsys, "topology", "show", str(path), "--json")
        assert code == 0 and json.loads(out)["counts"]["links"] == 56


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topology", "show", "nosuchpreset"], "neither a topology preset"),
        (["pattern", "show", "allreduce:nprocs=16"], "message size"),
        (["pattern", "show", "allreduce:nprocs=16,bytes=8,algorithm=magic"], "magic"),
        (["pattern", "show", "frobnicate:nprocs=4"], "unknown pattern 'frobnicate'"),
        (["pattern", "show", "cg:nprocs=6"], "power of two"),
        (["pattern", "show", "stencil2d:nprocs=4,colour=red"], "unknown parameter"),
        (
            ["pattern", "show", "cg:nprocs=128", "--topology", "allreduce28"],
            "do not fit in 28 slots",
        ),
        (["pattern", "show", "missing.tar.gz"], "no such file"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert err.startswith("sdnmpi: error: ")


def test_bad_files_exit_2(capsys, tmp_path: Path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    code, _, err = run(capsys, "pattern", "show", str(bad))
    assert code == 2 and str(bad) in err and "truncated or corrupt" in err
    xml = tmp_path / "t.graphml"
    xml.write_text(
        '<graphml><graph><node id="a"><data key="typ">router</data></node></graph></graphml>'
    )
    code, _, err = run(capsys, "topology", "show", str(xml))
    assert code == 2 and "unknown node type" in err


def test_console_script_runs_and_reports_errors_without_traceback():
    exe = Path(sys.executable).parent / "sdnmpi"
    ok = subprocess.run(
        [str(exe), "topology", "show", "netsa", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)["counts"]["hosts"] == 16
    bad = subprocess.run(
        [str(exe), "pattern", "show", "bcast:nprocs=0,bytes=1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (
        bad.returncode == 2
        and "Traceback" not in bad.stderr
        and bad.stderr.startswith("sdnmpi: error:")
    )
    usage = subprocess.run(
        [str(exe), "topology", "show"], capture_output=True, text=True, check=False
    )
    assert usage.returncode == 2


def test_placement_from_a_host_file(capsys, tmp_path: Path):
    hf = tmp_path / "hosts"
    hf.write_text("# two ranks on each of two hosts\nnode01 slots=2\nnode07:2\n")
    code, out, _ = run(
        capsys,
        "pattern",
        "show",
        "alltoall:nprocs=4,bytes=1000",
        "--json",
        "--topology",
        "unisonflow",
        "--placement",
        str(hf),
    )
    assert code == 0
    s = json.loads(out)
    assert s["hosts"] == ["node01", "node07"]
    assert s["total_bytes"] == 8 * 1000  # 4 ranks x 2 remote peers each
    hf.write_text("node01 slots=2\nnowhere\n")
    code, _, err = run(
        capsys,
        "pattern",
        "show",
        "alltoall:nprocs=4,bytes=1000",
        "--topology",
        "unisonflow",
        "--placement",
        str(hf),
    )
    assert code == 2 and "unknown host" in err and str(hf) in err
