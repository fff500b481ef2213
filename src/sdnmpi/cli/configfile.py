"""The configuration file: one TOML file, a table per daemon, a key per run option.

``[controller]``, ``[manager]`` and ``[agent]`` hold the options of ``sdnmpi
controller run``, ``sdnmpi manager run`` and ``sdnmpi agent run``: each key is an
option's long flag without its dashes (``stats-interval = 5.0`` for
``--stats-interval 5``).  The keys and their types are read from the commands
themselves, so an option added to a run command is a key with no code here.

The file supplies the command's defaults through click's ``default_map``: a flag on
the command line beats the file, the file beats the built-in default.  The file is
``--config PATH``, else ``$SDNMPI_CONFIG`` (empty: no file), else
``/etc/sdnmpi/sdnmpi.toml``, which may be absent (built-in defaults apply); a file
named explicitly must exist.  Everything wrong in it (syntax, an unknown table or
key, a value of the wrong type or out of range) is a :class:`ConfigError` naming the
file and the key, raised before the daemon starts (exit 2).
"""

from __future__ import annotations

import difflib
import json
import os
import textwrap
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

import typer

from sdnmpi.errors import ConfigError, quoted

DEFAULT_PATH = Path("/etc/sdnmpi/sdnmpi.toml")
ENV = "SDNMPI_CONFIG"

#: Daemon (= table) -> module whose ``app`` holds its ``run`` command.
DAEMONS = {
    "controller": "sdnmpi.cli.controller",
    "manager": "sdnmpi.cli.manager",
    "agent": "sdnmpi.cli.agent",
    "console": "sdnmpi.cli.console",
}

#: Options of a run command that are not keys of its table (flags without dashes).
NOT_KEYS = frozenset({"config", "help"})


@dataclass(frozen=True)
class Source:
    """Which file to read: ``path`` None for none; ``required`` if named explicitly."""

    path: Path | None
    required: bool

    def label(self) -> str:
        return str(self.path) if self.path is not None else f"(none: ${ENV} is empty)"


@dataclass(frozen=True)
class Setting:
    """One key's effective value (None: unset); ``source`` is ``file`` or ``default``."""

    key: str
    value: Any
    source: str
    param: Any  # the click option


def locate(explicit: Path | None, environ: Mapping[str, str] | None = None) -> Source:
    """The file ``--config`` (``explicit``), ``$SDNMPI_CONFIG`` or the default names.

    >>> locate(None, {}).path, locate(None, {ENV: ""}).path, locate(None, {ENV: "x"})
    (PosixPath('/etc/sdnmpi/sdnmpi.toml'), None, Source(path=PosixPath('x'), required=True))
    """
    if explicit is not None:
        return Source(explicit, True)
    env = (os.environ if environ is None else environ).get(ENV)
    if env is not None:
        return Source(Path(env), True) if env else Source(None, False)
    return Source(DEFAULT_PATH, False)


def read(source: Source) -> dict[str, dict[str, Any]]:
    """The file's tables ({} without a file); only daemons' tables are accepted."""
    path = source.path
    if path is None:
        return {}
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        if not source.required:
            return {}
        raise ConfigError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    tables = ", ".join(f"[{d}]" for d in DAEMONS)
    for name, table in doc.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {name}: a key outside any table; keys go under {tables}")
        if name not in DAEMONS:
            raise ConfigError(f"{path}: [{name}]: unknown table; the tables are {tables}")
    return doc


def run_command(daemon: str) -> Any:
    """The click command of ``sdnmpi DAEMON run``, as ``sdnmpi`` builds it (this imports
    that daemon's CLI module alone)."""
    from sdnmpi.cli.main import build_app

    root = typer.main.get_command(build_app(daemon))
    return root.commands[daemon].commands["run"]  # type: ignore[attr-defined]


def keys(command: Any) -> dict[str, Any]:
    """Key -> option of a run command: each option's first long flag without dashes."""
    out: dict[str, Any] = {}
    for param in command.params:
        longs = [o[2:] for o in param.opts if o.startswith("--")]
        if param.param_type_name == "option" and longs and longs[0] not in NOT_KEYS:
            out[longs[0]] = param
    return out


#: A TOML value's description and Python types, by the option's Python type.
_EXPECTED: dict[type, tuple[str, tuple[type, ...]]] = {
    int: ("an integer", (int,)),
    float: ("a number", (int, float)),
    bool: ("true or false", (bool,)),
    str: ("a string", (str,)),
}


def _base_type(param: Any) -> type:
    """int, float, bool or str: what the option takes (a path, a choice: str)."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:  # typer >= 0.2x: its own coercion, from the annotation
        kind = descriptor.annotation
        if get_origin(kind) in (list, tuple):
            kind = (get_args(kind) or (str,))[0]
    else:  # click's parameter types
        kind = {"integer": int, "float": float, "boolean": bool}.get(param.type.name.split()[0])
    return kind if kind in _EXPECTED else str


def _expected(param: Any) -> tuple[str, tuple[type, ...]]:
    """What a TOML value for ``param`` must be: its description and Python types."""
    return _EXPECTED[_base_type(param)]


def _cast(param: Any, ctx: Any, value: Any) -> Any:
    """``value`` converted (and range-checked) as the option converts its flag's."""
    runtime = getattr(param, "get_runtime_param", None)
    if runtime is not None:
        return runtime().coerce(value, param=param, ctx=ctx)
    return param.type_cast_value(ctx, value)


def shown(value: Any) -> str:
    """``value`` as it was written in TOML, for an error message.

    >>> shown("x"), shown(True), shown(3), shown([1]), shown({})
    ('"x"', 'true', '3', 'an array', 'a table')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return text if len(text) <= 80 else text[:77] + "..."
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return quoted(value)


def convert(ctx: Any, param: Any, value: Any, where: str) -> Any:
    """``value`` from the file converted as the command line would convert it."""
    want, types = _expected(param)
    many = param.multiple or param.nargs != 1
    items = value if many and isinstance(value, list) else [value]
    if many and not isinstance(value, list):
        raise ConfigError(f"{where}: expected an array, got {shown(value)}")
    for item in items:
        if (isinstance(item, bool) and bool not in types) or not isinstance(item, types):
            raise ConfigError(f"{where}: expected {want}, got {shown(item)}")
    try:
        return _cast(param, ctx, value)
    except typer.BadParameter as exc:
        raise ConfigError(f"{where}: {exc.message}") from None


def table_values(source: Source, daemon: str, table: Mapping[str, Any], ctx: Any) -> dict[str, Any]:
    """The run command's parameter values the daemon's table sets (name -> value)."""
    known = keys(ctx.command)
    values: dict[str, Any] = {}
    for key, value in table.items():
        where = f"{source.label()}: [{daemon}] {key}"
        param = known.get(key)
        if param is None:
            raise ConfigError(f"{where}: unknown key{_hint(key, known)}")
        values[param.name] = convert(ctx, param, value, where)
    return values


def _hint(key: str, known: Mapping[str, Any]) -> str:
    if key.replace("_", "-") in known:
        return f" (keys are spelled like the flags: {key.replace('_', '-')})"
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else " (see `sdnmpi config example`)"


def config_option(daemon: str) -> Any:
    """The ``--config`` option of ``sdnmpi DAEMON run``: reads the file before the
    other options (eager) and makes its ``[DAEMON]`` table their defaults."""

    def load(ctx: typer.Context, value: Path | None) -> Path | None:
        if ctx.resilient_parsing:  # shell completion
            return value
        source = locate(value)
        table = read(source).get(daemon, {})
        ctx.default_map = {**(ctx.default_map or {}), **table_values(source, daemon, table, ctx)}
        return value

    return typer.Option(
        None,
        "--config",
        is_eager=True,
        callback=load,
        help=f"Configuration file: its [{daemon}] table sets this command's options, flags "
        f"override it (default: ${ENV}, else {DEFAULT_PATH} if present; docs/CONFIG.md).",
    )


def effective(daemon: str, tables: Mapping[str, Any], source: Source) -> list[Setting]:
    """Every key of ``daemon`` with the value its run command would get without flags."""
    command = run_command(daemon)
    ctx = typer.Context(command, info_name="run")
    values = table_values(source, daemon, tables.get(daemon, {}), ctx)
    out = []
    for key, param in keys(command).items():
        if param.name in values:
            out.append(Setting(key, values[param.name], "file", param))
        else:
            out.append(Setting(key, param.get_default(ctx), "default", param))
    return out


def toml_value(value: Any) -> str:
    """``value`` written as TOML.

    >>> toml_value(Path("/run/x")), toml_value(False), toml_value(2.0), toml_value(["a"])
    ('"/run/x"', 'false', '2.0', '["a"]')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def placeholder(param: Any) -> str:
    """A value to replace, for a key without a default: ``"<string>"``, ``<integer>``."""
    want = {int: "integer", float: "number", bool: "boolean", str: "string"}[_base_type(param)]
    return f'"<{want}>"' if want == "string" else f"<{want}>"


def flag_of(param: Any) -> str:
    return str(next(o for o in param.opts if o.startswith("--")))


def example() -> str:
    """A full configuration file: every key commented out at its default, with its help."""
    lines = [
        "# sdnmpi configuration file: /etc/sdnmpi/sdnmpi.toml (or --config PATH, $SDNMPI_CONFIG).",
        "# Written by `sdnmpi config example`; `sdnmpi config show` prints what is in effect.",
        "#",
        "# One table per daemon; each key is an option of `sdnmpi <daemon> run`, spelled as its",
        "# flag without the dashes. A flag on the command line overrides the file, the file",
        "# overrides the built-in default. Every key below is commented out at its default.",
    ]
    for daemon in DAEMONS:
        lines += ["", f"[{daemon}]"]
        for s in effective(daemon, {}, Source(None, False)):
            help_text = f"{flag_of(s.param)}: {s.param.help or ''}".strip()
            lines += ["", *_comment(help_text)]
            if s.value is not None:
                lines.append(f"# {s.key} = {toml_value(s.value)}")
            else:
                note = "required, here or as a flag" if s.param.required else "unset by default"
                lines.append(f"# {s.key} = {placeholder(s.param)}  # {note}")
    return "\n".join(lines) + "\n"


def _comment(text: str) -> list[str]:
    return textwrap.wrap(text, 86, initial_indent="# ", subsequent_indent="# ")


def reference_markdown() -> str:
    """The keys as Markdown tables (docs/CONFIG.md's reference section)."""
    out: list[str] = []
    for daemon in DAEMONS:
        out += [f"### [{daemon}] (`sdnmpi {daemon} run`)", ""]
        out += ["| key | type | default | what it does |", "|---|---|---|---|"]
        for s in effective(daemon, {}, Source(None, False)):
            kind = placeholder(s.param).strip('"<>')
            if s.value is not None:
                default = f"`{toml_value(s.value)}`"
            else:
                default = "required" if s.param.required else "unset"
            text = (s.param.help or "").replace("|", "\\|")
            out.append(f"| `{s.key}` | {kind} | {default} | {text} |")
        out.append("")
    return "\n".join(out)
