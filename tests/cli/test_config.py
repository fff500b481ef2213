"""The daemons' configuration file: precedence (flag > file > default) for the three
run commands, every kind of bad input (one line naming file and key, exit 2, nothing
started), and the shipped example and docs generated from the commands."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer

from sdnmpi.cli import configfile
from sdnmpi.cli.configfile import DAEMONS, config_option
from sdnmpi.cli.main import build_app
from sdnmpi.errors import SdnMpiError, StoreError
from tests.cliutil import run_cli as run

REPO = Path(__file__).resolve().parents[2]


def toml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def received(daemon: str, argv: list[str]) -> dict[str, Any]:
    """The keyword arguments ``sdnmpi DAEMON run ARGV`` calls its function with (the
    function replaced by a recorder: the options resolved as for the real daemon)."""
    root: Any = typer.main.get_command(build_app(daemon))
    command = root.commands[daemon].commands["run"]
    got: dict[str, Any] = {}
    command.callback = lambda **kwargs: got.update(kwargs)
    root.main([daemon, "run", *argv], standalone_mode=False)
    return got


# --- precedence: flag > file > default, for each daemon ----------------------------

PRECEDENCE = {
    # daemon: (file, flags, expected, a key left at its default)
    "controller": (
        '[controller]\nport = 7000\nrouter = "ecmp"\nverbose = true\nstats-interval = 3\n',
        ["--router", "ours"],
        {"port": 7000, "router": "ours", "verbose": True, "stats_interval_s": 3.0},
        ("listen_host", "127.0.0.1"),
    ),
    "manager": (
        '[manager]\ncontroller-api = "/run/c.sock"\nworkers = 8\nlog-level = "debug"\n'
        "no-rule-budget = true\n",
        ["--workers", "4"],
        {
            "controller_api": Path("/run/c.sock"),
            "workers": 4,
            "log_level": "debug",
            "no_rule_budget": True,
        },
        ("rebalance", 8),
    ),
    "agent": (
        '[agent]\niface = "eth9"\nscan-interval = 0.5\nhost = "n1"\n',
        ["--iface", "eth1"],
        {"iface": "eth1", "scan_interval_s": 0.5, "host": "n1"},
        ("socket_path", Path("/run/sdnmpi/agent.sock")),
    ),
    "console": (
        '[console]\ncontroller-api = "/run/c.sock"\nport = 9000\nload-interval = 0.5\n',
        ["--port", "9100"],
        {"controller_api": Path("/run/c.sock"), "port": 9100, "load_interval_s": 0.5},
        ("address", "127.0.0.1"),
    ),
}


@pytest.mark.parametrize("daemon", list(DAEMONS))
def test_flag_beats_file_beats_default(daemon: str, tmp_path: Path) -> None:
    text, flags, expected, (default_name, default) = PRECEDENCE[daemon]
    path = toml(tmp_path / "sdnmpi.toml", text)
    got = received(daemon, ["--config", str(path), *flags])
    assert {k: got[k] for k in expected} == expected
    assert got[default_name] == default
    # without the file: the flag still applies, the file's values are gone
    bare = received(daemon, [*flags, *_required_flags(daemon)])
    for name in expected:
        if name not in ("router", "workers", "iface", "port"):  # set by the flag
            assert bare[name] != expected[name]


def _required_flags(daemon: str) -> list[str]:
    required = {"manager": ["--controller-api", "/x"], "console": ["--controller-api", "/x"]}
    return required.get(daemon, [])


@pytest.mark.parametrize("daemon", list(DAEMONS))
def test_show_reports_value_and_source(
    daemon: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, _, _, _ = PRECEDENCE[daemon]
    path = toml(tmp_path / "sdnmpi.toml", text)
    code, out, err = run(capsys, "config", "show", "--config", str(path), "--json")
    assert (code, err) == (0, "")
    shown = json.loads(out)
    assert shown["file"] == str(path) and shown["file_found"] is True
    table = shown["daemons"][daemon]
    from_file = {k for k, v in table.items() if v["source"] == "file"}
    assert from_file == set(re.findall(r"^([a-z-]+) =", text, re.M))
    assert all(v["source"] == "default" for k, v in table.items() if k not in from_file)
    others = [d for d in DAEMONS if d != daemon]
    assert all(v["source"] == "default" for d in others for v in shown["daemons"][d].values())


def test_show_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = toml(tmp_path / "s.toml", "[controller]\nport = 7000\n")
    code, out, _ = run(capsys, "config", "show", "--config", str(path))
    assert code == 0
    assert re.search(r"^port +=  ?7000  # file$", out, re.M)
    assert re.search(r'^listen-host += "127.0.0.1"  # default$', out, re.M)
    assert re.search(r"^iface += \(required: unset\)  # default$", out, re.M)


def test_controller_starts_with_the_files_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real command, down to the launcher: the file's port and poll interval."""
    from sdnmpi.controller import launcher

    calls: list[Any] = []
    monkeypatch.setattr(launcher, "run", lambda settings, listen: calls.append((settings, listen)))
    path = toml(tmp_path / "s.toml", "[controller]\nport = 7000\nstats-interval = 0.5\nhold = 1\n")
    code, _, err = run(capsys, "controller", "run", "--config", str(path), "--hold", "3")
    assert (code, err) == (0, "")
    [(settings, listen)] = calls
    assert (listen.port, listen.host) == (7000, "127.0.0.1")
    assert (settings.stats_interval_s, settings.hold_s) == (0.5, 3.0)


def test_manager_opens_the_files_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sdnmpi.manager import store

    calls: list[Any] = []

    def fake_open(db: str, postgres: str | None = None, *, busy_timeout_s: float = 5.0) -> Any:
        calls.append((db, postgres, busy_timeout_s))
        raise StoreError("stopped by the test")

    monkeypatch.setattr(store, "open_store", fake_open)
    path = toml(
        tmp_path / "s.toml",
        f'[manager]\ncontroller-api = "{tmp_path}/c.sock"\ndb = "{tmp_path}/m.db"\n'
        "busy-timeout = 9\n",
    )
    code, _, err = run(capsys, "manager", "run", "--config", str(path))
    assert (code, err) == (1, "sdnmpi: error: stopped by the test\n")
    assert calls == [(f"{tmp_path}/m.db", None, 9.0)]


def test_agent_gets_the_files_interface(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sdnmpi.node import agent

    configs: list[Any] = []

    class FakeAgent:
        def __init__(self, config: Any, hub: Any) -> None:
            configs.append(config)
            raise SdnMpiError("stopped by the test")

    monkeypatch.setattr(agent, "Agent", FakeAgent)
    path = toml(
        tmp_path / "s.toml",
        f'[agent]\niface = "veth7"\nsocket = "{tmp_path}/a.sock"\nscan-interval = 0.25\n',
    )
    code, _, err = run(capsys, "agent", "run", "--config", str(path))
    assert (code, err) == (1, "sdnmpi: error: stopped by the test\n")
    [config] = configs
    assert (config.iface, config.socket_path, config.scan_interval_s) == (
        "veth7",
        tmp_path / "a.sock",
        0.25,
    )


CONFIG_OPT = config_option("agent")


def test_a_new_option_is_a_key_with_no_code(tmp_path: Path) -> None:
    """Any option of a command with config_option() is a key, typed by the option."""
    app = typer.Typer()
    got: dict[str, Any] = {}

    @app.command()
    def run(
        config_file: Path | None = CONFIG_OPT,
        brand_new: int = typer.Option(1, "--brand-new"),
    ) -> None:
        got["brand_new"] = brand_new

    path = toml(tmp_path / "s.toml", "[agent]\nbrand-new = 5\n")
    typer.main.get_command(app).main(["--config", str(path)], standalone_mode=False)
    assert got == {"brand_new": 5}
    bad = toml(tmp_path / "b.toml", '[agent]\nbrand-new = "5x"\n')
    message = r'b.toml: \[agent\] brand-new: expected an integer, got "5x"'
    with pytest.raises(SdnMpiError, match=message):
        typer.main.get_command(app).main(["--config", str(bad)], standalone_mode=False)


# --- which file ----------------------------------------------------------------------


@pytest.fixture
def default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """/etc/sdnmpi/sdnmpi.toml moved to tmp_path (absent until a test writes it)."""
    path = tmp_path / "etc" / "sdnmpi.toml"
    monkeypatch.setattr(configfile, "DEFAULT_PATH", path)
    monkeypatch.delenv(configfile.ENV, raising=False)
    return path


def _show(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, "config", "show", "--json", *argv)
    assert (code, err) == (0, "")
    result: dict[str, Any] = json.loads(out)
    return result


def test_default_path_absent_means_defaults(
    default_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = _show(capsys)
    assert (shown["file"], shown["file_found"]) == (str(default_path), False)
    assert shown["daemons"]["controller"]["port"] == {"value": 6653, "source": "default"}
    assert received("controller", [])["port"] == 6653


def test_default_path_is_read(default_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    default_path.parent.mkdir()
    toml(default_path, "[controller]\nport = 7001\n")
    assert _show(capsys)["daemons"]["controller"]["port"] == {"value": 7001, "source": "file"}
    assert received("controller", [])["port"] == 7001


def test_env_overrides_default_and_flag_overrides_env(
    default_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    default_path.parent.mkdir()
    toml(default_path, "[controller]\nport = 7001\n")
    env = toml(tmp_path / "env.toml", "[controller]\nport = 7002\n")
    flag = toml(tmp_path / "flag.toml", "[controller]\nport = 7003\n")
    monkeypatch.setenv(configfile.ENV, str(env))
    assert received("controller", [])["port"] == 7002
    assert received("controller", ["--config", str(flag)])["port"] == 7003
    assert _show(capsys, "--config", str(flag))["daemons"]["controller"]["port"]["value"] == 7003
    monkeypatch.setenv(configfile.ENV, "")  # empty: no file at all
    assert received("controller", [])["port"] == 6653
    assert _show(capsys)["file"] is None


# --- bad input: one line naming file and key, exit 2, nothing started ------------------

BAD = [
    # (file text, expected message after "PATH: ")
    ('[manager]\nworkers = "x"\n', '[manager] workers: expected an integer, got "x"'),
    ("[manager]\nworkers = 2.5\n", "[manager] workers: expected an integer, got 2.5"),
    ("[manager]\nworkers = true\n", "[manager] workers: expected an integer, got true"),
    ("[controller]\nrouter = 3\n", "[controller] router: expected a string, got 3"),
    ('[controller]\nverbose = "yes"\n', '[controller] verbose: expected true or false, got "yes"'),
    ('[agent]\nscan-interval = "fast"\n', '[agent] scan-interval: expected a number, got "fast"'),
    ("[controller]\nport = [1]\n", "[controller] port: expected an integer, got an array"),
    ("[controller.port]\nx = 1\n", "[controller] port: expected an integer, got a table"),
    (
        "[manager]\nrebalance = -1\n",
        "[manager] rebalance: Input should be greater than or equal to 0",
    ),
    (
        "[manager]\nmax-jobs = 3\n",
        "[manager] max-jobs: unknown key (see `sdnmpi config example`)",
    ),
    (
        "[manager]\nmax_connections = 3\n",
        "[manager] max_connections: unknown key (keys are spelled like the flags: max-connections)",
    ),
    ("[agent]\nifac = 'x'\n", "[agent] ifac: unknown key (did you mean iface?)"),
    (
        "[managr]\nworkers = 1\n",
        "[managr]: unknown table; the tables are [controller], [manager], [agent]",
    ),
    ("port = 1\n", "port: a key outside any table; keys go under [controller], [manager], [agent]"),
    ("[manager\n", "not valid TOML: Expected ']' at the end of a table declaration (at line 1, "),
    ("[agent]\niface = 'a'\niface = 'b'\n", "not valid TOML: Cannot overwrite a value (at line 3"),
]


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The controller's launcher, the manager's store and the agent, recorded."""
    from sdnmpi.controller import launcher
    from sdnmpi.manager import store
    from sdnmpi.node import agent

    started: list[Any] = []
    monkeypatch.setattr(launcher, "run", lambda *a, **k: started.append("controller"))
    monkeypatch.setattr(store, "open_store", lambda *a, **k: started.append("manager"))
    monkeypatch.setattr(agent, "Agent", lambda *a, **k: started.append("agent"))
    return started


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_file_is_one_line_exit_2(
    text: str,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nothing_starts: list[Any],
) -> None:
    path = toml(tmp_path / "sdnmpi.toml", text)
    daemon = re.findall(r"\[(controller|manager|agent)\]", message + text) or ["controller"]
    required = {"manager": ["--controller-api", "/x"], "agent": ["--iface", "lo"]}
    for argv in (
        [daemon[0], "run", "--config", str(path), *required.get(daemon[0], [])],
        ["config", "show", "--config", str(path)],
    ):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, ""), argv
        assert err.startswith(f"sdnmpi: error: {path}: {message}"), argv
        assert err.count("\n") == 1
    assert nothing_starts == []


def test_missing_named_file_is_an_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    nothing_starts: list[Any],
) -> None:
    missing = tmp_path / "nope.toml"
    for daemon, extra in (("controller", []), ("manager", ["--controller-api", "/x"])):
        code, _, err = run(capsys, daemon, "run", "--config", str(missing), *extra)
        assert (code, err) == (2, f"sdnmpi: error: {missing}: no such file\n")
    monkeypatch.setenv(configfile.ENV, str(missing))
    code, _, err = run(capsys, "agent", "run", "--iface", "lo")
    assert (code, err) == (2, f"sdnmpi: error: {missing}: no such file\n")
    code, _, err = run(capsys, "config", "show")
    assert (code, err) == (2, f"sdnmpi: error: {missing}: no such file\n")
    assert nothing_starts == []


def test_unreadable_and_binary_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "config", "show", "--config", str(tmp_path))
    assert code == 2 and err.startswith(f"sdnmpi: error: {tmp_path}: cannot read: ")
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"[agent]\n\xff\n")
    code, _, err = run(capsys, "config", "show", "--config", str(binary))
    assert (code, err) == (2, f"sdnmpi: error: {binary}: not UTF-8 text (byte 8)\n")


def test_a_bad_file_leaves_help_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(configfile.ENV, str(toml(tmp_path / "s.toml", "[x]\n")))
    code, out, _ = run(capsys, "controller", "run", "--help")
    assert code == 0 and "--config" in out


def test_a_daemon_checks_its_own_table(tmp_path: Path) -> None:
    """The agent does not import the manager's options to check [manager] (0.5 s of
    CPU per agent); `sdnmpi config show` checks every table."""
    path = toml(tmp_path / "s.toml", "[manager]\nnope = 1\n[agent]\niface = 'lo'\n")
    assert received("agent", ["--config", str(path)])["iface"] == "lo"
    with pytest.raises(SdnMpiError, match=r"\[manager\] nope: unknown key"):
        received("manager", ["--config", str(path), "--controller-api", "/x"])


# --- the shipped example and reference, generated from the commands --------------------


def test_shipped_example_is_what_config_example_prints(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "config", "example")
    assert code == 0
    shipped = (REPO / "packaging" / "sdnmpi.toml.example").read_text()
    assert shipped == out, (
        "packaging/sdnmpi.toml.example is stale: sdnmpi config example > "
        "packaging/sdnmpi.toml.example"
    )


def test_docs_reference_is_what_config_example_markdown_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "config", "example", "--markdown")
    assert code == 0
    doc = (REPO / "docs" / "CONFIG.md").read_text()
    begin, end = "<!-- sdnmpi config example --markdown: begin -->\n", "<!-- end -->"
    assert doc[doc.index(begin) + len(begin) : doc.index(end)] == out, (
        "docs/CONFIG.md's reference is stale: paste `sdnmpi config example --markdown`"
    )


def test_docs_sample_file_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = (REPO / "docs" / "CONFIG.md").read_text()
    sample = doc.split("```toml\n")[1].split("```")[0]
    shown = _show(capsys, "--config", str(toml(tmp_path / "s.toml", sample)))
    assert shown["daemons"]["agent"]["iface"] == {"value": "eth1", "source": "file"}


def test_example_lists_every_key_and_its_default_is_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Uncommenting every key that has a default gives a valid file that changes
    nothing; the keys without one are marked as placeholders."""
    example = configfile.example()
    for daemon in DAEMONS:
        keys = configfile.keys(configfile.run_command(daemon))
        section = example.split(f"[{daemon}]")[1].split("\n[")[0]
        assert set(re.findall(r"^# ([a-z-]+) = ", section, re.M)) == set(keys)
    uncommented = re.sub(r"^# ([a-z-]+ = [^<\n]*)$", r"\1", example, flags=re.M)
    shown = _show(capsys, "--config", str(toml(tmp_path / "all.toml", uncommented)))
    defaults = _show(capsys, "--config", str(toml(tmp_path / "empty.toml", "")))
    for daemon, table in shown["daemons"].items():
        for key, v in table.items():
            assert v["source"] == ("default" if v["value"] is None else "file"), (daemon, key)
            assert v["value"] == defaults["daemons"][daemon][key]["value"], (daemon, key)


def test_the_admin_guides_configuration_is_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/ADMIN.md's sample file: every key known and well typed, taken from the file."""
    doc = (Path(__file__).parents[2] / "docs/ADMIN.md").read_text()
    (sample,) = re.findall(r"```toml\n(.*?)```", doc, re.S)
    path = toml(tmp_path / "admin.toml", sample)
    code, out, err = run(capsys, "config", "show", "--config", str(path), "--json")
    assert (code, err) == (0, "")
    shown = json.loads(out)["daemons"]
    assert shown["controller"]["stats-interval"] == {"value": 2.0, "source": "file"}
    assert shown["controller"]["live-stats-interval"] == {"value": 0.5, "source": "file"}
    assert shown["console"]["controller-api"]["source"] == "file"
