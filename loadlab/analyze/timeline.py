"""A run second by second: what the client saw next to what the server and the GPUs reported.

Built from the run folder alone. Each row covers [t, t + interval) since the run's start; a value
is NaN where nothing was measured in that interval, and a column no run data fed is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from loadlab.analyze.summary import per_request, steps_of
from loadlab.client.records import ErrorCategory
from loadlab.collect import signals as sig
from loadlab.store.reader import RunData

# Which sources to trust for a signal, best first: a direct scrape beats a Prometheus pull.
SERVER_SOURCES = ("server", "prometheus")
GPU_SOURCES = ("gpu", "prometheus")
# NcclInspectorCollector's collective seconds per poll interval and rank (source "nccl").
NCCL_COLLECTIVE_SECONDS = "collective_seconds"
# More rows than anyone reads; a tiny --interval would otherwise build them for minutes.
MAX_ROWS = 100_000


@dataclass
class TimelineRow:
    """One interval of the run. Rates are per second; latencies in seconds; NaN = no data."""

    t: float                      # seconds since the run's start, at the interval's start
    started: float                # requests sent
    completed: float              # requests that ended well
    failed: float                 # requests that ended in an error (not those cut off by the run's stop)
    output_tokens_per_s: float    # tokens whose events arrived in this interval
    ttft_p50: float               # of the requests whose first token arrived in this interval
    itl_p50: float                # of the gaps that ended in this interval
    in_flight: float              # mean requests open (sent, not ended) over the interval
    requests_running: float       # server: mean over the interval (summed over engines)
    requests_waiting: float
    kv_usage: float               # server: mean, 0..1
    preemptions: float            # server: preemptions counted in this interval
    gpu_util: float               # mean over GPUs and samples, 0..1
    gpu_sm_active: float
    gpu_dram_active: float
    collective_share: float       # collective time / engine step time (NCCL Inspector if no histogram)


COLUMNS = [f.name for f in fields(TimelineRow)]


@dataclass
class Timeline:
    """Rows of equal intervals from `start` (epoch seconds); `columns` are those holding data."""

    start: float
    interval: float
    rows: list[TimelineRow]
    columns: list[str]


def build_timeline(run: RunData, interval: float = 1.0) -> Timeline:
    """Bin a loaded run folder into intervals of `interval` seconds."""
    if not interval > 0:
        raise ValueError(f"interval must be > 0, got {interval}")
    start, end = _time_range(run)
    # floor + 1: the record at `end` itself falls in the last interval.
    count = math.floor((end - start) / interval) + 1
    if count > MAX_ROWS:
        raise ValueError(f"interval {interval:g} s makes {count} rows of a {end - start:.0f} s run "
                         f"(at most {MAX_ROWS}): choose a longer one")
    bins = _Bins(start, interval, count)
    values: dict[str, np.ndarray] = {}
    if len(run.requests):
        values.update(_client_columns(run, bins, end))
    samples = _used_samples(run.samples)
    for name, how in ((sig.REQUESTS_RUNNING, "sum"), (sig.REQUESTS_WAITING, "sum"), (sig.KV_USAGE, "mean")):
        values[name] = _gauge(samples, name, SERVER_SOURCES, how, bins)
    values["preemptions"] = _counter_delta(samples, sig.PREEMPTIONS, SERVER_SOURCES, bins)
    for name in (sig.GPU_UTIL, sig.GPU_SM_ACTIVE, sig.GPU_DRAM_ACTIVE):
        values[name] = _gauge(samples, name, GPU_SOURCES, "all", bins)
    collective = _counter_delta(samples, sig.COLLECTIVE_TIME + "_sum", SERVER_SOURCES, bins)
    if np.all(np.isnan(collective)):   # no engine histogram: NCCL Inspector's estimate, if any
        collective = _mean_over_ranks(samples, NCCL_COLLECTIVE_SECONDS, bins)
    step = _counter_delta(samples, sig.STEP_TIME + "_sum", SERVER_SOURCES, bins)
    with np.errstate(divide="ignore", invalid="ignore"):
        values["collective_share"] = np.where(step > 0, collective / step, np.nan)

    values["t"] = bins.starts - start
    present = [c for c in COLUMNS if c in values and not np.all(np.isnan(values[c]))]
    nan = np.full(bins.count, np.nan)
    columns = {c: values.get(c, nan) for c in COLUMNS}
    rows = [TimelineRow(**{c: float(columns[c][i]) for c in COLUMNS}) for i in range(bins.count)]
    return Timeline(start=start, interval=interval, rows=rows, columns=present)


@dataclass
class _Bins:
    """Equal intervals from `start`; maps times to interval indices (-1 = outside)."""

    start: float
    width: float
    count: int

    @property
    def starts(self) -> np.ndarray:
        return self.start + self.width * np.arange(self.count)

    @property
    def edges(self) -> np.ndarray:
        return self.start + self.width * np.arange(self.count + 1)

    def index(self, times: np.ndarray | pd.Series) -> np.ndarray:
        t = np.asarray(times, dtype=float)
        with np.errstate(invalid="ignore"):
            i = np.floor((t - self.start) / self.width)
        ok = np.isfinite(i) & (i >= 0) & (i < self.count)
        return np.where(ok, np.nan_to_num(i), -1).astype(int)

    def total(self, times: np.ndarray | pd.Series, weights: np.ndarray | None = None) -> np.ndarray:
        """Sum of `weights` (or a count) of the times falling in each interval."""
        i = self.index(times)
        w = np.ones(len(i)) if weights is None else np.asarray(weights, dtype=float)
        return np.bincount(i[i >= 0], weights=w[i >= 0], minlength=self.count).astype(float)

    def median(self, times: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Median of the values whose time falls in each interval (NaN for empty ones)."""
        i = self.index(times)
        keep = (i >= 0) & np.isfinite(values)
        medians = pd.Series(values[keep]).groupby(i[keep]).median()
        out = np.full(self.count, np.nan)
        out[medians.index.to_numpy()] = medians.to_numpy()
        return out


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


def _client_columns(run: RunData, bins: _Bins, end: float) -> dict[str, np.ndarray]:
    df = per_request(run.requests, {s.index: s.mode for s in steps_of(run)})
    token_times = [np.asarray(t if t is not None else [], dtype=float) for t in df["token_times"]]
    # Content events are not always single tokens: weight each so a request's events add up to
    # the server's token count.
    weights = [np.full(len(t), (n / len(t)) if n > 0 else 1.0) for t, n in zip(token_times, df["out_tokens"]) if len(t)]
    all_times = np.concatenate(token_times) if token_times else np.empty(0)
    gap_ends = np.concatenate([t[1:] for t in token_times]) if token_times else np.empty(0)
    gaps = np.concatenate(list(df["gaps"])) if len(df) else np.empty(0)
    return {
        "started": bins.total(df["send_time"]),
        "completed": bins.total(df.loc[df["ok"], "end_time"]),
        "failed": bins.total(df.loc[~df["ok"] & (df["error"] != ErrorCategory.ABORTED.value), "end_time"]),
        "output_tokens_per_s": bins.total(all_times, np.concatenate(weights) if weights else None) / bins.width,
        "ttft_p50": bins.median(df["first_token_time"].to_numpy(float), df["ttft"].to_numpy(float)),
        "itl_p50": bins.median(gap_ends, gaps),
        "in_flight": _mean_open(df["send_time"].to_numpy(float), df["end_time"].to_numpy(float), bins, end),
    }


def _mean_open(opened: np.ndarray, closed: np.ndarray, bins: _Bins, end: float) -> np.ndarray:
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
    used = {sig.REQUESTS_RUNNING, sig.REQUESTS_WAITING, sig.KV_USAGE, sig.PREEMPTIONS, sig.GPU_UTIL,
            sig.GPU_SM_ACTIVE, sig.GPU_DRAM_ACTIVE, sig.COLLECTIVE_TIME + "_sum", sig.STEP_TIME + "_sum",
            NCCL_COLLECTIVE_SECONDS}
    return samples[samples["signal"].isin(used)]


def _pick_source(samples: pd.DataFrame, signal: str, sources: tuple[str, ...]) -> pd.DataFrame:
    """The samples of `signal` from the first of `sources` that has any."""
    of_signal = samples[samples["signal"] == signal]
    for source in sources:
        chosen = of_signal[of_signal["source"] == source]
        if len(chosen):
            return chosen
    return of_signal.iloc[0:0]


def _gauge(samples: pd.DataFrame, signal: str, sources: tuple[str, ...], how: str, bins: _Bins) -> np.ndarray:
    """Per-interval mean of a gauge. how: "sum"/"mean" across series at one time, then the
    interval mean; "all": mean of every sample in the interval (e.g. over GPUs)."""
    df = _pick_source(samples, signal, sources)
    if how != "all":
        df = df.groupby("time", as_index=False)["value"].agg(how)
    i = bins.index(df["time"])
    keep = i >= 0
    means = pd.Series(df["value"].to_numpy(float)[keep]).groupby(i[keep]).mean()
    out = np.full(bins.count, np.nan)
    out[means.index.to_numpy()] = means.to_numpy()
    return out


def _counter_delta(samples: pd.DataFrame, signal: str, sources: tuple[str, ...], bins: _Bins) -> np.ndarray:
    """How much a counter grew in each interval, summed over its series (NaN: no samples there).

    Each increase is credited to the interval of the later sample; a drop means the counter was
    reset, and the new value is the increase since.
    """
    df = _pick_source(samples, signal, sources).sort_values("time")
    out = np.full(bins.count, np.nan)
    seen = bins.index(df["time"])
    out[np.unique(seen[seen >= 0])] = 0.0
    # The writer stores labels as JSON with sorted keys: equal label sets are equal strings.
    for _, series in df.groupby("labels"):
        values = series["value"].to_numpy(float)
        increase = np.diff(values)
        increase = np.where(increase < 0, values[1:], increase)
        i = bins.index(series["time"].to_numpy(float)[1:])
        np.add.at(out, i[i >= 0], increase[i >= 0])
    return out


def _mean_over_ranks(samples: pd.DataFrame, signal: str, bins: _Bins) -> np.ndarray:
    """Per interval: each rank's total of `signal` (source "nccl"), averaged over ranks."""
    df = samples[(samples["signal"] == signal) & (samples["source"] == "nccl")]
    i = bins.index(df["time"])
    keep = i >= 0
    per_rank = df[keep].assign(bin=i[keep]).groupby(["bin", "labels"])["value"].sum()
    means = per_rank.groupby(level="bin").mean()
    out = np.full(bins.count, np.nan)
    out[means.index.to_numpy()] = means.to_numpy()
    return out
