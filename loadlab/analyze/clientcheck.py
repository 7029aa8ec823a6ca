"""The client self-check: whether the load generator itself limited a step's measurement, and why
(the thresholds in loadlab.metrics.limits, the rule in docs/metrics.md)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from loadlab.analyze import clientcause
from loadlab.analyze.achieved import achieved
from loadlab.analyze.summary_types import ClientCheck, StepSummary
from loadlab.metrics.limits import (
    ANY_SHORTFALL,
    CLIENT_CPU_P90_MAX,
    JUDGE_MIN_DELIVERED,
    LOOP_LAG_P99_MAX,
    MAX_BUNCHED_TO_JUDGE,
    MAX_FAILED_SHARE_FOR_LOAD_CHECK,
    MIN_CONCURRENCY_RATIO,
    MIN_RATE_RATIO,
    MIN_REQUESTS_FOR_LOAD_CHECK,
    SEVERE_LOOP_LAG,
    START_DELAY_P99_MAX,
)
from loadlab.metrics.stats import percentile
from loadlab.numbers import format_number, format_value
from loadlab.store.schema import ErrorCategory, StepInfo

RATE_SIGNALS = ("client_cpu", "client_run_wait", *clientcause.HOST_SIGNALS)


def client_samples(samples: pd.DataFrame) -> pd.DataFrame:
    """The load generator's own samples and the host collector's (its host's busy cores)."""
    client = samples[samples["source"].isin(["client", "host"])].copy()
    # One parse per label set, mapped by a dict (not a Python call per sample).
    worker_of = {text: (json.loads(text) if text else {}).get("worker", "") for text in client["labels"].unique()}
    client["worker"] = client["labels"].map(worker_of)
    return client


def _covering(samples: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    """The rate samples (CPU and waiting shares: each covers the time since the one before it)
    over [start, end]: those taken inside it, and each series' first one after it, which covers
    the window's last stretch. A starved process samples late: its only reading of a short step
    may come after the step."""
    rate = samples[samples["signal"].isin(RATE_SIGNALS)]
    inside = rate[(rate["time"] >= start) & (rate["time"] <= end)]
    after = rate[rate["time"] > end].sort_values("time").groupby(["signal", "labels"]).head(1)
    return pd.concat([inside, after])


def client_check(
    in_step: pd.DataFrame,
    step: StepInfo,
    window: tuple[float, float, float],
    client_samples: pd.DataFrame,
    think_time: bool,
    server_local: bool | None = None,
    cores: int = 0,
) -> ClientCheck:
    """Run the self-check over one step's requests and the client samples of its window: the one
    rule of `ClientCheck` (effects limit the step, strain only warns, except strain of
    SEVERE_LOOP_LAG with any shortfall), and for a limited step its cause and advice."""
    check = ClientCheck()
    start, end, _ = window

    def flag(name: str, value: float, limit: float, text: str, effect: bool) -> None:
        check.values[name] = value
        if value > limit:
            check.limited |= effect
            (check.reasons if effect else check.warnings).append(text)

    in_window = client_samples[(client_samples["time"] >= start) & (client_samples["time"] <= end)]
    rates = _covering(client_samples, start, end)
    host = clientcause.host_load(rates, server_local, cores)
    if host is not None:
        check.values["host_busy_ratio"] = host.busy_ratio
    cpu = rates[rates["signal"] == "client_cpu"]
    if len(cpu):
        per_worker = cpu.groupby("worker")["value"].apply(lambda v: percentile(v.to_numpy(), 90))
        worst = str(per_worker.idxmax())
        flag(
            "client_cpu_p90",
            float(per_worker.max()),
            CLIENT_CPU_P90_MAX,
            f"client CPU p90 {format_number(per_worker.max())} cores in process {worst or '?'} "
            f"(> {CLIENT_CPU_P90_MAX}): the client is under strain",
            effect=False,
        )
    waited = rates[rates["signal"] == "client_run_wait"]
    if len(waited):  # the worst process's mean share of time runnable but kept off a CPU
        check.values["client_run_wait_ratio"] = float(waited.groupby("worker")["value"].mean().max())
    lag = in_window[in_window["signal"] == "client_loop_lag"]["value"].to_numpy()
    if lag.size:
        p99 = percentile(lag, 99)
        flag(
            "client_loop_lag_p99",
            p99,
            LOOP_LAG_P99_MAX,
            f"client event-loop lag p99 {format_value(p99, 's')} (> {format_value(LOOP_LAG_P99_MAX, 's')})",
            effect=False,
        )

    measured = in_step[~in_step["warmup"]]
    if step.mode == "open" and len(measured):
        p99 = percentile(measured["start_delay"].to_numpy(), 99)
        flag(
            "start_delay_p99",
            p99,
            START_DELAY_P99_MAX,
            f"open-loop start delay p99 {format_value(p99, 's')} (> {format_value(START_DELAY_P99_MAX, 's')}): "
            "requests left later than scheduled",
            effect=True,
        )

    finished = int(np.isfinite(measured["e2e"].to_numpy(dtype=float)).sum())
    seconds = window[2]
    # Closed-loop users pause after a failure (by design): a failing endpoint, not the client,
    # then keeps the load below target.
    failed = int((~measured["error"].isin(["", ErrorCategory.ABORTED.value])).sum())
    # The ratio is recorded for any step (a short step of long requests has few of them: the
    # analyzer still needs the figure); it flags the step only over enough requests.
    judged = finished >= MIN_REQUESTS_FOR_LOAD_CHECK
    if finished and seconds > 0 and step.target > 0 and failed <= MAX_FAILED_SHARE_FOR_LOAD_CHECK * len(measured):
        load = achieved(measured, step.mode, window, step.ramp_end)
        if step.mode == "open":
            check.values["achieved_rate_ratio"] = load / step.target
            if judged and load < MIN_RATE_RATIO * step.target:
                check.limited = True
                check.reasons.append(
                    f"achieved {format_number(load)} req/s < {MIN_RATE_RATIO} × requested {step.target:g} req/s"
                )
        elif not think_time:  # with think time, users are idle by design
            check.values["achieved_concurrency_ratio"] = load / step.target
            if judged and load < MIN_CONCURRENCY_RATIO * step.target:
                check.limited = True
                check.reasons.append(
                    f"achieved concurrency {format_number(load)} < {MIN_CONCURRENCY_RATIO} × {step.target:g} users"
                )
        ratio = check.values.get("achieved_rate_ratio", check.values.get("achieved_concurrency_ratio", math.nan))
        lag_p99 = check.values.get("client_loop_lag_p99", math.nan)
        if judged and not check.limited and lag_p99 >= SEVERE_LOOP_LAG and ratio < ANY_SHORTFALL:
            check.limited = True
            check.reasons.append(
                f"event-loop lag p99 {format_value(lag_p99, 's')} (>= {format_value(SEVERE_LOOP_LAG, 's')}) with "
                f"{format_value(ratio, 'fraction')} of the load delivered "
                f"(< {format_value(ANY_SHORTFALL, 'fraction')})"
            )
    if check.limited:
        check.cause = clientcause.cause(check.values, host)
        workers = int(cpu["worker"].nunique()) if len(cpu) else 1
        check.advice = clientcause.advice(check.cause, check.values, host, workers)
    return check


def untrusted(step: StepSummary) -> list[str]:
    """Why a client-limited step cannot be judged at the load it delivered (empty: it can): the
    lines of metrics/limits.py, each with its figure. Tokens timed by the kernel keep their times
    however late the client read them, and a send is stamped as it goes; what remains is too little
    load, an arrival process that left in bursts, and token times merged in late reads."""
    check = step.client
    lines = []
    ratio = step.achieved_ratio
    if step.mode != "open" and "achieved_concurrency_ratio" not in check.values:
        ratio = math.nan  # with think time, users idle by design: no delivered share to hold
    if ratio < JUDGE_MIN_DELIVERED:
        lines.append(
            f"{format_value(ratio, 'fraction')} of the load delivered "
            f"(< {format_value(JUDGE_MIN_DELIVERED, 'fraction')}): too far below {step.label} to judge the server at it"
        )
    delay = step.start_delay.p99
    if step.mode == "open" and step.target > 0 and delay > 1 / step.target:
        lines.append(
            f"start delay p99 {format_value(delay, 's')} > the mean gap between arrivals "
            f"({format_value(1 / step.target, 's')}): requests left in bursts, not as the arrival process asked"
        )
    if step.itl_bunched > MAX_BUNCHED_TO_JUDGE:
        lines.append(
            f"{format_value(step.itl_bunched, 'fraction')} of the gaps between tokens merged in late reads "
            f"(> {format_value(MAX_BUNCHED_TO_JUDGE, 'fraction')}): too few token times are the server's"
        )
    lag = check.values.get("client_loop_lag_p99", math.nan)
    if step.tokens.read_timed and step.tokens.read_timed >= step.succeeded / 2 and lag > LOOP_LAG_P99_MAX:
        lines.append(
            f"tokens timed when the client read them (TLS: no kernel timestamps) with event-loop lag p99 "
            f"{format_value(lag, 's')}: the timings are the client's"
        )
    return lines


def merge_checks(steps: list[StepSummary]) -> ClientCheck:
    """The whole run's check: limited if any step is; reasons and values name their step."""
    merged = ClientCheck()
    for s in steps:
        merged.limited |= s.client.limited
        prefix = f"{s.label}: " if len(steps) > 1 else ""
        merged.reasons += [prefix + r for r in s.client.reasons]
        merged.warnings += [prefix + w for w in s.client.warnings]
        merged.untrusted += [prefix + u for u in s.client.untrusted]
        if s.client.limited and not merged.cause:  # the first limited step's cause speaks for the run
            merged.cause, merged.advice = s.client.cause, list(s.client.advice)
        for name, value in s.client.values.items():
            merged.values[f"{s.label}/{name}" if len(steps) > 1 else name] = value
    return merged
