"""The numbers of a run, per load step and overall: latency distributions, throughput, errors,
achieved vs target load, token-count checks and the client self-check, aggregated here from the
requests; the types in loadlab.analyze.summary_types, the checks in loadlab.analyze.request_checks
and loadlab.analyze.clientcheck.

Definitions (kept in docs/metrics.md, the per-request formulas in loadlab/metrics/requests.py; change together):
- TTFT: first content event − the request's start. The start is the scheduled time in open loop
  (no coordinated omission) and the send time in closed loop; TTFT from the send time is kept too.
- E2E: last event − start. ITL: every gap between consecutive content events of all requests.
- TPOT: (E2E − TTFT) / (output tokens − 1) per request; per-user speed: output tokens / (E2E − TTFT).
- Output tokens: usage.completion_tokens, the client's own count when the server gave none.
Latencies are reported over successful, non-warm-up requests. Rates (requests/s, output
tokens/s, goodput) count the successful requests that ended in the step's steady-state window
(loadlab/analyze/window.py) over its length: the figure the analyzer's knee rule, the sweep and
the report all show. Counting every request of the step over the step's seconds would add the
requests that finished in the drain after the step's end without their seconds. A rate over a
window in which nothing ended, or one shorter than the fastest request, measures nothing: it is
NaN ("–"), and `rates_unmeasured` says why (loadlab.analyze.window.unmeasured_rates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from loadlab.analyze import clientcause
from loadlab.analyze.achieved import achieved
from loadlab.analyze.breakdown import media_summaries, turn_summaries
from loadlab.analyze.clientcheck import client_check, client_samples, merge_checks, untrusted
from loadlab.analyze.request_checks import meets_slo, token_check, token_count_fallback
from loadlab.analyze.server_notes import server_notes
from loadlab.analyze.summary_types import ClientCheck, RunSummary, StepSummary, TokenCheck
from loadlab.analyze.tokens import TokenTimes
from loadlab.analyze.window import steady_window, unmeasured_rates
from loadlab.metrics.requests import (
    bunched_share,
    output_tokens,
    read_gaps,
    request_start,
    time_per_output_token,
    user_tokens_per_s,
)
from loadlab.metrics.slo import Slo
from loadlab.metrics.stats import Distribution
from loadlab.numbers import format_value
from loadlab.store.meta import write_json_atomic
from loadlab.store.reader import SUMMARY_JSON, RunData
from loadlab.store.schema import ErrorCategory, Mode, StepInfo

# The summary's types, re-exported: the name other modules import them by.
__all__ = [
    "ClientCheck",
    "RunSummary",
    "Slo",
    "StepSummary",
    "TokenCheck",
    "bunched_note",
    "per_request",
    "steps_of",
    "summarize",
    "unmeasured_notes",
    "write_summary",
]


def bunched_note(step: StepSummary) -> str:
    """The line that says a step's ITL left bunched gaps out, and how many."""
    return (
        f"{step.label}: {format_value(step.itl_bunched, 'fraction')} of the gaps between tokens were bunched "
        f"(tokens that arrived in one read), left out of ITL; TPOT still spreads their time"
    )


def unmeasured_notes(summary: RunSummary) -> list[str]:
    """One line per step whose rates show "–" (`rates_unmeasured`), and the whole run's when it
    has several steps: the reason, where the figure would be."""
    rows = summary.steps + ([summary.overall] if len(summary.steps) > 1 else [])
    return [
        f"{s.label}: no rate measured (req/s, tok/s shown as –): {s.rates_unmeasured}"
        for s in rows
        if s.rates_unmeasured
    ]


def write_summary(run: RunData, slo: Slo | None = None) -> RunSummary:
    """Summarize a loaded run and write it to its folder's summary.json (atomically); returns it.

    The one writer of summary.json: `loadlab run`, the locustfile and `loadlab summary --write`.
    """
    result = summarize(run, slo)
    write_json_atomic(run.path / SUMMARY_JSON, result.to_dict())
    return result


def summarize(
    run: RunData, slo: Slo | None = None, tokens: TokenTimes | None = None, requests: pd.DataFrame | None = None
) -> RunSummary:
    """Compute the summary of a run folder's data (finished or cut off).

    `tokens`, `requests`: the run's TokenTimes and `per_request` table when the caller already
    has them (a large run's cost seconds, and a live verdict makes them every few seconds).
    """
    steps = steps_of(run)
    if requests is None:
        requests = per_request(run.requests, {s.index: s.mode for s in steps})
    if tokens is None:
        tokens = TokenTimes.of(run.requests["token_times"])
    measured = requests[~requests["warmup"]]
    samples = client_samples(run.samples)
    think_time = run.meta.config.think_time is not None
    server_local = clientcause.server_is_local(run.meta.config.url, run.samples)
    cores = int(run.meta.host.get("cpu_count") or 0)
    # A simulated run has no load generator to check: its users are planned, never late or starved.
    simulated = bool(run.meta.simulated)

    step_summaries = []
    rated: list[pd.Index] = []
    ended = 0  # measured requests, whatever their outcome, that ended in a steady window
    for step in steps:
        in_step = requests[requests["step"] == step.index]
        window = _window(step, in_step)
        steady = steady_window(step, in_step[~in_step["warmup"]])
        rated.append(steady.completed(in_step[~in_step["warmup"]]).index)
        step_ended = int(steady.contains(in_step.loc[~in_step["warmup"], "end_time"]).sum())
        ended += step_ended
        step_summaries.append(
            _summarize(
                in_step,
                tokens,
                step.index,
                step.label,
                step.mode,
                step.target,
                window,
                slo,
                ClientCheck()
                if simulated
                else client_check(in_step, step, window, samples, think_time, server_local, cores),
                _Rated(rated[-1], step_ended, steady.seconds),
                step.ramp_end,
            )
        )

    starts = [s.start_time for s in step_summaries if math.isfinite(s.start_time)]
    ends = [s.end_time for s in step_summaries if math.isfinite(s.end_time)]
    overall_window = (min(starts, default=math.nan), max(ends, default=math.nan), sum(s.window for s in step_summaries))
    modes = {s.mode for s in steps}
    single = step_summaries[0] if len(step_summaries) == 1 else None
    overall = _summarize(
        requests,
        tokens,
        -1,
        "overall",
        modes.pop() if len(modes) == 1 else "mixed",
        single.target if single else math.nan,
        overall_window,
        slo,
        merge_checks(step_summaries),
        _Rated(
            pd.Index([]).append(rated) if rated else pd.Index([]), ended, sum(s.rate_window for s in step_summaries)
        ),
        steps[0].ramp_end if single else math.nan,
    )
    if not single:
        overall.achieved = overall.achieved_ratio = math.nan  # one target per step, none for the run

    warnings = list(run.meta.warnings) + list(run.warnings)
    if len(measured) == 0:
        warnings.append("no measured requests (all warm-up, or none recorded)")
    fallback = token_count_fallback(measured, run.meta.config.token_count)
    warnings += [fallback] if fallback else []
    warnings += server_notes(run, steps, run.requests)
    return RunSummary(
        path=str(run.path),
        status=run.meta.status,
        cut_off=run.cut_off,
        started_at=run.meta.started_at,
        ended_at=run.meta.ended_at,
        steps=step_summaries,
        overall=overall,
        client=overall.client,
        coverage=list(run.meta.coverage),
        slo=slo,
        warnings=warnings,
        reason=run.meta.reason,
        turns=turn_summaries(measured),
        media=media_summaries(measured),
    )


def steps_of(run: RunData) -> list[StepInfo]:
    """The run's load steps by index: those in run.json, plus any step index that only appears in
    the records (a run cut off before run.json listed it), with its target from the config."""
    steps = list(run.meta.steps)
    known = {s.index for s in steps}
    config = run.meta.config
    mode: Mode = "open" if config.rate else "closed"
    targets = config.rate or config.concurrency
    for index in sorted(set(int(i) for i in run.requests["step"].unique()) - known):
        target = float(targets[index]) if index < len(targets) else math.nan
        name = "rate" if mode == "open" else "concurrency"
        label = f"step {index}" if math.isnan(target) else f"{name}={target:g}"
        steps.append(StepInfo(index=index, label=label, mode=mode, target=target, start_time=math.nan))
    if not steps:
        steps.append(StepInfo(index=0, label="step 0", mode=mode, target=math.nan, start_time=math.nan))
    return sorted(steps, key=lambda s: s.index)


def per_request(requests: pd.DataFrame, mode_of: dict[int, Mode]) -> pd.DataFrame:
    """The requests table plus each request's metrics (docs/metrics.md; seconds, NaN where
    undefined): ok, start, ttft, ttft_from_send, e2e, start_delay, out_tokens, tpot,
    user_tokens_per_s, and where the server timed its prefill (llama.cpp's per-request timings)
    server_prefill and ttft_waiting, TTFT less it: waiting for a slot, the network and the client.

    Its index is the row's position, as in `TokenTimes.of(requests["token_times"])`, which holds
    the token times and inter-token gaps; they are left out here (a large run's bulk, copied by
    every selection of rows). `mode_of` maps a step index to its mode ("open" or "closed"),
    which sets the start.
    """
    df = requests.drop(columns="token_times").reset_index(drop=True)
    df["ok"] = df["error"].fillna("") == ""
    df["start"] = request_start(df["scheduled_time"], df["send_time"], df["step"].map(mode_of).eq("open"))
    df["ttft"] = df["first_token_time"] - df["start"]
    df["ttft_from_send"] = df["first_token_time"] - df["send_time"]
    df["e2e"] = df["end_time"] - df["start"]
    df["start_delay"] = df["send_time"] - df["scheduled_time"]
    df["out_tokens"] = output_tokens(df["completion_tokens"], df["client_tokens"])
    df["tpot"] = time_per_output_token(df["first_token_time"], df["end_time"], df["out_tokens"])
    df["user_tokens_per_s"] = user_tokens_per_s(df["first_token_time"], df["end_time"], df["out_tokens"])
    # (folders from before format 5 have no such column: not said)
    df["server_prefill"] = df["server_prefill_time"] if "server_prefill_time" in df else math.nan
    df["ttft_waiting"] = df["ttft"] - df["server_prefill"]
    return df


def _window(step: StepInfo, in_step: pd.DataFrame) -> tuple[float, float, float]:
    """(start, end, seconds) the step's rates are measured over.

    Starts at the step's start, or at the first measured request's scheduled time when warm-up
    requests came first; ends at the step's end, or at its last request's end when the run was
    cut off before the step ended.
    """
    measured = in_step[~in_step["warmup"]]
    start = step.start_time
    if math.isnan(start) or in_step["warmup"].any():
        first = measured["scheduled_time"].min() if len(measured) else math.nan
        start = first if math.isnan(start) else max(start, first)
    end = step.end_time
    if math.isnan(end):
        end = in_step["end_time"].max() if len(in_step) else math.nan
    seconds = end - start if not (math.isnan(start) or math.isnan(end)) else 0.0
    return float(start), float(end), max(float(seconds), 0.0)


@dataclass(frozen=True)
class _Rated:
    """What a step's rates count: the rows of the successful requests that ended in its steady
    window, how many requests of any outcome ended there, and the window's seconds."""

    rows: pd.Index
    ended: int
    seconds: float


def _summarize(
    df: pd.DataFrame,
    tokens: TokenTimes,
    index: int,
    label: str,
    mode: str,
    target: float,
    window: tuple[float, float, float],
    slo: Slo | None,
    client: ClientCheck,
    rates: _Rated,
    ramp_end: float = math.nan,
) -> StepSummary:
    """`rates`: what the rates count (`_Rated`)."""
    start, end, seconds = window
    measured = df[~df["warmup"]]
    ok = measured[measured["ok"]]
    aborted = measured["error"] == ErrorCategory.ABORTED.value
    failed = measured[~measured["ok"] & ~aborted]
    rate_seconds = rates.seconds
    completed = ok.loc[ok.index.intersection(rates.rows)]
    fastest = float((ok["end_time"] - ok["send_time"]).min()) if len(ok) else math.nan
    unmeasured = unmeasured_rates(rates.ended, rate_seconds, fastest)

    def per_s(n: float) -> float:
        return math.nan if unmeasured else n / rate_seconds

    gaps = tokens.gaps_of(ok.index)
    output_tokens = int(ok["out_tokens"].sum())
    achieved_load = achieved(measured, mode, window, ramp_end)
    summary = StepSummary(
        index=index,
        label=label,
        mode=mode,
        target=float(target),
        start_time=start,
        end_time=end,
        window=seconds,
        sent=len(measured),
        succeeded=len(ok),
        failed=len(failed),
        aborted=int(aborted.sum()),
        warmup=int(df["warmup"].sum()),
        errors={str(k): int(v) for k, v in failed["error"].value_counts().sort_index().items()},
        requests_per_s=per_s(len(completed)),
        output_tokens=output_tokens,
        output_tokens_per_s=per_s(int(completed["out_tokens"].sum())),
        ttft=Distribution.of(ok["ttft"].to_numpy(), "s"),
        ttft_from_send=Distribution.of(ok["ttft_from_send"].to_numpy(), "s"),
        itl=Distribution.of(read_gaps(gaps), "s"),
        tpot=Distribution.of(ok["tpot"].to_numpy(), "s"),
        e2e=Distribution.of(ok["e2e"].to_numpy(), "s"),
        user_tokens_per_s=Distribution.of(ok["user_tokens_per_s"].to_numpy(), "tok/s"),
        start_delay=Distribution.of(measured["start_delay"].to_numpy(), "s"),
        server_prefill=Distribution.of(ok["server_prefill"].dropna().to_numpy(), "s"),
        ttft_waiting=Distribution.of(ok["ttft_waiting"].dropna().to_numpy(), "s"),
        cache_hits=int((ok["cached_tokens"].fillna(-1) > 0).sum()) if "cached_tokens" in ok else 0,
        achieved=achieved_load,
        achieved_ratio=achieved_load / target if target and target > 0 else math.nan,
        tokens=token_check(ok),
        client=client,
        itl_bunched=bunched_share(gaps),
        completed=len(completed),
        rate_window=rate_seconds,
        rates_unmeasured=unmeasured,
        items=int(ok["items"].sum()),
        items_per_s=per_s(int(completed["items"].sum())),
        prompt_tokens_per_s=per_s(int(completed["prompt_tokens"].clip(lower=0).sum())),
    )
    if client.limited and index >= 0:  # the run's check merges its steps' (merge_checks)
        client.untrusted = untrusted(summary)
    if slo is not None:
        meets = meets_slo(ok, tokens, slo)
        summary.slo_met = int(meets.sum())
        summary.goodput = per_s(int(meets[completed.index].sum()))
    return summary
