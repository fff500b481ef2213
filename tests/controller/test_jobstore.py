"""The controller's job store: round trip, atomic replacement, malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdnmpi.cli.main import main
from sdnmpi.controller.jobstore import SCHEMA, JobStore, StoredState
from sdnmpi.errors import ConfigError

PAIRS = {("h1", "h3"): ["h1", "leaf1", "spine2", "leaf2", "h3"]}


def test_round_trip_and_missing_file(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.json")
    assert store.load() == StoredState()
    tagged = {"cg": {"slot": 1, "nprocs": 1, "hosts": {"0": "h1"}, "collectives": []}}
    store.save({7: PAIRS, 12: {}}, tagged)
    assert store.load() == StoredState({7: PAIRS, 12: {}}, tagged)
    assert json.loads(store.path.read_text())["jobs"]["7"] == {"h1>h3": PAIRS[("h1", "h3")]}
    store.save({})
    assert store.load() == StoredState()
    assert [p.name for p in tmp_path.iterdir()] == ["jobs.json"]  # no temporary left


def test_version_1_files_are_read(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    doc = {"schema": "sdnmpi.controller-jobs/1", "jobs": {"7": {"h1>h3": PAIRS[("h1", "h3")]}}}
    path.write_text(json.dumps(doc))
    assert JobStore(path).load() == StoredState({7: PAIRS})


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{", "not a jobs file"),
        ('{"schema": "other/1", "jobs": {}}', "schema"),
        (json.dumps({"schema": SCHEMA, "jobs": {}, "tagged": {}, "extra": 1}), "exactly"),
        (json.dumps({"schema": SCHEMA, "jobs": {}}), "exactly"),
        (json.dumps({"schema": SCHEMA, "jobs": {}, "tagged": []}), "'tagged' must be"),
        (json.dumps({"schema": SCHEMA, "jobs": {"x": {}}, "tagged": {}}), "job id 'x'"),
        (
            json.dumps({"schema": SCHEMA, "jobs": {"1": {"h1h3": ["h1"]}}, "tagged": {}}),
            "'SRC>DST'",
        ),
        (
            json.dumps({"schema": SCHEMA, "jobs": {"1": {"h1>h3": "h1"}}, "tagged": {}}),
            "list of node names",
        ),
        (json.dumps({"schema": SCHEMA, "jobs": {"1": []}, "tagged": {}}), "must be an object"),
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
