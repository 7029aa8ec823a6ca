"""The numbers of a run, per load step and overall: latency distributions, throughput, errors,
achieved vs target load, token-count checks and the client self-check.

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
requests that finished in the drain after the step's end without their seconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from loadlab.analyze import clientcause
from loadlab.analyze.breakdown import MediaSummary, TurnSummary, media_summaries, turn_summaries
from loadlab.analyze.server_notes import server_notes
from loadlab.analyze.tokens import TokenTimes
from loadlab.analyze.window import steady_window
from loadlab.metrics.limits import CLIENT_CPU_P90_MAX, LOOP_LAG_P99_MAX, START_DELAY_P99_MAX
from loadlab.metrics.requests import (
    bunched_share,
    output_tokens,
    read_gaps,
    request_start,
    time_per_output_token,
    user_tokens_per_s,
)
from loadlab.metrics.slo import Slo
from loadlab.metrics.stats import Distribution, percentile
from loadlab.store.meta import float_or_nan, json_safe, write_json_atomic
from loadlab.store.reader import SUMMARY_JSON, RunData
from loadlab.store.schema import Coverage, ErrorCategory, Mode, StepInfo

# Client self-check: above these the load generator, not the server, may be what was measured.
MIN_RATE_RATIO = 0.9  # open loop: achieved request rate / requested rate
MIN_CONCURRENCY_RATIO = 0.8  # closed loop: achieved concurrency (Little's law) / users
MAX_FAILED_SHARE_FOR_LOAD_CHECK = 0.1  # above it, a failing endpoint explains low load
MIN_REQUESTS_FOR_LOAD_CHECK = 20  # fewer finished requests: ramp and tail dominate, don't judge
RATE_SIGNALS = ("client_cpu", "client_run_wait", *clientcause.HOST_SIGNALS)
# Strain this large leaves the client's timings untrusted: with any shortfall of the load, the step
# is client-limited (1500 users from one process: lag p99 182 ms, 89 % of them in flight). Judgement.
SEVERE_LOOP_LAG = 0.1  # s, event-loop lag p99
ANY_SHORTFALL = 0.95  # achieved / target below this is a shortfall (healthy closed-loop steps: 0.98-1.0)


@dataclass
class TokenCheck:
    """Successful requests whose token counts disagree, or whose tokens were timed less exactly
    (counts of requests)."""

    usage_missing: int = 0  # no usage.completion_tokens from the server (client count used)
    usage_mismatch: int = 0  # usage.completion_tokens != token events counted by the client
    over_max_tokens: int = 0  # more output tokens than max_tokens: the cap was not honoured
    under_max_tokens: int = 0  # fewer than max_tokens: the server stopped early (pinned lengths not honoured)
    read_timed: int = 0  # timed when the client read them (TLS), not by the kernel's receive timestamps


@dataclass
class ClientCheck:
    """Whether the load generator itself limited the measurement, and why: the one verdict that
    the summary, the analyzer (its `client` constraint), the gate and the report all show.

    `limited` needs an effect on the load (not delivered, or sent late); strain alone (client CPU,
    event-loop lag) is only a warning: loaded clients kept their users in flight (docs/diagnosis.md).
    """

    limited: bool = False
    reasons: list[str] = field(default_factory=list)  # the effects that made it limited
    values: dict[str, float] = field(default_factory=dict)  # the measured figures the checks used
    warnings: list[str] = field(default_factory=list)  # strain without an effect: not a verdict
    cause: str = ""  # a limited step: own_work | starved | unexplained (loadlab.analyze.clientcause)
    advice: list[str] = field(default_factory=list)  # what to change for that cause


@dataclass
class StepSummary:
    """One load step (or, with index -1, the whole run). Latencies in seconds, rates per second."""

    index: int
    label: str
    mode: str  # closed | open | mixed (overall of a run with both)
    target: float  # users (closed) or requests/s (open); NaN for overall of several steps
    start_time: float
    end_time: float
    window: float  # seconds from the step's start (warm-up excluded) to its end
    sent: int  # non-warm-up requests: succeeded + failed + aborted
    succeeded: int
    failed: int  # failed requests, aborted ones not included
    aborted: int  # still in flight when the run was stopped: not the server's failure
    warmup: int  # warm-up requests, stored but excluded from everything here
    errors: dict[str, int]  # failed requests by ErrorCategory value (aborted not included)
    requests_per_s: float  # `completed` / `rate_window`
    output_tokens: int  # of succeeded requests
    output_tokens_per_s: float  # of the `completed` requests / `rate_window`
    ttft: Distribution  # from scheduled time (open loop) or send time (closed loop)
    ttft_from_send: Distribution
    itl: Distribution  # the gaps between reads: bunched gaps (0, events read together) left out
    tpot: Distribution
    e2e: Distribution
    user_tokens_per_s: Distribution  # per-user speed, one value per request
    start_delay: Distribution  # send − scheduled time
    achieved: float  # closed: mean requests in flight (Little's law); open: sent requests/s
    achieved_ratio: float  # achieved / target
    tokens: TokenCheck
    client: ClientCheck
    goodput: float | None = None  # requests/s meeting every SLO (None: no SLO given), as requests_per_s
    slo_met: int | None = None
    # The share of gaps between token events that were bunched (events that arrived in one read),
    # left out of `itl`; NaN without gaps.
    itl_bunched: float = math.nan
    completed: int = 0  # successful requests that ended in the steady-state window(s)
    rate_window: float = math.nan  # seconds of the steady-state window(s) the rates are over
    # Pooling requests (embeddings, rerank; no stream, so no TTFT or ITL): the items they carried
    # (inputs, documents) and their usage.prompt_tokens, of succeeded requests, and both per second.
    items: int = 0
    items_per_s: float = math.nan
    prompt_tokens_per_s: float = math.nan

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepSummary:
        """Read back one entry of summary.json."""
        kw: dict[str, Any] = {
            k: (math.nan if v is None and k not in ("goodput", "slo_met") else v) for k, v in d.items()
        }
        for k in ("ttft", "ttft_from_send", "itl", "tpot", "e2e", "user_tokens_per_s", "start_delay"):
            kw[k] = Distribution.from_dict(d[k])
        kw["tokens"] = TokenCheck(**d["tokens"])
        kw["client"] = ClientCheck(**d["client"])
        return cls(**kw)


@dataclass
class RunSummary:
    """What summary.json holds: every step, the whole run, coverage and the client self-check."""

    path: str
    status: str  # running (cut off) | finished | degraded | interrupted | stopped | failed
    cut_off: bool
    started_at: float
    ended_at: float
    steps: list[StepSummary]
    overall: StepSummary
    client: ClientCheck  # any step limited; reasons name the step
    coverage: list[Coverage]
    slo: Slo | None = None
    warnings: list[str] = field(default_factory=list)
    reason: str = ""  # why the run stopped or failed, or missed its error budget
    turns: list[TurnSummary] = field(default_factory=list)  # sessions' turns (multiturn, tools), else []
    media: list[MediaSummary] = field(default_factory=list)  # by images and audio carried, else []

    @property
    def client_limited(self) -> bool:
        return self.client.limited

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (NaN as null), written to summary.json."""
        return json_safe({**asdict(self), "client_limited": self.client.limited})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSummary:
        """Read back summary.json."""
        return cls(
            path=d["path"],
            status=d["status"],
            cut_off=d["cut_off"],
            started_at=float_or_nan(d["started_at"]),
            ended_at=float_or_nan(d["ended_at"]),
            steps=[StepSummary.from_dict(s) for s in d["steps"]],
            overall=StepSummary.from_dict(d["overall"]),
            client=ClientCheck(**d["client"]),
            coverage=[Coverage(**c) for c in d["coverage"]],
            slo=Slo(**d["slo"]) if d.get("slo") else None,
            warnings=list(d.get("warnings", [])),
            reason=d.get("reason") or "",
            turns=[TurnSummary.from_dict(t) for t in d.get("turns", [])],
            media=[MediaSummary.from_dict(m) for m in d.get("media", [])],
        )


def bunched_note(step: StepSummary) -> str:
    """The line that says a step's ITL left bunched gaps out, and how many."""
    return (
        f"{step.label}: {step.itl_bunched:.1%} of the gaps between tokens were bunched (tokens that "
        f"arrived in one read), left out of ITL; TPOT still spreads their time"
    )


def write_summary(run: RunData, slo: Slo | None = None) -> RunSummary:
    """Summarize a loaded run and write it to its folder's summary.json (atomically); returns it.

    The one writer of summary.json: `loadlab run`, the locustfile and `loadlab summary --write`.
    """
    result = summarize(run, slo)
    write_json_atomic(run.path / SUMMARY_JSON, result.to_dict())
    return result


def summarize(run: RunData, slo: Slo | None = None, tokens: TokenTimes | None = None) -> RunSummary:
    """Compute the summary of a run folder's data (finished or cut off).

    `tokens`: the run's TokenTimes when the caller already has them (a large run's cost seconds).
    """
    steps = steps_of(run)
    mode_of = {s.index: s.mode for s in steps}
    requests = per_request(run.requests, mode_of)
    if tokens is None:
        tokens = TokenTimes.of(run.requests["token_times"])
    measured = requests[~requests["warmup"]]
    client_samples = _client_samples(run.samples)
    think_time = bool(run.meta.config.get("think_time"))
    server_local = clientcause.server_is_local(str(run.meta.config.get("url", "")), run.samples)
    cores = int(run.meta.host.get("cpu_count") or 0)

    step_summaries = []
    rated: list[pd.Index] = []
    for step in steps:
        in_step = requests[requests["step"] == step.index]
        window = _window(step, in_step)
        steady = steady_window(step, in_step[~in_step["warmup"]])
        rated.append(steady.completed(in_step[~in_step["warmup"]]).index)
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
                _client_check(in_step, step, window, client_samples, think_time, server_local, cores),
                (rated[-1], steady.seconds),
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
        _merge_checks(step_summaries),
        (pd.Index([]).append(rated) if rated else pd.Index([]), sum(s.rate_window for s in step_summaries)),
        steps[0].ramp_end if single else math.nan,
    )
    if not single:
        overall.achieved = overall.achieved_ratio = math.nan  # one target per step, none for the run

    warnings = list(run.meta.warnings) + list(run.warnings)
    if len(measured) == 0:
        warnings.append("no measured requests (all warm-up, or none recorded)")
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
    mode: Mode = "open" if config.get("rate") else "closed"
    targets = config.get("rate") or config.get("concurrency") or []
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
    undefined): ok, start, ttft, ttft_from_send, e2e, start_delay, out_tokens, tpot and
    user_tokens_per_s.

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
    rates: tuple[pd.Index, float],
    ramp_end: float = math.nan,
) -> StepSummary:
    """`rates`: the rows of the successful requests the rates count (ended in the steady-state
    window) and the seconds of that window."""
    start, end, seconds = window
    measured = df[~df["warmup"]]
    ok = measured[measured["ok"]]
    aborted = measured["error"] == ErrorCategory.ABORTED.value
    failed = measured[~measured["ok"] & ~aborted]
    rated, rate_seconds = rates
    completed = ok.loc[ok.index.intersection(rated)]

    def per_s(n: float) -> float:
        return n / rate_seconds if rate_seconds > 0 else math.nan

    gaps = tokens.gaps_of(ok.index)
    output_tokens = int(ok["out_tokens"].sum())
    achieved = _achieved(measured, mode, window, ramp_end)
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
        achieved=achieved,
        achieved_ratio=achieved / target if target and target > 0 else math.nan,
        tokens=_token_check(ok),
        client=client,
        itl_bunched=bunched_share(gaps),
        completed=len(completed),
        rate_window=rate_seconds,
        items=int(ok["items"].sum()),
        items_per_s=per_s(int(completed["items"].sum())),
        prompt_tokens_per_s=per_s(int(completed["prompt_tokens"].clip(lower=0).sum())),
    )
    if slo is not None:
        meets = _meets(ok, tokens, slo)
        summary.slo_met = int(meets.sum())
        summary.goodput = per_s(int(meets[completed.index].sum()))
    return summary


def _achieved(
    measured: pd.DataFrame, mode: str, window: tuple[float, float, float], ramp_end: float = math.nan
) -> float:
    """Open loop: requests sent per second. Closed loop: the time-weighted mean number of requests
    in flight over the window (Little's law by integration): a request that straddles the
    window's start or end counts only its time inside, so a step's last, long requests do not
    push the figure above the number of users. It counts from the end of the step's ramp-up
    (`ramp_end`, when recorded): while the users start, fewer are busy by design."""
    start, end, seconds = window
    if seconds <= 0:
        return math.nan
    if mode == "open":
        return len(measured) / seconds
    if start < ramp_end < end:
        start, seconds = ramp_end, end - ramp_end
    sent = measured["send_time"].to_numpy(dtype=float)
    ended = measured["end_time"].to_numpy(dtype=float)
    known = np.isfinite(sent) & np.isfinite(ended)
    inside = np.minimum(ended[known], end) - np.maximum(sent[known], start)
    return float(np.clip(inside, 0.0, None).sum() / seconds) if known.any() else math.nan


def _token_check(ok: pd.DataFrame) -> TokenCheck:
    capped = ok["max_tokens"] > 0
    has_usage = ok["completion_tokens"] >= 0
    return TokenCheck(
        usage_missing=int((~has_usage).sum()),
        usage_mismatch=int((has_usage & (ok["completion_tokens"] != ok["client_tokens"])).sum()),
        over_max_tokens=int((capped & (ok["out_tokens"] > ok["max_tokens"])).sum()),
        under_max_tokens=int((capped & (ok["out_tokens"] < ok["max_tokens"])).sum()),
        read_timed=int((ok["token_clock"] == "read").sum()),
    )


def _meets(ok: pd.DataFrame, tokens: TokenTimes, slo: Slo) -> pd.Series:
    """Which successful requests meet every objective (an undefined metric, e.g. the TPOT of a
    one-token answer, cannot miss)."""
    met = pd.Series(True, index=ok.index)
    for column, limit_ms in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2e", slo.e2e_ms)):
        if limit_ms is not None:
            met &= ~(ok[column] > limit_ms / 1000)
    if slo.itl_ms is not None:
        worst_gap = tokens.worst_gaps()[ok.index]
        met &= worst_gap <= slo.itl_ms / 1000
    return met


def _client_samples(samples: pd.DataFrame) -> pd.DataFrame:
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


def _client_check(
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
            f"client CPU p90 {per_worker.max():.2f} cores in process {worst or '?'} "
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
            f"client event-loop lag p99 {p99 * 1000:.1f} ms (> {LOOP_LAG_P99_MAX * 1000:.0f} ms)",
            effect=False,
        )

    measured = in_step[~in_step["warmup"]]
    if step.mode == "open" and len(measured):
        p99 = percentile(measured["start_delay"].to_numpy(), 99)
        flag(
            "start_delay_p99",
            p99,
            START_DELAY_P99_MAX,
            f"open-loop start delay p99 {p99 * 1000:.1f} ms (> {START_DELAY_P99_MAX * 1000:.0f} ms): "
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
        achieved = _achieved(measured, step.mode, window, step.ramp_end)
        if step.mode == "open":
            check.values["achieved_rate_ratio"] = achieved / step.target
            if judged and achieved < MIN_RATE_RATIO * step.target:
                check.limited = True
                check.reasons.append(
                    f"achieved {achieved:.2f} req/s < {MIN_RATE_RATIO} × requested {step.target:g} req/s"
                )
        elif not think_time:  # with think time, users are idle by design
            check.values["achieved_concurrency_ratio"] = achieved / step.target
            if judged and achieved < MIN_CONCURRENCY_RATIO * step.target:
                check.limited = True
                check.reasons.append(
                    f"achieved concurrency {achieved:.2f} < {MIN_CONCURRENCY_RATIO} × {step.target:g} users"
                )
        ratio = check.values.get("achieved_rate_ratio", check.values.get("achieved_concurrency_ratio", math.nan))
        lag_p99 = check.values.get("client_loop_lag_p99", math.nan)
        if judged and not check.limited and lag_p99 >= SEVERE_LOOP_LAG and ratio < ANY_SHORTFALL:
            check.limited = True
            check.reasons.append(
                f"event-loop lag p99 {lag_p99 * 1000:.0f} ms (>= {SEVERE_LOOP_LAG * 1000:.0f} ms) with {ratio:.0%} of "
                f"the load delivered (< {ANY_SHORTFALL:.0%}): the shortfall and the timings are the client's"
            )
    if check.limited:
        check.cause = clientcause.cause(check.values, host)
        workers = int(cpu["worker"].nunique()) if len(cpu) else 1
        check.advice = clientcause.advice(check.cause, check.values, host, workers)
    return check


def _merge_checks(steps: list[StepSummary]) -> ClientCheck:
    """The whole run's check: limited if any step is; reasons and values name their step."""
    merged = ClientCheck()
    for s in steps:
        merged.limited |= s.client.limited
        prefix = f"{s.label}: " if len(steps) > 1 else ""
        merged.reasons += [prefix + r for r in s.client.reasons]
        merged.warnings += [prefix + w for w in s.client.warnings]
        if s.client.limited and not merged.cause:  # the first limited step's cause speaks for the run
            merged.cause, merged.advice = s.client.cause, list(s.client.advice)
        for name, value in s.client.values.items():
            merged.values[f"{s.label}/{name}" if len(steps) > 1 else name] = value
    return merged
