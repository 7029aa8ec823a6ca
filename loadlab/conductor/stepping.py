"""How `loadlab sweep` raises the load, as a pure function of the steps measured so far.

Double the load from the start value (concurrency 1, or a low rate) until a step goes bad, then
bisect between the last good and the first bad step until they are close. A step is bad, in this
order: the load generator limited it (the figures are not the server's), more than
MAX_ERROR_RATE of its requests failed, it breached an SLO, or it is past the knee by the
analyzer's saturation rule (loadlab/analyze/saturation.py: throughput +<5 % for load +>=25 %, or
an overloaded queue), judged against the highest good step below it. The sweep also stops at
`--max` and after `max_steps` steps, so it always ends by itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loadlab.analyze.derive import Derived
from loadlab.analyze.saturation import KNEE_LOAD_GROWTH, OVERLOADED, PAST_KNEE, StepLoad, saturation

MAX_ERROR_RATE = 0.01  # a step whose requests fail more often than this is bad
BISECT_RESOLUTION = 0.1  # bisect until the first bad load is within 10 % of the last good one
# ... or, for the knee, within the load growth the saturation rule needs to call a step flat:
# a step closer to the last good one could never be judged past the knee.
DEFAULT_MAX_STEPS = 12

# Why a step is bad, or why the sweep stopped (Decision.stop).
CLIENT, ERRORS, SLO, KNEE = "client-limited", "errors", "slo", "knee"
MAX_LOAD, MAX_STEPS, RUN_STOPPED = "max", "max-steps", "run-stopped"


@dataclass(frozen=True)
class SweepLimits:
    """The sweep's bounds: closed loop (users) or open loop (requests/s), where it starts, the
    highest load it may try and how many steps it may run."""

    mode: str = "closed"  # closed | open
    start: float = 1.0
    max_load: float = math.inf
    max_steps: int = DEFAULT_MAX_STEPS


@dataclass
class StepResult:
    """What the sweep judges a finished step by (from the run folder, after the step)."""

    index: int
    label: str
    target: float
    derived: dict[str, float]  # the analyzer's derived values (output_tokens_per_s, e2e_p50, ...)
    error_rate: float = 0.0
    slo_failures: list[str] = field(default_factory=list)  # the SLO checks the step failed
    client_limited: str = ""  # why the load generator limited the step ("" = it did not)


@dataclass(frozen=True)
class Judgement:
    """A step's verdict for the sweep: `bad` is "" for a good step, else CLIENT/ERRORS/SLO/KNEE."""

    step: StepResult
    bad: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """The next load to run (None: stop), and when stopping, why (`stop`, one-line `reason`),
    with the highest good and the lowest bad step measured."""

    next_target: float | None
    stop: str = ""
    reason: str = ""
    good: StepResult | None = None
    bad: Judgement | None = None


def judge(step: StepResult, below: StepResult | None, mode: str) -> Judgement:
    """Whether `step` is good, judged on its own and against `below`, the highest good step of
    lower load (None for the first)."""
    if step.client_limited:
        return Judgement(step, CLIENT, f"the load generator limited {step.label} ({step.client_limited})")
    if step.error_rate > MAX_ERROR_RATE:
        return Judgement(
            step, ERRORS, f"{step.error_rate:.1%} of requests failed at {step.label} (> {MAX_ERROR_RATE:.0%})"
        )
    if step.slo_failures:
        return Judgement(step, SLO, f"SLO breached at {step.label}: {'; '.join(step.slo_failures)}")
    loads = [_load(s, mode) for s in (below, step) if s is not None]
    states, _ = saturation(loads)
    state = states[-1]
    if state.state in (PAST_KNEE, OVERLOADED):
        versus = f" vs {below.label}" if below is not None else ""
        return Judgement(step, KNEE, f"past the knee at {step.label}{versus}: {state.reason}")
    return Judgement(step, "", state.reason)


def judge_all(results: list[StepResult], mode: str) -> list[Judgement]:
    """Each step judged in the order run, against the highest good step of lower load before it."""
    judgements: list[Judgement] = []
    for step in results:
        below = max(
            (j.step for j in judgements if not j.bad and j.step.target < step.target),
            key=lambda s: s.target,
            default=None,
        )
        judgements.append(judge(step, below, mode))
    return judgements


def next_step(results: list[StepResult], limits: SweepLimits) -> Decision:
    """The sweep's next load, or why it stops (see the module's docstring)."""
    if not results:
        return Decision(min(limits.start, limits.max_load))
    judgements = judge_all(results, limits.mode)
    good = max((j.step for j in judgements if not j.bad), key=lambda s: s.target, default=None)
    bad = min((j for j in judgements if j.bad), key=lambda j: j.step.target, default=None)
    if bad is None:
        top = max(r.target for r in results)
        if top >= limits.max_load:
            return Decision(
                None,
                MAX_LOAD,
                f"reached --max {limits.max_load:g} without a knee, SLO breach "
                f"or errors: the server scales at least this far",
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
    if len(results) >= limits.max_steps:
        where = f"; highest good load: {good.label}" if good else ""
        return Decision(None, MAX_STEPS, f"step limit ({limits.max_steps}) reached{where}", good, bad)
    return Decision(target)


def _doubled(top: float, limits: SweepLimits) -> float:
    return min(2 * top, limits.max_load)


def _between(good: float, bad: float, mode: str, resolution: float) -> float | None:
    """The load halfway between, or None when the two are already within `resolution` x good."""
    if bad - good <= resolution * good + 1e-9:
        return None
    if mode == "closed":
        return float((int(good) + int(bad)) // 2) if bad - good > 1 else None
    return (good + bad) / 2


def _load(step: StepResult, mode: str) -> StepLoad:
    derived = {name: Derived(value, "", [], "sweep") for name, value in step.derived.items()}
    return StepLoad(step.index, mode, step.target, derived)
