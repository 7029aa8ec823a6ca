"""`loadlab gate`: a run folder checked against SLOs and, optionally, against a baseline run.

Every check is one `Check` (one JUnit test case). The exit code follows from their statuses:
0 all pass; 1 a check failed; 2 the run is invalid for gating (cut off, client-limited, too few
requests) or a check cannot be evaluated (a step or analysis.json that is not there, a rate
that measured nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from loadlab.analyze.analysis import Analysis, read_analysis
from loadlab.analyze.compare import NOT_COMPARABLE, REGRESSION, Change, compare_runs, format_change
from loadlab.analyze.measures import RunValues, StepValues, measure
from loadlab.errors import UserError
from loadlab.metrics.slo import METRICS, Objective, SloSpec
from loadlab.numbers import format_value
from loadlab.store.reader import ANALYSIS_JSON, RunFolderError, load_run

PASS, FAIL, INVALID, ERROR, SKIPPED = "pass", "fail", "invalid", "error", "skipped"
VALIDITY, SLO, BASELINE = "validity", "slo", "baseline"
DIGITS = 4  # significant figures of a gate's values: one more than elsewhere, as they meet a limit


@dataclass(frozen=True)
class Check:
    """One check and its outcome. `status`: pass | fail | invalid (the run cannot be gated) |
    error (the check cannot be evaluated) | skipped (nothing to compare)."""

    kind: str  # validity | slo | baseline
    name: str
    status: str
    measured: str = ""
    detail: str = ""


@dataclass
class GateResult:
    """All checks of one gate, and what else the reader should know (e.g. workload differences)."""

    run: str
    checks: list[Check]
    notes: list[str] = field(default_factory=list)
    # What the run folder's reader warned of (a step ending before it starts, a part skipped):
    # the lines `summary`, `analyze` and `report` print for the same folder.
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        statuses = {c.status for c in self.checks}
        return 2 if statuses & {INVALID, ERROR} else 1 if FAIL in statuses else 0

    @property
    def verdict(self) -> str:
        return ("PASS", "FAIL", "INVALID")[self.exit_code]


def gate_run(
    folder: Path, spec: SloSpec | None, baseline: Path | None = None, max_regression: float = 0.0, seed: int = 0
) -> GateResult:
    """Check the run in `folder` (and its analysis.json); UserError when it (or the baseline) is
    not a run folder."""
    if spec is None and baseline is None:
        raise UserError("nothing to check: give --slo and/or --baseline")
    per_request = spec.per_request if spec else None
    base_run = load_run(baseline) if baseline is not None else None
    run = load_run(folder)
    base = measure(base_run, per_request) if base_run is not None else None
    result = check_run(measure(run, per_request), spec, _read_analysis(folder), base, max_regression, seed)
    result.warnings = run.warnings + [f"baseline {baseline}: {w}" for w in (base_run.warnings if base_run else [])]
    return result


def unevaluated(run: str, why: str) -> GateResult:
    """The result of a gate that could not evaluate the run (unreadable, or an error of the gate
    itself): one check in error, exit 2, never 1 (which says an SLO failed)."""
    return GateResult(run, [Check(VALIDITY, "run gated", ERROR, "not evaluated", why)])


def check_run(
    values: RunValues,
    spec: SloSpec | None,
    analysis: Analysis | str | None = None,
    base: RunValues | None = None,
    max_regression: float = 0.0,
    seed: int = 0,
) -> GateResult:
    """The gate's checks on a measured run (`analysis`: the run's analysis, None when there is
    none, or why it could not be read); with `base`, the baseline check too. For callers that
    hold the run in memory, e.g. a sweep judging each step as it goes."""
    objectives = spec.objectives if spec else ()
    result = GateResult(values.summary.path, _validity(values, objectives, spec, analysis))
    for objective in objectives:
        result.checks += _objective_checks(objective, values, analysis)
    if base is not None:
        comparison = compare_runs(base, values, max_regression, seed)
        result.checks += [_baseline_check(c, max_regression) for c in comparison.changes] or [
            Check(BASELINE, f"baseline {base.summary.path}", ERROR, detail="no step in common with the baseline")
        ]
        result.notes += comparison.differences
    return result


def _validity(
    values: RunValues, objectives: tuple[Objective, ...], spec: SloSpec | None, analysis: Analysis | str | None
) -> list[Check]:
    """The run may be gated: it finished, and each gated step has enough requests and was not
    limited by the load generator."""
    summary = values.summary
    finished = summary.status == "finished" and not summary.cut_off
    reason = f" ({summary.reason})" if summary.reason else ""
    checks = [
        Check(
            VALIDITY,
            "run finished",
            PASS if finished else INVALID,
            "cut off" if summary.cut_off else summary.status,
            "" if finished else f"run status {summary.status}{reason}: not a whole measurement",
        )
    ]
    minimum = spec.min_requests if spec else 1
    for step in _gated_steps(values, objectives):
        s = step.summary
        checks.append(
            Check(
                VALIDITY,
                f"at least {minimum} requests [{s.label}]",
                PASS if s.succeeded >= minimum else INVALID,
                f"{s.succeeded} succeeded",
                "" if s.succeeded >= minimum else "too few successful requests to judge the step",
            )
        )
        if spec is None or spec.check_client:
            checks.append(
                Check(
                    VALIDITY,
                    f"not client-limited [{s.label}]",
                    INVALID if s.client.limited else PASS,
                    "client-limited" if s.client.limited else "ok",
                    "; ".join(s.client.reasons or [f"under strain: {w}" for w in s.client.warnings]),
                )
            )
    if isinstance(analysis, Analysis) and (spec is None or spec.check_client):
        limited = analysis.overall.client_limited
        checks.append(
            Check(
                VALIDITY,
                "not client-limited [analysis.json]",
                INVALID if limited else PASS,
                "client-limited" if limited else "ok",
                analysis.overall.headline if limited else "",
            )
        )
    return checks


def _gated_steps(values: RunValues, objectives: tuple[Objective, ...]) -> list[StepValues]:
    """The steps some objective looks at (every step when one looks at each or at the whole run)."""
    if not objectives or any(o.step in (None, "overall") for o in objectives):
        return values.steps
    chosen = {s.summary.index for o in objectives for s in (_select(values, o.step) or [])}
    return [s for s in values.steps if s.summary.index in chosen]


def _select(values: RunValues, step: int | str | None) -> list[StepValues] | None:
    """The steps a selector names (None when it names none)."""
    if step is None:
        return values.steps
    if step == "overall":
        return [values.overall]
    found = [s for s in values.steps if (s.summary.index == step if isinstance(step, int) else s.label == step)]
    return found or None


def _objective_checks(objective: Objective, values: RunValues, analysis: Analysis | str | None) -> list[Check]:
    steps = _select(values, objective.step)
    if steps is None:
        labels = ", ".join(s.label for s in values.steps)
        return [Check(SLO, objective.text, ERROR, detail=f"the run has no step {objective.step} (steps: {labels})")]
    if objective.metric in ("verdict", "saturation"):
        return [_verdict_check(objective, s, analysis) for s in steps]
    return [_metric_check(objective, s) for s in steps]


def _metric_check(objective: Objective, step: StepValues) -> Check:
    name = f"{objective.text} [{step.label}]"
    if objective.metric == "goodput" and step.summary.slo_met is None:
        return Check(SLO, name, ERROR, detail="goodput needs a per-request objective (ttft, itl, tpot or e2e)")
    value = step.value(objective.metric, objective.stat, objective.share)
    unit = "fraction" if objective.share else METRICS[objective.metric].unit
    limit = format_value(objective.limit, unit, DIGITS)
    sense = ">=" if METRICS[objective.metric].higher_is_better else "<="
    unmeasured = step.unmeasured(objective.metric, objective.share)
    if unmeasured:  # not a failure of 0: nothing was measured to hold against the limit
        return Check(SLO, name, ERROR, "not measured", f"{unmeasured}; limit {sense} {limit}")
    if math.isnan(value):
        return Check(SLO, name, FAIL, "no value", f"nothing measured to compare with {sense} {limit}")
    return Check(
        SLO,
        name,
        PASS if objective.passes(value) else FAIL,
        format_value(value, unit, DIGITS),
        f"limit {sense} {limit}",
    )


def _verdict_check(objective: Objective, step: StepValues, analysis: Analysis | str | None) -> Check:
    name = f"{objective.text} [{step.label}]"
    if not isinstance(analysis, Analysis):
        why = analysis or f"no {ANALYSIS_JSON} in the run folder (run `loadlab analyze RUN` first)"
        return Check(SLO, name, ERROR, detail=f"not checkable: {why}")
    key = "constraint" if objective.metric == "verdict" else "saturation"
    index = step.summary.index
    entry = analysis.overall if index < 0 else next((s for s in analysis.steps if s.index == index), None)
    if entry is None:
        return Check(SLO, name, ERROR, detail=f"not checkable: {ANALYSIS_JSON} has no {key} for this step")
    found = entry.constraint if key == "constraint" else entry.saturation
    return Check(
        SLO,
        name,
        FAIL if found in objective.excluded else PASS,
        found,
        f"must not be {' or '.join(objective.excluded)}",
    )


def _baseline_check(change: Change, max_regression: float) -> Check:
    name = f"baseline {change.metric} [{change.step}]"
    base, new = format_value(change.base, change.unit, DIGITS), format_value(change.new, change.unit, DIGITS)
    if change.call == NOT_COMPARABLE:
        why = f"; {change.note}" if change.note else ""
        return Check(BASELINE, name, SKIPPED, "not comparable", f"baseline {base}, now {new}{why}")
    unit = change.unit
    measured = (
        f"{format_change(change.change, unit)} [{format_change(change.low, unit)}, {format_change(change.high, unit)}]"
    )
    detail = (
        f"baseline {base}, now {new}; noise {format_change(change.noise, unit, sign='')}, "
        f"allowed regression {format_change(max_regression, unit, sign='')}: {change.call}"
    )
    return Check(BASELINE, name, FAIL if change.call == REGRESSION else PASS, measured, detail)


def _read_analysis(folder: Path) -> Analysis | str | None:
    """The run's analysis; None when absent; a string saying why when unreadable."""
    try:
        return read_analysis(folder)
    except RunFolderError as e:
        return str(e)
