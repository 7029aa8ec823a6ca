"""The configurations of `loadlab tune`: a grid of the server's flags (`--grid name=v1,v2`, a
JSON or TOML file), and the serve command each one starts: its values where `{name}` stands, else
appended as `--name value` (the engines' parsers take the last of a repeated flag); the port where
`{port}` stands. Everything here is checked before any server starts.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadlab.errors import UserError

DEFAULT_MAX_CONFIGS = 16
PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_.-]+)\}")


@dataclass(frozen=True)
class Configuration:
    """The server's flags set by one configuration: flag name (no dashes) -> value."""

    values: dict[str, str]

    @property
    def name(self) -> str:
        """Its folder's name, e.g. `max-num-seqs=8_max-num-batched-tokens=1024` (`default`: none set)."""
        text = "_".join(f"{k}={v}" for k, v in self.values.items()) or "default"
        return re.sub(r"[^A-Za-z0-9=._,+-]", "-", text)


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """`--grid name=v1,v2` (repeatable) as name -> values; UserError (one line) for a bad one."""
    grid: dict[str, list[str]] = {}
    for item in items:
        name, eq, values = item.partition("=")
        name = name.strip().removeprefix("--")
        listed = [v.strip() for v in values.split(",")]
        if not eq or not name or not all(listed):
            raise UserError(f"bad --grid {item!r}: write name=value,value (e.g. max-num-seqs=2,8,32)")
        if name in grid:
            raise UserError(f"--grid names {name} twice: give its values in one --grid")
        grid[name] = listed
    return grid


def read_grid_file(path: Path) -> list[dict[str, str]]:
    """A grid file (JSON or TOML): a table of name -> values (Cartesian), or a list of tables
    (`[{...}, ...]` in JSON, `[[config]]` in TOML: the configurations as listed)."""
    try:
        text = path.read_text(encoding="utf-8")
        data: Any = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except OSError as e:
        raise UserError(f"cannot read --grid-file {path}: {e.strerror or e}") from None
    except ValueError as e:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise UserError(f"--grid-file {path} is not valid {path.suffix.lstrip('.') or 'TOML'}: {e}") from None
    if isinstance(data, dict) and list(data) == ["config"]:
        data = data["config"]
    if isinstance(data, list):
        if not data or not all(isinstance(c, dict) and c for c in data):
            raise UserError(f"--grid-file {path}: a list of configurations must hold tables of flag = value")
        return [{_name(k): _value(v, path) for k, v in c.items()} for c in data]
    if not isinstance(data, dict) or not data:
        raise UserError(f"--grid-file {path}: expected a table of flag = [values] or a list of configurations")
    grid = {_name(k): [_value(v, path) for v in (vs if isinstance(vs, list) else [vs])] for k, vs in data.items()}
    return cartesian(grid)


def _name(key: str) -> str:
    return str(key).strip().removeprefix("--")


def _value(value: Any, path: Path) -> str:
    if isinstance(value, (dict, list)) or value == "":
        raise UserError(f"--grid-file {path}: a flag's value must be a number or a word, got {value!r}")
    return str(value).lower() if isinstance(value, bool) else str(value)


def cartesian(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    """Every combination of the grid's values, the first name varying slowest."""
    return [dict(zip(grid, combo, strict=True)) for combo in itertools.product(*grid.values())]


def configurations(
    template: str, grid: list[dict[str, str]], max_configs: int = DEFAULT_MAX_CONFIGS
) -> list[Configuration]:
    """The configurations to run, checked against the serve command before anything starts:
    at most `max_configs`, none twice, every `{name}` of the command given a value."""
    configs = [Configuration(values) for values in grid] or [Configuration({})]
    if len(configs) > max_configs:
        raise UserError(
            f"the grid has {len(configs)} configurations, more than --max-configs {max_configs}: "
            "narrow it or raise --max-configs"
        )
    names = [c.name for c in configs]
    if len(set(names)) < len(names):
        raise UserError("the grid lists a configuration twice")
    for config in configs:
        check_command(template, config.values)
    return configs


def check_command(template: str, values: dict[str, str]) -> list[str]:
    """The serve command's words, or UserError: it must hold `{port}`, and every other `{name}`
    must have a value."""
    try:
        words = shlex.split(template)
    except ValueError as e:
        raise UserError(f"bad --serve command ({e})") from None
    if not words:
        raise UserError("--serve needs a command that starts the server")
    if not any("{port}" in w for w in words):
        raise UserError("--serve must put {port} where the server takes its port (e.g. --port {port})")
    missing = sorted({m for w in words for m in PLACEHOLDER.findall(w)} - set(values) - {"port"})
    if missing:
        raise UserError(f"--serve has {{{missing[0]}}} but no value for it: give --grid {missing[0]}=...")
    return words


def render_command(template: str, values: dict[str, str], port: int) -> list[str]:
    """The command that starts the server: each value where `{name}` stands, else appended as
    `--name value`; the port where `{port}` stands."""
    words = check_command(template, values)
    placed = {name for name in values if any(f"{{{name}}}" in w for w in words)}
    args = []
    for word in words:
        for name, value in [*values.items(), ("port", str(port))]:
            word = word.replace(f"{{{name}}}", value)
        args.append(word)
    for name, value in values.items():
        if name not in placed:
            args += [f"--{name}", value]
    return args


def flag_value(template: str, flag: str) -> str | None:
    """The value the serve command gives `flag` (its last `--flag V` or `--flag=V`; None: not set)."""
    words = shlex.split(template)
    found = None
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith(flag + "="):
            found = word.partition("=")[2]
    return found
