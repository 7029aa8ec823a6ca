"""The configurations of `loadlab tune`: a grid or a grid file, and the serve command each one
starts, all checked before any server starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadlab.conductor.grid import (
    Configuration,
    cartesian,
    configurations,
    flag_value,
    parse_grid,
    read_grid_file,
    render_command,
)
from loadlab.errors import UserError

SERVE = "loadlab serve --preset tiny --port {port}"


def test_grids_combine_every_value_the_first_name_slowest() -> None:
    grid = parse_grid(["max-num-seqs=2,8", "--max-num-batched-tokens=1024,4096"])
    assert cartesian(grid) == [
        {"max-num-seqs": "2", "max-num-batched-tokens": "1024"},
        {"max-num-seqs": "2", "max-num-batched-tokens": "4096"},
        {"max-num-seqs": "8", "max-num-batched-tokens": "1024"},
        {"max-num-seqs": "8", "max-num-batched-tokens": "4096"},
    ]


@pytest.mark.parametrize("item", ["max-num-seqs", "=2,8", "max-num-seqs=2,,8", "max-num-seqs="])
def test_a_bad_grid_is_one_line(item: str) -> None:
    with pytest.raises(UserError, match="bad --grid"):
        parse_grid([item])


def test_a_flag_given_twice_in_the_grid_is_refused() -> None:
    with pytest.raises(UserError, match="twice"):
        parse_grid(["max-num-seqs=2", "max-num-seqs=8"])


def test_grid_files_are_cartesian_tables_or_lists(tmp_path: Path) -> None:
    table = tmp_path / "grid.json"
    table.write_text(json.dumps({"max-num-seqs": [2, 8], "enforce-eager": True}))
    assert read_grid_file(table) == [
        {"max-num-seqs": "2", "enforce-eager": "true"},
        {"max-num-seqs": "8", "enforce-eager": "true"},
    ]
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps([{"max-num-seqs": 2}, {"max-num-seqs": 8, "num-kv-blocks": 64}]))
    assert read_grid_file(listed) == [{"max-num-seqs": "2"}, {"max-num-seqs": "8", "num-kv-blocks": "64"}]
    toml = tmp_path / "grid.toml"
    toml.write_text('max-num-seqs = [2, 8]\n"max-num-batched-tokens" = 1024\n')
    assert read_grid_file(toml) == [
        {"max-num-seqs": "2", "max-num-batched-tokens": "1024"},
        {"max-num-seqs": "8", "max-num-batched-tokens": "1024"},
    ]
    configs = tmp_path / "configs.toml"
    configs.write_text('[[config]]\nmax-num-seqs = 2\n[[config]]\nmax-num-seqs = 32\n"num-kv-blocks" = 128\n')
    assert read_grid_file(configs) == [{"max-num-seqs": "2"}, {"max-num-seqs": "32", "num-kv-blocks": "128"}]


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("bad.json", "{", "not valid json"),
        ("bad.toml", "a = [", "not valid toml"),
        ("empty.json", "{}", "expected a table"),
        ("nested.json", '{"a": [[1]]}', "must be a number or a word"),
        ("list.json", "[1, 2]", "tables of flag = value"),
    ],
)
def test_a_bad_grid_file_is_one_line(tmp_path: Path, name: str, text: str, match: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UserError, match=match):
        read_grid_file(path)
    with pytest.raises(UserError, match="cannot read"):
        read_grid_file(tmp_path / "missing.toml")


def test_a_grid_larger_than_max_configs_is_refused() -> None:
    grid = cartesian(parse_grid(["a=1,2,3", "b=1,2,3"]))
    assert len(configurations(SERVE, grid, max_configs=9)) == 9
    with pytest.raises(UserError, match="9 configurations, more than --max-configs 8"):
        configurations(SERVE, grid, max_configs=8)


def test_no_grid_is_one_configuration_of_the_command_as_given() -> None:
    assert configurations(SERVE, []) == [Configuration({})]
    assert Configuration({}).name == "default"


def test_the_serve_command_needs_its_port_and_a_value_for_every_placeholder() -> None:
    with pytest.raises(UserError, match=r"must put \{port\}"):
        configurations("loadlab serve --preset tiny", [])
    with pytest.raises(UserError, match=r"has \{max-num-seqs\} but no value"):
        configurations(SERVE + " --max-num-seqs {max-num-seqs}", [{"num-kv-blocks": "8"}])
    with pytest.raises(UserError, match="bad --serve command"):
        configurations("loadlab serve 'unclosed {port}", [])


def test_a_value_goes_where_its_name_stands_else_it_is_appended() -> None:
    template = "vllm serve m --max-num-seqs {max-num-seqs} --port {port}"
    args = render_command(template, {"max-num-seqs": "8", "max-num-batched-tokens": "1024"}, 8123)
    assert args == [
        "vllm",
        "serve",
        "m",
        "--max-num-seqs",
        "8",
        "--port",
        "8123",
        "--max-num-batched-tokens",
        "1024",
    ]


def test_a_value_with_spaces_stays_one_word() -> None:
    assert render_command("srv --port {port} --name {name}", {"name": "a b"}, 1) == [
        "srv",
        "--port",
        "1",
        "--name",
        "a b",
    ]


def test_the_value_a_command_gives_a_flag_is_its_last() -> None:
    assert flag_value("s --max-num-seqs 2 --port {port} --max-num-seqs=4", "--max-num-seqs") == "4"
    assert flag_value("s --max-num-seqs 2 --port {port}", "--max-num-seqs") == "2"
    assert flag_value("s --port {port}", "--max-num-seqs") is None


def test_configuration_names_are_folder_names() -> None:
    assert Configuration({"max-num-seqs": "8", "dtype": "bfloat16"}).name == "max-num-seqs=8_dtype=bfloat16"
    assert "/" not in Configuration({"model": "/models/x y"}).name
