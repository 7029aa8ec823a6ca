"""Without server metrics the client's curves give the verdict: queueing, batch contention or
prefill cost, naming together what they cannot separate, at a lower confidence."""

from __future__ import annotations

from loadlab.analyze import blackbox
from loadlab.analyze.analysis import analyze_run
from loadlab.metrics.verdicts import (
    BATCH_CONTENTION,
    COMPUTE,
    ENGINE_OVERHEAD,
    INSUFFICIENT_DATA,
    KV_CAPACITY,
    MEMORY_BANDWIDTH,
    PREFILL_COST,
    QUEUEING,
    SCHEDULING,
)
from loadlab.store.schema import Sample
from tests.support.records import T, closed, paced, req
from tests.support.runs import run_of

N = 12  # requests per step: enough for a curve point, too few for the client's load check


def two_steps(low: tuple[float, float], high: tuple[float, float], samples: list[Sample] = ()):
    records = paced(0, T, *low, n=N) + paced(1, T + 10, *high, n=N)
    steps = [closed(1, T, T + 10, 0), closed(8, T + 10, T + 20, 1)]
    return run_of(records, steps, samples)


def test_ttft_growing_while_itl_stays_flat_is_queueing_before_the_engine():
    analysis = analyze_run(two_steps((0.05, 0.02), (0.60, 0.021)))
    step = analysis.steps[1]
    assert step.constraint == QUEUEING
    assert step.blackbox is not None and set(step.blackbox.candidates) == {SCHEDULING, KV_CAPACITY}
    assert "admission cap or KV capacity" in step.headline and "since concurrency=1" in step.headline
    assert 0 < step.confidence <= blackbox.CONFIDENCE_CAP
    assert step.missing == [blackbox.DECIDE[QUEUEING]] and "server metrics decide" in step.advice[0]
    assert any(e.name == "ttft_p50_growth" and e.direction == "for" for e in step.evidence)


def test_itl_growing_with_load_is_batch_contention():
    step = analyze_run(two_steps((0.05, 0.02), (0.08, 0.05))).steps[1]
    assert step.constraint == BATCH_CONTENTION
    assert set(step.blackbox.candidates) == {MEMORY_BANDWIDTH, ENGINE_OVERHEAD, COMPUTE}
    assert "--enable-mfu-metrics" in step.blackbox.decide


def test_curves_that_barely_move_name_nothing():
    step = analyze_run(two_steps((0.05, 0.02), (0.06, 0.021))).steps[1]
    assert step.constraint == INSUFFICIENT_DATA and step.blackbox is not None and step.blackbox.pattern == ""
    assert step.confidence == 0.0


def test_ttft_following_the_prompt_length_at_the_lowest_load_is_prefill_cost():
    prompts = [100 * (1 + i % 6) for i in range(N)]  # 100..600 tokens
    records = [
        req(i, T + 0.8 * i, [T + 0.8 * i + 0.0005 * p + 0.02 * k for k in range(3)], prompt_tokens=p, input_tokens=p)
        for i, p in enumerate(prompts)
    ]
    step = analyze_run(run_of(records, [closed(1)])).steps[0]
    assert step.constraint == PREFILL_COST and step.blackbox.candidates == [COMPUTE]


def test_the_lowest_load_alone_has_no_curve():
    step = analyze_run(run_of(paced(0, T, 0.05, 0.02, n=N), [closed(1)])).steps[0]
    assert step.constraint == INSUFFICIENT_DATA and "one step alone has no curve" in step.headline


def test_server_metrics_keep_the_white_box_verdict():
    running = [Sample(T + t, "server", "requests_running", 1.0, {}) for t in range(0, 20)]
    step = analyze_run(two_steps((0.05, 0.02), (0.60, 0.021), running)).steps[1]
    assert step.blackbox is None and step.constraint != QUEUEING


def test_client_only_keeps_the_clients_samples_alone():
    samples = [Sample(T, "server", "requests_running", 1.0, {}), Sample(T, "client", "client_cpu", 0.2, {})]
    run = blackbox.client_only(two_steps((0.05, 0.02), (0.6, 0.02), samples))
    assert list(run.samples["source"]) == ["client"]
