"""A verdict put to the test: the run before and after its knob was turned (knobs.py), read for
the two figures every class predicts will grow: the load where the throughput saturates and the
peak output tokens/s (with an interval: compare.py's bootstrap).

Where it saturates is Kleinrock's N*: the peak divided by the throughput one unit of load gets
where nothing waits (the lowest step's tokens/s per user, or per request/s on an open loop). A
cap or a pool moves the ceiling and leaves one user's rate alone, so N* moves with it; a knob that
speeds up every step raises both and N* stays. Both figures it reads are measured well (the
uncongested step and the highest one), where the first step to reach 90 % of the peak, or the
analyzer's knee, falls wherever a gently rising curve's noise puts it: seen on vLLM, a KV pool of
5 -> 10 blocks, the peak +96 % and that first step 6 -> 4 users. The knee is in the figures and
the tune table too.

- verified: the throughput saturates at a higher load, and the peak improved beyond the noise;
- refuted: the peak neither improved beyond the noise nor gained MIN_GAIN as measured (or it
  fell), wherever it saturates: a plateau of the same height reached at a higher load is the same
  ceiling (seen on vLLM, prefill-bound, a curve that flattens gently at +7-9 %);
- undecided: anything between: the peak gained as measured but not beyond its interval, or
  improved without the saturation load moving up (every load sped up: not the class's capacity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from loadlab.analyze.analysis import Analysis
from loadlab.analyze.compare import IMPROVEMENT, NO_CHANGE, REGRESSION, Change, format_change, step_change
from loadlab.analyze.measures import RunValues, StepValues
from loadlab.numbers import format_number

Outcome = Literal["verified", "refuted", "undecided"]
VERIFIED: Outcome = "verified"
REFUTED: Outcome = "refuted"
UNDECIDED: Outcome = "undecided"
MIN_GAIN = 0.10  # below this much more throughput, as measured, the knob bought nothing
RISING = 0.9  # the top step is still rising when the one below it reached less than this share of it
MOVED = 1.2  # the saturation load "moved" when it grew beyond a bisection's resolution (10 %)


@dataclass(frozen=True)
class Point:
    """One step on the Pareto chart: its load, total and per-user output tokens/s (p50)."""

    label: str
    load: float
    output_tps: float
    user_tps: float


@dataclass(frozen=True)
class Figures:
    """What a sweep found, as the tune table and a verification read it."""

    knee: str  # the knee's step label ("" when none was seen)
    knee_load: float  # its load; without a knee, the highest load measured (a lower bound)
    peak: str  # the step of the highest output tokens/s
    peak_tps: float
    goodput: float  # requests/s meeting --slo's per-request objectives at the peak step (NaN: none given)
    constraint: str  # the overall verdict's class
    runner_up: str  # the next most likely class at the verdict's step ("" when none)
    server: str  # the server kind the analyzer saw
    headline: str
    points: tuple[Point, ...] = ()  # every step, in load order

    def saturation(self) -> float:
        """Where the throughput saturates (the module's N*): the load at which the lowest step's
        tokens/s per unit of load, kept up, would reach the peak. NaN without a rated lowest step."""
        low = self.points[0] if self.points else None
        if low is None or not low.output_tps > 0 or not math.isfinite(self.peak_tps):
            return math.nan
        return self.peak_tps * low.load / low.output_tps

    def saturation_text(self) -> str:
        """The saturation load, in users; ">= N" when the throughput was still rising at the top
        load measured (the ceiling may be higher still)."""
        top = self.points[-2:]
        rising = len(top) == 2 and top[1].output_tps >= self.peak_tps and top[0].output_tps < RISING * top[1].output_tps
        return (">= " if rising else "") + format_number(self.saturation(), 2)

    def knee_text(self) -> str:
        """The knee as the table prints it: its load, or "none (>= N)"."""
        if self.knee:
            return format_number(self.knee_load)
        return f"none (>= {format_number(self.knee_load)})" if math.isfinite(self.knee_load) else "none"


def figures_of(values: RunValues, analysis: Analysis) -> Figures:
    """The knee (the analyzer's), the peak step and the verdict of one measured run."""
    overall = analysis.overall
    loads = {s.index: s.target for s in analysis.steps}
    knee = next((s for s in analysis.steps if s.index == overall.knee_step), None)
    focus = knee or (analysis.steps[-1] if analysis.steps else None)
    peak = _peak_step(values)
    return Figures(
        knee=knee.label if knee else "",
        knee_load=knee.target if knee else max(loads.values(), default=math.nan),
        peak=peak.label if peak else "",
        peak_tps=peak.value("output_tps") if peak else math.nan,
        goodput=peak.value("goodput") if peak and peak.summary.goodput is not None else math.nan,
        constraint=overall.constraint,
        runner_up=focus.runner_up.constraint if focus and focus.runner_up else "",
        server=overall.server,
        headline=overall.headline,
        points=tuple(
            sorted(
                (
                    Point(s.label, s.summary.target, s.value("output_tps"), s.value("tps_user", "p50"))
                    for s in values.steps
                ),
                key=lambda p: p.load,
            )
        ),
    )


@dataclass
class Measured:
    """One configuration of `loadlab tune`: its flags, run folder and status (measured, resumed:
    measured by an earlier tune, failed, interrupted; base: the run a verification tests), why, and
    its figures when measured."""

    name: str
    values: dict[str, str]
    folder: str
    status: str
    why: str = ""
    figures: Figures | None = None


@dataclass(frozen=True)
class Verification:
    """One turned knob judged: the figures before and after, the change of the peak throughput
    with its interval, and the outcome in words."""

    constraint: str
    flag: str
    before_value: int
    after_value: int
    before: Figures
    after: Figures
    throughput: Change | None  # peak output tokens/s, after against before (None: no peak)
    outcome: Outcome
    reason: str


def verify(
    constraint: str,
    flag: str,
    values: tuple[int, int],
    before: tuple[RunValues, Figures],
    after: tuple[RunValues, Figures],
    seed: int = 0,
) -> Verification:
    """Judge whether turning `flag` from values[0] to values[1] moved the plateau and the peak
    throughput as `constraint` predicts (the module's rules)."""
    (base_values, base), (new_values, new) = before, after
    b, n = _step(base_values, base.peak), _step(new_values, new.peak)
    change = step_change(b, n, "output_tps", seed=seed) if b and n else None
    before_n, after_n = base.saturation(), new.saturation()
    ratio = after_n / before_n if before_n > 0 else math.nan
    up, down = ratio > MOVED, ratio * MOVED < 1  # (False when either is unknown: NaN)
    call = change.call if change else ""
    small = change is not None and math.isfinite(change.change) and change.change < MIN_GAIN
    if up and call == IMPROVEMENT:
        outcome = VERIFIED
    elif call == REGRESSION or (call == NO_CHANGE and small):
        outcome = REFUTED
    else:
        outcome = UNDECIDED
    moved = " (moved up)" if up else " (moved down)" if down else " (did not move up)"
    level = f"throughput saturates at {base.saturation_text()} -> {new.saturation_text()} users{moved}"
    if change is None:
        tps = "no peak throughput to compare"
    else:
        tps = (
            f"peak output {format_number(change.base)} -> {format_number(change.new)} tok/s "
            f"({format_change(change.change, change.unit)}, 95 % interval {format_change(change.low, change.unit)} "
            f"to {format_change(change.high, change.unit)}, noise {format_change(change.noise, change.unit, '')}: "
            f"{change.call})"
        )
    knee = f"the analyzer's knee {base.knee_text()} -> {new.knee_text()}"
    return Verification(constraint, flag, values[0], values[1], base, new, change, outcome, f"{level}; {tps}; {knee}")


def _peak_step(values: RunValues) -> StepValues | None:
    """The step of the highest output tokens/s (None: no step has one)."""
    rated = [s for s in values.steps if math.isfinite(s.value("output_tps"))]
    return max(rated, key=lambda s: s.value("output_tps"), default=None)


def _step(values: RunValues, label: str) -> StepValues | None:
    return next((s for s in values.steps if s.label == label), None)
