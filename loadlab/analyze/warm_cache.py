"""A warm cache is not the system's speed: per step, the server's prefix-cache hit rate set
against the most the step's own traffic could hit.

Hits left by earlier traffic (an earlier step, an earlier run, a warm-up elsewhere) make TTFT
look shorter and throughput higher than the workload would get from a cold cache. The ceiling
is what the step's own requests can explain if the cache was empty when it began: every prompt
token seen for the first time in the step is computed; the rest may hit.
"""

from __future__ import annotations

import math

import pandas as pd

from loadlab.analyze.histograms import SampleIndex, window_increase
from loadlab.analyze.window import Window
from loadlab.collect import signals as sig
from loadlab.config import RunConfig, WorkloadConfig
from loadlab.numbers import format_value
from loadlab.store.schema import StepInfo

MARGIN = 0.25  # hit rate above the ceiling by more than this: warned (judgement: block granularity, templates)
MIN_HIT_RATE = 0.3  # below it, a warm cache cannot flatter much (judgement)


def hit_rate(samples: SampleIndex, window: Window) -> float:
    """The server's prefix-cache hit rate over `window`: hit tokens / looked-up tokens (vLLM,
    the reference server), else the mean of an engine's own hit-rate gauge (SGLang,
    TensorRT-LLM); NaN without either."""
    queries = window_increase(samples, sig.PREFIX_CACHE_QUERIES, window.as_bins())
    if queries > 0:
        return window_increase(samples, sig.PREFIX_CACHE_HITS, window.as_bins()) / queries
    gauge = samples.of(sig.PREFIX_CACHE_HIT_RATE)
    inside = gauge[window.contains(gauge["time"])]["value"]
    return float(inside.mean()) if len(inside) else math.nan


def step_hit_rate(samples: SampleIndex, start: float, end: float) -> float:
    """`hit_rate` over [start, end]; NaN where the span is not a finite, positive interval."""
    if not (math.isfinite(start) and math.isfinite(end) and end > start):
        return math.nan
    return hit_rate(samples, Window(start, end, end - start, "the step"))


def own_traffic_ceiling(requests: pd.DataFrame, workload: WorkloadConfig) -> float:
    """The most of the step's prompt tokens its own requests could find cached, from a cold
    start: 1 - first-seen tokens / all prompt tokens. `requests`: the step's request records."""
    if not len(requests):
        return math.nan
    tokens = requests["prompt_tokens"].where(requests["prompt_tokens"] > 0, requests["input_tokens"]).astype(float)
    total = float(tokens.sum())
    if total <= 0:
        return math.nan
    kind = workload.kind
    if kind == "multiturn":
        cold = _multiturn_cold(requests.assign(_tokens=tokens))
    elif kind == "shared_prefix":
        prefixes, prefix_len = workload.num_prefixes, float(workload.prefix_len)
        pool = prefixes * workload.suffixes_per_prefix
        suffix = max(0.0, float(tokens.mean()) - prefix_len)
        cold = prefixes * prefix_len + min(len(tokens), pool) * suffix
    else:  # synthetic or dataset prompts: each is new text
        cold = total
    return max(0.0, 1.0 - min(cold, total) / total)


def _multiturn_cold(requests: pd.DataFrame) -> float:
    """A conversation's first turn in the step is all new; a later turn adds what follows the
    previous turn's prompt and answer."""
    cold = 0.0
    for _, turns in requests.sort_values("turn").groupby("conversation", sort=False):
        prompts = turns["_tokens"].to_numpy(float)
        answers = turns["completion_tokens"].clip(lower=0).to_numpy(float)
        cold += float(prompts[0]) + float((prompts[1:] - prompts[:-1] - answers[:-1]).clip(min=0).sum())
    return cold


def warm_cache_warnings(
    steps: list[StepInfo], requests: pd.DataFrame, samples: SampleIndex, config: RunConfig
) -> list[str]:
    """One line per step whose hit rate is far above what its own traffic explains."""
    lines = []
    workload = config.workload
    for step in steps:
        in_step = requests[requests["step"] == step.index]
        end = step.end_time if math.isfinite(step.end_time) else float(in_step["end_time"].max())
        rate = step_hit_rate(samples, step.start_time, end)
        ceiling = own_traffic_ceiling(in_step, workload)
        if math.isnan(rate) or math.isnan(ceiling) or rate < MIN_HIT_RATE or rate - ceiling <= MARGIN:
            continue
        advice = (
            "the reset did not hold (check the server's log)"
            if config.reset_prefix_cache
            else "rerun with --reset-prefix-cache"
        )
        lines.append(
            f"{step.label}: prefix-cache hit rate {format_value(rate, 'fraction')}, but its own "
            f"{workload.kind} traffic explains at most {format_value(ceiling, 'fraction')}: "
            f"hits from earlier traffic flatter TTFT and throughput; {advice}"
        )
    return lines
