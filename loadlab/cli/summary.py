"""`loadlab summary DIR`: recompute a run folder's summary and print it (table or JSON)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from loadlab.analyze.analysis import Analysis


def summary(
    folder: Path = typer.Argument(..., help="Run folder (also one cut off mid-run)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of a table."),
    slo: str | None = typer.Option(
        None,
        "--slo",
        help="Per-request SLOs for goodput, e.g. ttft=500,itl=50ms,tpot=40,e2e=5s, and per-step ones for the "
        "answer's capacity, e.g. ttft_p99=2s (docs/slo.md; inline or a TOML file).",
    ),
    write: bool = typer.Option(False, "--write", help="Also rewrite DIR/summary.json with this summary."),
) -> None:
    """Summarize a run folder: latencies, throughput, errors and the client self-check, per step;
    for a run of several loads (a sweep), the answer in plain words last (as `loadlab diagnose`)."""
    from loadlab.analyze.answer import build_answer, per_step
    from loadlab.analyze.summary import summarize, write_summary
    from loadlab.cli.output import read_run
    from loadlab.errors import UserError
    from loadlab.metrics.slo import read_slo
    from loadlab.report.answer import print_answer
    from loadlab.report.console import print_summary, table_console

    spec = read_slo(slo) if slo is not None else None
    objectives = spec.per_request if spec else None
    if spec is not None and objectives is None and not per_step(spec):
        raise UserError(
            f"--slo {slo}: goodput needs a per-request objective (ttft, itl, tpot or e2e), the answer a "
            "per-step one (e.g. ttft_p99=2s)"
        )
    run = read_run(folder)
    result = write_summary(run, objectives) if write else summarize(run, objectives)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    print_summary(result, table_console())
    answer = build_answer(run, _analysis_of(folder), spec.text if spec else None)
    if answer is not None and answer.loads > 1:  # a sweep, or a run of several loads
        print_answer(answer, sys.stdout)


def _analysis_of(folder: Path) -> Analysis | None:
    """The run's analysis.json, or None (with a warning when it is there but unreadable)."""
    from loadlab.analyze.analysis import read_analysis
    from loadlab.store.reader import RunFolderError
    from loadlab.terminal import say

    try:
        return read_analysis(folder)
    except RunFolderError as e:
        say("warning", str(e))
        return None


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(summary)
