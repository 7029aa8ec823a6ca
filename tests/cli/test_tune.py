"""`loadlab tune` end to end: bad input refused in one line before any server starts, the knob
table, and (serial) the verdict of an admission-capped reference server put to the test."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.support.procs import loadlab


def marking_server(marker: Path) -> str:
    """A serve command that leaves `marker` behind if it is ever started."""
    code = f"open({str(marker)!r}, 'w')"
    return f"{sys.executable} -c {shlex.quote(code)} {{port}}"


def test_the_knob_table_is_printed() -> None:
    result = loadlab("tune", "--knobs", timeout=60)
    assert result.returncode == 0, result.stderr
    table = " ".join(result.stdout.split())
    for words in ("scheduling │ vLLM │ --max-num-seqs │ x4", "kv_capacity │ vLLM │ --num-gpu-blocks-override │ x2"):
        assert words in table, result.stdout
    assert "--parallel" in table and "--max-num-batched-tokens │ /2" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--grid", "max-num-seqs=1,2,4", "--grid", "max-num-batched-tokens=1,2,4", "--max-configs", "8"],
            "the grid has 9 configurations, more than --max-configs 8",
        ),
        (["--grid", "max-num-seqs"], "bad --grid"),
        (["--step-duration", "0"], "--step-duration must be"),
        (["--verify", "runs/x", "--grid", "a=1"], "--verify turns the verdict's knob itself"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    marker = tmp_path / "started"
    result = loadlab("tune", "--serve", marking_server(marker), *args, "--out", str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_tune_needs_a_serve_command(tmp_path: Path) -> None:
    result = loadlab("tune", "--grid", "a=1", timeout=60)
    assert result.returncode == 2 and "tune needs --serve CMD" in result.stderr


def test_a_server_that_does_not_start_is_one_line_and_exit_1(tmp_path: Path) -> None:
    out = tmp_path / "out"
    serve = f"{sys.executable} -c {shlex.quote('import sys; sys.exit(3)')} {{port}}"
    result = loadlab("tune", "--serve", serve, "--grid", "a=1", "--out", str(out), "--no-gpu", timeout=120)
    assert result.returncode == 1, result.stderr
    assert "a=1: the server did not start (the server exited with code 3" in " ".join(result.stderr.split())
    summary = json.loads((out / "tune.json").read_text())
    assert summary["configurations"][0]["status"] == "failed"
    assert (out / "a=1" / "server.log").is_file() and (out / "tune.html").is_file()
