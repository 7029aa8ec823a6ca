"""`loadlab sweep`: raise the load step by step until the knee, an SLO breach, errors or --max.

Exit codes as `loadlab run` (0 when the sweep stopped by itself, whatever the reason it found;
2 bad input; 3-6 and 130 when the run itself stopped, failed or was interrupted).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from loadlab.client.discovery import API_KEY_ENV

if TYPE_CHECKING:
    from loadlab.conductor.stepping import Judgement
    from loadlab.conductor.sweep import SweepOutcome
    from loadlab.metrics.slo import SloSpec
    from loadlab.store.schema import Mode

DEFAULT_MAX = 512  # users, or requests/s with --rate auto
DEFAULT_STEP_SECONDS = 20.0


def sweep(
    url: str = typer.Option(..., "--url", help="Endpoint base URL, e.g. http://127.0.0.1:8000."),
    slo: str | None = typer.Option(
        None,
        "--slo",
        help="Stop at the first step that breaches these SLOs (inline or a TOML file, docs/slo.md), e.g. "
        "ttft_p99=2s,itl_p99=100ms.",
    ),
    max_load: float | None = typer.Option(
        None,
        "--max",
        help=f"Highest concurrency (or rate) to try (default {DEFAULT_MAX}).",
    ),
    rate: str | None = typer.Option(
        None,
        "--rate",
        help="auto: sweep the open-loop request rate instead of the concurrency.",
    ),
    start: float = typer.Option(1.0, "--start", help="First step's concurrency (or requests/s)."),
    step_duration: float = typer.Option(DEFAULT_STEP_SECONDS, "--step-duration", help="Seconds per step."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Most steps to run (default 12)."),
    model: str | None = typer.Option(None, "--model", help="Model name; default: the first id from GET /v1/models."),
    api: str | None = typer.Option(
        None, "--api", help="chat | completions | embeddings | rerank (default chat; docs/workloads.md)."
    ),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/<timestamp>)."),
    input_len: str | None = typer.Option(None, "--input-len", help="Prompt tokens (as `loadlab run`)."),
    output_len: str | None = typer.Option(None, "--output-len", help="Output tokens (as `loadlab run`)."),
    workload: str | None = typer.Option(None, "--workload", help="synthetic | sharegpt | shared_prefix | multiturn."),
    dataset: str | None = typer.Option(None, "--dataset", help="ShareGPT-format JSON file (--workload sharegpt)."),
    timeout: float | None = typer.Option(None, "--timeout", help="Per-request timeout in seconds (default 300)."),
    processes: int | None = typer.Option(
        None,
        "--processes",
        help="Load-generator processes on this host (when a step comes out client-limited).",
    ),
    server_metrics: str | None = typer.Option(
        None,
        "--server-metrics",
        help="Server /metrics URL or path (default <url>/metrics, then /prometheus/metrics).",
    ),
    no_server_metrics: bool = typer.Option(False, "--no-server-metrics", help="Do not scrape the server's /metrics."),
    no_gpu: bool = typer.Option(False, "--no-gpu", help="Do not sample GPUs with NVML."),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        help=f"API key (else ${API_KEY_ENV[0]} or ${API_KEY_ENV[1]}); never written to disk.",
    ),
) -> None:
    """Find the server's knee: concurrency 1, 2, 4, ... (or a rising rate with --rate auto), then
    bisect between the last good and the first bad step. A step is bad when the load generator
    limited it, more than 1 % of its requests failed, it breached --slo, or it is past the knee
    (throughput +<5 % for load +>=25 %). One run folder, analyzed at the end; prints why it stopped."""
    from loadlab.cli.run import exit_on_outcome, print_final_analysis, print_final_summary

    outcome = start_sweep(
        url=url,
        slo=slo,
        max_load=max_load,
        rate=rate,
        start=start,
        step_duration=step_duration,
        max_steps=max_steps,
        model=model,
        api=api,
        out=out,
        input_len=input_len,
        output_len=output_len,
        workload=workload,
        dataset=dataset,
        timeout=timeout,
        processes=processes,
        server_metrics=server_metrics,
        no_server_metrics=no_server_metrics,
        no_gpu=no_gpu,
        api_key=api_key,
        command="sweep",
    )
    folder = Path(outcome.folder)
    print_final_summary(folder)
    print_final_analysis(folder)
    print_sweep(outcome)
    exit_on_outcome(outcome.run)


def start_sweep(
    *,
    url: str,
    slo: str | None,
    max_load: float | None,
    rate: str | None,
    start: float,
    step_duration: float,
    max_steps: int | None,
    model: str | None,
    api: str | None,
    out: Path | None,
    input_len: str | None,
    output_len: str | None,
    workload: str | None,
    dataset: str | None,
    timeout: float | None,
    processes: int | None,
    server_metrics: str | None,
    no_server_metrics: bool,
    no_gpu: bool,
    api_key: str | None,
    command: str,
) -> SweepOutcome:
    """Check the flags (UserError, one line) and run the sweep; shared with `loadlab diagnose`."""
    from loadlab.cli.output import say
    from loadlab.cli.run import prepare_run
    from loadlab.conductor.stepping import DEFAULT_MAX_STEPS, SweepLimits
    from loadlab.config import RunConfig
    from loadlab.errors import UserError
    from loadlab.metrics.slo import read_slo
    from loadlab.workload.scenario import apply_overrides

    if rate is not None and rate != "auto":
        raise UserError(f"--rate takes 'auto' in a sweep (it chooses the rates), got {rate!r}")
    mode: Mode = "open" if rate else "closed"
    top = DEFAULT_MAX if max_load is None else max_load
    steps = DEFAULT_MAX_STEPS if max_steps is None else max_steps
    if not (math.isfinite(start) and start > 0) or (mode == "closed" and not float(start).is_integer()):
        what = "a whole number of users" if mode == "closed" else "a rate"
        raise UserError(f"--start must be {what} > 0, got {start:g}")
    if not (math.isfinite(top) and top >= start) or (mode == "closed" and not float(top).is_integer()):
        what = "a whole number" if mode == "closed" else "a number"
        raise UserError(f"--max must be {what} >= --start ({start:g}), got {top:g}")
    if not (math.isfinite(step_duration) and step_duration > 0):
        raise UserError(f"--step-duration must be a number of seconds > 0, got {step_duration:g}")
    if steps < 1:
        raise UserError(f"--max-steps must be >= 1, got {steps}")
    spec = read_slo(slo) if slo is not None else None
    note = goodput_note(spec)
    if note:
        say("note", note)
    cfg = apply_overrides(
        RunConfig(),
        url=url,
        model=model,
        api=api,
        concurrency=None if rate else str(int(start)),
        rate=str(start) if rate else None,
        step_duration=step_duration,
        timeout=timeout,
        processes=processes,
        kind=workload,
        input_len=input_len,
        output_len=output_len,
        dataset=dataset,
        server_metrics=server_metrics,
        slo=spec.text if spec else None,
    )
    if no_server_metrics:
        cfg.server_metrics = None
    if no_gpu:
        cfg.gpu = False
    folder, console = prepare_run(cfg, out, api_key, int(top) if mode == "closed" else 0, command)
    from loadlab.conductor.sweep import run_sweep

    limits = SweepLimits(mode=mode, start=start, max_load=top, max_steps=steps, step_seconds=step_duration)
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
    from loadlab.numbers import format_number
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
            f"{j.step.error_rate:.1%}",
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
