"""The live verdict: the analyzer's own verdict over the last window of a run still going,
bounded buffers, the judge process, and a fault that shows "verdict: unavailable" instead of
ending the run."""

from __future__ import annotations

import io
import logging
import os
import pickle
import signal
import socket
import struct
import sys
import time

import pytest

from loadlab.analyze.analysis import analyze_run
from loadlab.conductor.liveverdict import (
    UNAVAILABLE,
    LiveVerdict,
    LiveWindow,
    answer,
    serve,
    write_message,
)
from loadlab.store.schema import StepInfo
from tests.support.records import T, closed, paced
from tests.support.runs import loaded_run, run_of

KV_BOUND = {"kv_usage": 0.97, "requests_waiting": 22, "requests_running": 4}
LIGHT = {"kv_usage": 0.2, "requests_waiting": 0, "requests_running": 4}
STEP = StepInfo(0, "concurrency=4", "closed", 4, T)


def light_then_kv_bound():
    """60 s of 4 users: the first 30 s with KV to spare, the last 30 s with the KV cache full
    and 22 requests waiting; each half apart (records, samples)."""
    light = loaded_run(seconds=30, gauges=LIGHT, counters={"preemptions": 0.0})
    bound = loaded_run(seconds=30, gauges=KV_BOUND, counters={"preemptions": 0.0}, start=T + 30)
    return light, bound


def window_of(*halves) -> LiveWindow:
    window = LiveWindow()
    for records, samples in halves:
        for r in records:
            window.add_record(r)
        window.add_samples(samples)
    return window


def test_the_live_verdict_is_the_analyzers_on_the_same_window():
    light, bound = light_then_kv_bound()
    live = window_of(light, bound).window(STEP, T + 61)  # requests of 1 s: the window ends 1 s before now
    assert live is not None
    v = live.judge({})
    # The analyzer on a run of just those 30 s, with its own steady window.
    alone = analyze_run(run_of(bound[0], [closed(4, T + 30, T + 60)], bound[1])).steps[0]
    assert v.window.start == pytest.approx(T + 30) and v.window.end == pytest.approx(T + 60)
    assert (v.constraint, v.saturation) == (alone.constraint, alone.saturation) == ("kv_capacity", "past_knee")
    assert v.confidence == pytest.approx(alone.confidence, abs=0.02)
    for name in ("kv_usage_p90", "waiting_mean", "preemptions_per_min"):
        assert v.derived[name].value == pytest.approx(alone.derived[name].value), name
    assert [e.name for e in v.evidence[:3]] == [e.name for e in alone.evidence[:3]]
    assert (
        answer(window_of(light, bound), STEP, T + 61, {}).line
        == "KV capacity binds: KV 97 %, 22 waiting, 0 preemptions/min"
    )


def test_the_window_moves_with_the_run():
    light, bound = light_then_kv_bound()
    early = window_of(light, bound).window(STEP, T + 31)  # judges the light half
    assert early is not None
    v = early.judge({})
    alone = analyze_run(run_of(light[0], [closed(4, T, T + 30)], light[1])).steps[0]
    assert v.constraint == alone.constraint != "kv_capacity"
    assert v.saturation == alone.saturation == "under_loaded"


def test_a_young_step_has_no_verdict_yet():
    light, _ = light_then_kv_bound()
    assert answer(window_of(light), STEP, T + 4, {}).line == ""


def test_buffers_keep_only_the_recent_window():
    window = LiveWindow(seconds=30)
    light, bound = light_then_kv_bound()
    for r in sorted(light[0] + bound[0], key=lambda r: r.end_time):  # records arrive as requests end
        window.add_record(r)
    window.add_samples(light[1] + bound[1])
    window.prune(T + 100)  # a window ends up to 15 s before now and counters need 10 s before it
    assert min(r.end_time for r in window._records) >= T + 30 and len(window._records) >= len(bound[0])
    assert min(row[0] for row in window._samples) >= T + 30
    window.prune(T + 200)
    assert not window._records and not window._samples


def test_a_fault_in_the_analysis_is_an_answer_not_a_crash(monkeypatch):
    _, bound = light_then_kv_bound()

    def broken(*_):
        raise ValueError("a bug in the analysis")

    monkeypatch.setattr("loadlab.conductor.liveverdict.analyze_run", broken)
    inp, out = io.BytesIO(), io.BytesIO()
    write_message(inp, ("add", bound[0], bound[1]))
    write_message(inp, ("judge", STEP, T + 61))
    write_message(inp, ("judge", STEP, T + 62))
    inp.seek(0)
    serve(inp, out)  # returns at the end of its input
    out.seek(0)
    answers = []
    while head := out.read(4):
        answers.append(pickle.loads(out.read(struct.unpack("<I", head)[0])))
    assert [a.line for a in answers] == [UNAVAILABLE, UNAVAILABLE]
    assert "ValueError: a bug in the analysis" in answers[0].error


def poll_until(live: LiveVerdict, done, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        live.poll()
        time.sleep(0.05)


def test_the_judge_process_answers_the_run():
    _, bound = light_then_kv_bound()
    live = LiveVerdict({}, lambda: STEP, lambda: T + 61)
    try:
        for r in bound[0]:
            live.add_record(r)
        live.add_samples(bound[1])
        poll_until(live, lambda: live.line)
        assert live.line == "KV capacity binds: KV 97 %, 22 waiting, 0 preemptions/min"
        assert live.constraint == "kv_capacity" and live.updates == 1 and live.cpu_s > 0
    finally:
        live.close()


def test_the_judge_process_holds_none_of_the_runs_descriptors_and_ignores_ctrl_c():
    # A socket of the run that the judge held open would not close when the run closes it.
    with socket.socket() as run_socket:
        live = LiveVerdict({}, lambda: STEP, lambda: T + 61)
        try:
            judge = live._proc
            assert judge is not None
            pid = judge.pid
            deadline = time.monotonic() + 20
            while len(os.listdir(f"/proc/{pid}/fd")) > 3 and time.monotonic() < deadline:
                time.sleep(0.01)  # (just forked: closing the run's descriptors)
            assert sorted(os.listdir(f"/proc/{pid}/fd")) == ["0", "1", "2"]
            assert run_socket.fileno() >= 0
            os.kill(pid, signal.SIGINT)  # Ctrl-C reaches the whole process group: the run ends it
            time.sleep(0.2)
            assert judge.poll() is None
        finally:
            live.close()
    assert judge.poll() is not None  # ended with the run (by its input's end, or killed after 2 s)


def test_a_judge_process_that_dies_shows_unavailable_and_is_logged_once(caplog):
    with caplog.at_level(logging.WARNING, logger="loadlab"):
        live = LiveVerdict({}, lambda: STEP, lambda: T + 61, command=(sys.executable, "-c", "pass"))
        try:
            poll_until(live, lambda: live.line, 20)
            for _ in range(5):
                assert live.poll() == UNAVAILABLE
        finally:
            live.close()
    assert len([r for r in caplog.records if "live verdict is unavailable" in r.getMessage()]) == 1


def test_a_new_step_clears_the_last_steps_verdict():
    step = [STEP]
    _, bound = light_then_kv_bound()
    live = LiveVerdict({}, lambda: step[0], lambda: T + 61)
    try:
        for r in bound[0]:
            live.add_record(r)
        live.add_samples(bound[1])
        poll_until(live, lambda: live.line)
        assert live.line
        step[0] = StepInfo(1, "concurrency=8", "closed", 8, T + 61)
        assert live.poll() == ""
    finally:
        live.close()


@pytest.mark.serial  # the step's length is chosen for this host's speed, measured just before
def test_a_run_against_a_tiny_kv_pool_shows_the_kv_verdict_appearing(kv_bound):
    result = kv_bound.result
    assert result.returncode == 0, result.stderr[-2000:]
    status = result.stderr[: result.stderr.find("[finished]")]  # the status lines (not a terminal: plain)
    verdicts = [line.strip() for line in status.splitlines() if line.startswith("          ")]
    # Every window of this run binds on KV (kv_bound_run), so every verdict says so. The busy
    # machine may starve the client's event loop: then the line rightly says so first.
    kv = [
        v
        for v in verdicts
        if (v.startswith("KV capacity binds: KV") and "waiting" in v)
        or (v.startswith("The load generator limits") and v.endswith("server-side evidence alone: KV capacity)"))
    ]
    assert kv, f"no KV verdict in a {kv_bound.seconds:.0f} s step:\n{status}"
    assert all(v in kv or v.startswith("Insufficient data") for v in verdicts), status
    assert UNAVAILABLE not in status


def test_a_costly_verdict_comes_less_often(monkeypatch):
    monkeypatch.setattr("loadlab.conductor.liveverdict.MAX_CORE_SHARE", 0.001)  # any verdict is costly
    _, bound = light_then_kv_bound()
    clock = [T + 61]
    live = LiveVerdict({}, lambda: STEP, lambda: clock[0], every=0.01)
    try:
        for r in bound[0]:
            live.add_record(r)
        live.add_samples(bound[1])
        poll_until(live, lambda: live.line)
        clock[0] += 1.0  # past `every`, not past cpu_s / MAX_CORE_SHARE
        for _ in range(20):
            live.poll()
            time.sleep(0.05)
        assert live.updates == 1 and live.cpu_s / 0.001 > 1.0
    finally:
        live.close()


def test_without_server_metrics_the_window_is_read_against_the_lowest_load_before_it():
    window = LiveWindow()
    low, high = StepInfo(0, "concurrency=1", "closed", 1, T, T + 10), StepInfo(1, "concurrency=8", "closed", 8, T + 10)
    for r in paced(0, T, 0.05, 0.02):
        window.add_record(r)
    assert answer(window, low, T + 10, {}).constraint == "insufficient_data"  # no lower load: no curve
    for r in paced(1, T + 10, 0.6, 0.021):
        window.add_record(r)
    reply = answer(window, high, T + 21, {})
    assert reply.constraint == "queueing", reply
    assert "admission cap or KV capacity" in reply.line and "no server metrics" in reply.line
