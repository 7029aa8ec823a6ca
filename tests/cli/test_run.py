"""`loadlab run` end to end against a real `loadlab mock`: run folder, steps, warm-up, open loop,
faults, and one-line errors for bad input. Runs are 1-2 s each."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from loadlab.store.reader import load_run
from loadlab.store.schema import FORMAT, ErrorCategory
from loadlab.workload.trace import BLOCK_TOKENS
from tests.support.disk import fill, small_tmpfs
from tests.support.procs import BIN, REPO, Proc, free_port, loadlab, sigint_default
from tests.support.reference_server import start_server
from tests.support.traces import write_azure, write_mooncake

QUIET = ("--no-server-metrics", "--no-gpu")


def start_mock(*args: str) -> tuple[str, Proc]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    return url, Proc(
        [str(BIN / "loadlab"), "mock", "--port", str(port), "--model", "m", *args], ready_url=f"{url}/health"
    )


def truth(url: str) -> dict[str, dict]:
    with urllib.request.urlopen(f"{url}/truth", timeout=10) as r:
        return {t["request_id"]: t for t in json.loads(r.read())["requests"]}


def run_ok(*args: str, env: dict | None = None):
    result = loadlab("run", *args, *QUIET, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


@pytest.fixture(scope="module")
def mock():
    url, proc = start_mock("--ttft", "0.02", "--itl", "0.01")
    with proc:
        yield url


def test_closed_loop_run_writes_a_complete_run_folder(mock, tmp_path):
    out = tmp_path / "run"
    result = run_ok(
        "--url",
        mock,
        "--concurrency",
        "4",
        "--duration",
        "1.5",
        "--output-len",
        "10",
        "--input-len",
        "20",
        "--out",
        str(out),
    )
    run = load_run(out)
    req = run.requests
    assert len(req) >= 8 and req["error"].eq("").all()
    assert (req["completion_tokens"] == 10).all() and (req["client_tokens"] == 10).all()
    assert run.meta.config.model == "m"  # discovered from /v1/models
    assert [s.label for s in run.meta.steps] == ["concurrency=4"]
    assert run.meta.status == "finished"
    served = truth(mock)
    for rec in req.itertuples():  # the X-Request-Id header reached the mock
        assert len(served[rec.request_id]["token_times"]) == len(rec.token_times) == 10
    client = run.samples[run.samples["source"] == "client"]
    assert {"client_cpu", "client_loop_lag"} <= set(client["signal"])
    assert all("worker" in json.loads(labels) for labels in client["labels"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"][0]["sent"] == len(req)
    assert "concurrency=4" in result.stdout  # the summary table


def test_steps_are_labelled_and_warmup_is_marked(mock, tmp_path):
    out = tmp_path / "steps"
    run_ok(
        "--url",
        mock,
        "--model",
        "m",
        "--concurrency",
        "1,3",
        "--requests",
        "6",
        "--warmup-requests",
        "2",
        "--output-len",
        "5",
        "--out",
        str(out),
    )
    run = load_run(out)
    assert [(s.index, s.label) for s in run.meta.steps] == [(0, "concurrency=1"), (1, "concurrency=3")]
    assert all(s.end_time >= s.start_time for s in run.meta.steps)
    for step in (0, 1):
        in_step = run.requests[run.requests["step"] == step]
        assert len(in_step) == 8 and in_step["warmup"].sum() == 2
        # warm-up requests are the first ones the step sent
        first = in_step.sort_values("scheduled_time").head(2)
        assert first["warmup"].all()
    summary = json.loads((out / "summary.json").read_text())
    assert [s["warmup"] for s in summary["steps"]] == [2, 2]


def test_a_steps_new_users_start_spread_over_the_ramp_up(mock, tmp_path):
    """Users 1 -> 4: step 1's three new users open their connections first, then send their first
    requests spread over --ramp-up from the step's start (run.json's ramp_end); the carried-on user
    goes on at once."""
    out = tmp_path / "ramp"
    run_ok(
        "--url",
        mock,
        "--model",
        "m",
        "--concurrency",
        "1,4",
        "--step-duration",
        "1.5",
        "--ramp-up",
        "0.8",
        "--output-len",
        "20",
        "--out",
        str(out),
    )
    run = load_run(out)
    first, second = run.meta.steps
    assert first.ramp_end == first.start_time  # one user: nothing to spread
    assert second.ramp_end == pytest.approx(second.start_time + 0.8)
    sent = run.requests.loc[run.requests["step"] == 1, "send_time"].to_numpy() - second.start_time
    assert sent.min() >= 0
    # The new users' places: 0, 0.4 and 0.2 s into the ramp; only one of them and the carried-on
    # user send sooner than 0.15 s (all at once, the three new ones would send within a few ms).
    assert (sent < 0.15).sum() <= 2
    assert (sent <= 0.8).sum() >= 4
    assert json.loads((out / "run.json").read_text())["format"] == FORMAT


def test_open_loop_keeps_the_schedule(mock, tmp_path):
    out = tmp_path / "open"
    run_ok(
        "--url",
        mock,
        "--model",
        "m",
        "--rate",
        "20",
        "--arrival",
        "constant",
        "--duration",
        "1.5",
        "--output-len",
        "5",
        "--out",
        str(out),
    )
    req = load_run(out).requests.sort_values("scheduled_time")
    assert 25 <= len(req) <= 31  # 20/s for 1.5 s
    gaps = req["scheduled_time"].diff().dropna()
    assert gaps.between(0.049, 0.051).all()  # the schedule does not wait for responses
    delays = (req["send_time"] - req["scheduled_time"]).sort_values()
    assert delays.iloc[0] >= 0 and delays.iloc[len(delays) // 2] < 0.05


def test_open_loop_request_count_and_poisson_steps(mock, tmp_path):
    out = tmp_path / "poisson"
    run_ok(
        "--url",
        mock,
        "--model",
        "m",
        "--rate",
        "30,60",
        "--requests",
        "12",
        "--output-len",
        "3",
        "--api",
        "completions",
        "--out",
        str(out),
    )
    run = load_run(out)
    assert [s.label for s in run.meta.steps] == ["rate=30", "rate=60"]
    assert run.requests.groupby("step").size().to_dict() == {0: 12, 1: 12}
    assert run.requests["error"].eq("").all() and set(run.requests["api"]) == {"completions"}


def test_every_fault_is_counted_and_the_run_goes_on(tmp_path):
    url, proc = start_mock(
        "--ttft",
        "0.02",
        "--itl",
        "0.01",
        "--seed",
        "5",
        "--error-rate",
        "0.1",
        "--error-codes",
        "500,429",
        "--disconnect-rate",
        "0.1",
        "--malformed-rate",
        "0.1",
        "--stall-rate",
        "0.1",
        "--stall-seconds",
        "5",
        "--not-sse-rate",
        "0.1",
    )
    out = tmp_path / "faults"
    with proc:
        run_ok(
            "--url",
            url,
            "--model",
            "m",
            "--concurrency",
            "6",
            "--duration",
            "2",
            "--timeout",
            "1.5",  # the 5 s stalls time out; a behaving stream (0.12 s) does even on a busy host
            "--output-len",
            "10",
            "--max-error-rate",
            "off",
            "--out",
            str(out),
        )
        served = truth(url)
    req = load_run(out).requests
    summary = json.loads((out / "summary.json").read_text())["steps"][0]
    assert summary["sent"] == len(req) == summary["succeeded"] + summary["failed"]
    categories = set(req["error"])
    assert {
        "",
        ErrorCategory.DISCONNECT.value,
        ErrorCategory.MALFORMED.value,
        ErrorCategory.TIMEOUT.value,
        ErrorCategory.NOT_SSE.value,
    } <= categories
    assert categories & {ErrorCategory.HTTP_5XX.value, ErrorCategory.HTTP_429.value}
    for rec in req.itertuples():  # each failure where the mock injected that fault
        fault = served[rec.request_id]["fault"]
        assert (rec.error == "") == (fault is None) or rec.error == ErrorCategory.ABORTED.value


def test_a_run_ends_its_last_step_within_the_grace_and_cuts_off_what_is_left(tmp_path):
    """Requests slower than the run: after its 4 s the two in flight get the grace (2 s here,
    docs/sweep.md), then are cut off: aborted, saying so, the run `finished` (exit 0), not failed,
    and not held for the 300 s per-request timeout."""
    url, proc = start_mock("--ttft", "100", "--itl", "0.01")
    out = tmp_path / "slow"
    with proc:
        result = run_ok("--url", url, "--model", "m", "--concurrency", "2", "--duration", "4", "--out", str(out))
    run = load_run(out)
    (step,) = run.meta.steps
    req = run.requests
    assert len(req) == 2 and (req["error"] == ErrorCategory.ABORTED.value).all()
    assert (req["error_detail"] == "cut off 2 s after the end of step concurrency=2 (the step's grace)").all()
    assert (req["end_time"] - step.end_time).between(2.0 - 0.1, 2.0 + 5.0).all()
    assert run.meta.status == "finished" and run.meta.ended_at - step.end_time < 2.0 + 30.0
    summary = json.loads((out / "summary.json").read_text())["steps"][0]
    assert (summary["sent"], summary["failed"], summary["aborted"]) == (2, 0, 2)
    assert "not counted as failed): 2" in result.stdout + result.stderr


def test_api_key_from_the_environment_is_sent_and_never_stored(tmp_path):
    url, proc = start_mock("--api-key", "sekret-123")
    out = tmp_path / "auth"
    with proc:
        run_ok(
            "--url",
            url,
            "--concurrency",
            "2",
            "--requests",
            "3",
            "--output-len",
            "3",
            "--out",
            str(out),
            env={"LOADLAB_API_KEY": "sekret-123"},
        )
        denied = loadlab(
            "run",
            "--url",
            url,
            "--model",
            "m",
            "--concurrency",
            "1",
            "--requests",
            "2",
            "--out",
            str(tmp_path / "denied"),
            *QUIET,
            env={"LOADLAB_API_KEY": "", "OPENAI_API_KEY": ""},
        )
    assert load_run(out).requests["error"].eq("").all()
    assert denied.returncode == 4  # a run that cannot succeed (below)
    assert set(load_run(tmp_path / "denied").requests["error"]) == {ErrorCategory.HTTP_401.value}
    for f in out.rglob("*"):
        if f.is_file():
            assert b"sekret-123" not in f.read_bytes(), f


def test_a_dead_endpoint_is_measured_not_a_crash(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "dead"
    result = loadlab(
        "run",
        "--url",
        dead,
        "--model",
        "m",
        "--concurrency",
        "2",
        "--duration",
        "1",
        "--out",
        str(out),
        *QUIET,
        timeout=120,
    )
    assert result.returncode == 3, result.stderr[-2000:]  # every request failed: over the error budget
    assert "Traceback" not in result.stderr
    req = load_run(out).requests
    assert len(req) >= 2 and set(req["error"]) == {ErrorCategory.CONNECT.value}


def one_error_line(stderr: str) -> str:
    """The single `error:` line a run that ended itself prints (and no traceback)."""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-2000:]
    return errors[0]


@pytest.mark.parametrize(
    "mock_args, run_args, cause",
    [
        (["--api-key", "right"], ["--model", "m", "--api-key", "wrong"], "HTTP 401"),
        ([], ["--model", "no-such-model"], "HTTP 404"),
    ],
    ids=["wrong-key", "wrong-model"],
)
def test_a_run_the_endpoint_rejects_stops_at_once(tmp_path, mock_args, run_args, cause):
    """Every request rejected alike: the run stops after its first few requests instead of
    sending failing requests for the whole minute, and says why in one line."""
    url, proc = start_mock(*mock_args)
    out = tmp_path / "rejected"
    with proc:
        result = loadlab(
            "run",
            "--url",
            url,
            *run_args,
            "--concurrency",
            "4",
            "--duration",
            "60",
            "--out",
            str(out),
            *QUIET,
            timeout=120,
        )
        received = len(truth(url))
    assert result.returncode == 4, result.stderr[-2000:]
    line = one_error_line(result.stderr)
    assert "rejected every request" in line and cause in line
    assert received < 50  # counted at the mock: it stopped at once
    data = load_run(out)
    assert data.meta.status == "stopped" and cause in data.meta.reason
    assert len(data.requests) == received


def test_a_wrong_or_missing_key_is_named_whatever_request_met_it_first(tmp_path):
    # Without --model the first request is model discovery (GET /v1/models), with it the load's:
    # both say the key is wrong, not "pass --model".
    url, proc = start_mock("--api-key", "right")
    no_key = {"LOADLAB_API_KEY": "", "OPENAI_API_KEY": ""}
    with proc:
        results = {
            (model, key): loadlab(
                "run",
                "--url",
                url,
                *(["--model", "m"] if model else []),
                *(["--api-key", key] if key else []),
                "--concurrency",
                "1",
                "--requests",
                "3",
                "--out",
                str(tmp_path / f"{model}-{key}"),
                *QUIET,
                env=no_key,
                timeout=120,
            )  # fmt: skip
            for model in (False, True)
            for key in ("sk-WRONG", "")
        }
    for (model, _), result in results.items():
        assert result.returncode == (4 if model else 2), result.stderr[-2000:]
        line = one_error_line(result.stderr)
        assert "HTTP 401" in line and "wrong or missing API key: check --api-key or $LOADLAB_API_KEY" in line
        assert "pass --model" not in line


def test_a_step_over_the_error_budget_ends_the_run(tmp_path):
    """80% of requests fail: the first step ends once it has enough requests to judge, the
    second never starts, and the exit code says the run missed its budget (here set in the
    scenario file), also when --slo gates the run (the run's own code keeps precedence)."""
    url, proc = start_mock("--error-rate", "0.8", "--error-codes", "500", "--ttft", "0.01", "--itl", "0.005")
    scenario = tmp_path / "budget.toml"
    scenario.write_text("max_error_rate = 0.5\n")
    out = tmp_path / "budget"
    with proc:
        result = loadlab(
            "run",
            "-c",
            str(scenario),
            "--url",
            url,
            "--model",
            "m",
            "--concurrency",
            "2,4",
            "--step-duration",
            "60",
            "--output-len",
            "5",
            "--out",
            str(out),
            "--slo",
            "error_rate=1%",
            *QUIET,
            timeout=120,
        )
    assert result.returncode == 3, result.stderr[-2000:]
    assert "--max-error-rate 0.5" in one_error_line(result.stderr)
    assert "gate: INVALID (exit 2)" in result.stdout  # printed, but the run's code 3 wins
    data = load_run(out)
    assert data.meta.status == "stopped" and "concurrency=2" in data.meta.reason
    assert set(data.requests["step"]) == {0}
    shown = loadlab("summary", str(out))  # the stopped run reads like any other
    assert shown.returncode == 0 and "stopped" in shown.stdout, shown.stderr


def test_a_failing_closed_loop_user_pauses_between_requests(tmp_path):
    """Every request fails at once (error budget off, as for a deliberate fault test): each user
    waits a growing pause after a failure instead of retrying in a tight loop."""
    url, proc = start_mock("--error-rate", "1", "--error-codes", "500")
    out = tmp_path / "backoff"
    with proc:
        run_ok(
            "--url",
            url,
            "--model",
            "m",
            "--concurrency",
            "4",
            "--duration",
            "2",
            "--max-error-rate",
            "off",
            "--out",
            str(out),
        )
        received = len(truth(url))
    # without the pause, 4 users send thousands of requests in 2 s; with it, a few each
    assert 4 <= received < 200
    assert len(load_run(out).requests) == received


@pytest.mark.parametrize(
    "args, message",
    [
        (["--url", "localhost:8000", "--model", "m", "--concurrency", "1"], "url"),
        (["--url", "http://127.0.0.1:1", "--model", "m", "--rate", "-2"], "rate"),
        (["--url", "http://127.0.0.1:1", "--model", "m", "--rate", "2", "--concurrency", "2"], "not both"),
        (["--url", "http://127.0.0.1:1", "--model", "m"], "concurrency or rate"),
        (
            [
                "--url",
                "http://127.0.0.1:1",
                "--model",
                "m",
                "--concurrency",
                "1",
                "--workload",
                "sharegpt",
                "--dataset",
                "/nonexistent/sharegpt.json",
            ],
            "not found",
        ),
        (["--url", "http://127.0.0.1:1", "--model", "m", "--concurrency", "1", "--api", "grpc"], "api"),
        (["--url", "http://127.0.0.1:1", "--concurrency", "1"], "--model"),  # cannot discover it
        (["--url", "http://127.0.0.1:1", "--model", "m", "--concurrency", "x"], "concurrency"),
        (
            ["--url", "http://127.0.0.1:1", "--model", "m", "--concurrency", "1", "--max-error-rate", "2"],
            "max_error_rate",
        ),
        (
            ["--url", "http://127.0.0.1:1", "--model", "m", "--concurrency", "1", "--max-error-rate", "some"],
            "max_error_rate",
        ),
        (["--url", "http://[::1", "--model", "m", "--concurrency", "1"], "url"),
        (["--url", "http://user:pw-77@[::1", "--model", "m", "--concurrency", "1"], "url"),
        (["--url", "http://127.0.0.1:99999", "--model", "m", "--concurrency", "1"], "url"),
        (["--url", "http://127.0.0.1:1", "--model", "m", "--concurrency", "1,,8"], "concurrency"),
        (["--url", "http://127.0.0.1:1", "--model", "m", "--rate", "1,2,"], "rate"),
        (
            ["--url", "http://u:pw-77@127.0.0.1:1", "--model", "m", "--concurrency", "1", "--api-key", "k"],
            "credentials",
        ),
        (["--url", "http://127.0.0.1:1", "--model", "m", "--concurrency", "1", "--slo", "ttft_p99=soon"], "bad SLO"),
        (["--url", "http://127.0.0.1:1", "--model", "m", "--trace", "/nonexistent/trace.csv"], "file not found"),
        (["--url", "http://127.0.0.1:1", "--model", "m", "--trace", "t.csv", "--trace-window", "9:1"], "trace window"),
        (["--url", "http://127.0.0.1:1", "--model", "m", "--trace", "t.csv", "--trace-speed", "0"], "trace_speed"),
        (["--url", "http://127.0.0.1:1", "--model", "m", "--trace", "t.csv", "--workload", "synthetic"], "--trace"),
        (["--url", "http://127.0.0.1:1", "--model", "m"], "no load"),
        # QUIET adds --no-server-metrics: which of the two was meant?
        (
            ["--url", "http://127.0.0.1:1", "--model", "m", "--concurrency", "1", "--server-metrics", "/m"],
            "--no-server-metrics turns scraping off and --server-metrics /m names a page to scrape: give one",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    result = loadlab("run", *args, "--out", str(tmp_path / "never"), *QUIET, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr
    assert "pw-77" not in result.stderr
    assert not Path(tmp_path / "never").exists()


def test_out_must_be_new_or_an_empty_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = loadlab(
        "run",
        "--url",
        "http://127.0.0.1:1",
        "--model",
        "m",
        "--concurrency",
        "1",
        "--out",
        str(tmp_path),
        *QUIET,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.startswith("error: ") and "non-empty" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_credentials_in_the_url_are_used_and_never_written_or_shown(mock, tmp_path):
    """`http://user:password@host` works (model discovery, requests, the /metrics scrape, with two
    processes) and the password appears nowhere: not in the run folder, not on the console."""
    out = tmp_path / "creds"
    url = mock.replace("http://", "http://alice:pw-4711@")
    result = loadlab(
        "run",
        "--url",
        url,
        "--concurrency",
        "2",
        "--requests",
        "4",
        "--output-len",
        "3",
        "--processes",
        "2",
        "--no-gpu",
        "--out",
        str(out),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run = load_run(out)
    assert len(run.requests) == 4 and run.requests["error"].eq("").all()
    assert run.meta.config.url == mock and run.meta.config.model == "m"
    assert any(c.source == "server" and c.ok_samples > 0 for c in run.meta.coverage)
    assert "pw-4711" not in result.stdout + result.stderr
    for f in out.rglob("*"):
        if f.is_file():
            assert b"pw-4711" not in f.read_bytes(), f


def test_an_api_key_in_the_environment_beside_credentials_in_the_url_is_named_not_sent(tmp_path):
    # The mock takes only the environment's key (Bearer): the URL's credentials, which win (one
    # Authorization header), are refused, and the run said beforehand that the key is not sent.
    url, proc = start_mock("--api-key", "sk-env")
    with proc:
        result = loadlab(
            "run", "--url", url.replace("http://", "http://alice:pw-4711@"), "--model", "m", "--concurrency", "1",
            "--requests", "3", "--out", str(tmp_path / "run"), *QUIET, env={"LOADLAB_API_KEY": "sk-env"}, timeout=120,
        )  # fmt: skip
    assert "warning: --url holds credentials, sent as Basic auth: $LOADLAB_API_KEY is not sent" in result.stderr
    assert result.returncode == 4 and "wrong or missing API key" in one_error_line(result.stderr)
    assert "pw-4711" not in result.stdout + result.stderr


def test_token_counting_that_falls_back_to_chunks_says_so_in_the_runs_warnings(mock, tmp_path):
    # The mock's chunks carry "logprobs": null: --token-count logprobs cannot count by them.
    out = tmp_path / "run"
    result = run_ok(
        "--url", mock, "--model", "m", "--concurrency", "2", "--requests", "4", "--output-len", "3",
        "--token-count", "logprobs", "--out", str(out),
    )  # fmt: skip
    line = (
        "--token-count logprobs: 4 of 4 successful requests carried no logprobs (the server sent none): "
        "their tokens were counted by chunks"
    )
    assert line in json.loads((out / "summary.json").read_text())["warnings"]
    assert f"warning: {line}" in result.stdout + result.stderr
    assert set(load_run(out).requests["token_events"]) == {"chunks"}


def _open_files_limit(soft: int, hard: int):
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return preexec


def test_too_few_open_files_for_the_concurrency_is_one_warning(mock, tmp_path):
    """The soft limit is raised to the hard one (as Locust does); beyond that, one warning line."""
    args = [
        str(BIN / "loadlab"),
        "run",
        "--url",
        mock,
        "--model",
        "m",
        "--duration",
        "0.5",
        "--output-len",
        "2",
        *QUIET,
    ]
    fits = subprocess.run(
        [*args, "--concurrency", "300", "--out", str(tmp_path / "fits")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_open_files_limit(200, 4096),
    )
    assert fits.returncode == 0 and "warning" not in fits.stderr, fits.stderr[-2000:]
    assert load_run(tmp_path / "fits").requests["error"].eq("").all()  # 300 sockets did open
    short = subprocess.run(
        [*args, "--concurrency", "300", "--out", str(tmp_path / "short")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_open_files_limit(200, 200),
    )
    warnings = [line for line in short.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "open files" in warnings[0] and "200" in warnings[0], short.stderr[-2000:]


def test_multiturn_answers_feed_the_next_turn_and_think_time_paces_the_user(mock, tmp_path):
    out = tmp_path / "multiturn"
    run_ok(
        "--url",
        mock,
        "--model",
        "m",
        "--concurrency",
        "1",
        "--requests",
        "6",
        "--workload",
        "multiturn",
        "--input-len",
        "10",
        "--output-len",
        "5",
        "--think-time",
        "0.2",
        "--out",
        str(out),
    )
    req = load_run(out).requests.sort_values("scheduled_time")
    assert req["error"].eq("").all() and req["conversation"].nunique() == 2
    # each turn resends the history: 10 new characters per user turn plus the 5-token answer
    assert req.groupby("turn")["input_tokens"].first().to_dict() == {0: 10, 1: 25, 2: 40}
    served = truth(mock)
    assert [served[r]["prompt_tokens"] for r in req["request_id"]] == req["input_tokens"].tolist()
    pauses = req["scheduled_time"].to_numpy()[1:] - req["end_time"].to_numpy()[:-1]
    assert (pauses >= 0.19).all()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_keeps_what_was_measured(tmp_path, stop):
    """Ctrl-C, or SIGTERM (a CI job's time limit), mid-run: the run folder is closed as
    interrupted with every request measured so far, and the exit code says so."""
    url, proc = start_mock("--ttft", "0.02", "--itl", "0.05")
    out = tmp_path / "interrupted"
    with proc:
        run = subprocess.Popen(
            [
                str(BIN / "loadlab"),
                "run",
                "--url",
                url,
                "--model",
                "m",
                "--concurrency",
                "3",
                "--duration",
                "60",
                "--output-len",
                "20",
                "--out",
                str(out),
                *QUIET,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=sigint_default,
        )
        try:
            deadline = time.monotonic() + 60
            while not list((out / "requests").glob("part-*.parquet")) and time.monotonic() < deadline:
                time.sleep(0.1)  # some requests finished and were flushed
            os.kill(run.pid, stop)
            stdout, stderr = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                os.kill(run.pid, signal.SIGKILL)
    assert run.returncode == 130, stderr[-2000:]
    data = load_run(out)
    assert data.meta.status == "interrupted"
    errors = set(data.requests["error"])
    assert "" in errors and errors <= {"", ErrorCategory.ABORTED.value}
    step = json.loads((out / "summary.json").read_text())["steps"][0]
    assert step["sent"] == len(data.requests) == step["succeeded"] + step["failed"] + step["aborted"]
    assert "[interrupted]" in stdout


def test_flags_override_the_scenario_file(mock, tmp_path):
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(
        f'url = "{mock}"\nmodel = "m"\nconcurrency = [2]\nduration = 30\n[workload]\noutput_len = "4"\n'
    )
    out = tmp_path / "scenario-run"
    run_ok("-c", str(scenario), "--rate", "20", "--requests", "5", "--out", str(out))
    run = load_run(out)
    assert [s.label for s in run.meta.steps] == ["rate=20"]  # the flag chose the load model
    assert len(run.requests) == 5 and (run.requests["completion_tokens"] == 4).all()
    assert run.meta.config.rate == [20.0] and run.meta.config.concurrency == []


def test_a_trace_is_replayed_on_its_own_clock_with_its_lengths(mock, tmp_path):
    rows = [(0.0, 40, 3), (0.3, 25, 5), (0.3, 60, 2), (0.8, 12, 4), (1.4, 33, 6), (2.0, 8, 1)]
    trace = write_azure(tmp_path / "AzureLLMInferenceTrace_conv.csv", rows)
    out = tmp_path / "trace"
    run_ok("--url", mock, "--model", "m", "--trace", str(trace), "--trace-speed", "2", "--out", str(out))
    run = load_run(out)
    assert [(s.label, s.mode) for s in run.meta.steps] == [("trace x2", "open")]
    req = run.requests.sort_values(["scheduled_time", "input_tokens"], ascending=[True, False])
    assert req["error"].eq("").all() and len(req) == len(rows)
    due = (req["scheduled_time"] - req["scheduled_time"].min()).tolist()
    assert due == pytest.approx([t / 2 for t, _, _ in rows], abs=1e-3)  # the trace's clock, twice as fast
    assert req["input_tokens"].tolist() == [40, 60, 25, 12, 33, 8]  # (the two at 0.3 s: longer first, as sorted)
    served = truth(mock)
    assert [served[r]["prompt_tokens"] for r in req["request_id"]] == req["input_tokens"].tolist()
    assert req["completion_tokens"].tolist() == [3, 2, 5, 4, 6, 1]
    # a late send is measured as in open loop: from the recorded time to the send
    assert (req["send_time"] >= req["scheduled_time"]).all()


def test_a_trace_window_from_a_scenario_file(mock, tmp_path):
    rows = [(t * 0.1, 10 + i, 2, [0, i]) for i, t in enumerate(range(20))]
    trace = write_mooncake(tmp_path / "mooncake_trace.jsonl", rows)
    scenario = tmp_path / "trace.toml"
    scenario.write_text(
        f'url = "{mock}"\nmodel = "m"\n[workload]\nkind = "trace"\ndataset = "{trace}"\ntrace_window = "0.5:1.2"\n'
    )
    out = tmp_path / "window"
    run_ok("-c", str(scenario), "--out", str(out))
    req = load_run(out).requests.sort_values("scheduled_time")
    assert req["input_tokens"].tolist() == list(range(15, 22))  # 0.5 s up to (not with) 1.2 s
    due = (req["scheduled_time"] - req["scheduled_time"].min()).tolist()
    assert due == pytest.approx([i * 0.1 for i in range(7)], abs=1e-3)


def test_a_mooncake_traces_shared_blocks_are_prefix_cache_hits_on_the_server(tmp_path):
    """Blocks 0 and 1 recur, block 0 once more: a prefix cache reuses them. The same lengths
    without hash ids share nothing beyond the chat template's first tokens."""
    blocks = [[0, 1], [0, 1], [0, 2], [3]]
    rows = [(0.4 * i, BLOCK_TOKENS + 200, 2, ids) for i, ids in enumerate(blocks)]  # (the tiny model: 1024)
    shared = write_mooncake(tmp_path / "mooncake_trace.jsonl", rows)
    plain = tmp_path / "plain.csv"
    plain.write_text("t,in,out\n" + "".join(f"{t},{n},{o}\n" for t, n, o, _ in rows))
    hits = {}
    for name, args in (("shared", ["--trace", str(shared)]), ("plain", ["--trace", str(plain)])):
        args += ["--trace-columns", "time=t,input=in,output=out"] if name == "plain" else []
        with start_server(tmp_path / f"{name}.log", "--max-model-len", "1024") as server:
            run_ok("--url", server.url, *args, "--out", str(tmp_path / name))
            hits[name] = server.metric("vllm:prefix_cache_hits_total")
        assert load_run(tmp_path / name).requests["error"].eq("").all()
    assert hits["shared"] >= 2 * BLOCK_TOKENS  # the second request ~700 tokens, the third ~500
    assert hits["plain"] < 64


def test_tool_sessions_grow_their_context_and_report_each_turns_ttft_and_cache_hits(tmp_path):
    flags = ["--workload", "tools", "--turns", "3", "--tool-time", "0.2", "--tool-output-len", "40"]
    flags += ["--input-len", "300", "--output-len", "8", "--concurrency", "2", "--requests", "12"]
    with start_server(tmp_path / "server.log", "--max-model-len", "1024") as server:
        result = run_ok("--url", server.url, *flags, "--out", str(tmp_path / "tools"))
    req = load_run(tmp_path / "tools").requests
    assert req["error"].eq("").all()
    reasons = req.groupby("turn")["finish_reason"].agg(set).to_dict()
    assert reasons == {0: {"tool_calls"}, 1: {"tool_calls"}, 2: {"length"}}
    assert req.groupby("turn")["prompt_tokens"].min().is_monotonic_increasing  # the history grows
    # each call is sent at least the tool time after the session's previous answer
    for _, session in req.sort_values("turn").groupby("conversation"):
        gaps = session["send_time"].to_numpy()[1:] - session["end_time"].to_numpy()[:-1]
        assert (gaps >= 0.2).all()
    turns = json.loads((tmp_path / "tools" / "summary.json").read_text())["turns"]
    hits = [t["cache_hit_rate"] for t in turns]
    assert [t["turn"] for t in turns] == [0, 1, 2] and hits[0] < 0.2 and min(hits[1:]) > 0.5
    assert "per turn" in result.stdout


def test_images_and_audio_reach_the_server_and_ttft_is_reported_by_media(tmp_path):
    flags = ["--images", "0,1,3", "--image-size", "64x64,128x32", "--audio-seconds", "0.2"]
    flags += ["--input-len", "20", "--output-len", "2", "--concurrency", "2", "--requests", "24"]
    with start_server(tmp_path / "server.log") as server:
        result = run_ok("--url", server.url, *flags, "--out", str(tmp_path / "media"))
    req = load_run(tmp_path / "media").requests
    assert req["error"].eq("").all() and set(req["images"]) == {0, 1, 3}
    # the server charges 4 tokens for each 64x64 or 128x32 image (32 x 32 patches) and 5 for 0.2 s of audio
    extra = req["prompt_tokens"] - req["images"] * 4 - 5
    assert extra.nunique() == 1
    assert set(req["image_pixels"] // req["images"].clip(lower=1)) <= {0, 4096}
    media = json.loads((tmp_path / "media" / "summary.json").read_text())["media"]
    assert sum(m["requests"] for m in media) == 24 and {m["images"] for m in media} == {0, 1, 3}
    assert "by media" in result.stdout


def test_open_loop_requests_never_wait_for_a_socket(mock, tmp_path):
    """~20 requests in flight at once: a pool of Locust's default 10 sockets would queue half of
    them and their TTFT (from the scheduled time) would grow by a whole request."""
    out = tmp_path / "pool"
    run_ok(
        "--url",
        mock,
        "--model",
        "m",
        "--rate",
        "40",
        "--arrival",
        "constant",
        "--requests",
        "30",
        "--output-len",
        "50",
        "--out",
        str(out),
    )
    req = load_run(out).requests
    assert len(req) == 30 and req["error"].eq("").all()
    starts, ends = req["send_time"].to_numpy(), req["end_time"].to_numpy()
    peak = max(((starts <= t) & (ends > t)).sum() for t in starts)
    assert peak >= 15
    ttft = (req["first_token_time"] - req["scheduled_time"]).sort_values()
    assert ttft.iloc[int(0.9 * len(ttft))] < 0.3  # the mock's TTFT is 0.02 s; a request lasts ~0.5 s


def test_a_full_disk_mid_run_stops_it_and_keeps_what_fit(tmp_path):
    """The run folder's file system fills up mid-run (a real tmpfs, filled by the test): the run
    stops sending, saves what fits, closes the folder as failed, says in one line how many
    finished requests could not be saved, and exits 5; `loadlab summary` reads what was saved."""
    url, proc = start_mock("--ttft", "0.02", "--itl", "0.01")
    with small_tmpfs(tmp_path / "disk") as disk, proc:
        out = disk / "run"
        run = subprocess.Popen(
            [
                str(BIN / "loadlab"),
                "run",
                "--url",
                url,
                "--model",
                "m",
                "--concurrency",
                "8",
                "--duration",
                "60",
                "--output-len",
                "20",
                "--out",
                str(out),
                *QUIET,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not list((out / "requests").glob("part-*.parquet")) and time.monotonic() < deadline:
                time.sleep(0.1)  # some requests were saved
            fill(disk)
            stdout, stderr = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                os.kill(run.pid, signal.SIGKILL)
        received = len(truth(url))
        assert run.returncode == 5, stderr[-2000:]
        line = one_error_line(stderr)
        assert str(out) in line and "No space left on device" in line, line
        unsaved = int(re.search(r"(\d+) finished requests could not be saved", line).group(1))
        data = load_run(out)
        assert data.meta.status == "failed" and line.endswith(data.meta.reason)
        saved = len(data.requests)
        assert saved > 0 and unsaved > 0
        assert saved + unsaved >= received  # every request the mock saw: saved or counted
        assert "[failed]" in stdout
        shown = loadlab("summary", str(out))
        assert shown.returncode == 0 and "failed" in shown.stdout, shown.stderr
        assert json.loads((out / "summary.json").read_text())["overall"]["sent"] == saved


def test_slo_gates_the_run_inline_and_sets_its_exit_code(mock, tmp_path):
    # client_limited=any: this test's load generator shares a busy machine with the mock.
    passed = loadlab(
        "run",
        "--url",
        mock,
        "--model",
        "m",
        "--concurrency",
        "2",
        "--requests",
        "12",
        "--output-len",
        "5",
        "--out",
        str(tmp_path / "pass"),
        "--slo",
        "ttft=2000,ttft_p99=2s,goodput=90%,client_limited=any",
        *QUIET,
        timeout=120,
    )
    assert passed.returncode == 0, passed.stdout[-2000:] + passed.stderr[-2000:]
    assert "gate: PASS (exit 0)" in passed.stdout
    summary = json.loads((tmp_path / "pass" / "summary.json").read_text())
    assert summary["slo"]["ttft_ms"] == 2000 and summary["steps"][0]["slo_met"] == 12  # goodput counted
    assert load_run(tmp_path / "pass").meta.config.slo.startswith("ttft=2000,")

    scenario = tmp_path / "scenario.toml"  # the SLO from the scenario's [slo] table
    scenario.write_text(
        f'url = "{mock}"\nmodel = "m"\nconcurrency = [2]\nrequests = 12\n'
        '[workload]\noutput_len = "5"\n[slo]\nttft_p50 = "1ms"\nclient_limited = "any"\n'
    )
    failed = loadlab("run", "-c", str(scenario), "--out", str(tmp_path / "fail"), *QUIET, timeout=120)
    assert failed.returncode == 1, failed.stdout[-2000:] + failed.stderr[-2000:]
    assert "gate: FAIL (exit 1)" in failed.stdout


def test_a_missing_or_broken_summary_json_is_a_warning_not_a_traceback(tmp_path, capsys):
    from loadlab.cli.running import print_final_summary

    print_final_summary(tmp_path)  # the writer could not write it
    (tmp_path / "summary.json").write_text("[]")
    print_final_summary(tmp_path)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("warning: no summary table") for line in err)


HOSTILE = "m\x1b]0;pwned\x07\x1b[31mred\u202eevil"


def test_text_from_the_server_is_printed_inert(tmp_path):
    """The model name GET /v1/models gives, and an error body echoing one, carry an escape
    sequence (window title), a colour and an RTL override: all printed as visible text."""
    url, proc = start_mock("--model", HOSTILE, "--ttft", "0.01", "--itl", "0.005")
    with proc:
        served = loadlab(
            "run", "--url", url, "--concurrency", "1", "--requests", "3", "--output-len", "4",
            "--out", str(tmp_path / "served"), *QUIET, timeout=120,
        )  # fmt: skip
        rejected = loadlab(
            "run", "--url", url, "--model", HOSTILE + "2", "--concurrency", "2", "--duration", "30",
            "--out", str(tmp_path / "rejected"), *QUIET, timeout=120,
        )  # fmt: skip
    assert served.returncode == 0 and rejected.returncode == 4, (served.stderr[-2000:], rejected.stderr[-2000:])
    assert load_run(tmp_path / "served").meta.config.model == HOSTILE  # what the server said, kept exact
    assert "model m\\x1b]0;pwned" in served.stderr and "rejected every request" in rejected.stderr
    for output in (served.stdout, served.stderr, rejected.stdout, rejected.stderr):
        assert "\x1b" not in output and "\u202e" not in output and "\x07" not in output


@pytest.mark.parametrize(("api", "items"), [("embeddings", 3), ("rerank", 4)])
def test_pooling_runs_report_latency_and_items_and_no_ttft(tmp_path, api, items):
    """Embeddings and rerank: timed send to response end, items and prompt tokens per second; the
    summary, analysis and report read the run, with TTFT and ITL not applicable (not 0)."""
    out = tmp_path / api
    flags = ["--api", api, "--items", str(items), "--input-len", "uniform:10:40", "--concurrency", "2"]
    with start_server(tmp_path / "server.log") as server:
        result = run_ok("--url", server.url, *flags, "--requests", "12", "--out", str(out))
    req = load_run(out).requests
    assert len(req) == 12 and req["error"].eq("").all()
    assert (req["items"] == items).all() and (req["api"] == api).all()
    assert (req["prompt_tokens"] >= items * 10).all() and (req["completion_tokens"] == 0).all()
    assert req["first_token_time"].isna().all() and (req["end_time"] > req["send_time"]).all()
    (step,) = json.loads((out / "summary.json").read_text())["steps"]
    assert step["succeeded"] == 12 and step["items"] == 12 * items
    assert step["items_per_s"] == pytest.approx(step["requests_per_s"] * items)
    # Every rate counts the same requests (those ending in the steady window) over the same seconds:
    # prompt tokens per request, so counted, lie within the requests' own.
    per_request = step["prompt_tokens_per_s"] / step["requests_per_s"]
    assert req["prompt_tokens"].min() <= per_request <= req["prompt_tokens"].max()
    assert step["e2e"]["count"] == 12 and step["ttft"]["count"] == 0 and step["ttft"]["p50"] is None
    assert "items/s" in result.stdout and "n/a" in result.stdout
    analyzed = loadlab("analyze", str(out))
    assert analyzed.returncode == 0, analyzed.stderr[-2000:]
    html = tmp_path / "report.html"
    reported = loadlab("report", str(out), "-o", str(html), timeout=120)
    assert reported.returncode == 0, reported.stderr[-2000:]
    assert "items/s" in html.read_text() and "n/a" in html.read_text()
