"""The bottleneck analysis of a run folder: per step and overall, what binds and how saturated.

`analyze_run(run)` -> `Analysis`: each step's steady-state window (window.py), its derived
quantities (derive.py, roofline.py), the rules' verdict (rules.py), its saturation across steps
(saturation.py) and advice for the server kind (advice.py). `write_analysis(run)` is the one
writer of analysis.json (its contract: docs/run-folder.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from loadlab.analyze import blackbox, peaks, rules
from loadlab.analyze.advice import VLLM, advice_for, server_kind
from loadlab.analyze.derive import Derived, StepData, derive, server_cores
from loadlab.analyze.histograms import SampleIndex
from loadlab.analyze.peaks import Peaks
from loadlab.analyze.roofline import (
    ModelSize,
    StepTimeFit,
    counts_steps,
    fit_step_time,
    has_work_estimates,
    recorded_model_size,
    work_rates,
)
from loadlab.analyze.rules import ClassScore, Evidence, score_all
from loadlab.analyze.saturation import (
    QUEUE_WAITING,
    Saturation,
    StepLoad,
    held_at_admission,
    held_by_kv,
    saturated_at_delivered_load,
    saturation,
    too_few,
)
from loadlab.analyze.server_notes import server_notes
from loadlab.analyze.summary import StepSummary, per_request, steps_of, summarize
from loadlab.analyze.window import Window, steady_window
from loadlab.collect import signals as sig
from loadlab.convert import ConvertError, from_json
from loadlab.metrics.verdicts import (
    CLIENT,
    COMPUTE,
    ENGINE_OVERHEAD,
    INSUFFICIENT_DATA,
    KV_CAPACITY,
    MEMORY_BANDWIDTH,
    NETWORK,
    OVERLOADED,
    PAST_KNEE,
    SCHEDULING,
    UNDER_LOADED,
    UNKNOWN,
    Constraint,
    SaturationState,
)
from loadlab.numbers import format_number, format_value
from loadlab.store.meta import FAILED, INTERRUPTED, STOPPED, json_safe, write_json_atomic
from loadlab.store.reader import ANALYSIS_JSON, RunData, RunFolderError, read_stage_json
from loadlab.store.schema import Mode, StepInfo

FORMAT = 1
REQUEST_COLUMNS = (
    "step",
    "ok",
    "error",
    "send_time",
    "end_time",
    "ttft",
    "e2e",
    "tpot",
    "out_tokens",
    "input_tokens",
    "prompt_tokens",
    "completion_tokens",
    # the server's per-request timings (llama.cpp), NaN where it gave none (derive.py's _timings)
    "server_prefill",
    "ttft_waiting",
    "server_decode_time",
)
CLOCK_SLOWDOWN_SHARE = 0.1  # GPU clock-event bits set in more samples than this: power/thermal sub-flag (notes)
STRAIN_CONFIDENCE = 0.8  # a client under strain (CPU, loop lag) without an effect: confidence x this (judgement)
# Below this confidence a verdict says what is likely, what else it could be and what would
# decide, instead of naming the constraint as a fact (judgement: a class scored on half its
# evidence, or on all of it half-heartedly, is a lead, not a finding).
CONFIDENT = 0.6
GPU_SIGNALS = (sig.GPU_UTIL, sig.GPU_SM_ACTIVE, sig.GPU_DRAM_ACTIVE, sig.GPU_TENSOR_ACTIVE)
NAMES = {
    CLIENT: "the load generator",
    KV_CAPACITY: "KV capacity",
    MEMORY_BANDWIDTH: "memory bandwidth",
    COMPUTE: "compute",
    SCHEDULING: "scheduling (admission)",
    NETWORK: "network (collectives)",
    ENGINE_OVERHEAD: "engine overhead",
    INSUFFICIENT_DATA: "insufficient data",
    **blackbox.NAMES,
}
# Server-side signals: without any of them (and no GPU samples) no server verdict is possible.
SERVER_SIGNALS = (
    sig.REQUESTS_RUNNING,
    sig.REQUESTS_WAITING,
    sig.KV_USAGE,
    sig.STEP_TIME + "_count",
    sig.TTFT + "_count",
    sig.GPU_UTIL,
    sig.GPU_SM_ACTIVE,
    sig.GPU_DRAM_ACTIVE,
)


@dataclass
class RunnerUp:
    constraint: Constraint
    score: float
    confidence: float


@dataclass
class StepVerdict:
    """One step's analysis (analysis.json's `steps` entries)."""

    index: int
    label: str
    mode: Mode
    target: float
    window: Window
    saturation: SaturationState
    saturation_reason: str
    constraint: Constraint
    score: float
    confidence: float
    runner_up: RunnerUp | None
    headline: str
    evidence: list[Evidence]
    advice: list[str]
    missing: list[str]
    derived: dict[str, Derived]
    # A client-limited step: what the server-side evidence alone would name (not trusted).
    server_side: RunnerUp | None = None
    # Below CONFIDENT: the next most likely constraint and the one measurement that would decide.
    could_be: str = ""
    would_decide: str = ""
    # Without server metrics: what the client's curves alone say (loadlab.analyze.blackbox).
    blackbox: blackbox.BlackBox | None = None
    # The load generator fell short, yet the server was past its knee at the load it did deliver:
    # the server's verdict stands and this says the shortfall beside it ("" when none).
    client_shortfall: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["derived"] = {k: v.to_dict() for k, v in self.derived.items()}
        return d


@dataclass
class Overall:
    constraint: Constraint
    saturation: SaturationState
    knee_step: int | None
    client_limited: bool
    confidence: float
    headline: str
    advice: list[str]
    server: str  # the server kind the advice is for ("" when unknown)
    step_time_fit: StepTimeFit | None = None


@dataclass
class Analysis:
    """What analysis.json holds."""

    path: str
    generated_at: float
    cut_off: bool
    notes: list[str]
    steps: list[StepVerdict]
    overall: Overall
    format: int = FORMAT

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (NaN as null), as docs/run-folder.md describes it."""
        return json_safe(
            {
                "format": self.format,
                "generated_at": self.generated_at,
                "path": self.path,
                "cut_off": self.cut_off,
                "notes": self.notes,
                "steps": [s.to_dict() for s in self.steps],
                "overall": asdict(self.overall),
            }
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Analysis:
        """The analysis `to_dict` wrote (null back to NaN); ConvertError (saying which field) when
        `d` is not one."""
        return from_json(cls, d)


def read_analysis(folder: Path) -> Analysis | None:
    """The analysis.json in run folder `folder`, as the dataclasses that wrote it; None when it
    is not there; RunFolderError (one line) when it cannot be read or is not an analysis."""
    data = read_stage_json(folder, ANALYSIS_JSON)
    if data is None:
        return None
    try:
        return Analysis.from_dict(data)
    except ConvertError as e:
        raise RunFolderError(f"{ANALYSIS_JSON} is not an analysis ({e})") from None


def write_analysis(run: RunData, device: Peaks | None = None, model: ModelSize | None = None) -> Analysis:
    """Analyze a loaded run and write its analysis.json (atomically); returns the analysis.
    The one writer of analysis.json: `loadlab run` at its end and `loadlab analyze`."""
    analysis = analyze_run(run, device=device, model=model)
    write_json_atomic(run.path / ANALYSIS_JSON, analysis.to_dict())
    return analysis


def save_analysis(run: RunData, device: Peaks | None = None, model: ModelSize | None = None) -> tuple[Analysis, str]:
    """`write_analysis`, or where analysis.json cannot be written, the analysis all the same and
    why ("" when written): a folder that cannot be written to costs a warning, not the verdict."""
    try:
        return write_analysis(run, device, model), ""
    except OSError as e:
        return analyze_run(run, device=device, model=model), f"analysis.json not written ({type(e).__name__}: {e})"


def analyze_run(
    run: RunData, window: Window | None = None, device: Peaks | None = None, model: ModelSize | None = None
) -> Analysis:
    """The analysis of a loaded run folder (finished or cut off; `token_times` are not needed).

    `window`: judge every step over it instead of the step's steady state (the live verdict
    judges the last seconds of a run still going, loadlab.conductor.liveverdict).
    `device`: a CPU server's peak FLOP/s and bandwidth for its work estimates' roofline; None
    calibrates this host when a run without GPU samples has them, over the cores the server's
    process may run on where the host collector read them.
    `model`: the served model's size, for MFU and MBU where the engine does not estimate its work;
    None: the size recorded with the run (`loadlab run --model-params/--model-bytes`), if any.
    """
    model = model or recorded_model_size(run.meta.config.model_params, run.meta.config.model_bytes)
    steps = steps_of(run)
    requests = per_request(run.requests, {s.index: s.mode for s in steps})
    summary = summarize(run, requests=requests)
    # Only the columns the analysis reads: filtering a million rows then moves no strings it ignores.
    measured = requests.loc[~requests["warmup"].astype(bool), list(REQUEST_COLUMNS)]
    samples = SampleIndex(run.samples)
    data = [_step_data(step, measured, samples, summary.steps[i], window) for i, step in enumerate(steps)]
    fit = fit_step_time(samples, [d.window for d in data])
    on_gpu = any(samples.has(name) for name in GPU_SIGNALS)
    work_known = has_work_estimates(samples) or (model is not None and counts_steps(samples))
    if device is None and work_known and not on_gpu:
        device = peaks.calibrate(server_cores(samples))
    for d in data:
        derive(d)
        _add_roofline(d, fit, device, model)
    kind = server_kind(samples)
    has_server = any(samples.has(name) for name in SERVER_SIGNALS)
    # No GPU sample in the whole run: a CPU server (or no GPU collector), where GPU counters cannot
    # exist; MFU, MBU and the intensity only where the engine estimates its work (or the model's
    # size was given), against the CPU's calibrated or given peaks.
    impossible = frozenset() if on_gpu else frozenset({rules.G} | (set() if work_known else {rules.F, rules.R}))
    states, knee = saturation(
        [
            StepLoad(d.step.index, d.step.mode, d.step.target, d.derived, d.summary.succeeded, _untrusted(d))
            for d in data
        ]
    )
    boxes = {} if has_server else blackbox.judge_steps(data)
    verdicts = [
        _verdict(d, state, kind, has_server, impossible, boxes.get(d.step.index))
        for d, state in zip(data, states, strict=True)
    ]
    cut_off = run.cut_off or run.meta.status in (INTERRUPTED, STOPPED, FAILED)
    notes = list(run.meta.warnings) + list(run.warnings) + server_notes(run, steps, run.requests)
    notes += _cut_notes(run, data, cut_off)
    return Analysis(
        path=str(run.path),
        generated_at=time.time(),
        cut_off=cut_off,
        notes=notes,
        steps=verdicts,
        overall=_overall(verdicts, knee, kind, fit),
    )


def _untrusted(d: StepData) -> str:
    """Why the load generator's figures of the step cannot be judged ("" = they can)."""
    client = d.summary.client
    return "; ".join(client.untrusted) if client.limited else ""


def _step_data(
    step: StepInfo, measured: pd.DataFrame, samples: SampleIndex, summary: StepSummary, window: Window | None
) -> StepData:
    in_step = measured[measured["step"] == step.index]
    return StepData(
        step=step, requests=in_step, window=window or steady_window(step, in_step), samples=samples, summary=summary
    )


def _add_roofline(d: StepData, fit: StepTimeFit | None, device: Peaks | None, model: ModelSize | None) -> None:
    if fit is not None:
        load_name = {
            sig.TOKENS_PER_STEP: "tokens_per_step_mean",
            sig.BATCH_SIZE: "batch_size_mean",
            sig.REQUESTS_RUNNING: "running_mean",
        }[fit.x]
        load = d.derived.get(load_name)
        if load is not None:
            low, high = fit.fixed_share_interval(load.value)
            d.put(
                "step_time_fixed_share",
                fit.fixed_share(load.value),
                "fraction",
                [*fit.y.split(" + "), fit.x],
                "server_metrics",
                note=f"fit: {fit.y.replace('_', ' ')} {format_value(fit.intercept, 's')} "
                f"+ {format_value(fit.slope, 's')} x {fit.x}, "
                f"R² {format_number(fit.r2)}, {fit.points} points; "
                f"slope ± 2 s.e.: {format_value(low, 'fraction')}-{format_value(high, 'fraction')}",
            )
    rates = work_rates(d.samples, d.window, device, model)
    if rates is not None:
        est = [sig.ESTIMATED_FLOPS, sig.ESTIMATED_READ_BYTES, sig.ESTIMATED_WRITE_BYTES]
        if not rates.work.startswith("the engine"):
            est = ["--model-params/--model-bytes", sig.TOKENS_PER_STEP, sig.STEP_TIME]
        work = f"{rates.work}, over {rates.over}"
        d.put("achieved_tflops_per_gpu", rates.flops_per_s / 1e12, "TFLOP/s", est, "server_metrics", note=work)
        d.put("achieved_gbps_per_gpu", rates.bytes_per_s / 1e9, "GB/s", est, "server_metrics", note=work)
        # Against the device's peaks, a CPU's too: there the step's time outside the device's
        # work is the engine's own, which is what the engine-overhead rule reads.
        peaks = f"peaks: {rates.gpu}"
        d.put("mfu", rates.mfu, "fraction", est, "server_metrics", note=f"{work}; {peaks}")
        d.put("mbu", rates.mbu, "fraction", est, "server_metrics", note=f"{work}; {peaks}")
        d.put("arithmetic_intensity", rates.intensity, "FLOP/byte", est, "server_metrics", note=work)
        d.put(
            "intensity_over_ridge",
            rates.intensity / rates.ridge,
            "ratio",
            est,
            "server_metrics",
            note=f"{format_number(rates.intensity)} FLOP/byte against a ridge of {format_number(rates.ridge)}"
            + (f" ({rates.gpu})" if rates.gpu else ""),
        )


def _verdict(
    d: StepData,
    state: Saturation,
    kind: str,
    has_server: bool,
    impossible: frozenset[str] = frozenset(),
    box: blackbox.BlackBox | None = None,
) -> StepVerdict:
    scores = score_all(d.derived, impossible)
    ok = int(d.requests["ok"].sum())

    def verdict(
        constraint: Constraint,
        headline: str,
        chosen: ClassScore | None = None,
        runner_up: RunnerUp | None = None,
        missing: list[str] | None = None,
    ) -> StepVerdict:
        evidence = _evidence(scores, chosen)
        return StepVerdict(
            index=d.step.index,
            label=d.step.label,
            mode=d.step.mode,
            target=d.step.target,
            window=d.window,
            # Without a successful request only refusals can still say something: overloaded.
            saturation=state.state if ok or state.state == OVERLOADED else UNKNOWN,
            saturation_reason=state.reason,
            constraint=constraint,
            score=chosen.score if chosen else 0.0,
            confidence=chosen.confidence if chosen else 0.0,
            runner_up=runner_up,
            headline=headline,
            evidence=evidence,
            advice=advice_for(constraint, kind, "arithmetic_intensity" in d.derived) + _clock_advice(d),
            missing=missing if missing is not None else (chosen.missing if chosen else []),
            derived=d.derived,
        )

    ranked = sorted((s for c, s in scores.items() if c != CLIENT), key=lambda s: s.confidence, reverse=True)
    eligible = [s for s in ranked if s.score >= rules.MIN_SCORE and s.coverage >= rules.MIN_COVERAGE]
    # The client first, by the summary's own check: one verdict in summary, gate, report and here.
    client = d.summary.client
    saturated = saturated_at_delivered_load(d.derived) if has_server and client.limited else ""
    if saturated:  # a shortfall can only hide saturation, not make it
        state = Saturation(PAST_KNEE, saturated)
    if state.state == UNDER_LOADED:  # an idle server's queue and KV pool set no per-token latency
        eligible = [s for s in eligible if s.constraint in rules.PER_TOKEN]
    elif held_at_admission(d.derived):  # a queue before free KV at the cap: what binds is admission
        eligible = [s for s in eligible if s.constraint == SCHEDULING] or eligible
    elif held_by_kv(d.derived):  # a queue before a full KV pool: what binds is its capacity
        eligible = [s for s in eligible if s.constraint == KV_CAPACITY] or eligible
    # The server's own gauges saying it was saturated at the load delivered (a queue before a full
    # KV pool or at its cap) need no client timing: that verdict stands even where the client's
    # figures are too far off to judge anything else.
    if client.limited and client.untrusted and not (saturated and eligible):
        limited = verdict(
            CLIENT,
            f"the load generator could not deliver this step ({'; '.join(client.reasons + client.untrusted)}): "
            "nothing else is trusted",
            scores[CLIENT],
            missing=[],
        )
        if client.advice:
            limited.advice = list(client.advice)
        if d.derived.get("waiting_mean", Derived(math.nan, "", [], "")).value < QUEUE_WAITING:
            # Nothing waited at what it was given: only what sets per-token latency can be read.
            eligible = [s for s in eligible if s.constraint in rules.PER_TOKEN]
        if has_server and eligible:
            limited.server_side = RunnerUp(eligible[0].constraint, eligible[0].score, eligible[0].confidence)
            limited.headline += f" (server-side evidence alone: {NAMES[eligible[0].constraint]})"
        return limited
    chosen = _server_verdict(verdict, d, state, scores, ranked, eligible, kind, has_server, box)
    if client.limited:  # judged at the load it delivered: the shortfall and its cause beside the verdict
        chosen.client_shortfall = f"the load generator fell short ({'; '.join(client.reasons)})"
        chosen.headline += f"; {chosen.client_shortfall}"
        chosen.advice += client.advice
    return chosen


def _server_verdict(
    verdict: Any,
    d: StepData,
    state: Saturation,
    scores: dict[str, ClassScore],
    ranked: list[ClassScore],
    eligible: list[ClassScore],
    kind: str,
    has_server: bool,
    box: blackbox.BlackBox | None,
) -> StepVerdict:
    """The server's verdict on a step at the load it delivered: insufficient data, the black box's,
    or the best eligible class with its runner-up and, below CONFIDENT, what would decide."""
    client = d.summary.client
    ok = int(d.requests["ok"].sum())
    if not len(d.requests):
        return verdict(INSUFFICIENT_DATA, "no request was sent in this step", missing=[rules.NEEDS[rules.C]])
    if ok == 0:
        failed = d.requests["error"].value_counts()
        what = ", ".join(f"{n} {e}" for e, n in failed.items())
        return verdict(
            INSUFFICIENT_DATA, f"no successful request in this step ({what})", missing=[rules.NEEDS[rules.C]]
        )
    few = too_few(ok)
    if few:
        return verdict(INSUFFICIENT_DATA, few, missing=[rules.NEEDS[rules.C]])
    if not has_server and box is not None:
        return _blackbox_verdict(verdict, box, kind)
    if not has_server:
        return verdict(
            INSUFFICIENT_DATA,
            "no server metrics or GPU samples: the client alone cannot say what binds",
            missing=[rules.NEEDS[rules.S], rules.NEEDS[rules.G]],
        )
    if not eligible:
        missing = [line for s in ranked for line in s.missing]
        return verdict(
            INSUFFICIENT_DATA,
            "no class's evidence is strong enough to name what binds",
            missing=list(dict.fromkeys(missing)),
        )
    best = eligible[0]
    # An under-loaded step's alternatives are what can set per-token latency too.
    rivals = [s for s in ranked if state.state != UNDER_LOADED or s.constraint in rules.PER_TOKEN]
    second = next((s for s in rivals if s is not best), None)
    runner_up = (
        RunnerUp(second.constraint, second.score, second.confidence)
        if second and best.confidence - second.confidence <= rules.RUNNER_UP_WITHIN
        else None
    )
    chosen = verdict(best.constraint, "", best, runner_up)
    strained = bool(client.warnings) or client.limited
    if strained:  # the client's figures are less sure: strain, or a load it fell short of
        chosen.confidence *= STRAIN_CONFIDENCE
    if chosen.confidence < CONFIDENT:
        # Below it only because of the client: a client at ease would decide.
        strained = strained and best.confidence >= CONFIDENT
        chosen.could_be, chosen.would_decide = _alternative(best, second, kind, strained, state.state == UNDER_LOADED)
    chosen.headline = _headline(best, state, chosen)
    if client.warnings:
        chosen.headline += f" (client under strain: {'; '.join(client.warnings)})"
    return chosen


def _alternative(
    best: ClassScore, second: ClassScore | None, kind: str, strained: bool, per_token: bool = False
) -> tuple[str, str]:
    """For a verdict of low confidence: what else it could be and the one measurement that would
    decide. The measurement: a client not under strain when strain alone lowered the confidence;
    else the first collector the named class is missing that this server can have (vLLM's work
    estimates only on vLLM), else the runner-up's, else more of the same evidence. The
    alternative: the runner-up when any of its evidence points to it, else the class that
    measurement would also score. `per_token`: only a class that can set per-token latency (an
    under-loaded step)."""
    unavailable = {rules.NEEDS[rules.F]} if kind != VLLM else set()
    candidates = [
        line
        for line in best.missing + (second.missing if second else [])
        if not line.startswith("(hint)") and line not in unavailable
    ]
    if strained:
        decide = "the same load from a load generator not under strain (--processes N, or a quieter host)"
    elif candidates:
        decide = candidates[0]
    else:
        decide = "longer steps at loads on both sides of this one (the same evidence, measured more)"
    if second is not None and second.score > 0:
        return NAMES[second.constraint], decide
    needs = next((key for key, line in rules.NEEDS.items() if line == decide), None)
    also = (
        NAMES[r.constraint]
        for r in rules.RULES
        if r.constraint not in (best.constraint, CLIENT)
        and (not per_token or r.constraint in rules.PER_TOKEN)
        and any(t.needs == needs for t in r.terms)
    )
    return next(also, "another constraint"), decide


def _blackbox_verdict(verdict: Any, box: blackbox.BlackBox, kind: str) -> StepVerdict:
    """The client's curves' verdict: a pattern and the classes it cannot separate, at a lower
    confidence, saying which collector would decide; insufficient data without a pattern."""
    if not box.pattern:
        chosen = verdict(INSUFFICIENT_DATA, box.headline, missing=[rules.NEEDS[rules.S], rules.NEEDS[rules.G]])
    else:
        chosen = verdict(box.pattern, box.headline, missing=[box.decide])
        chosen.confidence = chosen.score = box.confidence
        chosen.advice = [box.decide] + [line for c in box.candidates for line in advice_for(c, kind, False)]
    chosen.evidence = box.evidence + chosen.evidence
    chosen.blackbox = box
    return chosen


def _clock_advice(d: StepData) -> list[str]:
    """GPU clocks held down by power or heat in over CLOCK_SLOWDOWN_SHARE of the samples: a
    sub-flag of any verdict (the GPU ran slower than its rating)."""
    share = d.derived.get("gpu_clock_slowdown_share")
    if share is None or share.value <= CLOCK_SLOWDOWN_SHARE:
        return []
    return [
        "GPU clocks were slowed (power cap, thermal or hardware slowdown) in "
        f"{format_value(share.value, 'fraction')} of samples: "
        "check cooling, power limits and clocks before tuning the server"
    ]


def _headline(best: ClassScore, state: Saturation, chosen: StepVerdict) -> str:
    name = NAMES[best.constraint]
    top = "; ".join(e.text for e in best.evidence if e.direction == "for")
    if state.state == UNDER_LOADED:
        claim, evidence = f"{name} sets per-token latency", f"headroom: {state.reason}"
    else:
        claim, evidence = f"{name} binds ({state.state.replace('_', ' ')})", top
    sep = "; " if state.state == UNDER_LOADED else ": "
    return f"{_likely(chosen)}{claim}{sep}{evidence}{_doubt(chosen)}"


def _likely(verdict: StepVerdict) -> str:
    return "likely " if verdict.would_decide else ""


def _doubt(verdict: StepVerdict) -> str:
    """What a verdict below CONFIDENT adds: its confidence, what else it could be, what would decide."""
    if not verdict.would_decide:
        return ""
    return (
        f" (confidence {format_number(verdict.confidence, 2)} < {CONFIDENT}; it could also be {verdict.could_be}; "
        f"what would decide: {verdict.would_decide})"
    )


def _evidence(scores: dict[str, ClassScore], chosen: ClassScore | None) -> list[Evidence]:
    """The chosen class's rows first, then every other class's (a row of a term not measured is absent)."""
    order = ([chosen] if chosen else []) + [s for s in scores.values() if s is not chosen]
    return [e for s in order for e in s.evidence]


def _overall(steps: list[StepVerdict], knee: int | None, kind: str, fit: StepTimeFit | None) -> Overall:
    limited = [s for s in steps if s.constraint == CLIENT]
    judged = [s for s in steps if s.constraint not in (INSUFFICIENT_DATA, CLIENT)]
    if limited and not judged:
        names = ", ".join(s.label for s in limited)
        return Overall(
            CLIENT,
            UNKNOWN,
            None,
            True,
            max(s.confidence for s in limited),
            f"the load generator could not deliver {names}: fix the client before trusting any verdict",
            limited[0].advice,
            kind,
            fit,
        )
    short = [s.label for s in steps if s.client_shortfall]
    if not judged:
        reason = steps[0].headline if steps else "no steps"
        return Overall(
            INSUFFICIENT_DATA, UNKNOWN, knee, bool(short), 0.0, f"insufficient data: {reason}", [], kind, fit
        )
    by_index = {s.index: s for s in judged}
    saturated = [s for s in judged if s.saturation in (PAST_KNEE, OVERLOADED)]
    unjudged_knee = next((s for s in steps if s.index == knee and s.constraint == INSUFFICIENT_DATA), None)
    beyond = [s for s in judged if unjudged_knee is not None and s.index > unjudged_knee.index]
    focus = by_index.get(knee) if knee is not None else None
    focus = focus or (beyond[0] if beyond else None) or (saturated[0] if saturated else judged[-1])
    last = judged[-1]
    name = _likely(focus) + NAMES[focus.constraint]
    # A knee whose own step no class explains is said so: neither the steps beside it nor the
    # headline's "under-loaded" may hide that the load stopped paying there.
    unexplained = (
        f"{unjudged_knee.label}, where no class's evidence is strong enough to name what binds" if unjudged_knee else ""
    )
    if beyond:
        headline = f"{name} binds at {focus.label} ({focus.saturation.replace('_', ' ')}); the knee at {unexplained}"
    elif unjudged_knee is not None:
        headline = f"the knee at {unexplained}; below it, up to {last.label}: {name} sets per-token latency"
        last = [s for s in steps if s.constraint != CLIENT][-1]  # the saturation the sweep reached
    elif focus.saturation == UNDER_LOADED:
        headline = f"under-loaded up to {last.label}: {name} sets per-token latency; headroom left"
    elif knee is not None and focus.index == knee:
        headline = f"{name} binds at {focus.label} (the knee)"
    else:
        headline = f"{name} binds at {focus.label} ({focus.saturation.replace('_', ' ')})"
    headline += _doubt(focus)
    if short:  # the summary's check found the load short there: the gate and report say so too
        headline += f"; the load generator fell short at {', '.join(short)} (judged at the load it delivered)"
    if limited:  # steps it could not deliver at all: not judged, never the knee
        headline += f"; the load generator could not deliver {', '.join(s.label for s in limited)} (not judged)"
    return Overall(
        focus.constraint,
        last.saturation,
        knee,
        bool(short or limited),
        focus.confidence,
        headline,
        focus.advice + (limited[0].advice if limited else []),
        kind,
        fit,
    )


def _cut_notes(run: RunData, data: list[StepData], cut_off: bool) -> list[str]:
    """Which step a cut-off run ended in, and how much of it ran."""
    if not cut_off or not data:
        return []
    config = run.meta.config
    planned = config.step_duration or config.duration
    last = data[-1]
    ran = last.window.seconds
    if planned and math.isfinite(ran):
        return [
            f"{last.step.label} cut off mid-step: {format_value(ran, 's')} of "
            f"{format_value(float(planned), 's')} analyzed "
            f"(run status {run.meta.status})"
        ]
    return [f"run {run.meta.status}: the last step ({last.step.label}) is analyzed with what it has"]
