"""Where the command line writes: bad paths refused before the work with one line and
exit code 2, files written whole (sdnmpi.cli.output)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sdnmpi.cli.output import output_dir, output_file, written
from sdnmpi.errors import ConfigError
from tests.cliutil import run_cli as run


@pytest.mark.parametrize(
    "argv",
    [
        ("topology", "export", "milk", "-o", "{tmp}/nodir/x.graphml"),
        ("topology", "export", "milk", "-o", "{tmp}"),
        ("pattern", "convert", "ring:nprocs=4", "{tmp}/nodir/x.json"),
        ("pattern", "show", "ring:nprocs=4", "--plot", "{tmp}/nodir/x.png"),
        ("pattern", "show", "ring:nprocs=4", "--plot", "{tmp}"),
        ("evaluate", "-t", "milk", "-w", "ring:nprocs=8", "--plot", "{tmp}/file"),
        ("evaluate", "-t", "milk", "-w", "ring:nprocs=8", "--timeline", "{tmp}/file"),
    ],
)
def test_a_path_that_cannot_be_written_is_one_line_and_exit_2(capsys, tmp_path: Path, argv):
    (tmp_path / "file").write_text("x")
    code, out, err = run(capsys, *(a.replace("{tmp}", str(tmp_path)) for a in argv))
    assert code == 2, (out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert any(w in err for w in ("does not exist", "is a directory", "not a directory")), err
    assert (tmp_path / "file").read_text() == "x"  # nothing overwritten


def test_a_full_disk_is_one_line_and_exit_2(capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    code, _, err = run(capsys, "topology", "export", "milk", "-o", "/dev/full", "-f", "json")
    assert code == 2 and "No space left on device" in err and "Traceback" not in err
    assert os.path.exists("/dev/full") and not os.path.isfile("/dev/full")  # not replaced


def test_export_takes_the_format_from_the_name(capsys, tmp_path: Path):
    code, _, _ = run(capsys, "topology", "export", "milk", "-o", str(tmp_path / "m.json"))
    assert code == 0
    assert json.loads((tmp_path / "m.json").read_text())["name"]
    code, _, _ = run(capsys, "topology", "export", "milk", "-o", str(tmp_path / "m.graphml"))
    assert code == 0 and (tmp_path / "m.graphml").read_text().startswith("<?xml")
    code, _, err = run(
        capsys, "topology", "export", "milk", "-f", "graphml", "-o", str(tmp_path / "n.json")
    )
    assert code == 2 and "--format graphml but --output" in err
    assert not (tmp_path / "n.json").exists()


def test_written_leaves_the_old_file_when_the_writer_fails(tmp_path: Path):
    target = tmp_path / "out.json"
    target.write_text("old")

    def die(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("writer died")

    with pytest.raises(RuntimeError), written(target, "--output") as tmp:
        die(tmp)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temp left
    with written(target, "--output") as tmp:
        assert tmp.name.endswith("out.json") and tmp != target
        tmp.write_text("new")
    assert target.read_text() == "new"


def test_output_checks(tmp_path: Path):
    assert output_file(tmp_path / "a.json", "-o") == tmp_path / "a.json"
    with pytest.raises(ConfigError, match=r"-o .*: directory .*nodir does not exist"):
        output_file(tmp_path / "nodir" / "a.json", "-o")
    made = output_dir(tmp_path / "new" / "plots", "--plot")
    assert made.is_dir()
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        output_dir(tmp_path / "f", "--plot")


def test_names_with_brackets_are_printed_as_written(capsys, tmp_path: Path):
    """Rich read ``[...]`` in a name as markup: ``[/x]`` raised MarkupError (a
    traceback) and ``[bold]`` vanished.  The command line prints text, not markup."""
    from sdnmpi import catalog
    from sdnmpi.core.pattern import Pattern, Phase

    name = "evil[/x] [bold]job"
    pattern = Pattern(name, 2, (Phase.from_cells("p[1]", [(0, 1, 100)]),))
    path = tmp_path / "p.json"
    catalog.save_pattern(pattern, path)
    code, out, err = run(capsys, "pattern", "show", str(path))
    assert code == 0, err
    assert name in out and "p[1]" in out
