"""How `loadlab sweep` raises the load, as a pure function of the steps measured so far.

Double the load from the start value (concurrency 1, or a low rate) until a step goes bad, then
bisect between the highest good step and the lowest bad one until they are close. A step is bad,
in this order: the load generator could not deliver it (ClientCheck.untrusted: a step it only fell
short of is judged at the load it delivered), more than
MAX_ERROR_RATE of its requests failed, it breached an SLO, or it is past the knee by the
analyzer's saturation rule (loadlab/analyze/saturation.py: throughput +<5 % for load +>=25 %, or
an overloaded queue), all steps judged together in load order as the analyzer judges them.

A step with too few successful requests (saturation.too_few, the analyzer's rule) is neither
good nor bad: the sweep runs the same load again for twice as long, up to
MAX_STRETCH x the step duration, then stops saying why. The sweep also stops at `--max` and
after `max_steps` steps (reruns included), so it always ends by itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from loadlab.analyze.derive import Derived
from loadlab.analyze.saturation import KNEE_LOAD_GROWTH, MAX_ERROR_RATE, Saturation, StepLoad, saturation, too_few
from loadlab.metrics.verdicts import (
    CLIENT_LIMITED,
    ERRORS,
    KNEE,
    MAX_LOAD,
    MAX_STEPS,
    OVERLOADED,
    PAST_KNEE,
    SLO,
    TOO_FEW,
    BadStep,
    SaturationState,
    StopReason,
)
from loadlab.numbers import format_value
from loadlab.store.schema import Mode

SWEEP_JSON = "sweep.json"  # beside the run folder's files: how each step was judged, why the sweep stopped
BISECT_RESOLUTION = 0.1  # bisect until the first bad load is within 10 % of the last good one
# ... or, for the knee, within the load growth the saturation rule needs to call a step flat:
# a step closer to the last good one could never be judged past the knee.
DEFAULT_MAX_STEPS = 12
MAX_STRETCH = 4  # a step too short to judge is rerun longer, up to this many times --step-duration


@dataclass(frozen=True)
class SweepLimits:
    """The sweep's bounds: closed loop (users) or open loop (requests/s), where it starts, the
    highest load it may try and how many steps it may run."""

    mode: Mode = "closed"
    start: float = 1.0
    max_load: float = math.inf
    max_steps: int = DEFAULT_MAX_STEPS
    step_seconds: float = 20.0  # --step-duration: a rerun of a step too short to judge lasts longer


@dataclass
class StepResult:
    """What the sweep judges a finished step by (from the run folder, after the step)."""

    index: int
    label: str
    target: float
    derived: dict[str, float]  # the analyzer's derived values (output_tokens_per_s, e2e_p50, ...)
    error_rate: float = 0.0
    slo_failures: list[str] = field(default_factory=list)  # the SLO checks the step failed
    # Why the load generator could not deliver the step ("" = it delivered it, or fell short yet
    # within what can be judged at the load it delivered: ClientCheck.untrusted).
    client_limited: str = ""
    succeeded: int = 0  # the step's successful requests (saturation.too_few)
    seconds: float = 0.0  # how long the step was run
    aborted: int = 0  # its requests cut off at its end, still in flight after the grace (not failures)


@dataclass(frozen=True)
class Judgement:
    """A step's verdict for the sweep: `bad` is "" for a good step, else CLIENT_LIMITED/ERRORS/SLO/KNEE;
    a step that measured too little (`measured` False) is neither."""

    step: StepResult
    bad: BadStep | Literal[""]
    reason: str
    measured: bool = True
    saturation: SaturationState | Literal[""] = ""  # the analyzer's saturation state of the step


@dataclass(frozen=True)
class Decision:
    """The next load to run (None: stop), and when stopping, why (`stop`, one-line `reason`),
    with the highest good and the lowest bad step measured."""

    next_target: float | None
    stop: StopReason | Literal[""] = ""
    reason: str = ""
    good: StepResult | None = None
    bad: Judgement | None = None
    seconds: float | None = None  # the next step's length when not --step-duration (a rerun)
    knee: Judgement | None = None  # the knee step by the analyzer's rule (None: none seen)


def judge(step: StepResult, state: Saturation, label_of: dict[int, str]) -> Judgement:
    """Whether `step` is good, given its saturation among all steps (the analyzer's rule);
    `label_of` names the steps by index."""
    if step.client_limited:
        return Judgement(
            step, CLIENT_LIMITED, f"the load generator could not deliver {step.label} ({step.client_limited})"
        )
    if step.error_rate > MAX_ERROR_RATE:
        return Judgement(
            step,
            ERRORS,
            f"{format_value(step.error_rate, 'fraction')} of requests failed at {step.label} "
            f"(> {format_value(MAX_ERROR_RATE, 'fraction')})",
        )
    few = too_few(step.succeeded)
    if few and state.state != OVERLOADED:
        return Judgement(step, "", f"not judged: {few}", measured=False, saturation=state.state)
    if step.slo_failures:
        return Judgement(step, SLO, f"SLO breached at {step.label}: {'; '.join(step.slo_failures)}")
    if state.state in (PAST_KNEE, OVERLOADED):
        versus = f" vs {label_of[state.versus]}" if state.versus is not None else ""
        return Judgement(step, KNEE, f"past the knee at {step.label}{versus}: {state.reason}", saturation=state.state)
    return Judgement(step, "", state.reason, saturation=state.state)


def judge_all(results: list[StepResult], mode: Mode) -> tuple[list[Judgement], Judgement | None]:
    """Each step judged (in the order run), all steps' saturation taken together in load order as
    the analyzer takes them; and the knee step by the same rule (None: none seen)."""
    states, knee = saturation([_load(s, mode) for s in results])
    label_of = {s.index: s.label for s in results}
    judgements = [judge(step, state, label_of) for step, state in zip(results, states, strict=True)]
    return judgements, next((j for j in judgements if j.step.index == knee), None)


def next_step(results: list[StepResult], limits: SweepLimits) -> Decision:
    """The sweep's next load, or why it stops (see the module's docstring)."""
    if not results:
        return Decision(min(limits.start, limits.max_load))
    judgements, knee = judge_all(results, limits.mode)
    return replace(_next(judgements, limits), knee=knee)


def _next(judgements: list[Judgement], limits: SweepLimits) -> Decision:
    last = judgements[-1]
    measured = [j for j in judgements if j.measured]
    bad = min((j for j in measured if j.bad), key=lambda j: j.step.target, default=None)
    below = [j.step for j in measured if not j.bad and (bad is None or j.step.target < bad.step.target)]
    good = max(below, key=lambda s: s.target, default=None)
    seconds: float | None = None
    if not last.measured:
        longer = 2 * last.step.seconds
        if longer > MAX_STRETCH * limits.step_seconds + 1e-9:
            where = f"; highest good load: {good.label}" if good else ""
            return Decision(
                None,
                TOO_FEW,
                f"{last.step.label} in {last.step.seconds:g} s: {last.reason.removeprefix('not judged: ')}; "
                f"the requests take too long for steps of up to {MAX_STRETCH} x --step-duration: "
                f"rerun with a longer --step-duration{where}",
                good,
                bad,
            )
        target, seconds = last.step.target, longer
    elif bad is None:
        top = max(j.step.target for j in measured)
        if top >= limits.max_load:
            return Decision(
                None,
                MAX_LOAD,
                f"reached --max {limits.max_load:g}: no step past the knee, no SLO breach, no errors",
                good,
            )
        target = _doubled(top, limits)
    elif good is None:
        return Decision(None, bad.bad, f"{bad.reason} (the lowest load tried)", None, bad)
    else:
        resolution = KNEE_LOAD_GROWTH if bad.bad == KNEE else BISECT_RESOLUTION
        between = _between(good.target, bad.step.target, limits.mode, resolution)
        if between is None:
            return Decision(None, bad.bad, f"{bad.reason}; highest good load: {good.label}", good, bad)
        target = between
    if len(judgements) >= limits.max_steps:
        where = f"; highest good load: {good.label}" if good else ""
        return Decision(None, MAX_STEPS, f"step limit ({limits.max_steps}) reached{where}", good, bad)
    return Decision(target, seconds=seconds)


def _doubled(top: float, limits: SweepLimits) -> float:
    return min(2 * top, limits.max_load)


def _between(good: float, bad: float, mode: Mode, resolution: float) -> float | None:
    """The load halfway between, or None when the two are already within `resolution` x good."""
    if bad - good <= resolution * good + 1e-9:
        return None
    if mode == "closed":
        return float((int(good) + int(bad)) // 2) if bad - good > 1 else None
    return (good + bad) / 2


def _load(step: StepResult, mode: Mode) -> StepLoad:
    derived = {name: Derived(value, "", [], "sweep") for name, value in step.derived.items()}
    return StepLoad(step.index, mode, step.target, derived, step.succeeded, step.client_limited)
