"""`loadlab report RUN`: the run as one HTML file that opens anywhere, offline."""

from __future__ import annotations

from pathlib import Path

import typer


def report(
    folder: Path = typer.Argument(..., help="Run folder (also one cut off mid-run)."),
    output: Path | None = typer.Option(
        None, "-o", "--output", help="HTML file to write (default: reports/<run name>.html)."
    ),
) -> None:
    """Write the run's report: verdict, per-step table, load curve, latency CDFs, time series,
    errors, coverage and configuration, with every script inline. Prints the file's path."""
    from loadlab.cli.output import read_run
    from loadlab.report.html import DEFAULT_FOLDER, write_report

    run = read_run(folder)
    out = output or DEFAULT_FOLDER / f"{folder.resolve().name}.html"
    print(write_report(run, out))


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(report)
