"""`loadlab sweep`, `loadlab plan` and `loadlab diagnose` end to end against the mock (short steps),
and their bad input: one line, exit code 2."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from loadlab.store.reader import load_run
from tests.support.mock_load import mock_server
from tests.support.procs import loadlab
from tests.support.reference_server import start_server
from tests.support.runs import write_drawn_run
from tests.support.traces import write_burstgpt

# On the shared 2-core test machine the client's self-check may flag event-loop lag; these tests
# are about the stepping, so they tell the sweep not to stop on it (the SLO setting of the gate).
NOT_ON_CLIENT = "client_limited=any"


def read(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def test_a_sweep_doubles_to_max_in_one_run_folder_analyzed_at_the_end(tmp_path):
    out = tmp_path / "run"
    with mock_server("--ttft", "0.02", "--itl", "0.01", "--output-len", "8") as (url, _):
        result = loadlab(
            "sweep",
            "--url",
            url,
            "--max",
            "4",
            "--step-duration",
            "2",
            "--output-len",
            "8",
            "--slo",
            NOT_ON_CLIENT,
            "--no-gpu",
            "--out",
            str(out),
            timeout=180,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    # What the stop rules guarantee under any scheduling: a busy host may flatten the mock's
    # throughput at 4 users (past the knee), and then the sweep bisects (1, 2, 4, 3).
    sweep, analysis = read(out, "sweep.json"), read(out, "analysis.json")
    labels = [s["label"] for s in read(out, "run.json")["steps"]]
    assert labels == [s["label"] for s in sweep["steps"]] == [s["label"] for s in analysis["steps"]]
    targets = [s["target"] for s in sweep["steps"]]
    assert targets[:2] == [1, 2] and all(s["judged"] for s in sweep["steps"])  # doubling from 1
    bad = [s["target"] for s in sweep["steps"] if s["bad"]]
    if sweep["stop"] == "max":
        assert targets == [1, 2, 4] and not bad and sweep["good_step"] == 2
        assert "sweep stopped (max): reached --max 4" in result.stdout
    else:  # past the knee: bisected until the lowest bad load is within one user of the highest good
        assert sweep["stop"] == "knee" and all(s["bad"] in ("", "knee") for s in sweep["steps"])
        good = max(t for t, s in zip(targets, sweep["steps"], strict=True) if not s["bad"] and t < min(bad))
        assert min(bad) - good <= 1 and len(targets) <= 4
    # One knee: the sweep's is the analyzer's.
    assert sweep["knee_step"] == analysis["overall"]["knee_step"]
    assert "bottleneck analysis" in result.stdout
    # Between steps the sweep pauses: nothing is sent after a step's end while it decides, and
    # what was in flight finished (none aborted).
    from loadlab.store.reader import load_run

    run = load_run(out)
    ends = {s.index: s.end_time for s in run.meta.steps}
    late = run.requests[run.requests["send_time"] > run.requests["step"].map(ends)]
    assert late.empty, late[["step", "send_time"]]
    assert (run.requests["error"].fillna("") != "aborted").all()


def test_a_sweep_against_an_endpoint_slower_than_its_steps_judges_nothing_and_plan_refuses(tmp_path):
    # Each answer takes ~2 s and a step 1 s: a step finishes (in its drain) one or two requests,
    # none or one of them in its steady-state window. Such a step is neither good nor bad: the
    # sweep runs it again twice as long, up to 4 x --step-duration, then stops saying why.
    out = tmp_path / "run"
    with mock_server("--ttft", "2", "--itl", "0.01", "--output-len", "8") as (url, _):
        result = loadlab(
            "sweep",
            "--url",
            url,
            "--step-duration",
            "1",
            "--max",
            "8",
            "--output-len",
            "8",
            "--slo",
            NOT_ON_CLIENT,
            "--no-gpu",
            "--out",
            str(out),
            timeout=240,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    sweep = read(out, "sweep.json")
    assert sweep["stop"] == "too-few-requests" and sweep["good_step"] is None and sweep["knee_step"] is None
    assert [(s["target"], s["seconds"], s["judged"], s["bad"]) for s in sweep["steps"]] == [
        (1, 1, False, ""),
        (1, 2, False, ""),
        (1, 4, False, ""),
    ]
    assert "rerun with a longer --step-duration" in result.stdout
    assert "highest good load" not in result.stdout and "good:" not in result.stdout
    # The analyzer says the same of every step, by the same rule.
    steps = read(out, "analysis.json")["steps"]
    assert all(s["constraint"] == "insufficient_data" and "are needed to judge it" in s["headline"] for s in steps)
    # ... and plan refuses to size from them: one line, exit 2.
    plan = loadlab("plan", str(out), "--users", "10")
    assert plan.returncode == 2 and "Traceback" not in plan.stderr
    lines = plan.stderr.strip().splitlines()
    assert len(lines) == 1 and "no closed-loop step measured enough to plan from" in lines[0], plan.stderr


# A sweep's own work between steps (reading the step back and judging it) and its start-up, on a
# busy 2-core host: generous, and still far below the old wait for requests in flight.
SWEEP_SLACK_S = 60.0


def test_a_step_ends_within_its_grace_and_cuts_off_what_is_still_in_flight(tmp_path):
    # Each answer takes 100 s, a step 1 s (rerun at 2 and 4 s: too short to judge). Each step's
    # request gets the grace (2 s: step_grace) and is then cut off: recorded as aborted, never
    # a failure. Before, every step's end waited for it (up to --timeout): > 300 s here.
    out = tmp_path / "run"
    with mock_server("--ttft", "100", "--itl", "0.01", "--output-len", "8") as (url, _):
        started = time.monotonic()
        result = loadlab(
            "sweep",
            "--url",
            url,
            "--step-duration",
            "1",
            "--max",
            "2",
            "--output-len",
            "8",
            "--slo",
            NOT_ON_CLIENT,
            "--no-gpu",
            "--out",
            str(out),
            timeout=200,
        )
        wall = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-2000:]
    sweep = read(out, "sweep.json")
    steps = sweep["steps"]
    assert sweep["stop"] == "too-few-requests" and [s["seconds"] for s in steps] == [1, 2, 4]
    grace = 2.0  # each step's: STEP_GRACE_MIN_S
    budget = sum(s["seconds"] for s in steps) + grace * len(steps)
    assert wall < budget + SWEEP_SLACK_S, f"the sweep took {wall:.0f} s for a budget of {budget:.0f} s"
    # Each step's one request was cut off at its step's end plus the grace, counted apart.
    from loadlab.store.reader import load_run

    run = load_run(out)
    ends = {s.index: s.end_time for s in run.meta.steps}
    requests = run.requests
    assert len(requests) == len(steps) and (requests["error"] == "aborted").all()
    for _, r in requests.iterrows():
        label = steps[r["step"]]["label"]
        assert r["error_detail"] == f"cut off 2 s after the end of step {label} (the step's grace)"
        assert grace - 0.1 <= r["end_time"] - ends[r["step"]] <= grace + 5.0
    assert [s["aborted"] for s in steps] == [1, 1, 1] and not any(s["bad"] for s in steps)
    assert "+1 cut off" in result.stdout
    warnings = read(out, "run.json")["warnings"]
    assert sum("were cut off (recorded as aborted, not as failures)" in w for w in warnings) == len(steps)
    # The next step started once the one before was cut off, not after the request's 100 s.
    starts = [s.start_time for s in run.meta.steps]
    for before, after in zip(run.meta.steps, starts[1:], strict=False):
        assert after - before.end_time < grace + SWEEP_SLACK_S / 2


CONTEXT_DELAY_MAX_S = 1.0


def test_a_sweep_with_two_load_generator_processes_pauses_them_between_steps(tmp_path):
    out = tmp_path / "run"
    with mock_server("--ttft", "0.02", "--itl", "0.01", "--output-len", "8") as (url, _):
        result = loadlab(
            "sweep",
            "--url",
            url,
            "--max",
            "4",
            "--step-duration",
            "2",
            "--output-len",
            "8",
            "--processes",
            "2",
            "--slo",
            NOT_ON_CLIENT,
            "--no-gpu",
            "--out",
            str(out),
            timeout=180,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    assert read(out, "sweep.json")["stop"] == "max"
    from loadlab.store.reader import load_run

    run = load_run(out)
    ends = {s.index: s.end_time for s in run.meta.steps}
    # A worker learns of the pause from the master's next message (docs/distributed.md): tens of
    # ms, a few hundred on a loaded host; never the whole pause between steps.
    assert (run.requests["send_time"] <= run.requests["step"].map(ends) + CONTEXT_DELAY_MAX_S).all()
    assert run.requests["worker"].nunique() == 2


def test_rate_auto_sweeps_the_open_loop_rate(tmp_path):
    out = tmp_path / "run"
    with mock_server("--ttft", "0.02", "--itl", "0.01", "--output-len", "8") as (url, _):
        result = loadlab(
            "sweep",
            "--url",
            url,
            "--rate",
            "auto",
            "--start",
            "2",
            "--max",
            "4",
            "--step-duration",
            "3",
            "--output-len",
            "8",
            "--slo",
            NOT_ON_CLIENT,
            "--no-gpu",
            "--out",
            str(out),
            timeout=120,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    steps = read(out, "run.json")["steps"]
    assert [(s["label"], s["mode"]) for s in steps] == [("rate=2", "open"), ("rate=4", "open")]
    assert read(out, "sweep.json")["stop"] == "max"
    assert all(s["succeeded"] > 0 for s in read(out, "summary.json")["steps"])


def test_a_sweep_stops_at_the_lowest_load_when_requests_fail(tmp_path):
    out = tmp_path / "run"
    with mock_server("--ttft", "0.02", "--itl", "0.01", "--output-len", "8", "--error-rate", "0.3") as (url, _):
        result = loadlab(
            "sweep",
            "--url",
            url,
            "--step-duration",
            "3",
            "--output-len",
            "8",
            "--slo",
            NOT_ON_CLIENT,
            "--no-gpu",
            "--out",
            str(out),
            timeout=120,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    sweep = read(out, "sweep.json")
    assert sweep["stop"] == "errors" and sweep["good_step"] is None and len(sweep["steps"]) == 1
    assert "of requests failed at concurrency=1 (> 1 %)" in result.stdout


def test_an_slo_breach_stops_the_sweep(tmp_path):
    out = tmp_path / "run"
    with mock_server("--ttft", "0.05", "--itl", "0.01", "--output-len", "8") as (url, _):
        result = loadlab(
            "sweep",
            "--url",
            url,
            "--step-duration",
            "2",
            "--output-len",
            "8",
            "--max",
            "8",
            "--slo",
            f"ttft_p50=10ms,{NOT_ON_CLIENT}",
            "--no-gpu",
            "--out",
            str(out),
            timeout=120,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    assert read(out, "sweep.json")["stop"] == "slo"
    assert "SLO breached at concurrency=1: ttft_p50=10ms measured" in result.stdout


def test_a_sweep_sends_embeddings_with_the_workload_flags_run_has(tmp_path):
    """The workload flags are `loadlab run`'s: a sweep of /v1/embeddings requests of 4 inputs each,
    against the reference server's real model, judged by the sweep's rules to its end."""
    out = tmp_path / "run"
    with start_server(tmp_path / "server.log") as server:
        result = loadlab(
            "sweep", "--url", server.url, "--api", "embeddings", "--items", "4", "--input-len", "uniform:10:40",
            "--max", "4", "--step-duration", "3", "--slo", NOT_ON_CLIENT, "--no-gpu", "--out", str(out), timeout=240,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "api embeddings" in result.stderr and "Traceback" not in result.stderr
    sweep, req = read(out, "sweep.json"), load_run(out).requests
    assert sweep["stop"] in ("max", "knee", "errors", "too-few-requests", "max-steps"), sweep
    assert [s["target"] for s in sweep["steps"]][:2] == [1, 2] and len(req) > 0
    assert (req["api"] == "embeddings").all() and (req["items"] == 4).all()
    ok = req[req["error"] == ""]
    assert len(ok) > 0 and (ok["prompt_tokens"] >= 4 * 10).all() and (ok["completion_tokens"] == 0).all()


def test_a_sweep_takes_a_traces_lengths_and_not_its_clock(tmp_path):
    rows = [(i * 0.5, 20 + i, 2 + i % 3) for i in range(8)]
    trace = write_burstgpt(tmp_path / "BurstGPT_1.csv", rows)
    out = tmp_path / "run"
    with mock_server("--ttft", "0.02", "--itl", "0.01") as (url, _):
        result = loadlab(
            "sweep", "--url", url, "--trace", str(trace), "--max", "2", "--step-duration", "2",
            "--slo", NOT_ON_CLIENT, "--no-gpu", "--out", str(out), timeout=180,
        )  # fmt: skip
        clocked = loadlab("sweep", "--url", url, "--trace", str(trace), "--trace-speed", "2", timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    run = load_run(out)
    assert [s.label for s in run.meta.steps][:2] == ["concurrency=1", "concurrency=2"]  # the sweep's load
    lengths = set(zip(run.requests["input_tokens"], run.requests["max_tokens"], strict=True))
    assert lengths <= {(tokens_in, tokens_out) for _, tokens_in, tokens_out in rows} and len(lengths) > 1
    assert clocked.returncode == 2 and clocked.stderr.count("\n") == 1, clocked.stderr
    assert clocked.stderr.startswith("error: --trace-speed sets a trace's clock, which a sweep does not keep")


def test_diagnose_sweeps_analyzes_and_writes_the_report(tmp_path):
    out, report = tmp_path / "run", tmp_path / "r" / "diag.html"
    with mock_server("--ttft", "0.02", "--itl", "0.01", "--output-len", "8") as (url, _):
        result = loadlab(
            "diagnose",
            url,
            "--max",
            "2",
            "--step-duration",
            "2",
            "--output-len",
            "8",
            "--slo",
            NOT_ON_CLIENT,
            "--out",
            str(out),
            "--report",
            str(report),
            timeout=240,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (out / "analysis.json").exists() and report.exists() and report.stat().st_size > 10_000
    assert f"report: {report}" in result.stdout and "verdict: " in result.stdout
    assert "collector server: " in result.stdout and "samples" in result.stdout  # /metrics answered


def test_plan_reads_a_concurrency_curve(tmp_path):
    write_drawn_run(tmp_path / "run", seed=1, targets=(1, 2, 4), n=60)
    result = loadlab("plan", str(tmp_path / "run"), "--users", "10", "--think-time", "2", "--slo", "ttft_p99=2s")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "10 users with 2 s think time keep ~" in result.stdout
    assert "ttft_p99=2s" in result.stdout and "measured curve" in result.stdout
    # per-request objectives alone plan nothing: the plan says how to use them
    goodput = loadlab("plan", str(tmp_path / "run"), "--users", "10", "--slo", "ttft=500")
    assert goodput.returncode == 0 and "add e.g. goodput=95%" in goodput.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("sweep", "--url", "http://127.0.0.1:9", "--max", "3.5"), "--max must be a whole number"),
        (("sweep", "--url", "http://127.0.0.1:9", "--rate", "5"), "--rate takes 'auto'"),
        (("sweep", "--url", "http://127.0.0.1:9", "--step-duration", "0"), "--step-duration must be"),
        (("sweep", "--url", "http://127.0.0.1:9", "--slo", "ttft_p99=fast"), "bad SLO"),
        (("plan", "no-such-folder", "--users", "10"), "no-such-folder"),
        (("plan", ".", "--users", "0"), "--users must be >= 1"),
        (("plan", ".", "--users", "5", "--think-time", "soon"), "think"),
        (("diagnose", "not a url", "--max", "2"), "url"),
        (("sweep", "--url", "http://127.0.0.1:9", "--api", "rerank", "--workload", "tools"), "api rerank draws"),
        (("sweep", "--url", "http://127.0.0.1:9", "--images", "1", "--image-size", "12"), "image"),
        (("diagnose", "http://127.0.0.1:9", "--trace", "t.csv", "--workload", "multiturn"), "--trace replays"),
        (("diagnose", "http://127.0.0.1:9", "--workload", "trace", "--trace-speed", "3"), "trace file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = loadlab(*args, timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message.lower() in lines[0].lower(), result.stderr
    assert "Traceback" not in result.stderr


def test_plan_of_an_open_loop_run_says_it_needs_a_concurrency_sweep(tmp_path):
    from tests.support.runs import three_requests, write_run

    write_run(tmp_path, lambda t0: (three_requests(t0), []), mode="open")
    result = loadlab("plan", str(tmp_path), "--users", "10")
    assert result.returncode == 2 and "concurrency sweep" in result.stderr and "Traceback" not in result.stderr


def test_a_sweep_its_own_errors_rule_stopped_exits_0(tmp_path):
    # 80 % of requests fail: fewer than the 20 the run's error budget waits for in a 2 s step, so
    # the sweep's own rule (> 1 %) stops it; the budget, judged over the step at the run's end,
    # must not turn the sweep's own stop into the run's exit 3 (docs/sweep.md: 0).
    out = tmp_path / "run"
    with mock_server("--ttft", "0.3", "--itl", "0.01", "--error-rate", "0.8", "--error-codes", "500") as (url, _):
        result = loadlab(
            "sweep", "--url", url, "--step-duration", "2", "--max", "2", "--output-len", "4",
            "--slo", NOT_ON_CLIENT, "--no-gpu", "--out", str(out), timeout=120,
        )  # fmt: skip
    sweep = read(out, "sweep.json")
    assert sweep["stop"] == "errors" and len(sweep["steps"]) == 1, sweep
    assert result.returncode == 0 and "error:" not in result.stderr, result.stderr[-2000:]


def test_plan_says_whether_per_user_speed_rose_or_fell(tmp_path):
    write_drawn_run(tmp_path / "rose", seed=1, targets=(1, 2), n=60, slower=(1.25, 0.8))
    rose = loadlab("plan", str(tmp_path / "rose"), "--users", "4")
    assert rose.returncode == 0, rose.stderr[-2000:]
    assert "per-user speed rose from" in rose.stdout and "fell" not in rose.stdout
    write_drawn_run(tmp_path / "fell", seed=1, targets=(1, 2), n=60, slower=(0.8, 1.25))
    assert "per-user speed fell from" in loadlab("plan", str(tmp_path / "fell"), "--users", "4").stdout


def test_plan_for_an_absurd_number_of_users_says_what_the_figure_rests_on(tmp_path):
    write_drawn_run(tmp_path / "run", seed=1, targets=(1, 2, 4), n=60)
    result = loadlab("plan", str(tmp_path / "run"), "--users", str(10**12))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "1,000,000,000,000 users" in result.stdout and "nothing here measured" in result.stdout
    assert "nothing here measured" not in loadlab("plan", str(tmp_path / "run"), "--users", "10").stdout


def test_plan_leaves_out_a_step_whose_throughput_measured_nothing(tmp_path):
    from loadlab.clock import process_anchor
    from loadlab.config import RunConfig
    from loadlab.store.run_folder import RunWriter
    from loadlab.store.schema import StepInfo
    from tests.support.records import req
    from tests.support.runs import DRAWN_EVERY, drawn_records

    # Two steady steps, then 16 users whose requests were all sent within 0.15 s and ended 1 s
    # later: nothing ended in that step's steady window, so it has no throughput to plan on.
    writer = RunWriter(tmp_path / "run", RunConfig(url="http://127.0.0.1:1", concurrency=[1, 2, 16]), process_anchor())
    start = writer.meta.started_at
    for index, target in enumerate((1, 2)):
        writer.begin_step(StepInfo(index, f"concurrency={target}", "closed", target, start))
        writer.add_requests(drawn_records(start, 1 + index, 60, step=index))
        writer.end_step(index, start + 60 * DRAWN_EVERY)
        start += 60 * DRAWN_EVERY
    writer.begin_step(StepInfo(2, "concurrency=16", "closed", 16, start))
    sent = [start + i * 0.01 for i in range(16)]
    writer.add_requests(
        [req(i, t, [t + 0.5, t + 0.9], t + 1.0, step=2, request_id=f"b{i}") for i, t in enumerate(sent)]
    )
    writer.end_step(2, start + 1.2)
    writer.close()
    result = loadlab("plan", str(tmp_path / "run"), "--users", "10")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "not planned on: concurrency=16 (no rate measured: no request ended in the steady window" in result.stderr
    rows = [line.split("│")[1].strip() for line in result.stdout.splitlines() if line.startswith("│")]
    assert rows == ["1", "2"]  # the measured curve's concurrencies: 16 is not a point of it


@pytest.mark.parametrize(
    "args, message",
    [
        (("plan", ".", "--users", "5", "--think-time", "uniform:a:2"), "--think-time: bad duration distribution"),
        (("plan", ".", "--users", "5", "--slo", ""), "empty SLO"),
        (("gate", ".", "--slo", ""), "empty SLO"),
    ],
)
def test_bad_think_time_or_slo_is_named_for_what_it_is(args, message):
    result = loadlab(*args, timeout=60)
    assert result.returncode == 2 and result.stderr.startswith(f"error: {message}"), result.stderr
