"""The measured curve a capacity plan reads (`loadlab plan`, `plan --what-if`): one point per
closed-loop concurrency of a run, and the knee's concurrency by the analyzer's rule."""

from __future__ import annotations

from collections.abc import Callable

from loadlab.analyze.analysis import Analysis, analyze_run
from loadlab.analyze.capacity import CurvePoint
from loadlab.analyze.measures import measure, statistic
from loadlab.analyze.saturation import too_few
from loadlab.errors import UserError
from loadlab.metrics.slo import Objective, SloSpec
from loadlab.store.reader import RunData


def curve_points(
    run: RunData,
    objectives: tuple[Objective, ...],
    spec: SloSpec | None,
    note: Callable[[str], None],
    analysis: Analysis | None = None,
) -> tuple[list[CurvePoint], float | None]:
    """The measured curve of the run's closed-loop steps (one point per concurrency, the later
    step when one was run twice; a step too short to judge, by the analyzer's rule, or whose
    throughput measured nothing, is left out, told to `note`) and the knee's concurrency by the
    analyzer's rule (None: none seen; `analysis`: the run's, when the caller has it); UserError
    when there is nothing to plan from."""
    values = measure(run, spec.per_request if spec else None)
    by_load: dict[float, CurvePoint] = {}
    unjudged: list[str] = []
    for step in values.steps:
        s = step.summary
        if s.mode != "closed" or s.succeeded == 0 or not s.target > 0:
            continue
        few = too_few(s.succeeded) or (s.rates_unmeasured and f"no rate measured: {s.rates_unmeasured}")
        if few:
            unjudged.append(f"{s.label} ({few})")
            continue
        by_load[s.target] = CurvePoint(
            concurrency=s.target,
            output_tps=s.output_tokens_per_s,
            user_tps=step.value("tps_user", "p50"),  # the gate's tps_user_p50: one figure per step
            e2e=statistic(step.per_request["e2e"], "mean"),
            values={o.text: step.value(o.metric, o.stat, o.share) for o in objectives},
        )
    limited = [s.summary.label for s in values.steps if s.summary.client.limited]
    if limited:
        note(
            f"the client self-check flagged {', '.join(limited)}: their figures may be the load "
            "generator's, not the server's"
        )
    if not by_load:
        if unjudged:
            raise UserError(
                f"{run.path}: no closed-loop step measured enough to plan from ({unjudged[0]}): "
                "sweep again with a longer --step-duration"
            )
        raise UserError(
            f"{run.path} has no closed-loop step with a successful request: plan reads a "
            "concurrency sweep (loadlab sweep --url ...)"
        )
    if unjudged:
        note(f"not planned on: {'; '.join(unjudged)}")
    analysis = analysis or analyze_run(run)
    knee = next((s for s in analysis.steps if s.index == analysis.overall.knee_step), None)
    closed_knee = knee.target if knee is not None and knee.mode == "closed" and knee.target in by_load else None
    return [by_load[k] for k in sorted(by_load)], closed_knee
