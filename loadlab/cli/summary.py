"""`loadlab summary DIR`: recompute a run folder's summary and print it (table or JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def summary(
    folder: Path = typer.Argument(..., help="Run folder (also one cut off mid-run)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of a table."),
    slo: str | None = typer.Option(
        None,
        "--slo",
        help="Per-request SLOs for goodput, e.g. ttft=500,itl=50ms,tpot=40,e2e=5s (docs/slo.md; inline or a TOML "
        "file).",
    ),
    write: bool = typer.Option(False, "--write", help="Also rewrite DIR/summary.json with this summary."),
) -> None:
    """Summarize a run folder: latencies, throughput, errors and the client self-check, per step."""
    from loadlab.analyze.summary import summarize, write_summary
    from loadlab.cli.output import read_run
    from loadlab.errors import UserError
    from loadlab.metrics.slo import read_slo
    from loadlab.report.console import print_summary, table_console

    objectives = read_slo(slo).per_request if slo is not None else None
    if slo is not None and objectives is None:
        raise UserError(f"--slo {slo}: goodput needs a per-request objective (ttft, itl, tpot or e2e)")
    run = read_run(folder)
    result = write_summary(run, objectives) if write else summarize(run, objectives)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print_summary(result, table_console())


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(summary)
