"""A step's prefix-cache hit rate against the most its own traffic can explain."""

from __future__ import annotations

import math

import pytest

from loadlab.analyze.histograms import SampleIndex
from loadlab.analyze.summary import summarize
from loadlab.analyze.warm_cache import own_traffic_ceiling, step_hit_rate, warm_cache_warnings
from loadlab.config import RunConfig, WorkloadConfig
from loadlab.store.schema import Sample
from loadlab.store.tables import requests_table, samples_table
from tests.support.records import T, closed, req
from tests.support.runs import run_of


def records(prompts: list[int], completions: int = 10, conversation: str = "", step: int = 0):
    return [
        req(
            i,
            T + i,
            [T + i + 0.1 * k for k in range(1, completions + 1)],
            prompt_tokens=p,
            input_tokens=p,
            completion_tokens=completions,
            conversation=conversation,
            turn=i if conversation else -1,
            step=step,
        )
        for i, p in enumerate(prompts)
    ]


def table(recs):
    return requests_table(recs).to_pandas()


def cache_samples(points: list[tuple[float, float, float]]) -> list[Sample]:
    """(time, queries, hits) scrapes of the canonical counters."""
    out = []
    for t, queries, hits in points:
        out.append(Sample(t, "server", "prefix_cache_queries", queries, {"model_name": "m"}))
        out.append(Sample(t, "server", "prefix_cache_hits", hits, {"model_name": "m"}))
    return out


def test_random_prompts_explain_no_hits():
    assert own_traffic_ceiling(table(records([100] * 10)), WorkloadConfig(kind="synthetic")) == 0.0


def test_shared_prefixes_explain_all_but_their_first_sightings():
    # 2 prefixes of 400 tokens x 4 suffixes of 100: 40 requests of 500 tokens = 20000 tokens;
    # cold: 2 x 400 prefix tokens + 8 distinct suffixes x 100 = 1600
    workload = WorkloadConfig(kind="shared_prefix", num_prefixes=2, prefix_len=400, suffixes_per_prefix=4)
    assert own_traffic_ceiling(table(records([500] * 40)), workload) == pytest.approx(1 - 1600 / 20000)


def test_a_conversation_explains_its_history_but_not_its_new_turns():
    # turn prompts 100, 160, 230 with 10-token answers: new tokens 100, 50, 60 of 490
    ceiling = own_traffic_ceiling(table(records([100, 160, 230], conversation="c1")), WorkloadConfig(kind="multiturn"))
    assert ceiling == pytest.approx(1 - 210 / 490)


def test_the_hit_rate_comes_from_the_counters_increase_in_the_window():
    index = SampleIndex(
        samples_table(cache_samples([(T - 1, 1000, 900), (T + 5, 3000, 1100), (T + 11, 5000, 1300)])).to_pandas()
    )
    assert step_hit_rate(index, T, T + 11) == pytest.approx(400 / 4000)
    assert math.isnan(step_hit_rate(index, T, math.nan))


def test_an_engines_own_rate_gauge_serves_when_there_are_no_counters():
    gauge = [Sample(T + t, "server", "prefix_cache_hit_rate", v, {}) for t, v in ((1, 0.8), (2, 0.6), (30, 0.0))]
    assert step_hit_rate(SampleIndex(samples_table(gauge).to_pandas()), T, T + 10) == pytest.approx(0.7)


def test_a_warm_cache_on_random_prompts_is_warned_once_with_the_fix():
    recs = records([100] * 10)
    index = SampleIndex(samples_table(cache_samples([(T - 1, 0, 0), (T + 10, 1000, 860)])).to_pandas())
    lines = warm_cache_warnings([closed(2)], table(recs), index, RunConfig(workload=WorkloadConfig(kind="synthetic")))
    assert len(lines) == 1
    assert "86 %" in lines[0] and "at most 0 %" in lines[0] and "--reset-prefix-cache" in lines[0]


def test_hits_the_workload_explains_are_not_warned():
    workload = WorkloadConfig(kind="shared_prefix", num_prefixes=2, prefix_len=400, suffixes_per_prefix=4)
    index = SampleIndex(samples_table(cache_samples([(T - 1, 0, 0), (T + 10, 20000, 17000)])).to_pandas())
    assert warm_cache_warnings([closed(2)], table(records([500] * 40)), index, RunConfig(workload=workload)) == []


def test_the_summary_carries_the_warning():
    recs = records([100] * 10)
    run = run_of(
        recs,
        [closed(2)],
        cache_samples([(T - 1, 0, 0), (T + 10, 1000, 900)]),
        config={"workload": {"kind": "synthetic"}},
    )
    assert any("prefix-cache hit rate 90 %" in w for w in summarize(run).warnings)
