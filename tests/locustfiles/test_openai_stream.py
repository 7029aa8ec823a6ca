"""`locust -f locustfiles/openai_stream.py` under Locust's own CLI: master, workers, one run folder."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request

from loadlab.store.reader import load_run
from tests.support.procs import BIN, REPO, Proc, free_port

LOCUSTFILE = "locustfiles/openai_stream.py"
KEY = "key-that-must-not-reach-the-disk"


def locust(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "locust"), "-f", LOCUSTFILE, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_headless_master_and_two_workers_write_one_run_folder(tmp_path):
    mock_port, master_port, out = free_port(), free_port(), tmp_path / "run"
    stats_file = tmp_path / "stats.json"
    worker = [
        str(BIN / "locust"),
        "-f",
        LOCUSTFILE,
        "--worker",
        "--master-host",
        "127.0.0.1",
        "--master-port",
        str(master_port),
    ]
    with (
        Proc(
            [str(BIN / "loadlab"), "mock", "--port", str(mock_port), "--api-key", KEY, "--itl", "0.01"],
            ready_url=f"http://127.0.0.1:{mock_port}/health",
        ),
        Proc(worker, log=tmp_path / "w1.log"),
        Proc(worker, log=tmp_path / "w2.log"),
    ):
        res = locust(
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
            "--expect-workers",
            "2",
            "--expect-workers-max-wait",
            "60",
            "--headless",
            "-u",
            "4",
            "-r",
            "10",
            "--run-time",
            "4s",
            "--host",
            f"http://127.0.0.1:{mock_port}/v1",
            "--loadlab-model",
            "mock",
            "--loadlab-output-len",
            "64",
            "--loadlab-out",
            str(out),
            "--json-file",
            str(tmp_path / "stats"),
            env={"LOADLAB_API_KEY": KEY},
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{mock_port}/truth", timeout=10) as r:
            served = json.load(r)["requests"]
    assert res.returncode == 0, res.stderr[-3000:]  # requests cut off by the stop are no failures

    run = load_run(out)
    df = run.requests
    # Every request the mock saw is in the master's folder once, also those cut off by the quit
    # (Locust alone waits ~0.5 s for workers; loadlab's flush handshake waits for all of them).
    assert sorted(df["request_id"]) == sorted(t["request_id"] for t in served)
    assert len(df) >= 8 and set(df["error"]) <= {"", "aborted"}
    assert (df["error"] == "aborted").any()  # streams cut off by the quit: the case that tests the flush
    assert (df[df["error"] == ""]["completion_tokens"] == 64).all()  # the master's settings reached the workers
    assert df["worker"].nunique() == 2
    assert set(run.meta.worker_anchors) == set(df["worker"])
    assert [(s.label, s.mode) for s in run.meta.steps] == [("concurrency=4", "closed")]
    # The folder is analyzed at the end too, as by `loadlab run`.
    assert json.loads((out / "analysis.json").read_text())["steps"][0]["label"] == "concurrency=4"
    # Locust's own statistics: one request per finished HTTP request (token events are not
    # requests; streams cut off by the stop are kept in the folder only).
    locust_total = sum(e["num_requests"] for e in json.loads(stats_file.read_text()))
    assert locust_total == (df["error"] != "aborted").sum()
    assert not any(KEY.encode() in f.read_bytes() for f in out.rglob("*") if f.is_file())


def test_bad_loadlab_option_is_one_line_error(tmp_path):
    res = locust(
        "--headless",
        "--host",
        "http://127.0.0.1:9",
        "--loadlab-model",
        "m",
        "--loadlab-input-len",
        "banana",
        "--run-time",
        "1s",
        timeout=60,
    )
    assert res.returncode == 2
    assert "error: " in res.stderr and "banana" in res.stderr and "Traceback" not in res.stderr


def test_errors_name_the_options_a_locust_user_typed(tmp_path):
    undiscoverable = locust("--headless", "--host", f"http://127.0.0.1:{free_port()}", "--run-time", "1s", timeout=60)
    assert undiscoverable.returncode == 2 and "Traceback" not in undiscoverable.stderr
    assert "pass --loadlab-model" in undiscoverable.stderr and "pass --model" not in undiscoverable.stderr
    for host in ([], ["--host", "ftp://x"]):
        bad = locust("--headless", *host, "--loadlab-model", "m", "--run-time", "1s", timeout=60)
        assert bad.returncode == 2 and "error: bad --host" in bad.stderr and "--url" not in bad.stderr, bad.stderr
