"""`loadlab serve`: the reference server behind loadlab's CLI, without torch in loadlab itself."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
import requests

from tests.reference_server.server import MODEL, TEST_FLAGS
from tests.support.procs import BIN, Proc, free_port, loadlab


@pytest.mark.parametrize("sig, tensor_parallel", [(signal.SIGTERM, "2"), (signal.SIGINT, "1")])
def test_serve_runs_the_reference_server_until_a_signal_stops_it_and_its_ranks(tmp_path, sig, tensor_parallel):
    port = free_port()
    log = tmp_path / "server.log"
    args = [str(BIN / "loadlab"), "serve", "--port", str(port), *TEST_FLAGS, "--tensor-parallel", tensor_parallel]
    with Proc(args, ready_url=f"http://127.0.0.1:{port}/health", timeout=120, log=log) as server:
        assert requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()["data"][0]["id"] == MODEL
        children = psutil.Process(server.pid).children(recursive=True)
        if tensor_parallel == "2":
            assert children, "no tensor-parallel rank was started"
        assert server.stop(sig, timeout=30) == 0
    deadline = time.monotonic() + 10
    while any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
    output = log.read_text()
    assert "shutting down" in output and "Traceback" not in output, output


def test_serve_help_lists_every_engine_flag():
    result = loadlab("serve", "--help")
    assert result.returncode == 0
    for flag in ("--host", "--port", "--api-key", "--export-tokenizer", "--max-num-seqs", "--kv-memory-gb",
                 "--tensor-parallel", "--max-waiting", "--batching"):
        assert flag in result.stdout


@pytest.mark.parametrize("args, mentions", [
    (["--max-num-seqs", "many"], "--max-num-seqs"),
    (["--no-such-flag"], "--no-such-flag"),
])
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
    code = ("import sys; sys.modules['torch'] = None; sys.argv = ['loadlab', 'serve'];"
            "from loadlab.cli import main; main()")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: the reference server needs torch: pip install 'loadlab[server]'"


def test_the_serve_command_does_not_import_torch():
    code = "import sys, loadlab.cli, loadlab.cli.serve; loadlab.cli._register_commands(); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
