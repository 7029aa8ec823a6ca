"""LiveStats, the one live counter: the web UI's LLM numbers are exact percentiles over every record
received, and the status line's counts are the summary's."""

from __future__ import annotations

import math
import random

import numpy as np

from loadlab.analyze.summary import summarize
from loadlab.clock import now
from loadlab.conductor.livestats import RATE_WINDOW_S, LiveStats, request_latencies
from loadlab.store.schema import RequestRecord
from tests.support.records import closed
from tests.support.runs import run_of


def record(
    i: int, start: float, ttft: float, gaps: list[float], *, error: str = "", warmup: bool = False, queued: float = 0.0
) -> RequestRecord:
    """A request scheduled at `start`, sent `queued` s later, first token `ttft` after sending."""
    send = start + queued
    times = [send + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestRecord(
        request_id=f"r{i}",
        worker="w",
        step=0,
        warmup=warmup,
        api="chat",
        scheduled_time=start,
        send_time=send,
        first_token_time=times[0],
        end_time=times[-1],
        token_times=times,
        completion_tokens=len(times),
        client_tokens=len(times),
        error=error,
    )


def test_percentiles_are_exact_over_all_records_of_all_workers():
    rng = random.Random(7)
    t = now() - 5
    records = [
        record(i, t + i * 0.01, rng.uniform(0.02, 0.4), [rng.uniform(0.005, 0.05) for _ in range(rng.randint(1, 30))])
        for i in range(300)
    ]
    live = LiveStats(open_loop=False)
    for r in records:
        live.add(r)
    snap = live.snapshot()

    ttft = [r.first_token_time - r.send_time for r in records]
    itl = [g for r in records for g in np.diff(r.token_times)]
    e2e = [r.end_time - r.send_time for r in records]
    tpot = [(r.end_time - r.first_token_time) / (r.completion_tokens - 1) for r in records]
    for name, values in (("ttft", ttft), ("itl", itl), ("e2e", e2e), ("tpot", tpot)):
        got = snap["latency_ms"][name]
        assert got["count"] == len(values)
        for q in (50, 90, 99):
            assert math.isclose(got[f"p{q}"], np.percentile(values, q) * 1000, rel_tol=1e-9), (name, q)


def test_open_loop_ttft_counts_from_the_scheduled_time():
    r = record(0, start=100.0, ttft=0.1, gaps=[0.02], queued=0.5)
    assert math.isclose(request_latencies(r, open_loop=True).ttft, 0.6)
    assert math.isclose(request_latencies(r, open_loop=False).ttft, 0.1)


def test_failures_are_counted_by_category_and_kept_out_of_latencies():
    t = now()
    live = LiveStats(open_loop=False)
    live.add(record(0, t - 1, 0.1, [0.02]))
    live.add(record(1, t - 1, 0.1, [0.02], error="http_5xx"))
    live.add(record(2, t - 1, 0.1, [0.02], error="http_5xx"))
    live.add(record(3, t - 1, 0.1, [0.02], error="timeout"))
    live.add(record(4, t - 1, 9.0, [0.02], warmup=True))
    live.add(record(5, t - 1, 0.1, [0.02], error="aborted"))  # cut off by a stop: no failure
    snap = live.snapshot()
    assert snap["requests_ok"] == 1 and snap["requests_failed"] == 3 and snap["requests_aborted"] == 1
    assert snap["errors"] == {"http_5xx": 2, "timeout": 1}
    assert snap["latency_ms"]["ttft"]["count"] == 1  # neither the failures nor the warm-up


def test_throughput_counts_requests_that_ended_in_the_window():
    t = now()
    live = LiveStats(open_loop=False, in_flight=lambda: 7)
    live.add(record(0, t - 2, 0.1, [0.1] * 9))  # 10 tokens, ended ~1 s ago
    live.add(record(1, t - 3, 0.1, [0.1] * 4))  # 5 tokens
    live.add(record(2, t - RATE_WINDOW_S - 5, 0.1, [0.1] * 19))  # ended long before the window
    snap = live.snapshot()
    assert math.isclose(snap["output_tokens_per_s"], 15 / RATE_WINDOW_S)
    assert math.isclose(snap["requests_per_s"], 2 / RATE_WINDOW_S)
    assert snap["in_flight"] == 7


def test_empty_stats_are_null_not_nan_and_reset_forgets():
    live = LiveStats(open_loop=True)
    assert live.snapshot()["latency_ms"]["ttft"] == {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None}
    live.add(record(0, now() - 1, 0.1, [0.02]))
    live.reset()
    assert live.snapshot()["requests_ok"] == 0


def test_the_live_counts_are_the_summarys():
    """The status line's done / errors / tokens count what the summary counts: warm-up requests
    and requests aborted by a stop are not done (the old status-line Tally counted both)."""
    t = now() - 5
    records = [
        record(0, t, 0.1, [0.02] * 4),
        record(1, t, 0.1, [0.02] * 9),
        record(2, t, 0.1, [0.02], error="http_5xx"),
        record(3, t, 0.1, [0.02] * 4, warmup=True),
        record(4, t, 0.1, [0.02] * 2, error="aborted"),
    ]
    live = LiveStats(open_loop=False, keep_latencies=False)
    for r in records:
        live.add(r)
    overall = summarize(run_of(records, [closed(2, start=t - 1, end=t + 5)])).overall
    assert (
        (live.done, live.failed, live.output_tokens)
        == (overall.succeeded + overall.failed, overall.failed, overall.output_tokens)
        == (3, 1, 15)
    )
    assert live.snapshot()["latency_ms"]["ttft"]["count"] == 0  # counts only: no percentiles kept


def test_records_out_of_order_count_once_in_the_rate_window():
    """Workers ship records in batches, so a master receives them out of order: an old record
    behind a recent one leaves the window all the same (the old Tally kept it: an overcount)."""
    t = now()
    live = LiveStats(open_loop=False)
    live.add(record(0, t - 2, 0.1, [0.1] * 9))  # 10 tokens, ended ~1 s ago
    live.add(record(1, t - RATE_WINDOW_S - 5, 0.1, [0.1] * 19))  # ended long before the window
    live.add(record(2, t - 3, 0.1, [0.1] * 4))  # 5 tokens
    assert math.isclose(live.recent_rates()[0], 15 / RATE_WINDOW_S)
    assert math.isclose(live.snapshot()["output_tokens_per_s"], 15 / RATE_WINDOW_S)


def test_recent_latencies_are_those_of_the_requests_that_ended_in_the_window():
    t = now()
    live = LiveStats(open_loop=False)
    live.add(record(0, t - RATE_WINDOW_S - 5, 2.0, [0.5] * 3))  # slow, but long ago
    live.add(record(1, t - 2, 0.1, [0.02] * 3))
    live.add(record(2, t - 3, 0.3, [0.04] * 3))
    recent = live.recent_latencies()
    assert recent["ttft"]["count"] == 2 and math.isclose(recent["ttft"]["p50"], 200.0, rel_tol=1e-6)
    assert recent["itl"]["count"] == 6 and math.isclose(recent["itl"]["p50"], 30.0, rel_tol=1e-6)
    assert live.snapshot()["latency_ms"]["ttft"]["count"] == 3  # the table keeps every request
