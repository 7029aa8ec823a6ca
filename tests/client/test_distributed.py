"""`loadlab run --processes N`: a Locust master here and N worker processes, one merged run folder.

Every test runs the real CLI against a real `loadlab mock` and checks the folder against what the
mock says it served (GET /truth): no record lost, none counted twice, every worker's records in.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import numpy as np
import psutil
import pytest

from loadlab.metrics.requests import read_gaps
from loadlab.store.reader import load_run
from tests.support.procs import BIN, REPO, Proc, free_port, loadlab, sigint_default

KEY = "key-that-must-not-reach-the-disk"


def mock(port: int, *extra: str) -> Proc:
    return Proc(
        [
            str(BIN / "loadlab"),
            "mock",
            "--port",
            str(port),
            "--ttft",
            "0.05",
            "--itl",
            "0.02",
            "--output-len",
            "32",
            "--api-key",
            KEY,
            *extra,
        ],
        ready_url=f"http://127.0.0.1:{port}/health",
    )


def truth(port: int) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/truth", timeout=10) as r:
        return json.load(r)["requests"]


def run_args(port: int, out: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--url",
        f"http://127.0.0.1:{port}",
        "--model",
        "mock",
        "--out",
        str(out),
        "--input-len",
        "8",
        "--server-metrics",
        "off",
        *extra,
    ]


def start_run(port: int, out: Path, *extra: str, stderr=subprocess.PIPE) -> subprocess.Popen:
    """`loadlab run --processes 2` in the background, in a process group of its own (as a
    terminal's foreground job is); the test ends it."""
    args = [str(BIN / "loadlab"), *run_args(port, out, *extra, "--processes", "2")]
    return subprocess.Popen(
        args,
        cwd=REPO,
        env={**os.environ, "OPENAI_API_KEY": KEY},
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        preexec_fn=sigint_default,
        start_new_session=True,
    )


def wait_until(proc: subprocess.Popen, condition, what: str, timeout: float = 90) -> None:
    """Poll `condition` while the run is alive; fail with `what` on timeout or an early exit."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline and proc.poll() is None, what
        time.sleep(0.2)


def parts(out: Path) -> int:
    return len(list((out / "requests").glob("part-*.parquet")))


def test_two_workers_merge_into_one_run_folder(tmp_path):
    port, out = free_port(), tmp_path / "run"
    with mock(port):
        res = loadlab(
            *run_args(port, out, "--concurrency", "4", "--requests", "40", "--output-len", "16", "--processes", "2"),
            env={"OPENAI_API_KEY": KEY},
            timeout=180,
        )
        served = truth(port)
    assert res.returncode == 0, res.stderr

    run = load_run(out)
    df = run.requests
    # Every request the mock served is in the folder exactly once, all of them succeeded with the
    # settings (API key, output length) the master sent to the workers.
    assert sorted(df["request_id"]) == sorted(t["request_id"] for t in served)
    assert len(df) == 40 and (df["error"] == "").all() and (df["completion_tokens"] == 16).all()
    workers = df["worker"].value_counts()
    assert len(workers) == 2 and workers.min() > 0, workers
    assert set(run.meta.worker_anchors) == set(workers.index)

    # Every worker process watched itself: its self-check samples reached the folder too.
    lag = run.samples[run.samples["signal"] == "client_loop_lag"]
    assert set(workers.index) <= {json.loads(labels)["worker"] for labels in lag["labels"]}

    # One merged result: the summary's percentiles are exact over all workers' records.
    summary = json.loads((out / "summary.json").read_text())["overall"]
    ttft = df["first_token_time"] - df["send_time"]
    gaps = read_gaps(np.concatenate([np.diff(np.asarray(t)) for t in df["token_times"]]))  # bunched: no ITL
    for q in (50, 90, 99):
        assert math.isclose(summary["ttft"][f"p{q}"], np.percentile(ttft, q), rel_tol=1e-9)
        assert math.isclose(summary["itl"][f"p{q}"], np.percentile(gaps, q), rel_tol=1e-9)
    assert summary["sent"] == 40

    # The API key travelled to the workers in memory only.
    assert not any(KEY.encode() in f.read_bytes() for f in out.rglob("*") if f.is_file())


def test_open_loop_rate_is_split_across_workers(tmp_path):
    port, out = free_port(), tmp_path / "run"
    with mock(port):
        res = loadlab(
            *run_args(
                port,
                out,
                "--rate",
                "8",
                "--arrival",
                "constant",
                "--duration",
                "4",
                "--output-len",
                "4",
                "--processes",
                "2",
            ),
            env={"OPENAI_API_KEY": KEY},
            timeout=180,
        )
    assert res.returncode == 0, res.stderr
    df = load_run(out).requests
    by_worker = {w: np.sort(g["scheduled_time"].to_numpy()) for w, g in df.groupby("worker")}
    assert len(by_worker) == 2
    for times in by_worker.values():
        # Constant arrivals at this worker's share: 8 req/s over 2 workers is one every 0.25 s.
        assert math.isclose(np.median(np.diff(times)), 0.25, rel_tol=0.05)
    assert 20 <= len(df) <= 40  # ~32 in 4 s; twice the rate (an unsplit pacer) would give ~64


STOPS = {
    "SIGINT to the run": lambda proc: proc.send_signal(signal.SIGINT),
    "Ctrl-C in a terminal": lambda proc: os.killpg(proc.pid, signal.SIGINT),  # the whole group
    "SIGTERM to the group": lambda proc: os.killpg(proc.pid, signal.SIGTERM),  # e.g. a CI time limit
}


# Whichever of the master's greenlets the signal finds running (its message listener drops a
# KeyboardInterrupt): tests/conductor/test_interrupts.py provokes each case.
@pytest.mark.parametrize("stop", list(STOPS))
def test_interrupt_mid_stream_loses_no_record(tmp_path, stop):
    """Stopped with long streams in flight on both workers: their aborted requests still arrive,
    also when the signal reaches the workers too."""
    port, out = free_port(), tmp_path / "run"
    with mock(port):
        proc = start_run(port, out, "--concurrency", "4", "--output-len", "2000")
        try:
            wait_until(proc, lambda: len(truth(port)) >= 4, "load never started")
            time.sleep(0.5)
            STOPS[stop](proc)
            assert proc.wait(90) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        served = truth(port)
    assert len(served) == 4 and not any(t["finished"] for t in served)
    df = load_run(out).requests
    assert sorted(df["request_id"]) == sorted(t["request_id"] for t in served)
    assert (df["error"] == "aborted").all()
    assert df["worker"].nunique() == 2


def test_the_workers_requests_still_in_flight_after_the_grace_are_cut_off(tmp_path):
    """Answers slower than the run on both workers: after the step's grace the master has each
    worker cut off its requests (recorded as aborted, saying so, none lost), and the run ends
    finished instead of waiting for the per-request timeout."""
    port, out = free_port(), tmp_path / "run"
    with mock(port, "--ttft", "100"):
        res = loadlab(
            *run_args(port, out, "--concurrency", "4", "--duration", "3", "--processes", "2"),
            env={"OPENAI_API_KEY": KEY},
            timeout=150,
        )
        served = truth(port)
    assert res.returncode == 0, res.stderr[-2000:]
    run = load_run(out)
    df = run.requests
    assert sorted(df["request_id"]) == sorted(t["request_id"] for t in served) and len(df) == 4
    assert (df["error"] == "aborted").all() and df["worker"].nunique() == 2
    assert (df["error_detail"] == "cut off 2 s after the end of step concurrency=4 (the step's grace)").all()
    assert run.meta.status == "finished"


def test_a_worker_killed_mid_run_is_accounted_for(tmp_path):
    """kill -9 of one worker: the master notices at once (it watches the PIDs it started), records
    the worker's requests in flight as aborted, says so live, goes on with the other worker and
    ends on time as `degraded` (exit 6) with a warning naming the worker and the time."""
    port, out = free_port(), tmp_path / "run"
    with mock(port):
        proc = start_run(port, out, "--concurrency", "4", "--duration", "8", "--output-len", "16")
        try:
            wait_until(proc, lambda: parts(out) >= 1, "load never started")  # records are arriving
            time.sleep(1.0)  # at least one more shipment from each worker
            victim = psutil.Process(proc.pid).children()[0]
            victim_id = f"{socket.gethostname()}:{victim.pid}"
            killed_at = time.time()
            os.kill(victim.pid, signal.SIGKILL)
            _, stderr = proc.communicate(timeout=60)  # bounded: no wait for the dead worker's "done"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        served = truth(port)
    assert proc.returncode == 6, stderr
    stderr = stderr.decode()
    assert f"! worker {victim_id} died" in stderr  # the live status line said so
    run = load_run(out)
    assert run.meta.status == "degraded"

    # sent = ok + failed + aborted: every request the mock received is in the folder exactly once.
    df = run.requests
    assert sorted(df["request_id"]) == sorted(t["request_id"] for t in served)
    mine = df[df["worker"] == victim_id]
    aborted = mine[mine["error"] == "aborted"]
    assert len(aborted) > 0 and (mine["error"] != "").sum() == len(aborted)
    assert (mine["error"] == "").sum() > 0  # what the dead worker had shipped is kept
    assert (df.loc[df["worker"] != victim_id, "error"] == "").all()

    # run.json and summary.json name the worker and when it died.
    (warning,) = run.meta.warnings
    assert victim_id in warning and f"its {len(aborted)} requests in flight" in warning
    died_at = datetime.fromisoformat(warning.split(" died at ")[1].split(" ")[0]).timestamp()
    assert killed_at - 0.1 <= died_at <= aborted["end_time"].min() + 0.001
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "degraded" and warning in summary["warnings"]


def test_records_stream_to_the_folder_during_the_run_and_workers_die_with_the_master(tmp_path):
    """kill -9 of the run process mid-run: the folder already holds both workers' records (they
    are shipped continuously, not at the end) and no child process (the workers, the live
    verdict's judge) outlives the master."""
    port, out = free_port(), tmp_path / "run"
    with mock(port):
        proc = start_run(
            port, out, "--concurrency", "4", "--duration", "60", "--output-len", "16", stderr=subprocess.DEVNULL
        )
        children: list[psutil.Process] = []
        try:
            wait_until(proc, lambda: parts(out) >= 3, "no records while running")
            children = psutil.Process(proc.pid).children()
            workers = [c for c in children if "loadlab.client.worker" in " ".join(c.cmdline())]
            assert len(workers) == 2
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            _, alive = psutil.wait_procs(children, timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for c in children:  # by PID, should the test fail
                if c.is_running():
                    c.kill()
    assert not alive, f"processes outlived the master: {[' '.join(c.cmdline()) for c in alive]}"
    run = load_run(out)
    assert run.meta.cut_off
    assert run.requests["worker"].nunique() == 2


def test_an_interrupt_ends_the_step_at_the_interrupt_not_after_the_shutdown(tmp_path):
    """Ctrl-C of a closed-loop run: the step ends when the signal came, so the workers' shutdown
    (about a second and a half) neither lowers the achieved concurrency nor marks the run
    client-limited."""
    port, out = free_port(), tmp_path / "run"
    with mock(port):
        proc = start_run(port, out, "--concurrency", "4", "--duration", "60", "--output-len", "32")
        try:
            wait_until(proc, lambda: len(truth(port)) >= 40, "load never started")
            interrupted_at = time.time()
            os.killpg(proc.pid, signal.SIGINT)
            assert proc.wait(90) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    run = load_run(out)
    (step,) = run.meta.steps
    aborted = run.requests[run.requests["error"] == "aborted"]
    assert len(aborted) > 0  # streams were cut off by the shutdown that followed the signal
    # The step ended at the signal: before the shutdown cut the first stream off.
    assert interrupted_at - 0.1 <= step.end_time <= aborted["end_time"].min()
    summary = json.loads((out / "summary.json").read_text())
    check = summary["client"]
    assert check["values"]["achieved_concurrency_ratio"] >= 0.8, check
    assert not any("achieved concurrency" in r for r in check["reasons"]), check
