"""The controller's job store: round trip, atomic replacement, malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdnmpi.cli.main import main
from sdnmpi.controller.jobstore import SCHEMA, JobStore
from sdnmpi.errors import ConfigError

PAIRS = {("h1", "h3"): ["h1", "leaf1", "spine2", "leaf2", "h3"]}


def test_round_trip_and_missing_file(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.json")
    assert store.load() == {}
    store.save({7: PAIRS, 12: {}})
    assert store.load() == {7: PAIRS, 12: {}}
    assert json.loads(store.path.read_text())["jobs"]["7"] == {"h1>h3": PAIRS[("h1", "h3")]}
    store.save({})
    assert store.load() == {}
    assert [p.name for p in tmp_path.iterdir()] == ["jobs.json"]  # no temporary left


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{", "not a jobs file"),
        ('{"schema": "other/1", "jobs": {}}', "schema"),
        (json.dumps({"schema": SCHEMA, "jobs": {}, "extra": 1}), "exactly"),
        (json.dumps({"schema": SCHEMA, "jobs": {"x": {}}}), "job id 'x'"),
        (json.dumps({"schema": SCHEMA, "jobs": {"1": {"h1h3": ["h1"]}}}), "'SRC>DST'"),
        (json.dumps({"schema": SCHEMA, "jobs": {"1": {"h1>h3": "h1"}}}), "list of node names"),
        (json.dumps({"schema": SCHEMA, "jobs": {"1": []}}), "must be an object"),
    ],
)
def test_malformed_files_name_the_file(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle) as exc:
        JobStore(path).load()
    assert str(path) in str(exc.value)


def test_unwritable_locations_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        JobStore(tmp_path / "missing" / "jobs.json").check_writable()
    (tmp_path / "dir").mkdir()
    with pytest.raises(ConfigError, match="not a file"):
        JobStore(tmp_path / "dir").check_writable()


def test_cli_rejects_a_bad_state_file_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "jobs.json"
    path.write_text("[]")
    with pytest.raises(SystemExit) as exc:
        main(["controller", "run", "--port", "1", "--state-file", str(path)])
    assert exc.value.code == 2
    assert "not a jobs file" in capsys.readouterr().err
