"""The summary and the analysis name a server page's families when loadlab maps none of them."""

from __future__ import annotations

from loadlab.analyze.analysis import analyze_run
from loadlab.analyze.summary import summarize
from loadlab.store.schema import Sample
from tests.support.records import T, closed, req
from tests.support.runs import run_of


def run_with(samples: list[Sample]):
    recs = [req(i, T + i, [T + i + 0.1, T + i + 0.2]) for i in range(6)]
    return run_of(recs, [closed(2)], samples)


def test_an_unmapped_page_is_named_in_one_line_in_summary_and_analysis():
    page = [
        Sample(T + t, "server", name, 1.0, {})
        for t in (1, 2)
        for name in ("ollama_loaded_models", "ollama_requests_total", "python_info")
    ]
    run = run_with(page)
    lines = [w for w in summarize(run).warnings if "families loadlab does not map" in w]
    assert len(lines) == 1 and "ollama_loaded_models, ollama_requests" in lines[0] and "python" not in lines[0]
    assert lines[0] in analyze_run(run).notes


def test_a_mapped_page_gets_no_such_line():
    run = run_with([Sample(T + 1, "server", "requests_running", 2.0, {}), Sample(T + 1, "server", "vllm:x", 1.0, {})])
    assert not any("does not map" in w for w in summarize(run).warnings)
