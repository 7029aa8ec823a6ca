"""The answer in plain words: what one user sees, how many users the server holds within the SLO
and at what speed, what limits it and the one change to try.

Read off the run's measured steps, never interpolated or extrapolated: a figure that no step
measured is not given, and the answer says why (no step ran one user; every measured step held
the SLO, so the capacity is at least the top one). A step holds the SLO when it measured enough to
be judged (saturation.too_few), the load generator delivered it, at most MAX_ERROR_RATE of its
requests failed and every per-step objective of the SLO holds there; the capacity is the highest
load up to which every judged step holds it (load order). A step the load generator fell short
of is judged at the load it delivered, as the analyzer and the sweep judge it, and says so; one
it could not deliver (ClientCheck.untrusted) holds nothing. The SLO is the run's own (`--slo`),
else DEFAULT_SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadlab.analyze.analysis import CONFIDENT, Analysis, StepVerdict
from loadlab.analyze.measures import RunValues, StepValues, measure
from loadlab.analyze.saturation import MAX_ERROR_RATE, too_few
from loadlab.metrics.slo import METRICS, Objective, SloSpec, parse_slo
from loadlab.metrics.verdicts import INSUFFICIENT_DATA
from loadlab.numbers import format_value
from loadlab.store.reader import RunData

# What "within the SLO" means when the run was given none: the first token within 2 s for 99 %
# of requests, and a typical user reading at least 10 tokens/s (faster than people read).
DEFAULT_SLO = "ttft_p99=2s,tps_user_p50=10"
# A verdict's confidence in words, highest threshold first: the one place these words are defined
# (docs/diagnosis.md). Below CONFIDENT a verdict names what is likely, not a finding.
CONFIDENCE_WORDS = ((0.9, "sure"), (0.7, "fairly sure"), (CONFIDENT, "somewhat sure"), (0.0, "unsure"))
NO_VERDICT = "no verdict"


@dataclass(frozen=True)
class StepFigures:
    """What one measured step says to a user: its load and the summary's figures for it."""

    label: str
    load: float  # users (closed loop) or requests/s (open loop)
    ttft_p50: float  # seconds
    ttft_p99: float
    user_tps_p50: float  # per-user tokens/s, the typical user
    output_tps: float  # output tokens/s, all users together
    # The load generator fell short of `load` (judged at what it delivered): the mean in flight
    # (closed loop) or requests/s sent (open loop); NaN when it delivered the load.
    delivered: float = math.nan


@dataclass(frozen=True)
class Capacity:
    """The highest measured load within the SLO. `held` None: not even the lowest judged step held
    it; `beyond`: every judged step held it, so the capacity is at least `held` (the curve ends
    there); `breach`: the first step that did not hold it, and why ("" when none)."""

    unit: str  # users | requests/s
    held: StepFigures | None
    beyond: bool
    breach: str


@dataclass(frozen=True)
class Answer:
    """The plain answer of a run: one user's figures, the capacity within the SLO, the verdict."""

    slo: str  # the SLO judged against, as text
    slo_is_default: bool  # DEFAULT_SLO: the run was given no per-step objective
    loads: int  # distinct loads the run measured (several: a sweep or a step list)
    one_user: StepFigures | None  # the closed-loop step at one user (None: see one_user_note)
    one_user_note: str  # why there is no such figure, or a caveat on it ("" when none)
    capacity: Capacity | None  # None: no step measured enough to be judged
    verdict: str  # the analysis's overall headline ("" without an analysis)
    confidence: float
    confidence_words: str
    change: str  # the first line of its advice ("" when none)


def confidence_words(confidence: float, constraint: str = "") -> str:
    """A verdict's confidence in words (CONFIDENCE_WORDS); NO_VERDICT for insufficient data."""
    if constraint == INSUFFICIENT_DATA or not confidence > 0:
        return NO_VERDICT
    return next(word for floor, word in CONFIDENCE_WORDS if confidence >= floor)


def answer_slo(*texts: str | None) -> tuple[SloSpec, bool]:
    """The SLO an answer judges by: the first of `texts` with a per-step objective, else
    DEFAULT_SLO's objectives with the first text's other items (goodput's per-request objectives,
    client_limited=any), True when the default's were taken; UserError for bad text, as `parse_slo`."""
    given = [text for text in texts if text]
    for text in given:
        spec = parse_slo(text)
        if per_step(spec):
            return spec, False
    return parse_slo(",".join([DEFAULT_SLO, *given[:1]])), True


def per_step(spec: SloSpec) -> tuple[Objective, ...]:
    """The objectives of `spec` that judge each step on its own (not one named step, not the run)."""
    return tuple(o for o in spec.objectives if o.step is None)


def build_answer(
    run: RunData, analysis: Analysis | None, slo: str | None = None, measured: RunValues | None = None
) -> Answer | None:
    """The answer of a loaded run, judged by `slo` (SLO text), else the run's own SLO, else the
    default (answer_slo); None when no step streamed a token (nothing a user would read).
    `measured`: the run's values when the caller has them, with the run's own SLO's goodput."""
    spec, is_default = answer_slo(slo, run.meta.config.slo or None)
    values = measured or measure(run, spec.per_request)
    streamed = [s for s in values.steps if s.summary.mode in ("closed", "open") and s.summary.output_tokens > 0]
    if not streamed:
        return None
    mode = "closed" if any(s.summary.mode == "closed" for s in streamed) else "open"
    curve = _curve([s for s in streamed if s.summary.mode == mode])
    verdicts = {v.index: v for v in analysis.steps} if analysis else {}
    one, note = _one_user(curve if mode == "closed" else [])
    overall = analysis.overall if analysis else None
    return Answer(
        slo=spec.text,
        slo_is_default=is_default,
        loads=len({(s.summary.mode, s.summary.target) for s in values.steps}),
        one_user=one,
        one_user_note=note,
        capacity=_capacity(curve, mode, spec, verdicts) if curve else None,
        verdict=overall.headline if overall else "",
        confidence=overall.confidence if overall else math.nan,
        confidence_words=confidence_words(overall.confidence, overall.constraint) if overall else NO_VERDICT,
        change=overall.advice[0] if overall and overall.advice else "",
    )


def _curve(steps: list[StepValues]) -> list[StepValues]:
    """The judged steps in load order, the later step where a load was run twice."""
    by_load = {s.summary.target: s for s in steps if not too_few(s.summary.succeeded) and s.summary.target > 0}
    return [by_load[load] for load in sorted(by_load)]


def _figures(step: StepValues) -> StepFigures:
    s = step.summary
    delivered = s.achieved if s.client.limited else math.nan
    return StepFigures(
        s.label, s.target, s.ttft.p50, s.ttft.p99, s.user_tokens_per_s.p50, s.output_tokens_per_s, delivered
    )


def _one_user(curve: list[StepValues]) -> tuple[StepFigures | None, str]:
    step = next((s for s in curve if s.summary.target == 1), None)
    if step is None:
        return None, "no step ran one user (closed loop, enough requests to judge)"
    client = step.summary.client
    note = f"the load generator could not deliver it ({'; '.join(client.untrusted)})" if client.untrusted else ""
    return _figures(step), note


def _capacity(curve: list[StepValues], mode: str, spec: SloSpec, verdicts: dict[int, StepVerdict]) -> Capacity:
    held: StepValues | None = None
    for step in curve:
        why = _breach(step, spec, verdicts.get(step.summary.index))
        if why:
            return Capacity(_unit(mode), _figures(held) if held else None, False, f"{step.label}: {why}")
        held = step
    return Capacity(_unit(mode), _figures(curve[-1]), True, "")


def _unit(mode: str) -> str:
    return "users" if mode == "closed" else "requests/s"


def _breach(step: StepValues, spec: SloSpec, verdict: StepVerdict | None) -> str:
    """Why `step` does not hold the SLO ("" when it does)."""
    s = step.summary
    if s.client.limited and s.client.untrusted and spec.check_client:  # short of that: judged at what it delivered
        return f"the load generator could not deliver it ({'; '.join(s.client.untrusted)})"
    errors = step.value("error_rate")
    if errors > MAX_ERROR_RATE:
        return f"{format_value(errors, 'fraction')} of requests failed (> {format_value(MAX_ERROR_RATE, 'fraction')})"
    broken = [_broken(o, step, verdict) for o in per_step(spec)]
    return "; ".join(b for b in broken if b)


def _broken(objective: Objective, step: StepValues, verdict: StepVerdict | None) -> str:
    """How `step` breaks `objective` ("" when it holds; a verdict objective without an analysis holds)."""
    if objective.metric in ("verdict", "saturation"):
        if verdict is None:
            return ""
        found = verdict.constraint if objective.metric == "verdict" else verdict.saturation
        return f"{objective.text} (found {found})" if found in objective.excluded else ""
    value = step.value(objective.metric, objective.stat, objective.share)
    if objective.passes(value):
        return ""
    unit = "fraction" if objective.share else METRICS[objective.metric].unit
    return f"{objective.text} (measured {format_value(value, unit)})"
