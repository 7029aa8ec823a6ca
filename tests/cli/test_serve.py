"""`loadlab serve`: the reference server behind loadlab's CLI, without torch in loadlab itself."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import psutil
import pytest
import requests

from reference_server.config import EngineConfig
from tests.support.procs import BIN, Proc, free_port, loadlab, wait_http
from tests.support.reference_server import MODEL, TEST_FLAGS


def serve_args(port: int, *flags: str) -> list[str]:
    return [str(BIN / "loadlab"), "serve", "--port", str(port), *TEST_FLAGS, *flags]


def assert_clean_exit(log: Path, ranks: list[psutil.Process]) -> None:
    deadline = time.monotonic() + 10
    while any(alive(r) for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(r) for r in ranks), "a tensor-parallel rank outlived the server"
    output = log.read_text()
    assert "shutting down" in output and "Traceback" not in output, output


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_serve_runs_the_reference_server_until_sigterm(tmp_path):
    """...with its API key from the environment, so that it need not show in `ps`."""
    port = free_port()
    log = tmp_path / "server.log"
    models = f"http://127.0.0.1:{port}/v1/models"
    with Proc(
        serve_args(port),
        ready_url=f"http://127.0.0.1:{port}/health",
        timeout=120,
        log=log,
        env={"LOADLAB_SERVER_API_KEY": "sk-env"},
    ) as server:
        assert requests.get(models, timeout=10).status_code == 401
        answer = requests.get(models, headers={"Authorization": "Bearer sk-env"}, timeout=10)
        assert answer.json()["data"][0]["id"] == MODEL
        assert server.stop(signal.SIGTERM, timeout=30) == 0
    assert_clean_exit(log, [])


def test_ctrl_c_stops_the_server_and_its_tensor_parallel_ranks(tmp_path):
    # Ctrl-C sends SIGINT to the whole foreground process group: the ranks get it too.
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            serve_args(port, "--tensor-parallel", "2"), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", timeout=120, proc=server)
        ranks = psutil.Process(server.pid).children(recursive=True)
        assert ranks, "no tensor-parallel rank was started"
        os.killpg(server.pid, signal.SIGINT)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert_clean_exit(log, ranks)


def test_serve_help_lists_every_engine_flag():
    result = loadlab("serve", "--help")
    assert result.returncode == 0
    engine_flags = ["--" + f.name.replace("_", "-") for f in fields(EngineConfig)]
    for flag in ["--host", "--port", "--api-key", "--idle-timeout", "--export-tokenizer", *engine_flags]:
        assert flag in result.stdout


@pytest.mark.parametrize(
    "args, mentions",
    [
        (["--max-num-seqs", "many"], "--max-num-seqs"),
        (["--no-such-flag"], "--no-such-flag"),
        (["--idle-timeout", "0"], "--idle-timeout: must be a positive number of seconds"),
        (["--port", "99999"], "cannot listen on 127.0.0.1:99999"),
        (["--twin", "v100:llama-3-8b", "--port", "0"], "--twin: unknown GPU 'v100'; choose from h100"),
        (["--twin", "h100:llama-3-8b", "--tensor-parallel", "2", "--port", "0"], "give the number of GPUs in it"),
        (
            ["--twin", "h100:llama-3-8b", "--gpu-memory-utilization", "1.5", "--port", "0"],
            "gpu_memory_utilization must be in (0, 1]",
        ),
    ],
)
def test_bad_flags_are_a_short_error_and_exit_2(args, mentions):
    result = loadlab("serve", *args)
    assert result.returncode == 2 and mentions in result.stderr and "Traceback" not in result.stderr


def test_a_port_in_use_is_a_one_line_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = loadlab("serve", "--port", str(taken.getsockname()[1]), *TEST_FLAGS, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in result.stderr


def test_without_torch_serve_says_how_to_install_it():
    # sys.modules[name] = None makes Python treat the module as not installed.
    code = (
        "import sys; sys.modules['torch'] = None; sys.argv = ['loadlab', 'serve'];from loadlab.cli import main; main()"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: the reference server needs torch: pip install 'loadlab[server]'"


def test_the_serve_command_does_not_import_torch():
    code = "import sys, loadlab.cli, loadlab.cli.serve; loadlab.cli._register_commands(); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
