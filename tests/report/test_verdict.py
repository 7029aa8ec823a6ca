"""print_analysis: the per-step table and the verdict panel in the terminal; the live one-line verdict."""

from __future__ import annotations

import io

from rich.console import Console

from loadlab.analyze.analysis import analyze_run
from loadlab.report.verdict import print_analysis, verdict_line
from loadlab.store.schema import Sample
from tests.support.records import T, closed
from tests.support.runs import loaded_run, run_of


def render(analysis) -> str:
    out = io.StringIO()
    print_analysis(analysis, Console(file=out, width=220, color_system=None))
    return out.getvalue()


def test_a_kv_bound_step_shows_its_figures_evidence_and_knobs():
    vllm = [Sample(T, "server", "vllm:request_success_total", 1.0, {})]  # a raw name: the server is vLLM
    records, samples = loaded_run(gauges={"kv_usage": 0.97, "requests_waiting": 12, "requests_running": 4}, extra=vllm)
    text = render(analyze_run(run_of(records, [closed(4, T, T + 20)], samples)))
    row = next(line for line in text.splitlines() if line.strip().startswith("concurrency=4"))
    assert "past_knee" in row and "kv_capacity" in row and "KV p90 97 %" in row
    assert "verdict: KV capacity · past knee" in text
    assert "+ kv usage p90 97 % >= 80 %  [server_metrics]" in text
    assert "vLLM: raise --gpu-memory-utilization" in text
    assert "window: from in-flight reaching 4 to the last send" in text


def test_insufficient_data_says_what_would_decide_it():
    records, _ = loaded_run()
    text = render(analyze_run(run_of(records, [closed(4, T, T + 20)])))
    assert "verdict: insufficient data" in text and "would decide it better:" in text
    assert "--server-metrics" in text


def test_the_live_line_names_the_class_and_its_figures():
    records, samples = loaded_run(
        gauges={"kv_usage": 0.97, "requests_waiting": 22, "requests_running": 4}, counters={"preemptions": 0.0}
    )
    step = analyze_run(run_of(records, [closed(4, T, T + 20)], samples)).steps[0]
    assert verdict_line(step) == "KV capacity binds: KV 97 %, 22 waiting, 0 preemptions/min"
    lonely = analyze_run(run_of(records, [closed(4, T, T + 20)])).steps[0]
    assert verdict_line(lonely).startswith("Insufficient data: no server metrics")
