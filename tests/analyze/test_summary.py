"""summarize(): the numbers of a run, checked against answers worked out by hand."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from loadlab.analyze.summary import RunSummary, Slo, StepSummary, summarize, write_summary
from loadlab.clock import process_anchor
from loadlab.config import RunConfig
from loadlab.metrics.limits import CLIENT_CPU_P90_MAX
from loadlab.store.reader import load_run
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import Coverage, Sample, StepInfo
from tests.support.records import T, closed, four_users_back_to_back, opened, req
from tests.support.runs import hand_built, run_of


def test_latencies_throughput_and_counts_of_a_closed_loop_step() -> None:
    s = summarize(hand_built()).steps[0]
    assert (s.sent, s.succeeded, s.failed, s.aborted, s.warmup) == (4, 3, 1, 0, 1)
    assert s.errors == {"timeout": 1}
    assert s.window == 10
    assert s.ttft.count == 3 and s.ttft.p50 == pytest.approx(0.2) and s.ttft.mean == pytest.approx(0.2)
    assert s.ttft_from_send.p50 == pytest.approx(0.2)
    # gaps sorted .1 .1 .2 .3: p50 .15, p90 at rank 2.7 -> .27
    assert s.itl.count == 4 and s.itl.p50 == pytest.approx(0.15) and s.itl.p90 == pytest.approx(0.27)
    assert s.tpot.count == 2 and s.tpot.mean == pytest.approx((0.4 / 3 + 0.4) / 2)
    assert (s.e2e.min, s.e2e.max, s.e2e.p50) == pytest.approx((0.3, 0.6, 0.5))
    assert s.user_tokens_per_s.count == 2 and s.user_tokens_per_s.p50 == pytest.approx(7.5)
    assert s.output_tokens == 4 + 2 + 1
    # Rates count the successful requests that ended in the steady-state window (in flight never
    # reaches 2 users: first send 1000 to last send 1003, 3 s): r0 and r1, 4 + 2 tokens. r3
    # ends after the window (in the drain): counting it over the step's seconds inflates them.
    assert (s.completed, s.rate_window) == (2, 3)
    assert s.requests_per_s == pytest.approx(2 / 3) and s.output_tokens_per_s == pytest.approx(6 / 3)
    # Little's law over finished requests (failed included): (0.6 + 0.5 + 1.0 + 0.3) / 10 s
    assert s.achieved == pytest.approx(0.24) and s.achieved_ratio == pytest.approx(0.12)
    assert (s.tokens.usage_missing, s.tokens.usage_mismatch) == (1, 1)
    assert (s.tokens.over_max_tokens, s.tokens.under_max_tokens) == (1, 1)
    assert s.tokens.read_timed == 1
    assert not s.client.limited  # too few requests to judge achieved load
    assert s.goodput is None


def test_open_loop_ttft_counts_from_the_scheduled_time() -> None:
    records = [
        req(i, T + i * 0.2 + 0.05, [T + i * 0.2 + 0.15, T + i * 0.2 + 0.25], scheduled=T + i * 0.2) for i in range(50)
    ]
    s = summarize(run_of(records, [opened(5)])).steps[0]
    assert s.ttft.p50 == pytest.approx(0.15) and s.ttft_from_send.p50 == pytest.approx(0.10)
    assert s.e2e.p50 == pytest.approx(0.25) and s.start_delay.p99 == pytest.approx(0.05)
    assert s.achieved == pytest.approx(5.0) and s.achieved_ratio == pytest.approx(1.0)
    assert s.client.limited and s.client.values["start_delay_p99"] == pytest.approx(0.05)
    assert any("start delay p99 50 ms" in r for r in s.client.reasons)


def test_open_loop_that_falls_short_of_the_requested_rate_is_client_limited() -> None:
    records = [req(i, T + i * 0.5, [T + i * 0.5 + 0.1]) for i in range(20)]
    s = summarize(run_of(records, [opened(5)])).steps[0]
    assert s.achieved == pytest.approx(2.0)
    assert s.client.limited and any("achieved 2 req/s < 0.9" in r for r in s.client.reasons)
    healthy = [req(i, T + i * 0.2 + 0.001, [T + i * 0.2 + 0.1], scheduled=T + i * 0.2) for i in range(50)]
    assert not summarize(run_of(healthy, [opened(5)])).steps[0].client.limited


@pytest.mark.parametrize(
    "users, think_time, limited", [(4, None, False), (8, None, True), (8, {"kind": "fixed", "mean": 1.0}, False)]
)
def test_closed_loop_achieved_concurrency_by_littles_law(users: int, think_time: Any, limited: bool) -> None:
    s = summarize(run_of(four_users_back_to_back(), [closed(users)], config={"think_time": think_time})).steps[0]
    assert s.achieved == pytest.approx(4.0) and s.achieved_ratio == pytest.approx(4 / users)
    assert s.client.limited is limited
    assert any("concurrency 4 < 0.8 × 8 users" in r for r in s.client.reasons) is limited


def test_a_refusing_endpoint_does_not_make_the_client_look_limited() -> None:
    # 2 of 8 users' worth of requests succeed; the rest were refused and their users backed off.
    ok = [req(k, T + k, [T + k + 0.5, T + k + 1.0]) for k in range(10)]
    refused = [req(100 + k, T + k * 0.1, [], T + k * 0.1 + 0.001, error="connect", status=0) for k in range(90)]
    s = summarize(run_of(ok + refused, [closed(8)])).steps[0]
    assert s.achieved < 0.8 * 8 and not s.client.limited


def test_achieved_concurrency_counts_only_the_time_inside_the_step() -> None:
    # 4 users busy for the whole 10 s window, but each one's last request runs 5 s past its end:
    # still 4 in flight on average, not 4 + 4 x 4 s / 10 s (whole durations would say 5.6).
    records = [
        req(u * 10 + k, T + k, [T + k + 0.5, T + k + (5.0 if k == 9 else 1.0)]) for u in range(4) for k in range(10)
    ]
    s = summarize(run_of(records, [closed(4)])).steps[0]
    assert s.achieved == pytest.approx(4.0)


def test_client_cpu_and_loop_lag_inside_the_step_warn_but_do_not_make_it_client_limited() -> None:
    samples = (
        [Sample(T + i, "client", "client_cpu", 0.2, {"worker": "a"}) for i in range(10)]
        + [Sample(T + i, "client", "client_cpu", 0.5 if i < 5 else 0.9, {"worker": "b"}) for i in range(10)]
        + [Sample(T - 5, "client", "client_cpu", 3.0, {"worker": "c"})]  # before the step
        + [Sample(T + i / 10, "client", "client_loop_lag", 0.001 if i < 90 else 0.05) for i in range(100)]
    )
    summary = summarize(run_of(four_users_back_to_back(), [closed(4)], samples))
    s = summary.steps[0]
    # Strain without an effect: the four users stayed in flight, so the figures stand.
    assert not s.client.limited and s.client.reasons == []
    assert s.client.values["client_cpu_p90"] == pytest.approx(0.9) and 0.9 > CLIENT_CPU_P90_MAX
    assert any("process b" in w for w in s.client.warnings)
    assert s.client.values["client_loop_lag_p99"] > 0.010
    assert any("event-loop lag" in w for w in s.client.warnings)
    assert summary.client.warnings == s.client.warnings and not summary.client_limited
    calm = [Sample(T + i, "client", "client_cpu", 0.3, {"worker": "a"}) for i in range(10)]
    assert summarize(run_of(four_users_back_to_back(), [closed(4)], calm)).client.warnings == []


def test_warm_up_requests_are_excluded_and_the_window_starts_after_them() -> None:
    records = [
        req(0, T, [T + 1.9], warmup=True),
        req(1, T, [T + 1.9], warmup=True),
        req(2, T + 2, [T + 2.5]),
        req(3, T + 2, [T + 3.0]),
    ]
    s = summarize(run_of(records, [closed(2, end=T + 12)])).steps[0]
    assert (s.sent, s.warmup, s.window) == (2, 2, 10)
    assert s.ttft.count == 2 and s.ttft.max == pytest.approx(1.0)


def test_a_cut_off_run_without_steps_in_run_json_uses_what_the_records_say() -> None:
    records = [req(0, T, [T + 1]), req(1, T + 1, [T + 4], step=1), req(2, T + 2, [T + 3], step=1)]
    summary = summarize(run_of(records, [], status="running", config={"concurrency": [2, 4]}))
    assert summary.cut_off and summary.status == "running"
    assert [(s.index, s.label, s.mode, s.target) for s in summary.steps] == [
        (0, "concurrency=2", "closed", 2),
        (1, "concurrency=4", "closed", 4),
    ]
    assert summary.steps[1].window == pytest.approx(3.0)  # first start .. last end
    cut = summarize(run_of(records[:1], [StepInfo(0, "c=2", "closed", 2, T)], status="running"))
    assert cut.steps[0].end_time == T + 1 and cut.steps[0].window == pytest.approx(1.0)


def test_aborted_requests_are_not_failures() -> None:
    records = [req(0, T, [T + 1]), req(1, T, [T + 0.5], T + 2, error="aborted")]
    s = summarize(run_of(records, [closed(2)])).steps[0]
    assert (s.sent, s.succeeded, s.failed, s.aborted, s.errors) == (2, 1, 0, 1, {})


def test_goodput_counts_requests_meeting_every_slo() -> None:
    run = hand_built()
    fast = summarize(run, Slo(ttft_ms=150)).steps[0]
    assert fast.slo_met == 1 and fast.goodput == pytest.approx(1 / 3)  # r1, over the 3 s window as requests/s
    assert summarize(run, Slo(itl_ms=250)).steps[0].slo_met == 2  # r0, r3 (no gap)
    both = summarize(run, Slo(ttft_ms=350, itl_ms=250, e2e_ms=550)).steps[0]
    # r3 only, which ended after the steady-state window: goodput counts what requests/s counts
    assert both.slo_met == 1 and both.goodput == 0
    assert summarize(run, Slo(tpot_ms=200)).steps[0].slo_met == 2  # r0, r3


def test_overall_adds_up_the_steps_and_names_them_in_client_reasons() -> None:
    slow = [req(100 + i, T + 10 + i * 0.5, [T + 10 + i * 0.5 + 0.1], step=1) for i in range(20)]
    run = run_of(four_users_back_to_back() + slow, [closed(4), opened(5, T + 10, T + 20, index=1)])
    summary = summarize(run)
    o = summary.overall
    assert (o.index, o.label, o.mode) == (-1, "overall", "mixed")
    assert o.sent == 60 and o.window == 20 and math.isnan(o.achieved)
    assert o.completed == sum(s.completed for s in summary.steps) > 0
    assert o.rate_window == sum(s.rate_window for s in summary.steps)
    assert o.requests_per_s == pytest.approx(o.completed / o.rate_window)
    assert summary.client.limited and summary.client.reasons[0].startswith("rate=5: ")
    assert summary.coverage == [Coverage("server", True, ok_samples=7)]


def test_summary_json_round_trip() -> None:
    summary = summarize(hand_built(), Slo(ttft_ms=300))
    d = json.loads(json.dumps(summary.to_dict(), allow_nan=False))  # NaN written as null
    assert d["client_limited"] is False and d["steps"][0]["ttft"]["unit"] == "s"
    back = RunSummary.from_dict(d)
    assert isinstance(back.steps[0], StepSummary) and back.slo == Slo(ttft_ms=300)
    assert back.to_dict() == summary.to_dict()


def test_write_summary_writes_summary_json_into_the_closed_run_folder(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run", RunConfig(), process_anchor())
    now = time.time()  # within the run the writer opens: the reader leaves out rows far outside it
    writer.add_requests([req(0, now, [now + 0.1, now + 0.2])])
    writer.close(status="interrupted", coverage=[Coverage("gpu", False, error="no NVML")])
    result = write_summary(load_run(tmp_path / "run"), Slo(ttft_ms=300))
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(result.to_dict()))
    assert on_disk["status"] == "interrupted" and on_disk["coverage"][0]["error"] == "no NVML"
    assert on_disk["steps"][0]["slo_met"] == 1


def test_a_run_without_measured_requests_summarizes_to_empty_figures_and_a_warning() -> None:
    summary = summarize(run_of([req(0, T, [T + 1], warmup=True)], [closed(2)]))
    s = summary.overall
    assert (s.sent, s.warmup, s.ttft.count) == (0, 1, 0)
    assert math.isnan(s.requests_per_s) and s.rates_unmeasured  # no rate of 0 over nothing
    assert math.isnan(s.ttft.p50) and not summary.client.limited
    assert any("no measured requests" in w for w in summary.warnings)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 100),
            st.floats(0.001, 5),
            st.lists(st.floats(0.0001, 1), min_size=1, max_size=20),
            st.sampled_from(["", "", "timeout", "aborted"]),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_invariants_on_random_runs(requests: list[tuple[float, float, list[float], str]]) -> None:
    records = []
    for i, (send, ttft, gaps, error) in enumerate(requests):
        tokens = [T + send + ttft]
        for g in gaps[1:]:
            tokens.append(tokens[-1] + g)
        records.append(req(i, T + send, tokens, error=error))
    s = summarize(run_of(records, [closed(4, T, T + 200)])).steps[0]
    ok = [(r, len(r.token_times)) for r in records if r.ok]
    assert s.sent == len(records) == s.succeeded + s.failed + s.aborted
    assert s.itl.count == sum(n - 1 for _, n in ok)
    assert s.tpot.count == sum(1 for _, n in ok if n > 1)
    assert s.output_tokens == sum(n for _, n in ok)
    if ok:
        assert s.ttft.min <= s.ttft.p50 <= s.ttft.p90 <= s.ttft.p99 <= s.ttft.max
        assert s.e2e.min >= s.ttft.min - 1e-9


def test_the_run_folders_warnings_and_status_are_carried_into_the_summary(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    writer = RunWriter(folder, RunConfig(url="http://x", concurrency=[1]), process_anchor())
    writer.add_warning("load-generator process host:7 died")
    writer.close(status="degraded")
    write_summary(load_run(folder))
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "degraded" and "load-generator process host:7 died" in summary["warnings"]


def test_bunched_tokens_are_a_share_not_zero_gaps_in_itl() -> None:
    """Two requests; the second's last three tokens came in one read (one time): 2 of its 4 gaps
    are bunched, left out of ITL, which holds the gaps between reads only."""
    records = [req(0, T, [T + 0.1, T + 0.2, T + 0.3]), req(1, T, [T + 0.1, T + 0.2, T + 0.4, T + 0.4, T + 0.4])]
    s = summarize(run_of(records, [closed()])).steps[0]
    assert s.itl.count == 4 and s.itl.min == pytest.approx(0.1) and s.itl.max == pytest.approx(0.2)
    assert s.itl_bunched == pytest.approx(2 / 6)
    assert RunSummary.from_dict(json.loads(json.dumps(summarize(run_of(records, [closed()])).to_dict()))).steps[
        0
    ].itl_bunched == pytest.approx(2 / 6)
    assert math.isnan(summarize(run_of([req(0, T, [T + 0.1])], [closed()])).steps[0].itl_bunched)


def test_a_rate_over_a_window_in_which_nothing_ended_is_no_figure_and_says_why() -> None:
    # A trace replayed at 1e9x: everything sent within 50 ms, every request ends 0.4 s later.
    # Nothing ended in the steady window (first to last send): a rate of 0 would read as a server
    # that delivered nothing.
    records = [req(i, T + i * 0.01, [T + i * 0.01 + 0.2], T + i * 0.01 + 0.4) for i in range(6)]
    summary = summarize(run_of(records, [opened(1e9)]))
    s = summary.steps[0]
    assert (s.sent, s.succeeded, s.completed) == (6, 6, 0)
    for rate in (s.requests_per_s, s.output_tokens_per_s, s.items_per_s, s.prompt_tokens_per_s):
        assert math.isnan(rate)
    assert s.rates_unmeasured == "no request ended in the steady window (50 ms)"
    assert s.ttft.count == 6  # the latencies were measured: only the rates were not
    assert json.loads(json.dumps(summary.to_dict()))["steps"][0]["requests_per_s"] is None
    assert StepSummary.from_dict(summary.to_dict()["steps"][0]).rates_unmeasured == s.rates_unmeasured


def test_a_rate_over_a_window_shorter_than_the_fastest_request_is_no_figure() -> None:
    # Three users: in flight reaches 3 at +1.01, the last send is at +1.06: a 50 ms window in
    # which r0 (sent 1.05 s before it) ended. 1 request / 50 ms = 20 req/s would be one request's
    # timing, not a rate; the fastest request took 1.05 s.
    records = [
        req(0, T, [T + 0.5], T + 1.05),
        req(1, T + 1.0, [T + 1.5], T + 2.1),
        req(2, T + 1.01, [T + 1.5], T + 2.2),
        req(3, T + 1.06, [T + 1.6], T + 2.3),
    ]
    s = summarize(run_of(records, [closed(3)])).steps[0]
    assert s.completed == 1 and math.isnan(s.requests_per_s) and math.isnan(s.output_tokens_per_s)
    assert s.rates_unmeasured == (
        "the steady window (50 ms) is shorter than the fastest request (1.05 s from send to end): "
        "what ended in it was sent before it"
    )
    # Requests that ended in the window but failed: a measured 0, the errors say why.
    failed = [req(i, T + i * 0.5, [], T + i * 0.5 + 0.1, error="http_5xx") for i in range(10)]
    s = summarize(run_of(failed, [opened(2)])).steps[0]
    assert s.requests_per_s == 0 and not s.rates_unmeasured
