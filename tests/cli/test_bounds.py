"""No input may take the machine: the hostile probe's values (issue 29) as real CLI runs against
`loadlab mock` (max_model_len 32768). Each is one `error:` line and exit 2, no traceback, before
anything is built: the process's peak RSS stays under a load generator's own memory. A run at the
bounds stays within the stated memory budget (docs/workloads.md, Bounds), and SIGTERM ends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from loadlab.config import RunConfig
from loadlab.store.reader import load_run
from loadlab.workload.limits import BODY_COPIES, PROCESS_BASE_BYTES, request_bytes
from loadlab.workload.scenario import apply_overrides
from tests.support.mock_load import mock_server
from tests.support.procs import BIN, REPO, sigint_default
from tests.support.traces import write_mooncake

QUIET = ("--no-server-metrics", "--no-gpu")
TWIN = ("--twin", "h100:llama-3-8b")
# Runs a command and prints its exit code and peak RSS (KiB, the largest of its processes).
PEAK_RSS = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)"
)


@pytest.fixture(scope="module")
def mock():
    with mock_server("--model", "m", "--ttft", "0.01", "--itl", "0.005") as (url, _):
        yield url


def measured(*args: str, timeout: float = 120) -> tuple[int, int, str]:
    """Run `loadlab *args`: (exit code, peak RSS in bytes, all it printed)."""
    out = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, str(BIN / "loadlab"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    *printed, last = out.stderr.rstrip("\n").split("\n")
    code, peak_kib = (int(v) for v in last.split())
    return code, peak_kib * 1024, out.stdout + "\n".join(printed)


def refused(*args: str) -> str:
    """Run `loadlab *args` and require one error line, exit 2, no traceback, nothing built."""
    code, peak, printed = measured(*args)
    assert code == 2, printed[-2000:]
    assert "Traceback" not in printed
    lines = printed.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), printed[-2000:]
    assert peak < PROCESS_BASE_BYTES, f"{peak >> 20} MiB before refusing"
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--api", "embeddings", "--items", "1000000000"), "--items 1,000,000,000 is more than the bound of 2,048"),
        (("--audio-seconds", "1e9"), "--audio-seconds 1,000,000,000 is more than the bound of 600 seconds"),
        (("--input-len", "1000000000"), "--input-len 1,000,000,000 is more than the bound of 1,048,576 tokens"),
        (("--images", "1000000"), "--images 1,000,000 is more than the bound of 256 images"),
        (
            ("--input-len", "40000"),
            "at least 40,128 tokens (prompt and output): more than the endpoint's max_model_len",
        ),
        (("--audio-seconds", "600", "--concurrency", "64"), "64 requests in flight per process"),
    ],
    ids=["items", "audio", "input-len", "images", "max-model-len", "in-flight"],
)
def test_run_refuses_a_size_beyond_its_bound(mock, tmp_path, args, says):
    load = () if "--concurrency" in args else ("--concurrency", "1")
    line = refused("run", "--url", mock, *load, "--duration", "3", *args, "--out", str(tmp_path / "run"), *QUIET)
    assert says in line
    assert not (tmp_path / "run").exists()


def test_a_trace_line_beyond_the_bound_is_refused(mock, tmp_path):
    trace = write_mooncake(tmp_path / "big.jsonl", [(0.0, 1_000_000_000, 10, [])])
    line = refused("run", "--url", mock, "--trace", str(trace), *QUIET)
    assert "line 1: input_length 1000000000 is more than the bound of 1,048,576 tokens" in line


def test_a_trace_spanning_centuries_without_a_duration_is_refused(mock, tmp_path):
    trace = tmp_path / "span.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,100,10\n3000-01-01 00:00:00,100,10\n"
    )
    assert "bound of 604,800 s" in refused("run", "--url", mock, "--trace", str(trace), *QUIET)


def test_a_trace_with_a_200_mb_field_is_one_line(mock, tmp_path):
    trace = tmp_path / "field.csv"
    with trace.open("w") as f:
        f.write("Timestamp,Request tokens,Response tokens\n0,")
        for _ in range(200):
            f.write("1" * (1 << 20))
        f.write(",5\n")
    assert "line 2 is longer than the bound of 1 MiB" in refused("run", "--url", mock, "--trace", str(trace), *QUIET)


@pytest.mark.parametrize("case", ["symlink-loop", "folder-loop", "not-a-file", "not-an-image"])
def test_an_image_folder_that_cannot_be_read_is_one_line(mock, tmp_path, case):
    folder = tmp_path / "images"
    if case == "folder-loop":
        os.symlink(folder, folder)
    else:
        folder.mkdir()
    if case == "symlink-loop":
        os.symlink("a.png", folder / "a.png")
    elif case == "not-a-file":
        (folder / "a.png").mkdir()
    elif case == "not-an-image":
        (folder / "a.png").write_bytes(b"GIF89a")
    line = refused("run", "--url", mock, "--concurrency", "1", "--images", "1", "--image-dir", str(folder), *QUIET)
    assert str(folder) in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--duration", "1e9"), "--duration 1,000,000,000 is more than the bound of 604,800 seconds"),
        (("--duration", "5000"), "5,000 simulated seconds in all is more than the bound of 3,600"),
        (("--duration", "10", "--input-len", "1000000000"), "--input-len 1,000,000,000 is more than the bound"),
    ],
    ids=["duration-1e9", "duration-over-an-hour", "input-len"],
)
def test_simulate_refuses_work_it_cannot_finish(tmp_path, args, says):
    out = tmp_path / "sim"
    assert says in refused("simulate", *TWIN, "--concurrency", "4", *args, "--out", str(out))
    assert not out.exists()


def test_a_sweeps_highest_step_keeps_the_bounds(mock, tmp_path):
    out = str(tmp_path / "sweep")
    line = refused("sweep", "--url", mock, "--max", "1000", "--audio-seconds", "600", "--out", out, *QUIET)
    assert line.startswith("error: --max 1000: 1,000 requests in flight per process")


def test_plan_what_if_refuses_a_sweep_it_cannot_simulate_in_time():
    line = refused("plan", "--users", "20000", "--what-if", "h100:llama-3-8b", "--step-duration", "100")
    assert "up to 20,000 users of 100 s steps is ~8,000,000 user-seconds of simulation" in line
    line = refused("plan", "--users", "10", "--what-if", "h100:llama-3-8b", "--step-duration", "3000")
    assert "more than the bound of 3,600 simulated seconds" in line


def test_plan_refuses_more_users_than_it_can_count():
    line = refused("plan", "--users", "1" + "0" * 32, "--what-if", "h100:llama-3-8b")
    assert "--users 100,000,000,000,000,000,000,000,000,000,000 is more than the bound" in line


def test_a_run_at_the_bounds_stays_within_the_memory_budget(mock, tmp_path):
    """Two users sending 600 s audio clips (the bound, ~24 MiB a body): the process holds its own
    memory plus BODY_COPIES bodies per request in flight, as the budget says."""
    flags = ("--audio-seconds", "600", "--concurrency", "2", "--duration", "2")
    code, peak, printed = measured("run", "--url", mock, *flags, "--out", str(tmp_path / "run"), *QUIET)
    assert code == 0 and "Traceback" not in printed, printed[-2000:]
    body = request_bytes(apply_overrides(RunConfig(), audio_seconds="600", concurrency=[2]))
    budget = PROCESS_BASE_BYTES + 2 * BODY_COPIES * body
    assert peak < budget, f"peak {peak >> 20} MiB, budget {budget >> 20} MiB"
    assert (load_run(tmp_path / "run").requests["audio_seconds"] == 600).all()


def test_sigterm_ends_a_run_of_the_largest_requests(mock, tmp_path):
    out = tmp_path / "run"
    args = ["run", "--url", mock, "--audio-seconds", "600", "--concurrency", "4", "--duration", "60"]
    run = subprocess.Popen(
        [str(BIN / "loadlab"), *args, "--out", str(out), *QUIET],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out / "run.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)  # its users build and send 24 MiB requests
        os.kill(run.pid, signal.SIGTERM)
        _, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.kill(run.pid, signal.SIGKILL)
    assert run.returncode == 130 and "Traceback" not in stderr, stderr[-2000:]
    assert load_run(out).meta.status == "interrupted"
