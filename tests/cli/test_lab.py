"""`loadlab lab`'s bad input is one line and exit code 2, before any server starts; --list prints
the table. (The scenarios themselves run in tests/lab/test_lab.py.)"""

from __future__ import annotations

import json

import pytest

from tests.support.procs import loadlab


@pytest.mark.parametrize("args, message", [
    (["--only", "kv_capacity,nope"], "unknown scenario nope; choose from kv_capacity,"),
    (["--only", ","], "unknown scenario ','"),
    (["--device", "tpu"], "--device 'tpu': choose auto, cpu or cuda"),
])
def test_bad_input_is_one_line(args, message):
    result = loadlab("lab", *args, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), result.stderr


def test_a_folder_holding_a_run_is_refused(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({}))
    result = loadlab("lab", "--only", "network", "--out", str(tmp_path), timeout=60)
    assert result.returncode == 2
    assert "already holds a run" in result.stderr and "Traceback" not in result.stderr


def test_list_names_every_scenario_with_what_it_expects():
    result = loadlab("lab", "--list", timeout=60)
    assert result.returncode == 0, result.stderr
    rows = [line.split()[:2] for line in result.stdout.splitlines()]
    assert ["kv_capacity", "kv_capacity"] in rows and ["client", "client"] in rows
    assert ["under_loaded", "under_loaded"] in rows
    assert len(rows) == 9
