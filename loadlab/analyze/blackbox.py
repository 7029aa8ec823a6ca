"""A verdict without server metrics: what the client's own curves say, and what they cannot.

Hosted APIs, Ollama and servers behind a gateway expose no metrics; `--no-server-metrics` runs
have none either. The client's curves across steps still carry most of the answer, each step
set against the lowest load of the same mode:

- queueing before the engine: TTFT grows with load while the per-token time stays flat (TPOT,
  each request's mean inter-token gap, stands for ITL: it needs no per-token times):
  requests wait to start, and once started they run as fast as before. Admission cap and KV
  capacity look alike from outside; the server's running/waiting and KV gauges decide.
- batch contention: the per-token time grows with load: every step carries more sequences and takes longer.
  Memory bandwidth, the engine's own per-step work (engine overhead) and compute look alike from
  outside; step times against batch size with MBU and MFU (GPU counters, the engine's work
  estimates or the model's size) decide.
- prefill cost: at the lowest load, TTFT grows with the prompt's length: prefill work binds
  the first token (compute-bound on a GPU).

Where the server's responses carry its own per-request timings (llama.cpp's `timings`: not server
metrics, the server's word on each request), they are used and the verdict says so: TTFT less
the server's prefill is the time a request waited (for a slot, on the network), so a queue shows
as that wait growing while the prefill stays; and the server's decode time per token growing says
the engine itself slowed, not the network or the client's reading.

The network needs the server's own timing to set TTFT's floor against: a server TTFT histogram
is a server metric, and with one the analyzer's own network rule applies; without, it is named
among what would decide.

Saturation (throughput flat while latency grows) is the analyzer's saturation state, which reads
the client's curves alone already. Confidence is capped below the white-box verdict's: the same
curve has more than one cause. Every threshold is judgement; they are listed in docs/diagnosis.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd

from loadlab.analyze.derive import TIMINGS, StepData
from loadlab.analyze.rules import Evidence
from loadlab.metrics.verdicts import (
    BATCH_CONTENTION,
    COMPUTE,
    ENGINE_OVERHEAD,
    KV_CAPACITY,
    MEMORY_BANDWIDTH,
    PREFILL_COST,
    QUEUEING,
    SCHEDULING,
    BlackBoxPattern,
    RuleClass,
)
from loadlab.numbers import format_number
from loadlab.store.reader import RunData

# What each black-box pattern cannot tell apart, in white-box classes.
CANDIDATES: dict[BlackBoxPattern, tuple[RuleClass, ...]] = {
    QUEUEING: (SCHEDULING, KV_CAPACITY),
    BATCH_CONTENTION: (MEMORY_BANDWIDTH, ENGINE_OVERHEAD, COMPUTE),
    PREFILL_COST: (COMPUTE,),
}
NAMES = {
    QUEUEING: "queueing before the engine (admission cap or KV capacity)",
    BATCH_CONTENTION: "batch contention (memory bandwidth, engine overhead or compute)",
    PREFILL_COST: "prefill cost (compute)",
}
DECIDE = {
    QUEUEING: "server metrics decide: running requests pinned at a cap is the admission cap (scheduling); "
    "KV usage near 1 with preemptions is KV capacity (--server-metrics; SGLang needs --enable-metrics)",
    BATCH_CONTENTION: "engine step times against batch size (reference server, TGI, TensorRT-LLM) with MBU and MFU "
    "(GPU counters: NVML/GPM or dcgm-exporter; vLLM's --enable-mfu-metrics; or --model-params/--model-bytes) "
    "decide memory bandwidth, engine overhead and compute",
    PREFILL_COST: "GPU counters or vLLM's --enable-mfu-metrics confirm prefill is compute-bound",
}
TTFT_GROWTH = 2.0  # TTFT p50 at least this many times the lowest load's: it grew (judgement)
TPOT_FLAT = 1.3  # TPOT p50 at most this many times the lowest load's: it stayed flat (judgement)
TPOT_GROWTH = 1.5  # TPOT p50 at least this many times the lowest load's: contention (judgement)
QUEUE_OVER_CONTENTION = 2.0  # TTFT grew this many times more than TPOT: queueing dominates (judgement)
PREFILL_CORRELATION = 0.5  # TTFT against prompt tokens, rank (Spearman) r at the lowest load (judgement)
PREFILL_SPREAD = 1.5  # TTFT at the longest prompts / at the shortest, at least (judgement)
MIN_PROMPT_CV = 0.2  # prompt lengths must vary this much (coefficient of variation) to judge prefill
NO_PATTERN_DECIDE = (
    "server metrics decide (running, waiting and KV gauges; the server's TTFT histogram for the network), "
    "or GPU counters"
)
CONFIDENCE_CAP = 0.5  # a black-box verdict is never surer than this (judgement)
TIMED = "the server's per-request timings (in its responses, not server metrics)"
MIN_REQUESTS = 5  # successful requests a step needs for its curve point (as the analyzer's MIN_OK_REQUESTS)


@dataclass
class BlackBox:
    """One step's black-box verdict (analysis.json's `blackbox`)."""

    pattern: Literal[BlackBoxPattern, ""]  # "": no pattern
    candidates: list[RuleClass]  # the white-box classes it cannot separate
    headline: str
    confidence: float
    decide: str  # which collector would decide
    baseline: str = ""  # the step it was set against
    evidence: list[Evidence] = field(default_factory=list)


def client_only(run: RunData) -> RunData:
    """The run as an endpoint without metrics would have left it: only the client's own samples
    (its self-check), so that its analysis is the black-box one."""
    samples = run.samples[run.samples["source"] == "client"] if len(run.samples) else run.samples
    return replace(run, samples=samples.reset_index(drop=True))


def judge_steps(steps: list[StepData]) -> dict[int, BlackBox]:
    """Each step's black-box verdict, every step set against the lowest load of its mode.
    `steps` must have their derived quantities (loadlab.analyze.derive)."""
    verdicts = {}
    for d in steps:
        same = [s for s in steps if s.step.mode == d.step.mode and _ok(s) >= MIN_REQUESTS]
        base = min(same, key=lambda s: (s.step.target, s.step.index), default=None)
        verdicts[d.step.index] = judge(d, base)
    return verdicts


def judge(d: StepData, base: StepData | None) -> BlackBox:
    """One step against `base` (the lowest load of its mode; None: no curve to read)."""
    evidence: list[Evidence] = []
    if _ok(d) < MIN_REQUESTS:
        return _none(f"only {_ok(d)} successful requests: at least {MIN_REQUESTS} are needed", evidence)
    if base is None or base is d or not base.step.target < d.step.target:
        prefill = _prefill(d, evidence)
        if prefill is not None:
            return prefill
        return _none("the lowest load: the step the others are set against (one step alone has no curve)", evidence)
    ttft = _ttft_growth(d, base, evidence)
    tpot = _tpot_growth(d, base, evidence)
    said = _timed(d, base, evidence)
    against = base.step.label
    if math.isnan(ttft) or math.isnan(tpot):
        return _none(f"TTFT or TPOT not measured here or at {against}", evidence)
    if ttft >= TTFT_GROWTH and (tpot <= TPOT_FLAT or ttft >= QUEUE_OVER_CONTENTION * tpot):
        strength = min(1.0, math.log(ttft) / math.log(4 * TTFT_GROWTH))
        return _found(
            QUEUEING,
            f"{NAMES[QUEUEING]}: TTFT x{format_number(ttft)} since {against} "
            f"while TPOT x{format_number(tpot)}: requests wait to "
            + ("start, then run as fast as before" if tpot <= TPOT_FLAT else "start far more than they slow down")
            + said.get(QUEUEING, ""),
            strength,
            against,
            evidence,
        )
    if tpot >= TPOT_GROWTH:
        strength = min(1.0, math.log(tpot) / math.log(2 * TPOT_GROWTH))
        return _found(
            BATCH_CONTENTION,
            f"{NAMES[BATCH_CONTENTION]}: TPOT x{format_number(tpot)} since {against} (TTFT x{format_number(ttft)}): "
            "each engine step carries more sequences and takes longer" + said.get(BATCH_CONTENTION, ""),
            strength,
            against,
            evidence,
        )
    growth = f"TTFT x{format_number(ttft)} and TPOT x{format_number(tpot)} since {against}"
    return _none(f"{growth}: no pattern past its thresholds", evidence)


def _ok(d: StepData) -> int:
    return int(d.requests["ok"].sum()) if len(d.requests) else 0


def _value(d: StepData, name: str) -> float:
    derived = d.derived.get(name)
    return derived.value if derived is not None else math.nan


def _ttft_growth(d: StepData, base: StepData, evidence: list[Evidence]) -> float:
    ratio = _value(d, "ttft_p50") / _value(base, "ttft_p50")
    if math.isfinite(ratio):
        evidence.append(_row(QUEUEING, "ttft_p50_growth", ratio, "ratio", TTFT_GROWTH, "TTFT p50 growth"))
    return ratio


def _tpot_growth(d: StepData, base: StepData, evidence: list[Evidence]) -> float:
    # TPOT, each request's mean gap, stands for ITL: it needs no token times (the live verdict has none).
    ratio = _value(d, "tpot_p50") / _value(base, "tpot_p50")
    if math.isfinite(ratio):
        evidence.append(_row(BATCH_CONTENTION, "tpot_p50_growth", ratio, "ratio", TPOT_GROWTH, "TPOT p50 growth"))
    return ratio


def _timed(d: StepData, base: StepData, evidence: list[Evidence]) -> dict[str, str]:
    """What the server's per-request timings add to each pattern's headline (nothing where its
    responses carried none): the wait before the prefill against the prefill, for queueing; the
    server's own decode time per token, for batch contention. Their growths are evidence rows."""
    growth = {name: _value(d, name) / _value(base, name) for name in ("ttft_waiting_p50", "server_prefill_p50")}
    tpot = _value(d, "server_tpot_p50") / _value(base, "server_tpot_p50")
    said = {}
    wait, prefill = growth["ttft_waiting_p50"], growth["server_prefill_p50"]
    if math.isfinite(wait) and math.isfinite(prefill):
        what = f"{TIMED}: the wait before the prefill, p50 growth"
        evidence.append(_row(QUEUEING, "ttft_waiting_growth", wait, "ratio", TTFT_GROWTH, what, TIMINGS))
        said[QUEUEING] = (
            f"; {TIMED}: the wait before the prefill x{format_number(wait)}, the prefill x{format_number(prefill)}"
        )
    if math.isfinite(tpot):
        what = f"{TIMED}: decode time per token, p50 growth"
        evidence.append(_row(BATCH_CONTENTION, "server_tpot_growth", tpot, "ratio", TPOT_GROWTH, what, TIMINGS))
        said[BATCH_CONTENTION] = f"; {TIMED}: its decode time per token x{format_number(tpot)}"
    return said


def _prefill(d: StepData, evidence: list[Evidence]) -> BlackBox | None:
    """TTFT against prompt length within the step (its lowest load): prefill cost when it tracks it."""
    ok = d.requests[d.requests["ok"].astype(bool)]
    prompts = ok["prompt_tokens"].where(ok["prompt_tokens"] > 0, ok["input_tokens"]).to_numpy(float)
    ttft = ok["ttft"].to_numpy(float)
    keep = np.isfinite(prompts) & np.isfinite(ttft) & (prompts > 0)
    prompts, ttft = prompts[keep], ttft[keep]
    if len(prompts) < MIN_REQUESTS or prompts.std() / prompts.mean() < MIN_PROMPT_CV:
        return None
    # Rank correlation: one stalled request on a busy host must not hide the trend.
    r = float(np.corrcoef(pd.Series(prompts).rank(), pd.Series(ttft).rank())[0, 1])
    short, long = np.quantile(prompts, 0.25), np.quantile(prompts, 0.75)
    spread = float(np.median(ttft[prompts >= long]) / np.median(ttft[prompts <= short]))
    evidence.append(
        _row(PREFILL_COST, "ttft_prompt_correlation", r, "r", PREFILL_CORRELATION, "TTFT against prompt tokens, rank r")
    )
    if r < PREFILL_CORRELATION or not spread >= PREFILL_SPREAD:
        return None
    return _found(
        PREFILL_COST,
        f"{NAMES[PREFILL_COST]}: at the lowest load TTFT follows the prompt's length (r {format_number(r)}; "
        f"x{format_number(spread)} from the shortest to the longest quarter)",
        min(1.0, r),
        "",
        evidence,
    )


def _found(
    pattern: BlackBoxPattern, headline: str, strength: float, baseline: str, evidence: list[Evidence]
) -> BlackBox:
    return BlackBox(
        pattern, list(CANDIDATES[pattern]), headline, CONFIDENCE_CAP * strength, DECIDE[pattern], baseline, evidence
    )


def _none(why: str, evidence: list[Evidence]) -> BlackBox:
    return BlackBox("", [], f"no server metrics: {why}", 0.0, NO_PATTERN_DECIDE, "", evidence)


def _row(
    pattern: BlackBoxPattern, name: str, value: float, unit: str, threshold: float, what: str, source: str = "client"
) -> Evidence:
    """An evidence row FOR the pattern when `value` reaches `threshold`."""
    for_it = value >= threshold
    return Evidence(
        constraint=pattern,
        name=name,
        value=value,
        unit=unit,
        threshold=threshold,
        direction="for" if for_it else "against",
        weight=1.0,
        source=source,
        signals=[source],
        text=f"{what} {format_number(value)} ({'≥' if for_it else '<'} {format_number(threshold)})",
    )
