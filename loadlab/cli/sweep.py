"""`loadlab sweep`: raise the load step by step until the knee, an SLO breach, errors or --max.

Exit codes as `loadlab run` (0 when the sweep stopped by itself, whatever the reason it found;
2 bad input; 3-6 and 130 when the run itself stopped, failed or was interrupted).
"""

from __future__ import annotations

from pathlib import Path

import typer

from loadlab.cli.options import (
    ClientFlags,
    CollectorFlags,
    SweepFlags,
    WorkloadFlags,
    takes_flags,
)


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
    from loadlab.cli.running import exit_on_outcome, print_final_analysis, print_final_summary
    from loadlab.cli.sweeping import print_sweep, start_sweep
    from loadlab.errors import UserError

    if rate is not None and rate != "auto":
        raise UserError(f"--rate takes 'auto' in a sweep (it chooses the rates), got {rate!r}")
    outcome = start_sweep(url, "open" if rate else "closed", start, limits, out, "sweep", workload, client, collectors)
    folder = Path(outcome.folder)
    print_final_summary(folder)
    print_final_analysis(folder)
    print_sweep(outcome)
    exit_on_outcome(outcome.run)


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(sweep)
