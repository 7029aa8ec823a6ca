"""The derived quantities of one load step over its steady-state window.

Each `Derived` names the signals it came from and the collector behind them, so a verdict's
evidence can say where every number was measured. A quantity whose signals are missing is
simply absent (the rules count it as missing coverage, never as zero).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from loadlab.analyze.histograms import SampleIndex, near, window_histogram, window_increase
from loadlab.analyze.intervals import GPU_SOURCES, NCCL_COLLECTIVE_SECONDS, collective_share
from loadlab.analyze.summary import StepSummary
from loadlab.analyze.warm_cache import hit_rate
from loadlab.analyze.window import Window, unmeasured_rates
from loadlab.collect import signals as sig
from loadlab.metrics.stats import percentile
from loadlab.store.reader import labels_of
from loadlab.store.schema import ErrorCategory, StepInfo

# Host collector signals (loadlab.collect.host): CPU cores busy per process, label `role`.
PROCESS_CPU = "process_cpu"
# vLLM's waiting requests by reason (label `reason`): "capacity" = waiting for KV blocks or a seat
# among the running, "deferred" = held by transient constraints. Stored under the collector's
# signal name; run folders recorded before it was mapped hold vLLM's raw name.
WAITING_BY_REASON, CAPACITY = sig.REQUESTS_WAITING_BY_REASON, "capacity"
WAITING_BY_REASON_RAW = "vllm:num_requests_waiting_by_reason"
# Which collector a signal family comes from, for the evidence rows.
CLIENT, SERVER, GPU, HOST, NCCL = "client", "server_metrics", "gpu", "host", "nccl"
# The server's own per-request timings in its responses (llama.cpp's `timings`): not server metrics.
TIMINGS = "server_timings"
# Every quantity a step's derivation can record (here, the client self-check's figures, and the
# analysis's roofline terms): `put` refuses any other name, so the rules table can be checked
# against this list and a misspelt term cannot silently count as never measured.
QUANTITIES = frozenset(
    {
        # the client's requests
        "completed_per_s",
        "output_tokens_per_s",
        "littles_law_concurrency",
        "littles_law_ratio",
        "ttft_p50",
        "e2e_p50",
        "tpot_p50",
        "decode_share",
        "tokens_per_s_per_user_p50",
        "refused_share",
        # the server's per-request timings in its responses (llama.cpp)
        "server_prefill_p50",
        "ttft_waiting_p50",
        "server_tpot_p50",
        # the client self-check (loadlab.analyze.clientcheck's ClientCheck.values)
        "client_cpu_p90",
        "client_run_wait_ratio",
        "client_loop_lag_p99",
        "start_delay_p99",
        "achieved_rate_ratio",
        "achieved_concurrency_ratio",
        "host_busy_ratio",
        # the server's metrics
        "running_mean",
        "running_max",
        "running_at_cap",
        "running_cap",
        "waiting_mean",
        "waiting_p95",
        "waiting_slope",
        "kv_usage_p50",
        "kv_usage_p90",
        "kv_usage_max",
        "preemptions_per_min",
        "engine_busy",
        "server_ttft_p50",
        "server_ttft_mean",
        "ttft_outside_server",
        "ttft_outside_share",
        "queue_time_mean",
        "queue_share",
        "server_itl_p50",
        "tokens_per_step_mean",
        "batch_size_mean",
        "step_time_mean",
        "collective_share",
        "prefix_cache_hit_rate",
        "capacity_wait_share",
        # GPU counters and the host
        sig.GPU_UTIL,
        sig.GPU_SM_ACTIVE,
        sig.GPU_TENSOR_ACTIVE,
        sig.GPU_DRAM_ACTIVE,
        "gpu_clock_slowdown_share",
        "server_cpu",
        # the analysis's roofline, over the steps (loadlab.analyze.analysis)
        "step_time_fixed_share",
        "achieved_tflops_per_gpu",
        "achieved_gbps_per_gpu",
        "mfu",
        "mbu",
        "arithmetic_intensity",
        "intensity_over_ridge",
    }
)


@dataclass
class Derived:
    """One derived number, its unit and what it was computed from; `note` says what it was set
    against where the signals left a choice (its evidence row repeats it)."""

    value: float
    unit: str
    signals: list[str]
    source: str
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        """The JSON form of analysis.json's `derived` entries."""
        return {
            "value": self.value,
            "unit": self.unit,
            "signals": self.signals,
            "source": self.source,
            "note": self.note,
        }


@dataclass
class StepData:
    """What a step's derivation reads: the step, its measured requests (per_request columns), its
    window, the run's samples by signal and the step's summary (client check, achieved load)."""

    step: StepInfo
    requests: pd.DataFrame
    window: Window
    samples: SampleIndex
    summary: StepSummary
    derived: dict[str, Derived] = field(default_factory=dict)

    def put(self, name: str, value: float, unit: str, signals: list[str], source: str, note: str = "") -> None:
        """Record a derived number; NaN (not measured) is left out. `name` must be one of QUANTITIES."""
        if name not in QUANTITIES:
            raise ValueError(f"{name!r} is not a derived quantity (loadlab.analyze.derive.QUANTITIES)")
        if value is not None and math.isfinite(value):
            self.derived[name] = Derived(float(value), unit, signals, source, note)


def derive(data: StepData) -> dict[str, Derived]:
    """Every derived quantity of the step that its signals allow."""
    _client_side(data)
    _server_side(data)
    _gpu_side(data)
    _host_side(data)
    return data.derived


def _client_side(d: StepData) -> None:
    w, req = d.window, d.requests
    ok = w.completed(req)  # the summary's rates count these same requests over the same window
    seconds = w.seconds
    requests = ["client.requests"]
    succeeded = req[req["ok"].astype(bool)]
    ended = int(w.contains(req["end_time"]).sum())
    fastest = float((succeeded["end_time"] - succeeded["send_time"]).min()) if len(succeeded) else math.nan
    if not unmeasured_rates(ended, seconds, fastest):  # the summary's rule: no rate over nothing
        rate = len(ok) / seconds
        d.put("completed_per_s", rate, "requests/s", requests, CLIENT)
        d.put("output_tokens_per_s", ok["out_tokens"].sum() / seconds, "tokens/s", requests, CLIENT)
        if len(ok):
            little = rate * float(ok["e2e"].mean())
            d.put("littles_law_concurrency", little, "requests", requests, CLIENT)
            if d.step.mode == "closed" and d.step.target > 0:
                d.put("littles_law_ratio", little / d.step.target, "fraction", requests, CLIENT)
    if len(ok):
        d.put("ttft_p50", percentile(ok["ttft"].to_numpy(float), 50), "s", requests, CLIENT)
        d.put("e2e_p50", percentile(ok["e2e"].to_numpy(float), 50), "s", requests, CLIENT)
        d.put("tpot_p50", percentile(ok["tpot"].to_numpy(float), 50), "s", requests, CLIENT)
        e2e = ok["e2e"].to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            decode = (e2e - ok["ttft"].to_numpy(float)) / e2e
        d.put(
            "decode_share",
            float(np.nanmean(decode)) if np.isfinite(decode).any() else math.nan,
            "fraction",
            requests,
            CLIENT,
        )
    _timings(d, ok)
    # Per-user speed is the summary's, over all the step's successful requests (docs/metrics.md),
    # not the window's: summary, plan, gate, report and sweep then show one number per step.
    d.put("tokens_per_s_per_user_p50", d.summary.user_tokens_per_s.p50, "tokens/s", requests, CLIENT)
    sent = req[w.contains(req["send_time"])]
    if len(sent):
        errors = sent["error"].fillna("")
        refused = errors.isin([ErrorCategory.HTTP_429.value, ErrorCategory.TIMEOUT.value, ErrorCategory.HTTP_5XX.value])
        d.put("refused_share", refused.mean(), "fraction", requests, CLIENT)
    # The client self-check of loadlab.analyze.clientcheck, over the step (the same figures the
    # summary's CLIENT-LIMITED flag used).
    # (A summary.json of another loadlab may name figures this one does not judge: left out.)
    for name, value in d.summary.client.values.items():
        if name not in QUANTITIES:
            continue
        d.put(
            name,
            value,
            "fraction" if name.endswith("ratio") else ("cores" if "cpu" in name else "s"),
            ["client." + name],
            CLIENT,
        )


def _timings(d: StepData, ok: pd.DataFrame) -> None:
    """What the server's per-request timings say, where its responses carried them: its prefill,
    TTFT less it (waiting for a slot, the network, the client) and its decode time per token."""
    said = ok[ok["server_prefill"].notna()] if "server_prefill" in ok else ok.iloc[0:0]
    if not len(said):
        return
    columns = ["server_prefill_time", "server_decode_time", "completion_tokens"]
    d.put("server_prefill_p50", percentile(said["server_prefill"].to_numpy(float), 50), "s", columns[:1], TIMINGS)
    d.put("ttft_waiting_p50", percentile(said["ttft_waiting"].to_numpy(float), 50), "s", columns[:1], TIMINGS)
    # The share of TTFT before the server's prefill: a queue's, where no queue-time histogram says
    # it (the server's own, read after this, takes its place).
    ttft = said["ttft"].mean()
    d.put("queue_share", said["ttft_waiting"].mean() / ttft if ttft > 0 else math.nan, "fraction", columns[:1], TIMINGS)
    tokens = said["completion_tokens"].where(said["completion_tokens"] > 0)  # as llama.cpp's predicted_per_token_ms
    tpot = (said["server_decode_time"] / tokens).to_numpy(float)
    d.put("server_tpot_p50", percentile(tpot, 50), "s", columns, TIMINGS)


def _server_side(d: StepData) -> None:
    bins = d.window.as_bins()
    s = d.samples
    running = _gauge(s, sig.REQUESTS_RUNNING, d.window, "sum")
    cap = _gauge(s, sig.RUNNING_CAP, d.window, "sum")  # summed over engines, as running is
    waiting = _gauge(s, sig.REQUESTS_WAITING, d.window, "sum")
    kv = _gauge(s, sig.KV_USAGE, d.window, "mean")
    if running.size:
        d.put("running_mean", running.mean(), "requests", [sig.REQUESTS_RUNNING], SERVER)
        d.put("running_max", running.max(), "requests", [sig.REQUESTS_RUNNING], SERVER)
        # Running pinned at its cap = admission binds. The configured cap where the server
        # exports it (the reference server's max_num_seqs); else the highest count seen in the
        # window stands for it, which any steady load reaches now and then.
        if cap.size and cap.max() >= 1:
            d.put("running_cap", cap.max(), "requests", [sig.RUNNING_CAP], SERVER)
            d.put(
                "running_at_cap",
                running.mean() / cap.max(),
                "fraction",
                [sig.REQUESTS_RUNNING, sig.RUNNING_CAP],
                SERVER,
                f"of the configured cap, {cap.max():g}",
            )
        elif running.max() >= 1:
            d.put(
                "running_at_cap",
                running.mean() / running.max(),
                "fraction",
                [sig.REQUESTS_RUNNING],
                SERVER,
                f"of the most seen, {running.max():g}: the server exports no cap",
            )
    if waiting.size:
        d.put("waiting_mean", waiting.mean(), "requests", [sig.REQUESTS_WAITING], SERVER)
        d.put("waiting_p95", percentile(waiting, 95), "requests", [sig.REQUESTS_WAITING], SERVER)
        d.put("waiting_slope", _slope(s, d.window), "requests/s", [sig.REQUESTS_WAITING], SERVER)
    if kv.size:
        for q in (50, 90):
            d.put(f"kv_usage_p{q}", percentile(kv, q), "fraction", [sig.KV_USAGE], SERVER)
        d.put("kv_usage_max", kv.max(), "fraction", [sig.KV_USAGE], SERVER)
    preempted = window_increase(s, sig.PREEMPTIONS, bins)
    if d.window.seconds > 0:
        d.put("preemptions_per_min", preempted / d.window.seconds * 60, "1/min", [sig.PREEMPTIONS], SERVER)
        step_time = window_increase(s, sig.STEP_TIME + "_sum", bins)
        d.put("engine_busy", step_time / d.window.seconds, "fraction", [sig.STEP_TIME + "_sum"], SERVER)
    hist = {
        name: window_histogram(s, name, bins)
        for name in (sig.TTFT, sig.QUEUE_TIME, sig.ITL, sig.TOKENS_PER_STEP, sig.BATCH_SIZE, sig.STEP_TIME)
    }
    ttft, queue, itl = hist[sig.TTFT], hist[sig.QUEUE_TIME], hist[sig.ITL]
    if ttft is not None:
        d.put("server_ttft_p50", ttft.quantile(0.5), "s", [sig.TTFT], SERVER)
        d.put("server_ttft_mean", ttft.mean, "s", [sig.TTFT], SERVER)
        client_ttft = d.requests.loc[d.requests["ok"] & d.window.contains(d.requests["end_time"]), "ttft"]
        if len(client_ttft):
            outside = float(client_ttft.mean()) - ttft.mean
            d.put("ttft_outside_server", outside, "s", ["client.ttft", sig.TTFT], SERVER)
            if ttft.mean > 0:
                d.put("ttft_outside_share", outside / ttft.mean, "ratio", ["client.ttft", sig.TTFT], SERVER)
    if queue is not None:
        d.put("queue_time_mean", queue.mean, "s", [sig.QUEUE_TIME], SERVER)
        client_p50 = d.derived.get("ttft_p50")
        base = ttft.mean if ttft is not None else (client_p50.value if client_p50 else math.nan)
        d.put(
            "queue_share",
            queue.mean / base if base > 0 else math.nan,
            "fraction",
            [sig.QUEUE_TIME, sig.TTFT if ttft is not None else "client.ttft"],
            SERVER,
        )
    if itl is not None:
        d.put("server_itl_p50", itl.quantile(0.5), "s", [sig.ITL], SERVER)
    for name, key, unit in (
        (sig.TOKENS_PER_STEP, "tokens_per_step", "tokens"),
        (sig.BATCH_SIZE, "batch_size", "sequences"),
        (sig.STEP_TIME, "step_time", "s"),
    ):
        histogram = hist[name]
        if histogram is not None:
            d.put(f"{key}_mean", histogram.mean, unit, [name], SERVER)
    parts = [
        near(s.of(sig.COLLECTIVE_TIME + "_sum"), bins),
        near(s.of(sig.STEP_TIME + "_sum"), bins),
        near(s.of(NCCL_COLLECTIVE_SECONDS, ("nccl",)), bins),
    ]
    share = collective_share(pd.concat(parts, ignore_index=True), bins)[0]
    d.put("collective_share", share, "fraction", [sig.COLLECTIVE_TIME, sig.STEP_TIME], SERVER)
    d.put("prefix_cache_hit_rate", hit_rate(s, d.window), "fraction", [sig.PREFIX_CACHE_HITS], SERVER)
    d.put("capacity_wait_share", _capacity_wait_share(s, d.window), "fraction", [WAITING_BY_REASON], SERVER)


def _gpu_side(d: StepData) -> None:
    for name in (sig.GPU_UTIL, sig.GPU_SM_ACTIVE, sig.GPU_TENSOR_ACTIVE, sig.GPU_DRAM_ACTIVE, "gpu_clock_slowdown"):
        values = _in_window(d.samples.of(name, GPU_SOURCES), d.window)["value"].to_numpy(float)
        if values.size:
            d.put(
                name if name != "gpu_clock_slowdown" else "gpu_clock_slowdown_share",
                values.mean(),
                "fraction",
                [name],
                GPU,
            )


def _host_side(d: StepData) -> None:
    cpu = _in_window(d.samples.of(PROCESS_CPU, ("host",)), d.window)
    if len(cpu):
        roles = cpu["labels"].map({t: labels_of(t).get("role", "") for t in cpu["labels"].unique()})
        server = cpu[roles == "server"]
        if len(server):
            d.put("server_cpu", server.groupby("time")["value"].sum().mean(), "cores", [PROCESS_CPU], HOST)


def server_cores(samples: SampleIndex) -> int | None:
    """How many cores the server's process may run on, as the host collector read its affinity
    (`loadlab run --server-pid`); None where it was not sampled or the platform could not say."""
    cpu = samples.of(PROCESS_CPU, ("host",))
    found = [labels_of(t) for t in cpu["labels"].unique()] if len(cpu) else []
    cores = [int(labels["cores"]) for labels in found if labels.get("role") == "server" and "cores" in labels]
    return max(cores) if cores else None


def _in_window(df: pd.DataFrame, window: Window) -> pd.DataFrame:
    return df[window.contains(df["time"])]


def _gauge(s: SampleIndex, signal: str, window: Window, how: str) -> np.ndarray:
    """The gauge's values in the window, one per scrape: summed (or averaged) over its series."""
    df = _in_window(s.of(signal), window)
    return df.groupby("time")["value"].agg(how).to_numpy(float) if len(df) else np.empty(0)


def _slope(s: SampleIndex, window: Window) -> float:
    """Least-squares slope of the waiting queue over the window (requests per second)."""
    df = _in_window(s.of(sig.REQUESTS_WAITING), window).groupby("time")["value"].sum()
    if len(df) < 3:
        return math.nan
    t = df.index.to_numpy(float)
    return float(np.polyfit(t - t[0], df.to_numpy(float), 1)[0])


def _capacity_wait_share(s: SampleIndex, window: Window) -> float:
    """Share of the waiting requests (over the window's scrapes) that wait for capacity: KV
    blocks or a seat among the running. With the KV pool nearly empty, a seat: the admission
    cap, seen even where the running gauge lags (a starved API server reads 0 running in half
    its scrapes while two run). NaN without the gauge or without anything waiting."""
    df = _in_window(s.of(WAITING_BY_REASON), window)
    if not len(df):
        df = _in_window(s.of(WAITING_BY_REASON_RAW), window)
    if not len(df):
        return math.nan
    reason = df["labels"].map({t: labels_of(t).get("reason") for t in df["labels"].unique()})
    total = float(df["value"].sum())
    return float(df.loc[(reason == CAPACITY).to_numpy(bool), "value"].sum()) / total if total > 0 else math.nan
