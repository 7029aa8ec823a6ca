"""`loadlab sweep`: raise the load step by step until the knee, an SLO breach, errors or --max.

Exit codes as `loadlab run` (0 when the sweep stopped by itself, whatever the reason it found;
2 bad input; 3-6 and 130 when the run itself stopped, failed or was interrupted).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar

import typer

from loadlab.cli.options import (
    STEP_DURATION,
    ClientFlags,
    CollectorFlags,
    ConfigFlags,
    FlagGroup,
    WorkloadFlags,
    configure,
    takes_flags,
)

DEFAULT_MAX = 512  # users, or requests/s with --rate auto
DEFAULT_STEP_SECONDS = 20.0

if TYPE_CHECKING:
    from loadlab.conductor.stepping import Judgement
    from loadlab.conductor.sweep import SweepOutcome
    from loadlab.metrics.slo import SloSpec
    from loadlab.store.schema import Mode


@dataclass(frozen=True)
class SweepFlags(FlagGroup):
    """How far and how long a sweep goes: `sweep` and `diagnose` (conductor/sweep.py checks them)."""

    panel: ClassVar[str] = "Sweep"
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo",
            help="Stop at the first step that breaches these SLOs (inline or a TOML file, docs/slo.md), e.g. "
            "ttft_p99=2s,itl_p99=100ms.",
        ),
    ] = None
    max_load: Annotated[
        float, typer.Option("--max", help="Highest load to try: users (requests/s with `sweep --rate auto`).")
    ] = DEFAULT_MAX
    step_duration: Annotated[float, STEP_DURATION] = DEFAULT_STEP_SECONDS
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Most steps to run (default 12).")] = None


@takes_flags
def sweep(
    url: str = typer.Option(..., "--url", help="Endpoint base URL, e.g. http://127.0.0.1:8000."),
    rate: str | None = typer.Option(
        None,
        "--rate",
        help="auto: sweep the open-loop request rate instead of the concurrency.",
    ),
    start: float = typer.Option(1.0, "--start", help="First step's concurrency (or requests/s)."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/<timestamp>)."),
    *,
    limits: SweepFlags,
    workload: WorkloadFlags,
    client: ClientFlags,
    collectors: CollectorFlags,
) -> None:
    """Find the server's knee: concurrency 1, 2, 4, ... (or a rising rate with --rate auto), then
    bisect between the last good and the first bad step. A step is bad when the load generator
    limited it, more than 1 % of its requests failed, it breached --slo, or it is past the knee
    (throughput +<5 % for load +>=25 %). One run folder, analyzed at the end; prints why it stopped.
    The workload flags are `loadlab run`'s; a trace gives its lengths only (docs/sweep.md)."""
    from loadlab.cli.run import exit_on_outcome, print_final_analysis, print_final_summary
    from loadlab.errors import UserError

    if rate is not None and rate != "auto":
        raise UserError(f"--rate takes 'auto' in a sweep (it chooses the rates), got {rate!r}")
    outcome = start_sweep(url, "open" if rate else "closed", start, limits, out, "sweep", workload, client, collectors)
    folder = Path(outcome.folder)
    print_final_summary(folder)
    print_final_analysis(folder)
    print_sweep(outcome)
    exit_on_outcome(outcome.run)


def start_sweep(
    url: str, mode: Mode, start: float, flags: SweepFlags, out: Path | None, command: str, *groups: ConfigFlags
) -> SweepOutcome:
    """Check the flags (UserError, one line) and run the sweep; shared with `loadlab diagnose`."""
    from loadlab.cli.output import say
    from loadlab.cli.run import import_load_generator, prepare_run

    import_load_generator()
    from loadlab.conductor.sweep import run_sweep, sweep_config, sweep_limits
    from loadlab.config import RunConfig
    from loadlab.metrics.slo import read_slo

    limits = sweep_limits(mode, start, flags.max_load, flags.max_steps, flags.step_duration)
    spec = read_slo(flags.slo) if flags.slo is not None else None
    note = goodput_note(spec)
    if note:
        say("note", note)
    cfg = sweep_config(configure(RunConfig(), *groups, url=url, slo=spec.text if spec else None), limits)
    folder, console = prepare_run(cfg, out, int(limits.max_load) if mode == "closed" else 0, command)
    return run_sweep(cfg, folder, console, limits, spec)


def goodput_note(spec: SloSpec | None) -> str:
    """What to add when the SLO's per-request objectives would otherwise judge nothing ("" if fine)."""
    if spec is None or spec.per_request is None or any(o.metric == "goodput" for o in spec.objectives):
        return ""
    return (
        "per-request objectives (ttft=, itl=, tpot=, e2e=) only define goodput; add e.g. goodput=95% "
        "to judge steps by them"
    )


def print_sweep(outcome: SweepOutcome) -> None:
    """The sweep's steps as judged (load order), the line saying why it stopped and the knee by
    the analyzer's rule (the one its verdict and the report name)."""
    from rich.table import Table

    from loadlab.conductor.stepping import judge_all
    from loadlab.numbers import format_number, format_value
    from loadlab.report.console import table_console

    table = Table(title="sweep", title_justify="left")
    # Output tokens/s: the successful requests that ended in the step's steady-state window over
    # its length, the same figure as `loadlab summary`, the report and plan (docs/metrics.md).
    for name in ("step", "s", "ok", "tok/s", "user tok/s p50", "E2E p50 s", "errors", "judged"):
        table.add_column(name, justify="left" if name in ("step", "judged") else "right")
    judgements, knee = judge_all(outcome.results, outcome.limits.mode)
    for j in sorted(judgements, key=lambda j: (j.step.target, j.step.index)):
        d = j.step.derived
        if not j.measured:
            verdict = f"[yellow]{j.reason}[/yellow]"
        else:
            verdict = f"[red]{j.bad}[/red]: {j.reason}" if j.bad else f"good: {j.reason}"
        table.add_row(
            j.step.label,
            f"{j.step.seconds:g}",
            str(j.step.succeeded) + (f" +{j.step.aborted} cut off" if j.step.aborted else ""),
            format_number(d.get("output_tokens_per_s")),
            format_number(d.get("tokens_per_s_per_user_p50")),
            format_number(d.get("e2e_p50")),
            format_value(j.step.error_rate, "fraction"),
            verdict + (" [bold](the knee)[/bold]" if j is knee else ""),
        )
    console = table_console()
    console.print(table)
    decision = outcome.decision
    console.print(f"sweep stopped ({decision.stop}): {decision.reason}", highlight=False, markup=False)
    console.print(knee_line(decision.knee), highlight=False, markup=False)
    if decision.good is not None:
        console.print(
            f"highest good load: {decision.good.label}; plan capacity with `loadlab plan {outcome.folder} --users N`",
            highlight=False,
            markup=False,
        )
    print(f"run folder: {outcome.folder}", file=sys.stderr)


def knee_line(knee: Judgement | None) -> str:
    """Where the knee is, by the analyzer's saturation rule (docs/diagnosis.md)."""
    if knee is None:
        return "knee: none seen among the steps measured"
    return f"knee: {knee.step.label} ({knee.reason})"


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(sweep)
