"""`loadlab lab`'s bad input is one line and exit code 2, before any server starts; --list prints
the table. (The scenarios themselves run in tests/lab/test_lab.py.)"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.procs import BIN, loadlab, sigint_default


@pytest.mark.parametrize(
    "args, message",
    [
        (["--only", "kv_capacity,nope"], "unknown scenario nope; choose from kv_capacity,"),
        (["--only", ","], "unknown scenario ','"),
        (["--device", "tpu"], "--device 'tpu': choose auto, cpu or cuda"),
        (["--step-seconds", "0.5"], "--step-seconds 0.5: choose 2 to 3600"),
        (["--step-seconds", "nan"], "--step-seconds nan: choose 2 to 3600"),
        (["--engine", "tgi"], "--engine 'tgi': choose reference, vllm, llamacpp"),
        (["--engine", "vllm", "--device", "cuda"], "--device cuda: the lab's vllm is a CPU build"),
        (["--engine", "llamacpp", "--llama-server", "/nonexistent/llama-server"], "no llama-server at /nonexistent"),
        (["--engine", "vllm", "--only", "network"], "unknown scenario network; choose from kv_capacity,"),
        (["--engine", "vllm", "--vllm-python", "/nonexistent/python"], "no vLLM environment at /nonexistent/python"),
    ],
)
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
    assert len(rows) == 11


def test_list_of_the_vllm_lab_names_its_scenarios():
    result = loadlab("lab", "--engine", "vllm", "--list", timeout=60)
    assert result.returncode == 0, result.stderr
    rows = [line.split()[:2] for line in result.stdout.splitlines()]
    assert ["kv_capacity", "kv_capacity"] in rows and ["scheduling", "scheduling"] in rows
    assert ["compute", "compute"] in rows and ["under_loaded", "under_loaded"] in rows
    assert "--num-gpu-blocks-override" in result.stdout and "--max-num-seqs" in result.stdout


def test_list_of_the_llamacpp_lab_names_its_scenarios_with_and_without_metrics():
    result = loadlab("lab", "--engine", "llamacpp", "--list", timeout=60)
    assert result.returncode == 0, result.stderr
    rows = [line.split()[:2] for line in result.stdout.splitlines()]
    assert ["scheduling", "scheduling"] in rows and ["scheduling-blackbox", "queueing"] in rows
    assert ["memory_bandwidth-blackbox", "batch_contention"] in rows and ["client", "client"] in rows
    assert "--parallel 2 under 16 users" in result.stdout


def test_an_interrupted_lab_writes_what_it_finished_and_leaves_no_server_behind(tmp_path):
    log = tmp_path / "lab.log"
    out = tmp_path / "lab"
    with open(log, "wb") as err:
        lab = subprocess.Popen(
            [
                str(BIN / "loadlab"),
                "lab",
                "--only",
                "scheduling,network",
                "--step-seconds",
                "4",  # the interrupt, not the verdict, is tested here
                "--device",
                "cpu",
                "--out",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=sigint_default,
        )
    try:
        server = wait_for(log, r"^network: server .* \(pid (\d+)[,)]", timeout=300)
        time.sleep(2)
        lab.send_signal(signal.SIGINT)
        assert lab.wait(120) == 130
    finally:
        if lab.poll() is None:
            lab.kill()
    assert re.search(r"^scheduling: (match|client_limited|mismatch)", log.read_text(), re.MULTILINE)
    results = json.loads((out / "lab.json").read_text())["results"]
    assert [r["name"] for r in results] == ["scheduling"]
    assert "| scheduling |" in (out / "lab.md").read_text()
    assert not Path(f"/proc/{server}").exists(), "the interrupted scenario's server is still running"


def wait_for(log: Path, pattern: str, timeout: float) -> str:
    """The first group of the first line of `log` matching `pattern`, waiting up to `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(), re.MULTILINE)
        if found:
            return found[1]
        time.sleep(0.5)
    raise AssertionError(f"no line like {pattern!r} in {log.read_text()[-2000:]}")
