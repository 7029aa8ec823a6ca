"""`loadlab timeline DIR`: a run second by second, client and server side by side."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from loadlab.errors import UserError


def timeline(
    folder: Path = typer.Argument(..., help="Run folder (also one cut off mid-run)."),
    interval: float = typer.Option(1.0, "--interval", help="Seconds per row."),
) -> None:
    """Print the run interval by interval: requests, tokens/s, TTFT/ITL p50, in flight, and the
    server's queue, KV usage, preemptions, GPU activity and collective share when recorded."""
    from loadlab.analyze.timeline import build_timeline
    from loadlab.cli.output import read_run
    from loadlab.report.console import table_console
    from loadlab.report.timeline import timeline_table

    if not (interval > 0 and math.isfinite(interval)):
        raise UserError(f"--interval must be a finite number > 0, got {interval}")
    run = read_run(folder)
    try:
        result = build_timeline(run, interval)
    except ValueError as e:
        raise UserError(str(e)) from None
    table_console().print(timeline_table(result, f"{folder}: every {interval:g} s", interval))


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(timeline)
