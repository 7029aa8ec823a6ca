"""analyze_run on hand-built runs: derived quantities, verdicts, the contract of analysis.json,
and bad input (no requests, one request, a step without success, no server metrics, cut off)."""

from __future__ import annotations

import io
import json
import math
import os
from dataclasses import replace

import numpy as np
import pytest
from rich.console import Console

from loadlab.analyze.analysis import (
    CONFIDENT,
    Analysis,
    StepVerdict,
    _overall,
    analyze_run,
    read_analysis,
    write_analysis,
)
from loadlab.analyze.curve import curve_points
from loadlab.analyze.derive import Derived
from loadlab.analyze.measures import measure
from loadlab.analyze.peaks import given
from loadlab.analyze.rules import NEEDS, Evidence, W
from loadlab.analyze.summary import RunSummary, write_summary
from loadlab.analyze.window import Window
from loadlab.collect.signals import canonical_name
from loadlab.gate.checks import INVALID, PASS, gate_run
from loadlab.metrics.slo import parse_slo
from loadlab.metrics.verdicts import AT_KNEE, ENGINE_OVERHEAD, INSUFFICIENT_DATA, UNDER_LOADED
from loadlab.numbers import format_number
from loadlab.report.console import print_summary
from loadlab.report.html.data import build_report_data
from loadlab.report.html.page import render_page, run_sections
from loadlab.report.verdict import print_analysis, verdict_line
from loadlab.store.reader import ANALYSIS_JSON, SUMMARY_JSON, RunFolderError, load_run
from loadlab.store.schema import Sample
from tests.support.records import T, closed, opened, req
from tests.support.runs import DECODE_HEAVY, PREFILL_HEAVY, loaded_run, run_of, vllm_samples, write_run

KV_BOUND = {"kv_usage": 0.97, "requests_waiting": 12, "requests_running": 4}


def test_a_full_kv_cache_with_a_queue_is_kv_capacity_with_its_evidence_and_signals():
    records, samples = loaded_run(gauges=KV_BOUND, counters={"preemptions": 0.0})
    step = analyze_run(run_of(records, [closed(4, T, T + 20)], samples)).steps[0]
    assert step.constraint == "kv_capacity" and step.saturation == "past_knee"
    d = step.derived
    assert d["kv_usage_p90"].value == pytest.approx(0.97) and d["kv_usage_p90"].signals == ["kv_usage"]
    assert d["waiting_mean"].value == 12 and d["preemptions_per_min"].value == 0
    # Little's law: 4 users x 1 s requests -> 4 completed/s x 1 s = 4 in flight.
    assert d["littles_law_concurrency"].value == pytest.approx(4, rel=0.1)
    assert d["decode_share"].value == pytest.approx(0.9)
    assert step.evidence[0].constraint == "kv_capacity" and step.evidence[0].source == "server_metrics"
    assert step.window.how == "from in-flight reaching 4 to the last send"


def test_an_empty_kv_cache_with_a_queue_is_scheduling():
    records, samples = loaded_run(gauges={"kv_usage": 0.02, "requests_waiting": 30, "requests_running": 4})
    assert analyze_run(run_of(records, [closed(4, T, T + 20)], samples)).steps[0].constraint == "scheduling"


def test_a_verdict_below_the_stated_confidence_says_what_is_likely_what_else_and_what_would_decide():
    # A server that exports only its queue gauges (as vLLM on a CPU): the decode share alone
    # points to memory bandwidth, on 40 % of the evidence the class could have had.
    records, samples = loaded_run(gauges={"requests_running": 4, "requests_waiting": 0})
    analysis = analyze_run(run_of(records, [closed(4, T, T + 20)], samples))
    step = analysis.steps[0]
    assert step.constraint == "memory_bandwidth" and step.confidence < CONFIDENT
    # The step-time fit is what separates bandwidth from compute: that is what would decide.
    assert (step.could_be, step.would_decide) == ("compute", NEEDS[W])
    for headline in (step.headline, analysis.overall.headline):
        assert "likely memory bandwidth sets per-token latency" in headline
        assert f"confidence {format_number(step.confidence, 2)} < {CONFIDENT}; it could also be compute" in headline
        assert f"what would decide: {NEEDS[W]}" in headline
    assert verdict_line(step).startswith("Likely: Memory bandwidth sets per-token latency")


def test_a_verdict_at_the_stated_confidence_names_its_constraint_plainly():
    records, samples = loaded_run(gauges=KV_BOUND, counters={"preemptions": 0.0})
    analysis = analyze_run(run_of(records, [closed(4, T, T + 20)], samples))
    step = analysis.steps[0]
    assert step.confidence >= CONFIDENT and (step.could_be, step.would_decide) == ("", "")
    assert step.headline.startswith("KV capacity binds (past knee): ") and "likely" not in step.headline
    assert analysis.overall.headline == "KV capacity binds at concurrency=4 (past knee)"
    assert verdict_line(step).startswith("KV capacity binds: KV 97 %")


def test_no_server_metrics_is_insufficient_data_naming_the_collectors():
    records, _ = loaded_run()
    step = analyze_run(run_of(records, [closed(4, T, T + 20)])).steps[0]
    assert step.constraint == "insufficient_data" and "no server metrics" in step.headline
    assert any("--server-metrics" in m for m in step.missing)


def test_one_request_is_insufficient_data():
    analysis = analyze_run(run_of([req(0, T, [T + 0.1, T + 0.2])], [closed(1, T, T + 1)]))
    assert analysis.steps[0].constraint == "insufficient_data"
    assert "only 1 successful request(s) in the step: at least 5" in analysis.steps[0].headline
    assert analysis.overall.constraint == "insufficient_data"


def test_a_step_without_a_successful_request_says_why():
    records, samples = loaded_run(gauges=KV_BOUND)
    failed = [req(900000 + i, T + 30 + i, [], error="http_429", step=1) for i in range(6)]
    analysis = analyze_run(
        run_of(records + failed, [closed(4, T, T + 20), closed(8, T + 30, T + 40, index=1)], samples)
    )
    second = analysis.steps[1]
    assert (
        second.constraint == "insufficient_data"
        and second.headline == "no successful request in this step (6 http_429)"
    )
    assert second.saturation == "overloaded"  # every request refused
    assert analysis.steps[0].constraint == "kv_capacity"


def test_a_step_whose_requests_all_failed_client_side_has_no_saturation():
    records, samples = loaded_run(gauges=KV_BOUND)
    failed = [req(900000 + i, T + 30 + i, [], error="client_error", step=1) for i in range(6)]
    analysis = analyze_run(
        run_of(records + failed, [closed(4, T, T + 20), closed(8, T + 30, T + 40, index=1)], samples)
    )
    assert analysis.steps[1].saturation == "unknown" and analysis.steps[1].constraint == "insufficient_data"


def test_a_run_without_any_request_is_insufficient_data():
    analysis = analyze_run(run_of([], []))
    assert [s.constraint for s in analysis.steps] == ["insufficient_data"]
    assert analysis.steps[0].headline == "no request was sent in this step"


def test_a_step_the_client_fell_short_of_is_judged_at_the_load_it_delivered():
    # 2 of 4 users kept in flight (half the load: the line, JUDGE_MIN_DELIVERED); the server's KV
    # pool full but nothing waits. The tokens are the kernel's: the server is judged at 2 users.
    records, samples = loaded_run(users=2, gauges={"kv_usage": 0.97, "requests_waiting": 0, "requests_running": 2})
    samples += [Sample(T + t, "client", "client_loop_lag", 0.05, {"worker": "w"}) for t in range(20)]
    analysis = analyze_run(run_of(records, [closed(4, T, T + 20)], samples))
    step = analysis.steps[0]
    # Under-loaded at what it was given: it names only what sets per-token latency, never KV capacity.
    assert step.constraint in ("memory_bandwidth", "compute", "network") and step.saturation == "under_loaded"
    assert step.client_shortfall.startswith("the load generator fell short (achieved concurrency 2 < ")
    assert step.client_shortfall in step.headline and "nothing else is trusted" not in step.headline
    assert analysis.overall.client_limited and analysis.overall.constraint == step.constraint


def test_a_step_the_client_delivered_under_half_of_is_client_and_nothing_else_is_trusted():
    # 1 of 4 users in flight: too far below its label to say how the server behaves there.
    records, samples = loaded_run(users=1, gauges={"kv_usage": 0.97, "requests_waiting": 0, "requests_running": 1})
    samples += [Sample(T + t, "client", "client_loop_lag", 0.05, {"worker": "w"}) for t in range(20)]
    analysis = analyze_run(run_of(records, [closed(4, T, T + 20)], samples))
    step = analysis.steps[0]
    assert step.constraint == "client" and "nothing else is trusted" in step.headline
    assert "25 % of the load delivered (< 50 %): too far below concurrency=4 to judge" in step.headline
    assert step.saturation == "unknown"  # never judged, never the knee
    assert step.server_side is None or step.server_side.constraint in ("memory_bandwidth", "compute", "network")
    assert analysis.overall.client_limited and analysis.overall.constraint == "client"


def test_a_server_past_its_knee_at_the_delivered_load_keeps_its_verdict_with_the_shortfall_beside_it():
    # 2 of 4 users kept in flight, yet the KV pool is full and 12 requests wait: more load would
    # only have waited longer, so the KV verdict stands.
    records, samples = loaded_run(users=2, gauges=KV_BOUND)
    samples += [Sample(T + t, "client", "client_loop_lag", 0.05, {"worker": "w"}) for t in range(20)]
    analysis = analyze_run(run_of(records, [closed(4, T, T + 20)], samples))
    step = analysis.steps[0]
    assert step.constraint == "kv_capacity" and step.saturation == "past_knee"
    assert step.client_shortfall.startswith("the load generator fell short (achieved concurrency 2 < ")
    assert step.client_shortfall in step.headline and "nothing else is trusted" not in step.headline
    assert "KV cache 97 % full with 12 requests waiting" in step.saturation_reason
    # The summary's check found the load short: the overall flag (the gate's) agrees with it.
    assert analysis.overall.client_limited and analysis.overall.constraint == "kv_capacity"
    assert "fell short at" in analysis.overall.headline


def _client_figures(cpu: float, lag: float, host_busy: float, seconds: int = 20) -> list[Sample]:
    """The self-check's samples of one load-generator process on a 2-core host: its CPU and the
    host's busy cores every second, its event-loop lag every 100 ms."""
    out = []
    for t in range(seconds):
        out += [
            Sample(T + t, "client", "client_cpu", cpu, {"worker": "w"}),
            Sample(T + t, "client", "client_host_cpu", host_busy, {"worker": "w", "cores": "2"}),
        ]
        out += [Sample(T + t + i / 10, "client", "client_loop_lag", lag, {"worker": "w"}) for i in range(10)]
    return out


VLLM_WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"


# As the collector stores vLLM's gauge (its signal name), and as runs recorded before it was mapped hold it.
@pytest.mark.parametrize("waiting_by_reason", [canonical_name(VLLM_WAITING_BY_REASON).signal, VLLM_WAITING_BY_REASON])
def test_vllm_at_its_admission_cap_starving_its_client_is_scheduling_with_the_starved_client_beside_it(
    waiting_by_reason,
):
    # Recorded on vLLM 0.32 CPU (`loadlab lab --engine vllm`, scheduling: --max-num-seqs 2 under 16
    # users, 2 cores): 10.2 requests waiting, all for capacity, KV 0.1 %; the starved API server read
    # 0 running in half its scrapes while 2 ran. The client used 0.07 cores, loop lag p99 706 ms,
    # 88 % of the users in flight, the host's 2 cores busy. Before: "compute binds", confidence 0.27.
    extra = []
    for t in range(21):
        labels = {"engine": "0"}
        extra += [
            Sample(T + t, "server", "requests_running", 2.0 * (t % 2), labels),
            Sample(T + t, "server", waiting_by_reason, 10.0, {**labels, "reason": "capacity"}),
            Sample(T + t, "server", waiting_by_reason, 0.0, {**labels, "reason": "deferred"}),
            Sample(T + t, "server", "vllm:request_success_total", 0.7 * t, labels),  # unmapped: names the engine
        ]
    records, samples = loaded_run(users=14, gauges={"kv_usage": 0.001, "requests_waiting": 10}, extra=extra)
    run = run_of(
        records,
        [closed(16, T, T + 20)],
        samples + _client_figures(0.07, 0.706, 2.0),
        config={"url": "http://127.0.0.1:8000"},
    )
    step = analyze_run(run).steps[0]
    assert step.constraint == "scheduling" and step.saturation == "past_knee"
    assert "waiting for a seat (KV cache 0.1 % full): running at its cap" in step.saturation_reason
    assert "event-loop lag p99 706 ms (>= 100 ms) with 88 % of the load delivered" in step.client_shortfall
    assert "nothing else is trusted" not in step.headline
    advice = " ".join(step.advice)
    assert "vLLM: raise --max-num-seqs" in advice  # the server's advice first
    assert "starved, not overloaded" in advice and "the server on the same host" in advice
    assert "`taskset -c 1 loadlab run ...`" in advice and "more processes will not help" in advice


def test_token_times_merged_in_late_reads_leave_the_step_to_the_client():
    # 3 of 4 users in flight (a shortfall), and most of each stream's tokens read together: the
    # kernel's time is the latest packet's, so the gaps between them were never measured.
    records, samples = loaded_run(users=3, gauges={"kv_usage": 0.2, "requests_waiting": 0, "requests_running": 3})
    for r in records:
        r.token_times = [r.token_times[0]] * 3 + [r.token_times[-1]] * 7
    samples += _client_figures(0.3, 0.15, 2.0)
    step = analyze_run(run_of(records, [closed(4, T, T + 20)], samples)).steps[0]
    assert step.constraint == "client" and "of the gaps between tokens merged in late reads (> 50 %)" in step.headline


def test_an_open_loop_step_whose_requests_left_in_bursts_is_the_clients():
    # 10 req/s asked, 9 sent, each up to 300 ms late (the mean gap is 100 ms): the arrival process
    # the server saw is not the one asked, whatever the token times.
    records = [
        req(i, T + i * 0.11 + 0.3, [T + i * 0.11 + 0.3 + 0.05 * k for k in range(1, 6)], scheduled=T + i * 0.11)
        for i in range(180)
    ]
    step = analyze_run(run_of(records, [opened(10, T, T + 20)], [])).steps[0]
    assert step.constraint == "client"
    assert "start delay p99 300 ms > the mean gap between arrivals (100 ms)" in step.headline


def test_strain_as_large_as_1500_users_from_one_process_is_judged_at_the_load_it_delivered():
    # Recorded against `loadlab mock` (1 ms per token): loop lag p99 182 ms, 89 % of the users in
    # flight (above the 80 % line), the process near a core; the mock's KV gauge high, nothing
    # waiting. A shortfall with tokens timed by the kernel: the server's verdict stands beside it.
    records, samples = loaded_run(users=89, gauges={"kv_usage": 0.9, "requests_waiting": 0, "requests_running": 89})
    step = analyze_run(run_of(records, [closed(100, T, T + 20)], samples + _client_figures(0.97, 0.182, 1.3))).steps[0]
    assert step.constraint in ("memory_bandwidth", "compute", "network") and step.saturation == "under_loaded"
    assert "event-loop lag p99 182 ms (>= 100 ms) with 89 % of the load delivered" in step.client_shortfall
    assert step.client_shortfall in step.headline and "nothing else is trusted" not in step.headline
    assert step.derived["achieved_concurrency_ratio"].value == pytest.approx(0.89, abs=0.01)
    assert any("own work" in line and "--processes 2" in line for line in step.advice)


def test_an_under_loaded_step_never_names_kv_capacity_or_scheduling():
    # KV usage high (healthy on an engine that pre-allocates), less than one request waiting:
    # under-loaded, so what it names must be able to set per-token latency.
    for gauges in ({"kv_usage": 0.97, "requests_waiting": 0.4}, {"kv_usage": 0.0, "requests_waiting": 0.6}):
        records, samples = loaded_run(gauges={**gauges, "requests_running": 4})
        step = analyze_run(run_of(records, [closed(4, T, T + 20)], samples)).steps[0]
        assert step.saturation == "under_loaded"
        assert step.constraint in ("memory_bandwidth", "compute", "network", "insufficient_data")
        assert "KV capacity" not in step.headline and "scheduling" not in step.headline


def test_loop_lag_with_the_load_delivered_is_a_warning_on_the_server_verdict():
    records, samples = loaded_run(gauges=KV_BOUND, counters={"preemptions": 0.0})
    lagged = samples + [Sample(T + t, "client", "client_loop_lag", 0.05, {"worker": "w"}) for t in range(20)]
    calm = analyze_run(run_of(records, [closed(4, T, T + 20)], samples)).steps[0]
    step = analyze_run(run_of(records, [closed(4, T, T + 20)], lagged)).steps[0]
    assert step.constraint == "kv_capacity" and step.derived["achieved_concurrency_ratio"].value > 0.95
    assert "client under strain: client event-loop lag p99 50 ms (> 10 ms)" in step.headline
    assert step.confidence == pytest.approx(calm.confidence * 0.8)


def test_a_verdict_below_the_stated_confidence_only_for_client_strain_is_decided_by_a_calm_client():
    records, samples = loaded_run(gauges={"kv_usage": 0.85, "requests_waiting": 2, "requests_running": 4})
    lagged = samples + [Sample(T + t, "client", "client_loop_lag", 0.05, {"worker": "w"}) for t in range(20)]
    calm = analyze_run(run_of(records, [closed(4, T, T + 20)], samples)).steps[0]
    step = analyze_run(run_of(records, [closed(4, T, T + 20)], lagged)).steps[0]
    assert calm.constraint == step.constraint == "kv_capacity"
    assert calm.confidence >= CONFIDENT > step.confidence and not calm.would_decide
    assert step.would_decide.startswith("the same load from a load generator not under strain")
    assert step.headline.startswith("likely KV capacity binds") and "what would decide: the same load" in step.headline


def test_a_queue_before_a_busy_engine_below_its_cap_is_compute_not_scheduling():
    # Prefill-heavy at 3 users: 1.33 waiting, running 0..2 (of a 32-seat cap), KV 3 %, engine
    # busy 100 %.
    running = [Sample(T + t, "server", "requests_running", float(t % 3), {"engine": "0"}) for t in range(21)]
    records, samples = loaded_run(
        users=3,
        gauges={"kv_usage": 0.03, "requests_waiting": 1.33},
        counters={"preemptions": 0.0, "step_time_sum": 1.0},
        extra=running,
    )
    step = analyze_run(run_of(records, [closed(3, T, T + 20)], samples)).steps[0]
    assert step.derived["engine_busy"].value == pytest.approx(1.0)
    assert step.derived["running_at_cap"].value == pytest.approx(1 / 2, abs=0.05)
    assert step.constraint != "scheduling"


def queue_before(running: list[float], cap: float | None) -> dict:
    """A step of 16 users with 14 waiting before an idle-looking KV pool (2 %), running as given
    per scrape, the engine busy all along (so only running at its cap can point to admission),
    and the server's configured cap when it exports one."""
    extra = [Sample(T + t, "server", "requests_running", r, {"engine": "0"}) for t, r in enumerate(running)]
    if cap is not None:
        extra += [Sample(T + t, "server", "running_cap", cap, {"engine": "0"}) for t in range(len(running))]
    records, samples = loaded_run(
        users=16,
        gauges={"kv_usage": 0.02, "requests_waiting": 14},
        counters={"preemptions": 0.0, "step_time_sum": 1.0},
        extra=extra,
    )
    step = analyze_run(run_of(records, [closed(16, T, T + 20)], samples)).steps[0]
    return {"constraint": step.constraint, "at_cap": step.derived["running_at_cap"], "evidence": step.evidence}


def test_running_pinned_at_the_configured_cap_is_scheduling_though_it_once_peaked_higher():
    # --max-num-seqs 2, but once 3 ran (a request finishing as the next was admitted, between two
    # scrapes): against the most seen, 2 of 3 would not look pinned.
    step = queue_before([2.0] * 10 + [3.0] + [2.0] * 10, cap=2.0)
    assert step["at_cap"].value == pytest.approx(2.05 / 2, abs=0.01)
    assert step["at_cap"].signals == ["requests_running", "running_cap"]
    assert step["constraint"] == "scheduling"
    row = next(e for e in step["evidence"] if e.constraint == "scheduling" and e.name == "running_at_cap")
    assert row.direction == "for" and "(of the configured cap, 2)" in row.text
    without_cap = queue_before([2.0] * 10 + [3.0] + [2.0] * 10, cap=None)
    assert without_cap["at_cap"].value == pytest.approx(2.05 / 3, abs=0.01)
    assert without_cap["constraint"] != "scheduling"


def test_running_steady_far_below_the_configured_cap_is_not_pinned_at_it():
    # Two requests run all along of a 32-seat cap: the most seen (2) would call them pinned.
    step = queue_before([2.0] * 21, cap=32.0)
    assert step["at_cap"].value == pytest.approx(2 / 32)
    assert step["constraint"] != "scheduling"
    without_cap = queue_before([2.0] * 21, cap=None)
    assert without_cap["at_cap"].value == pytest.approx(1.0)
    assert without_cap["at_cap"].note == "of the most seen, 2: the server exports no cap"
    assert without_cap["constraint"] == "scheduling"


def test_a_step_of_few_long_requests_keeps_its_achieved_concurrency():
    # Two steps of 2 users x 5 requests of 4 s: fewer than the 20 the summary's client flag needs.
    first, _ = loaded_run(users=2, e2e=4.0)
    second, _ = loaded_run(users=2, e2e=4.0, step=1, start=T + 20)
    analysis = analyze_run(run_of(first + second, [closed(2, T, T + 20), closed(2, T + 20, T + 40, index=1)]))
    assert [s.derived["achieved_concurrency_ratio"].value for s in analysis.steps] == pytest.approx([1, 1], abs=0.05)


def test_a_cut_off_run_is_analyzed_and_says_so():
    records, samples = loaded_run(gauges=KV_BOUND)
    analysis = analyze_run(
        run_of(records, [closed(4, T, math.nan)], samples, status="running", config={"duration": 60})
    )
    assert analysis.cut_off and analysis.steps[0].constraint == "kv_capacity"
    assert analysis.notes[-1].startswith("concurrency=4 cut off mid-step: 19 s of 60 s analyzed")


def test_analysis_json_holds_the_contract(tmp_path):
    write_run(tmp_path, lambda t0: loaded_run(start=t0, gauges=KV_BOUND, users=2))
    write_analysis(load_run(tmp_path))
    data = json.loads((tmp_path / ANALYSIS_JSON).read_text())
    assert data["format"] == 1 and data["cut_off"] is False and isinstance(data["notes"], list)
    step = data["steps"][0]
    for key in (
        "index",
        "label",
        "mode",
        "target",
        "window",
        "saturation",
        "constraint",
        "score",
        "confidence",
        "runner_up",
        "headline",
        "evidence",
        "advice",
        "missing",
        "derived",
    ):
        assert key in step, key
    assert set(step["window"]) >= {"start", "end", "seconds", "how"}
    assert set(step["evidence"][0]) >= {
        "constraint",
        "name",
        "value",
        "unit",
        "threshold",
        "direction",
        "weight",
        "source",
        "signals",
        "text",
    }
    assert set(step["derived"]["kv_usage_p90"]) >= {"value", "unit", "signals"}
    assert set(data["overall"]) >= {
        "constraint",
        "saturation",
        "knee_step",
        "client_limited",
        "confidence",
        "headline",
        "advice",
    }
    assert "NaN" not in (tmp_path / ANALYSIS_JSON).read_text()


def test_analysis_json_reads_back_into_the_dataclasses_that_wrote_it(tmp_path):
    write_run(tmp_path, lambda t0: loaded_run(start=t0, gauges=KV_BOUND, users=2))
    written = write_analysis(load_run(tmp_path))
    read = read_analysis(tmp_path)
    assert read is not None and read.to_dict() | {"generated_at": 0} == written.to_dict() | {"generated_at": 0}
    step = read.steps[0]
    assert isinstance(step.window, Window) and isinstance(step.evidence[0], Evidence)
    assert isinstance(step.derived["kv_usage_p90"], Derived) and step.constraint == "kv_capacity"
    # Two vLLM steps: a step-time fit, work estimates against a CPU's peaks, NaN written as null.
    samples = vllm_samples([replace(s, flops=3.3e9, read_bytes=0.9e9) for s in DECODE_HEAVY])
    records = []
    for i, s in enumerate(DECODE_HEAVY):
        records += loaded_run(users=int(s.running), ttft=0.02, e2e=1.0, step=i, start=s.start)[0]
    steps = [closed(s.running, s.start, s.start + 20, index=i) for i, s in enumerate(DECODE_HEAVY)]
    built = analyze_run(run_of(records, steps, samples), device=given(0.1, 10))
    assert built.overall.step_time_fit is not None and "intensity_over_ridge" in built.steps[1].derived
    assert Analysis.from_dict(json.loads(json.dumps(built.to_dict()))).to_dict() == built.to_dict()


def test_a_cpu_servers_calibrated_peak_counts_the_cores_its_process_may_run_on():
    # vLLM pinned to one core of a larger host: its compute peak is one core's, not the host's.
    stretch = replace(DECODE_HEAVY[0], flops=3.3e9, read_bytes=0.9e9)
    records, _ = loaded_run(users=int(stretch.running), ttft=0.02, e2e=1.0, start=stretch.start)
    steps = [closed(stretch.running, stretch.start, stretch.start + 20)]

    def ridge_note(*labels: dict[str, str]) -> str:
        cpu = [Sample(stretch.start + t, "host", "process_cpu", 1.0, dict(x)) for t in range(20) for x in labels]
        step = analyze_run(run_of(records, steps, vllm_samples([stretch]) + cpu)).steps[0]
        return step.derived["intensity_over_ridge"].note

    server = {"role": "server", "pid": "7"}
    pinned, unknown = ridge_note({**server, "cores": "1"}), ridge_note(server)
    assert "on the server's 1 core," in pinned
    assert f"on {os.cpu_count()} cores," in unknown  # not read (an older run): the host's
    ridge = [float(note.split("against a ridge of ")[1].split()[0]) for note in (pinned, unknown)]
    assert ridge[0] == pytest.approx(ridge[1] / os.cpu_count(), rel=0.01)  # the same calibration, scaled
    assert "on the server's 3 cores," in ridge_note({**server, "cores": "3"}, {"role": "client", "cores": "9"})


def test_an_analysis_json_that_is_not_an_analysis_is_one_line_and_an_absent_one_is_none(tmp_path):
    assert read_analysis(tmp_path) is None
    (tmp_path / ANALYSIS_JSON).write_text('{"steps": [3, null], "overall": null}')
    with pytest.raises(RunFolderError, match="analysis.json is not an analysis"):
        read_analysis(tmp_path)
    good = analyze_run(run_of([], [])).to_dict()
    good["steps"][0]["saturation"] = 7
    (tmp_path / ANALYSIS_JSON).write_text(json.dumps(good))
    with pytest.raises(RunFolderError, match=r"steps\[0\]\.saturation is 7, not one of under_loaded"):
        read_analysis(tmp_path)


def test_saturation_compares_steps_by_load_not_by_run_order():
    # A sweep bisects: concurrency 1, 2, 4, then 3. Throughput 10, 20, 20, 20 tokens/s: flat from 2
    # on. Judged by load, 3 is already flat against 2 (past the knee) and 2 is the knee; in run
    # order, 3 would only have had 4 (a higher load) before it.
    records, samples, steps, start = [], [], [], T
    for index, (users, e2e) in enumerate([(1, 1.0), (2, 1.0), (4, 2.0), (3, 1.5)]):
        gauges = {"kv_usage": 0.1, "requests_waiting": 0, "requests_running": users}
        r, s = loaded_run(users=users, seconds=12, e2e=e2e, step=index, start=start, gauges=gauges)
        records += r
        samples += s
        steps.append(closed(users, start, start + 12, index=index))
        start += 20
    analysis = analyze_run(run_of(records, steps, samples))
    by_label = {s.label: s.saturation for s in analysis.steps}
    assert by_label == {
        "concurrency=1": "under_loaded",
        "concurrency=2": "at_knee",
        "concurrency=4": "past_knee",
        "concurrency=3": "past_knee",
    }
    assert analysis.overall.knee_step == 1


def test_gpu_host_collective_and_prefix_cache_quantities_name_their_signals():
    gpu = [
        Sample(T + t / 2, "gpu", name, value, {"gpu": str(g)})
        for t in range(40)
        for g in (0, 1)
        for name, value in (
            ("gpu_util", 1.0),
            ("gpu_sm_active", 0.3),
            ("gpu_dram_active", 0.7),
            ("gpu_tensor_active", 0.1),
            ("gpu_clock_slowdown", float(t % 4 == 0)),
        )
    ]
    host = [Sample(T + t, "host", "process_cpu", 1.5, {"role": "server", "pid": "9"}) for t in range(20)]
    # The prefix-cache counters as the collector stores vLLM's (canonical names): 1000 tokens
    # queried and 250 hit per second.
    counters = {
        "step_time_sum": 0.8,
        "collective_time_sum": 0.2,
        "prefix_cache_queries": 1000,
        "prefix_cache_hits": 250,
    }
    records, samples = loaded_run(
        gauges={"kv_usage": 0.3, "requests_waiting": 0, "requests_running": 4}, counters=counters, extra=gpu + host
    )
    step = analyze_run(run_of(records, [closed(4, T, T + 20)], samples)).steps[0]
    d = step.derived
    assert d["gpu_dram_active"].value == pytest.approx(0.7) and d["gpu_dram_active"].source == "gpu"
    assert d["gpu_clock_slowdown_share"].value == pytest.approx(10 / 39)  # window T..T+19: 39 half-seconds
    assert d["server_cpu"].value == 1.5 and d["server_cpu"].source == "host"
    assert d["engine_busy"].value == pytest.approx(0.8)
    assert d["collective_share"].value == pytest.approx(0.25)
    assert d["prefix_cache_hit_rate"].value == pytest.approx(0.25)
    # DRAM busy, tensor cores idle, decode-heavy: memory bandwidth; GPU clocks slowed in 25 % of samples.
    assert step.constraint == "memory_bandwidth" and step.saturation == "under_loaded"
    assert any("GPU clocks were slowed" in a for a in step.advice)


def test_per_user_speed_and_throughput_are_one_figure_each_in_summary_analysis_gate_and_plan(tmp_path):
    # One user alone for 5 s of fast answers (10 tokens over 0.1 s: 100 tok/s), then two users
    # with slow ones (10 tokens over 0.9 s: 11.1 tok/s). The step's successful requests (the
    # summary's) are mostly fast (10 of 18), p50 100; the steady window (from two in flight to the last
    # send) holds only slow ones, p50 11.1: every stage must give the step's figure, not the window's.
    def content(t0: float) -> tuple[list, list]:
        fast = [req(k, t0 + 0.5 * k, list(t0 + 0.5 * k + np.linspace(0.1, 0.2, 10))) for k in range(10)]
        slow = [
            req(100 + 2 * k + u, t0 + 5 + k, list(t0 + 5 + k + np.linspace(0.1, 1.0, 10)))
            for k in range(4)
            for u in range(2)
        ]
        return fast + slow, []

    folder = tmp_path / "run"
    write_run(folder, content)
    run = load_run(folder)
    write_summary(run)
    write_analysis(run)
    summary = json.loads((folder / SUMMARY_JSON).read_text())["steps"][0]["user_tokens_per_s"]["p50"]
    analysis = json.loads((folder / ANALYSIS_JSON).read_text())["steps"][0]["derived"]
    assert summary == pytest.approx(100, rel=1e-3)
    assert analysis["tokens_per_s_per_user_p50"]["value"] == summary  # also sweep's table
    assert measure(run).steps[0].value("tps_user", "p50") == summary  # the gate's tps_user_p50
    points, _ = curve_points(run, (), None, print)
    assert points[0].user_tps == summary  # loadlab plan's curve
    # Throughput too: the requests that ended in the steady-state window (the slow ones ending
    # at 6, 7 and 8 s, 10 tokens each, over 5..8 s), not every request over the step.
    step = json.loads((folder / SUMMARY_JSON).read_text())["steps"][0]
    assert step["output_tokens_per_s"] == pytest.approx(6 * 10 / 3)
    assert analysis["output_tokens_per_s"]["value"] == pytest.approx(step["output_tokens_per_s"])  # sweep's table
    assert measure(run).steps[0].value("output_tps") == step["output_tokens_per_s"]  # the gate, the report
    assert points[0].output_tps == step["output_tokens_per_s"]  # loadlab plan
    # (Half the users in flight for the first half: the gate's client check is beside the point.)
    assert gate_run(folder, parse_slo("tps_user_p50=99,client_limited=any")).exit_code == 0
    assert gate_run(folder, parse_slo("tps_user_p50=101,client_limited=any")).exit_code == 1


@pytest.mark.parametrize(("users", "limited"), [(2, False), (1, True)])
def test_the_client_limited_verdict_is_one_in_summary_analysis_gate_and_report(tmp_path, users, limited):
    # Event-loop lag p99 50 ms all along. Two users keep the step's target of 2 in flight: strain
    # without an effect, a warning only. One user keeps half of it: client-limited, judged at the
    # load it delivered (here: no server metrics and one step, so no verdict of the server's).
    def content(t0: float) -> tuple[list, list]:
        records, _ = loaded_run(users=users, seconds=12, e2e=0.5, start=t0)
        return records, [Sample(t0 + i / 10, "client", "client_loop_lag", 0.05, {"worker": "w"}) for i in range(120)]

    folder = tmp_path / "run"
    write_run(folder, content)
    run = load_run(folder)
    write_summary(run)
    write_analysis(run)
    summary = RunSummary.from_dict(json.loads((folder / SUMMARY_JSON).read_text()))
    analysis = json.loads((folder / ANALYSIS_JSON).read_text())
    assert summary.client_limited is limited and analysis["overall"]["client_limited"] is limited
    assert analysis["steps"][0]["constraint"] != "client"
    assert bool(analysis["steps"][0]["client_shortfall"]) is limited
    assert summary.client.warnings == ["client event-loop lag p99 50 ms (> 10 ms)"]
    checks = {c.name: c.status for c in gate_run(folder, parse_slo("e2e_p99=10s")).checks}
    expected = INVALID if limited else PASS
    assert checks["not client-limited [x]"] == checks["not client-limited [analysis.json]"] == expected
    # `loadlab summary` and the end of `loadlab run`: the summary, then the verdict panel.
    console = Console(file=io.StringIO(), width=200)
    print_summary(summary, console)
    print_analysis(write_analysis(run), console)
    out = console.file.getvalue()
    assert ("CLIENT-LIMITED" in out) is limited and ("the load generator fell short" in out) is limited
    assert "client under strain: client event-loop lag p99 50 ms" in out
    page = render_page("r", run_sections(build_report_data(run)))
    assert ("The load generator may have limited" in page) is limited
    assert "<b>client-limited</b> " + ("yes" if limited else "no") in page and "Client under strain" in page


@pytest.mark.parametrize(
    ("stretches", "ttft", "flops", "read", "expect"),
    [
        (DECODE_HEAVY, 0.02, 3.3e9, 8e9, "memory_bandwidth"),
        (DECODE_HEAVY, 0.02, 3.3e9, 0.9e9, "engine_overhead"),
        (PREFILL_HEAVY, 0.15, 27e9, 0.1e9, "compute"),
    ],
)
def test_vllm_decode_heavy_and_prefill_heavy_runs_get_different_classes(stretches, ttft, flops, read, expect):
    # No step-time histogram: the phase-time fit, and --enable-mfu-metrics estimates set against
    # a CPU's peaks (0.1 TFLOP/s, 10 GB/s: a ridge of 10 FLOP/byte). Decode steps of a fixed
    # time are memory bandwidth reading 8 GB/s (MBU 0.8), engine overhead reading 0.9 (MBU 0.09).
    samples = vllm_samples([replace(s, flops=flops, read_bytes=read) for s in stretches])
    records = []
    for i, s in enumerate(stretches):
        records += loaded_run(users=int(s.running), ttft=ttft, e2e=ttft + 0.16 if expect == "compute" else 1.0,
                              step=i, start=s.start)[0]  # fmt: skip
    steps = [closed(s.running, s.start, s.start + 20, index=i) for i, s in enumerate(stretches)]
    analysis = analyze_run(run_of(records, steps, samples), device=given(0.1, 10))
    assert [s.constraint for s in analysis.steps] == [expect, expect]
    derived = analysis.steps[1].derived
    assert (derived["intensity_over_ridge"].value < 1) is (expect != "compute")
    assert derived["mbu"].value == pytest.approx(read / 10e9, rel=0.05)
    assert "peaks: given: 0.1 TFLOP/s, 10 GB/s" in derived["mbu"].note
    assert "against a ridge of 10 (given: 0.1 TFLOP/s, 10 GB/s)" in derived["intensity_over_ridge"].note
    assert derived["step_time_fixed_share"].note.startswith("fit: itl + prefill time")


def test_a_steps_mbu_and_mfu_show_with_their_source_in_the_panel_and_the_live_line():
    # The vLLM decode-heavy run of the test above reading 0.9 GB/s of a given 10 GB/s: engine overhead.
    samples = vllm_samples([replace(s, flops=3.3e9, read_bytes=0.9e9) for s in DECODE_HEAVY])
    records = []
    for i, s in enumerate(DECODE_HEAVY):
        records += loaded_run(users=int(s.running), ttft=0.02, e2e=1.0, step=i, start=s.start)[0]
    steps = [closed(s.running, s.start, s.start + 20, index=i) for i, s in enumerate(DECODE_HEAVY)]
    analysis = analyze_run(run_of(records, steps, samples), device=given(0.1, 10))
    step = analysis.steps[-1]
    assert step.constraint == "engine_overhead"
    assert any("a faster device will not help" in a for a in step.advice)  # no engine named by the samples
    line = verdict_line(step)
    assert line.startswith("Engine overhead sets per-token latency (headroom): fixed step") and "MBU 9" in line
    out = io.StringIO()
    print_analysis(analysis, Console(file=out, width=250, color_system=None))
    text = out.getvalue()
    assert "roofline (" in text and "MBU 9" in text and "the engine's own estimates" in text
    assert "peaks: given: 0.1 TFLOP/s, 10 GB/s" in text


def step_verdict(index: int, saturation: str, constraint: str, confidence: float = 0.9) -> StepVerdict:
    """A judged step of a closed-loop sweep at 2**index users, as analyze_run hands it on."""
    users = 2**index
    return StepVerdict(
        index, f"concurrency={users}", "closed", users, Window(T, T + 20, 20, "w"), saturation, "", constraint,
        confidence, confidence, None, "", [], ["try this"] if constraint != INSUFFICIENT_DATA else [], [], {},
    )  # fmt: skip


def test_a_knee_whose_cause_no_class_names_is_said_not_hidden_behind_the_steps_below_it():
    # As a CPU vLLM beside its load generator was seen (2026-12-05): 1-8 users engine overhead with
    # headroom, then throughput +49 %, +50 %, +5 % for each doubling with an empty queue, no class named.
    steps = [step_verdict(i, UNDER_LOADED, ENGINE_OVERHEAD, 0.64) for i in range(4)]
    steps += [step_verdict(i, AT_KNEE, INSUFFICIENT_DATA, 0.0) for i in range(4, 7)]
    overall = _overall(steps, 4, "vLLM", None)
    assert overall.knee_step == 4 and overall.saturation == AT_KNEE
    assert overall.headline == (
        "the knee at concurrency=16, where no class's evidence is strong enough to name what binds; "
        "below it, up to concurrency=8: engine overhead sets per-token latency"
    )
    # a class named beyond the knee is the verdict, the unexplained knee beside it
    steps[5:] = [step_verdict(i, AT_KNEE, "compute", 0.64) for i in (5, 6)]
    overall = _overall(steps, 4, "vLLM", None)
    assert overall.constraint == "compute" and overall.saturation == AT_KNEE
    assert overall.headline == (
        "compute binds at concurrency=32 (at knee); the knee at concurrency=16, where no class's evidence "
        "is strong enough to name what binds"
    )
    # without a knee, the steps below say what they did
    assert _overall(steps[:4], None, "vLLM", None).headline.startswith("under-loaded up to concurrency=8: engine ")
