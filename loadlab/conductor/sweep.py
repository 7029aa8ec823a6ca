"""`loadlab sweep`'s loop: run a step with the Conductor, read it back from the run folder, judge
it (stepping.py) and choose the next, until the sweep stops itself. Every step is one labelled
step of the same run folder; `sweep.json` beside it says how each step was judged and why the
sweep stopped.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console

from loadlab.analyze.analysis import StepVerdict, analyze_run
from loadlab.analyze.measures import measure
from loadlab.analyze.summary_types import StepSummary
from loadlab.conductor.interrupts import held
from loadlab.conductor.runloop import Conductor, RunOutcome, StepPlan
from loadlab.conductor.stepping import (
    DEFAULT_MAX_STEPS,
    SWEEP_JSON,
    Decision,
    StepResult,
    SweepLimits,
    judge_all,
    next_step,
)
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.gate.checks import FAIL, SLO, check_run
from loadlab.metrics.slo import SloSpec
from loadlab.metrics.verdicts import INTERRUPTED, RUN_STOPPED
from loadlab.numbers import format_number
from loadlab.store.meta import write_json_atomic
from loadlab.store.reader import load_run
from loadlab.store.schema import Mode
from loadlab.workload.limits import MAX_STEPS, too_big
from loadlab.workload.scenario import apply_overrides


@dataclass
class SweepOutcome:
    """How the run ended, why the sweep stopped, and what it measured step by step."""

    run: RunOutcome
    decision: Decision
    results: list[StepResult]
    folder: Path
    limits: SweepLimits


def sweep_limits(mode: Mode, start: float, top: float, max_steps: int | None, step_seconds: float) -> SweepLimits:
    """The sweep's limits from its flags (`max_steps` None: the default), or UserError naming the bad one."""
    steps = DEFAULT_MAX_STEPS if max_steps is None else max_steps
    closed = mode == "closed"
    if not (math.isfinite(start) and start > 0) or (closed and not float(start).is_integer()):
        raise UserError(f"--start must be {'a whole number of users' if closed else 'a rate'} > 0, got {start:g}")
    if not (math.isfinite(top) and top >= start) or (closed and not float(top).is_integer()):
        raise UserError(
            f"--max must be {'a whole number' if closed else 'a number'} >= --start ({start:g}), got {top:g}"
        )
    if not (math.isfinite(step_seconds) and step_seconds > 0):
        raise UserError(f"--step-duration must be a number of seconds > 0, got {step_seconds:g}")
    if steps < 1:
        raise UserError(f"--max-steps must be >= 1, got {steps}")
    if steps > MAX_STEPS:
        raise too_big("--max-steps", steps, MAX_STEPS, "steps")
    return SweepLimits(mode=mode, start=start, max_load=top, max_steps=steps, step_seconds=step_seconds)


def sweep_config(config: RunConfig, limits: SweepLimits) -> RunConfig:
    """The run config a sweep starts from: its first step's load and length. UserError for a
    workload setting the sweep cannot keep: a trace's clock (a sweep sets the load itself and
    takes a trace's lengths only, docs/sweep.md)."""
    if config.workload.kind == "trace" and config.workload.trace_speed != 1:
        raise UserError(
            "--trace-speed sets a trace's clock, which a sweep does not keep (it sets the load and takes "
            "the trace's lengths only): leave it out"
        )
    closed = limits.mode == "closed"

    def at(load: float) -> RunConfig:
        steps = [int(load)] if closed else [load]
        return apply_overrides(
            config,
            concurrency=steps if closed else [],
            rate=[] if closed else steps,
            step_duration=limits.step_seconds,
        )

    try:  # the highest step must keep the bounds too (docs/workloads.md, Bounds)
        at(limits.max_load)
    except UserError as e:
        raise UserError(f"--max {limits.max_load:g}: {e}") from None
    return at(limits.start)


def run_sweep(
    config: RunConfig, folder: Path, console: Console, limits: SweepLimits, spec: SloSpec | None
) -> SweepOutcome:
    """Sweep the load as stepping.py decides, writing one run folder and its sweep.json."""
    with held():  # an interrupt now ends the sweep at its first step's first check, folder closed
        conductor = Conductor(config, folder, console, limits.mode)
    results: list[StepResult] = []
    decision = next_step(results, limits)
    try:
        while decision.next_target is not None:
            plan = step_plan(len(results), decision.next_target, limits.mode, decision.seconds or limits.step_seconds)
            if not (conductor.run_step(plan) and conductor.pause()):
                why = conductor.breach.reason if conductor.breach else "the run folder could not be written"
                decision = Decision(None, RUN_STOPPED, f"the run stopped itself at {plan.label}: {why}")
                break
            try:
                results.append(read_step(Path(folder), plan, spec))
            except (UserError, OSError, ValueError, KeyError) as e:  # what was measured stays in the folder
                decision = Decision(
                    None,
                    RUN_STOPPED,
                    f"could not read {plan.label} back from the run folder "
                    f"({type(e).__name__}: {e}): the sweep ends here",
                )
                break
            decision = next_step(results, limits)
    except KeyboardInterrupt:
        conductor.interrupt()
        decision = Decision(None, INTERRUPTED, "interrupted")
    with held():  # a second interrupt must not leave the run folder open
        outcome = conductor.close()
    if outcome.cause == "error-budget" and decision.stop != RUN_STOPPED:
        # Judged over a whole step at the run's end: the sweep judged that step by its own,
        # stricter errors rule and stopped by itself, which exits 0 (docs/sweep.md).
        outcome = RunOutcome(outcome.status)
    try:
        write_sweep_json(Path(folder), limits, decision, results)
    except OSError as e:  # what was measured is in the run folder already
        console.print(f"warning: {SWEEP_JSON} not written ({e.strerror or e})", highlight=False)
    return SweepOutcome(outcome, decision, results, Path(folder), limits)


def step_plan(index: int, target: float, mode: Mode, seconds: float) -> StepPlan:
    """One sweep step: a time-bounded closed- or open-loop step labelled like `loadlab run`'s."""
    name = "concurrency" if mode == "closed" else "rate"
    return StepPlan(index, f"{name}={target:g}", mode, target, seconds, 0)


def read_step(folder: Path, plan: StepPlan, spec: SloSpec | None) -> StepResult:
    """The step just run, read back from the run folder: the analyzer's derived values, its error
    rate, the SLO checks it failed (the gate's checks) and whether the client limited it."""
    return read_steps(folder, [plan], spec)[0]


def read_steps(folder: Path, plans: list[StepPlan], spec: SloSpec | None) -> list[StepResult]:
    """The steps `plans` of the run folder, each read back as `read_step` reads one (the run
    loaded and analyzed once)."""
    run = load_run(folder)
    analysis = analyze_run(run)
    values = measure(run, spec.per_request if spec else None)
    checks = check_run(values, spec, analysis).checks if spec is not None else []
    results = []
    for plan in plans:
        step = next(s for s in values.steps if s.summary.index == plan.index)
        verdict = next(s for s in analysis.steps if s.index == plan.index)
        suffix = f" [{plan.label}]"
        failures = [
            f"{c.name.removesuffix(suffix)} measured {c.measured} ({c.detail})"
            for c in checks
            if c.kind == SLO and c.status == FAIL and c.name.endswith(suffix)
        ]
        error_rate = step.value("error_rate")
        client = step.summary.client
        # client_limited=any: not judged
        untrusted = client.limited and bool(client.untrusted) and (spec is None or spec.check_client)
        results.append(
            StepResult(
                plan.index,
                plan.label,
                plan.target,
                {k: d.value for k, d in verdict.derived.items()},
                0.0 if math.isnan(error_rate) else error_rate,
                failures,
                _undelivered(step.summary, verdict) if untrusted else "",
                step.summary.succeeded,
                plan.seconds,
                step.summary.aborted,
            )
        )
    return results


def _undelivered(summary: StepSummary, verdict: StepVerdict) -> str:
    """Why the load generator could not deliver a step, with the load it did deliver and what the
    server's side alone would name there."""
    client = summary.client
    unit = "req/s" if summary.mode == "open" else "users"
    text = f"{'; '.join(client.reasons + client.untrusted)}; delivered {format_number(summary.achieved)} {unit}"
    if verdict.server_side is not None:
        text += f", where the server's side alone names {verdict.server_side.constraint}"
    return text


def write_sweep_json(folder: Path, limits: SweepLimits, decision: Decision, results: list[StepResult]) -> None:
    """sweep.json: the limits, each step's judgement, the knee and why the sweep stopped."""
    judgements, _ = judge_all(results, limits.mode)
    steps = [
        {
            "index": j.step.index,
            "label": j.step.label,
            "target": j.step.target,
            "seconds": j.step.seconds,
            "succeeded": j.step.succeeded,
            "aborted": j.step.aborted,
            "judged": j.measured,
            "bad": j.bad,
            "saturation": j.saturation,
            "reason": j.reason,
        }
        for j in judgements
    ]
    data = {
        "format": 2,
        "limits": asdict(limits),
        "stop": decision.stop,
        "reason": decision.reason,
        "good_step": decision.good.index if decision.good else None,
        "bad_step": decision.bad.step.index if decision.bad else None,
        "knee_step": decision.knee.step.index if decision.knee else None,
        "steps": steps,
    }
    write_json_atomic(folder / SWEEP_JSON, data)
