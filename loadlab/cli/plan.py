"""`loadlab plan RUN --users N`: how many replicas N users need, and what each user then sees,
read off a sweep's measured curve (loadlab/analyze/capacity.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from loadlab.cli.options import DEFAULT_STEP_SECONDS, EngineFlags, WhatIfFlags, WorkloadFlags, configure, takes_flags

# From this many replicas on, the plan says that their adding up is assumed, not measured.
LARGE_FLEET = 1000

if TYPE_CHECKING:
    from rich.table import Table

    from loadlab.analyze.capacity import CapacityPlan, CurvePoint, Reading
    from loadlab.metrics.slo import Objective, SloSpec


@takes_flags
def plan(
    folder: Path | None = typer.Argument(
        None,
        help="Run folder of a concurrency sweep (loadlab sweep, or loadlab run --concurrency 1,2,4,...); "
        "not with --what-if.",
    ),
    users: int = typer.Option(..., "--users", help="Users to plan for."),
    think_time: str = typer.Option(
        "0",
        "--think-time",
        help="Seconds a user pauses between requests: a number or a distribution such as uniform:2:8 (its mean is "
        "used).",
    ),
    slo: str | None = typer.Option(
        None,
        "--slo",
        help="SLOs a replica must meet (inline or a TOML file, docs/slo.md), e.g. ttft_p99=2s,tps_user_p50=10.",
    ),
    what_if: str | None = typer.Option(
        None,
        "--what-if",
        help="GPU twins to compare, GPU:MODEL[:tpN],... (docs/twin.md): a simulated sweep of each, planned for "
        "--users, in one table and one HTML page.",
    ),
    *,
    workload: WorkloadFlags,
    simulation: WhatIfFlags,
    engine: EngineFlags,
) -> None:
    """Active streams = users x E2E / (E2E + think time) (Little's law); one replica's capacity is
    the highest measured concurrency meeting the SLOs (interpolated between steps); replicas =
    streams / capacity, rounded up; per-user tokens/s read off the curve. Nothing is extrapolated
    beyond the measured concurrencies: the plan says so instead. With --what-if, the curves come
    from simulated sweeps of GPU twins (docs/sweep.md)."""
    from loadlab.analyze.capacity import plan_capacity
    from loadlab.analyze.curve import curve_points
    from loadlab.cli.output import read_run
    from loadlab.cli.sweeping import goodput_note
    from loadlab.errors import UserError
    from loadlab.metrics.slo import read_slo
    from loadlab.report.console import table_console
    from loadlab.terminal import say
    from loadlab.workload.distributions import parse_seconds
    from loadlab.workload.limits import MAX_PLAN_USERS, too_big

    if users < 1:
        raise UserError(f"--users must be >= 1, got {users}")
    if users > MAX_PLAN_USERS:
        raise too_big("--users", users, MAX_PLAN_USERS, "users")
    try:
        think = parse_seconds(think_time).mean
    except UserError as e:
        raise UserError(f"--think-time: {e}") from None
    spec = read_slo(slo) if slo is not None else None
    objectives, skipped = _usable(spec.objectives if spec else ())
    note = goodput_note(spec)
    if note:
        say("note", note)
    for text in skipped:
        say("note", f"SLO item '{text}' is not a per-step statistic the curve can hold; not planned on")
    if what_if is not None:
        if folder is not None:
            raise UserError("plan reads either a run folder or --what-if's simulated sweeps, not both")
        _what_if(what_if, users, think, spec, objectives, workload, simulation, engine)
        return
    if folder is None:
        raise UserError("plan needs a run folder of a sweep, or --what-if GPU:MODEL[:tpN],...")
    given = workload.given() + simulation.given() + engine.given()
    if given:
        raise UserError(f"{given[0]} is for --what-if's simulated sweeps; a run folder has its own")
    points, knee = curve_points(read_run(folder), objectives, spec, lambda text: say("note", text))
    result = plan_capacity(points, users, think, objectives, knee)
    console = table_console()
    console.print(_curve_table(points, objectives))
    console.print(plan_sentence(result, points), highlight=False, markup=False)


def _what_if(
    text: str,
    users: int,
    think: float,
    spec: SloSpec | None,
    objectives: tuple[Objective, ...],
    workload: WorkloadFlags,
    flags: WhatIfFlags,
    engine: EngineFlags,
) -> None:
    """The specs, their engines, the sweeps' config and limits from the flags (UserError, one line,
    before any sweep); then the conductor sweeps and plans each (conductor/whatif.py)."""
    from loadlab.conductor.simulate import SIMULATED_URL
    from loadlab.conductor.whatif import parse_specs, what_if, whatif_config, whatif_limits
    from loadlab.config import RunConfig

    specs = parse_specs(text)
    seconds = DEFAULT_STEP_SECONDS if flags.step_duration is None else flags.step_duration
    limits = whatif_limits(users, flags.max_load, seconds)
    base = configure(RunConfig(), workload, url=SIMULATED_URL, slo=spec.text if spec else None)
    cfg = whatif_config(base, limits)
    what_if([engine.engine(s) for s in specs], cfg, limits, users, think, spec, objectives, flags.out, flags.report)


def _usable(objectives: tuple[Objective, ...]) -> tuple[tuple[Objective, ...], list[str]]:
    """The objectives a curve point can be judged on: statistics of each step (not verdicts,
    not items for one named step or the whole run)."""
    usable = tuple(o for o in objectives if o.metric not in ("verdict", "saturation") and o.step is None)
    return usable, [o.text for o in objectives if o not in usable]


def _curve_table(points: list[CurvePoint], objectives: tuple[Objective, ...]) -> Table:
    from rich.table import Table

    from loadlab.numbers import format_number

    table = Table(title="measured curve (one replica)", title_justify="left")
    for name in ("concurrency", "tok/s", "user tok/s p50", "E2E mean s", *(o.text for o in objectives)):
        table.add_column(name, justify="right")
    for p in points:
        marks = [
            f"{format_number(p.values[o.text], 4)} {'ok' if o.passes(p.values[o.text]) else 'BREACH'}"
            for o in objectives
        ]
        figures = (format_number(v) for v in (p.output_tps, p.user_tps, p.e2e))
        table.add_row(f"{p.concurrency:g}", *figures, *marks)
    return table


def plan_sentence(plan: CapacityPlan, points: list[CurvePoint]) -> str:
    """The plan in plain words, saying where a value was interpolated or is out of range."""
    from loadlab.analyze.capacity import KNEE
    from loadlab.numbers import format_number, format_value

    lo, hi = plan.measured_range
    think = f"with {plan.think_time:g} s think time" if plan.think_time > 0 else "sending back to back"
    lines = [
        f"{plan.users:,} users {think} keep ~{format_number(plan.streams, group=True)} streams busy "
        f"(busy share {format_value(plan.busy_share, 'fraction')}: E2E / (E2E + think time), Little's law)."
    ]
    peak, first, last = max(points, key=lambda p: p.output_tps), points[0], points[-1]
    a, b = first.user_tps, last.user_tps
    trend = "rose" if b > a else "fell" if b < a else "held" if a == b else "went"
    lines.append(
        "Aggregate tokens/s is not a fixed pie: dividing the peak, "
        f"{format_number(peak.output_tps, group=True)} tokens/s at "
        f"{peak.concurrency:g} streams, by {format_number(plan.streams, group=True)} streams says "
        f"{format_number(peak.output_tps / plan.streams)} "
        f"tokens/s each; measured, per-user speed {trend} from {format_number(a)} tokens/s at "
        f"{first.concurrency:g} stream{'s' if first.concurrency != 1 else ''} to {format_number(b)} at "
        f"{last.concurrency:g}{' as batches grew' if trend == 'fell' else ''}."
    )
    if not plan.limits:
        where = (
            "at the knee (where throughput stops growing with the load, the analyzer's rule)"
            if plan.capacity_how == KNEE
            else "where throughput peaked (no knee among the measured steps)"
        )
        lines.append(
            f"No per-step SLO to plan on: one replica's capacity is taken {where}, "
            f"{format_number(plan.capacity)} streams."
        )
    elif plan.replicas is None:
        breached = [lim.objective for lim in plan.limits if math.isnan(lim.concurrency)]
        lines.append(
            f"Even the lowest measured concurrency ({lo:g}) breaches {', '.join(breached)}: "
            "no replica count meets the SLO at this workload."
        )
        return "\n".join(lines)
    else:
        tight = min(plan.limits, key=lambda lim: lim.concurrency)
        how = {
            "interpolated": "interpolated between measured steps",
            "measured": f"at least: every measured step up to {hi:g} meets it",
        }.get(tight.how, tight.how)
        lines.append(
            f"One replica meets {', '.join(lim.objective for lim in plan.limits)} up to "
            f"{format_number(plan.capacity)} streams ({tight.objective} binds; {how})."
        )
    lines.append(
        f"So {plan.replicas:,} replica{'s' if plan.replicas != 1 else ''} "
        f"(~{format_number(plan.per_replica)} streams each); each user then sees {_tps(plan.user_tps, lo, hi)}."
    )
    if plan.replicas is not None and plan.replicas >= LARGE_FLEET:
        lines.append(
            f"Note: {plan.replicas:,} replicas is one replica's measured curve multiplied: that replicas add up "
            "(users spread evenly, nothing shared between them) is assumed, and nothing here measured it."
        )
    one = plan.user_tps_one_replica
    lines.append(
        f"All {plan.users:,} users on one replica (~{format_number(plan.streams_one_replica, group=True)} streams): "
        f"each would see {_tps(one, lo, hi)}."
    )
    return "\n".join(lines)


def _tps(reading: Reading, lo: float, hi: float) -> str:
    from loadlab.numbers import format_number

    if math.isnan(reading.value):
        return f"an unknown speed: {reading.how} ({lo:g}-{hi:g} streams), not extrapolated"
    note = " (interpolated)" if reading.how == "interpolated" else ""
    return f"~{format_number(reading.value)} tokens/s{note}"


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(plan)
