"""A run second by second: what the client saw next to what the server and the GPUs reported.

Built from the run folder alone. Each row covers [t, t + interval) since the run's start; a value
is NaN where nothing was measured in that interval, and a column no run data fed is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from loadlab.analyze.intervals import (
    GPU_SOURCES,
    NCCL_COLLECTIVE_SECONDS,
    SERVER_SOURCES,
    Bins,
    collective_share,
    interval_totals,
    pick_source,
)
from loadlab.analyze.summary import per_request, steps_of
from loadlab.analyze.tokens import TokenTimes
from loadlab.collect import signals as sig
from loadlab.numbers import format_value
from loadlab.store.reader import RunData
from loadlab.store.schema import ErrorCategory

# More rows than anyone reads; a tiny --interval would otherwise build them for minutes.
MAX_ROWS = 100_000


@dataclass
class TimelineRow:
    """One interval of the run. Rates are per second; latencies in seconds; NaN = no data."""

    t: float  # seconds since the run's start, at the interval's start
    started: float  # requests sent
    completed: float  # requests that ended well
    failed: float  # requests that ended in an error (not those cut off by the run's stop)
    output_tokens_per_s: float  # tokens whose events arrived in this interval
    ttft_p50: float  # of the requests whose first token arrived in this interval
    itl_p50: float  # of the gaps that ended in this interval
    in_flight: float  # mean requests open (sent, not ended) over the interval
    requests_running: float  # server: mean over the interval (summed over engines)
    requests_waiting: float
    kv_usage: float  # server: mean, 0..1
    preemptions: float  # server: preemptions counted in this interval
    gpu_util: float  # mean over GPUs and samples, 0..1
    gpu_sm_active: float
    gpu_dram_active: float
    collective_share: float  # collective time / engine step time (NCCL Inspector if no histogram)


COLUMNS = [f.name for f in fields(TimelineRow)]


@dataclass
class Timeline:
    """Rows of equal intervals from `start` (epoch seconds); `columns` are those holding data."""

    start: float
    interval: float
    rows: list[TimelineRow]
    columns: list[str]


def build_timeline(
    run: RunData, interval: float = 1.0, requests: pd.DataFrame | None = None, tokens: TokenTimes | None = None
) -> Timeline:
    """Bin a loaded run folder into intervals of `interval` seconds.

    `requests`, `tokens`: the run's `per_request` frame and `TokenTimes` when the caller already
    has them (a large run's cost seconds to compute).
    """
    if not interval > 0:
        raise ValueError(f"interval must be > 0, got {interval}")
    start, end = _time_range(run)
    # floor + 1: the record at `end` itself falls in the last interval.
    count = math.floor((end - start) / interval) + 1
    if count > MAX_ROWS:
        raise ValueError(
            f"interval {interval:g} s makes {count} rows of a {format_value(end - start, 's')} run "
            f"(at most {MAX_ROWS}): choose a longer one"
        )
    bins = Bins(start, interval, count)
    values: dict[str, np.ndarray] = {}
    if len(run.requests):
        if requests is None:
            requests = per_request(run.requests, {s.index: s.mode for s in steps_of(run)})
        if tokens is None:
            tokens = TokenTimes.of(run.requests["token_times"])
        values.update(_client_columns(requests, tokens, bins, end))
    samples = _used_samples(run.samples)
    for name, how in ((sig.REQUESTS_RUNNING, "sum"), (sig.REQUESTS_WAITING, "sum"), (sig.KV_USAGE, "mean")):
        values[name] = gauge(samples, name, SERVER_SOURCES, how, bins)
    values["preemptions"] = interval_totals(pick_source(samples, sig.PREEMPTIONS, SERVER_SOURCES), bins)
    for name in (sig.GPU_UTIL, sig.GPU_SM_ACTIVE, sig.GPU_DRAM_ACTIVE):
        values[name] = gauge(samples, name, GPU_SOURCES, "all", bins)
    values["collective_share"] = collective_share(samples, bins)

    values["t"] = bins.starts - start
    present = [c for c in COLUMNS if c in values and not np.all(np.isnan(values[c]))]
    nan = np.full(bins.count, np.nan)
    columns = {c: values.get(c, nan) for c in COLUMNS}
    rows = [TimelineRow(**{c: float(columns[c][i]) for c in COLUMNS}) for i in range(bins.count)]
    return Timeline(start=start, interval=interval, rows=rows, columns=present)


def _time_range(run: RunData) -> tuple[float, float]:
    """From run.json's start (else the first record) to the last record or run.json's end.

    Samples from before the start (a Prometheus pull can reach back) are left out.
    """
    times = [run.requests[c] for c in ("scheduled_time", "send_time", "end_time")] + [run.samples["time"]]
    data = pd.concat(times, ignore_index=True).astype(float)
    data = data[np.isfinite(data)]
    start = run.meta.started_at if math.isfinite(run.meta.started_at) else (data.min() if len(data) else 0.0)
    ends = [t for t in (run.meta.ended_at, data.max() if len(data) else math.nan) if math.isfinite(t)]
    return float(start), float(max([start, *ends]))


def _client_columns(df: pd.DataFrame, tokens: TokenTimes, bins: Bins, end: float) -> dict[str, np.ndarray]:
    # Content events are not always single tokens: weight each so a request's events add up to
    # the server's token count.
    out_tokens = df["out_tokens"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_event = np.where(out_tokens > 0, out_tokens / tokens.counts, 1.0)
    # One token per event (the usual case): a count, without an array of weights per event.
    weights = None if np.all(per_event[tokens.counts > 0] == 1) else np.repeat(per_event, tokens.counts)
    # Each event's interval, found once for every event and, through `later`, for every gap's end.
    at = bins.index(tokens.times)
    read = tokens.gaps != 0  # bunched gaps are no ITL (loadlab.metrics.requests.read_gaps)
    return {
        "started": bins.total(df["send_time"]),
        "completed": bins.total(df.loc[df["ok"], "end_time"]),
        "failed": bins.total(df.loc[~df["ok"] & (df["error"] != ErrorCategory.ABORTED.value), "end_time"]),
        "output_tokens_per_s": bins.total_at(at, weights) / bins.width,
        "ttft_p50": bins.median(df["first_token_time"].to_numpy(float), df["ttft"].to_numpy(float)),
        "itl_p50": bins.median_at(at[tokens.later][read], tokens.gaps[read]),
        "in_flight": _mean_open(df["send_time"].to_numpy(float), df["end_time"].to_numpy(float), bins, end),
    }


def _mean_open(opened: np.ndarray, closed: np.ndarray, bins: Bins, end: float) -> np.ndarray:
    """Time-averaged number of open intervals [opened, closed) in each bin (unclosed: open to `end`)."""
    sent = np.isfinite(opened)
    opened, closed = opened[sent], np.where(np.isfinite(closed[sent]), closed[sent], end)
    if not len(opened):
        return np.zeros(bins.count)
    # The open count is a step function; its integral is piecewise linear between events.
    times = np.concatenate([opened, closed])
    steps = np.concatenate([np.ones(len(opened)), -np.ones(len(closed))])
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.cumsum(steps[order])
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times))])
    integral = np.interp(bins.edges, times, area)
    return np.diff(integral) / bins.width


def _used_samples(samples: pd.DataFrame) -> pd.DataFrame:
    """Only the signals the timeline shows (a run can hold millions of histogram buckets)."""
    used = {
        sig.REQUESTS_RUNNING,
        sig.REQUESTS_WAITING,
        sig.KV_USAGE,
        sig.PREEMPTIONS,
        sig.GPU_UTIL,
        sig.GPU_SM_ACTIVE,
        sig.GPU_DRAM_ACTIVE,
        sig.COLLECTIVE_TIME + "_sum",
        sig.STEP_TIME + "_sum",
        NCCL_COLLECTIVE_SECONDS,
    }
    return samples[samples["signal"].isin(used)]


def gauge(samples: pd.DataFrame, signal: str, sources: tuple[str, ...], how: str, bins: Bins) -> np.ndarray:
    """Per-interval mean of a gauge. how: "sum"/"mean" across series at one time, then the
    interval mean; "all": mean of every sample in the interval (e.g. over GPUs)."""
    df = pick_source(samples, signal, sources)
    if how != "all":
        df = df.groupby("time", as_index=False).agg(value=("value", how))
    i = bins.index(df["time"])
    keep = i >= 0
    means = pd.Series(df["value"].to_numpy(float)[keep]).groupby(i[keep]).mean()
    out = np.full(bins.count, np.nan)
    out[means.index.to_numpy()] = means.to_numpy()
    return out
