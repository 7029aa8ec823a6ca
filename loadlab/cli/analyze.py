"""`loadlab analyze RUN`: say what limits the server, per step and overall; write analysis.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from loadlab.analyze.analysis import Analysis


def analyze(
    folder: Path = typer.Argument(..., help="Run folder (also one cut off mid-run)."),
    as_json: bool = typer.Option(False, "--json", help="Print the analysis as JSON (the content of analysis.json)."),
    no_server_metrics: bool = typer.Option(
        False,
        "--no-server-metrics",
        help="Judge as if the run had no server metrics or GPU samples (the client's curves alone); "
        "analysis.json is left as it is.",
    ),
) -> None:
    """Find the bottleneck: each step's saturation and binding constraint, with evidence and advice.

    Rewrites RUN/analysis.json (docs/run-folder.md); exit code 2 with one line when RUN is not a
    run folder.
    """
    from loadlab.report.console import table_console
    from loadlab.report.verdict import print_analysis

    analysis = analyze_blackbox(folder) if no_server_metrics else analyze_folder(folder)
    if as_json:
        print(json.dumps(analysis.to_dict(), indent=2))
    else:
        print_analysis(analysis, table_console())


def analyze_folder(folder: Path) -> Analysis:
    """Load the run (without per-token times, which the analysis does not need), analyze it and
    write analysis.json; a folder that cannot be written to only costs a warning line."""
    from loadlab.analyze.analysis import analyze_run, write_analysis
    from loadlab.cli.output import read_run, say

    run = read_run(folder, without=("token_times",))
    try:
        return write_analysis(run)
    except OSError as e:
        say("warning", f"analysis.json not written ({type(e).__name__}: {e})")
        return analyze_run(run)


def analyze_blackbox(folder: Path) -> Analysis:
    """The analysis of the run with every server, Prometheus, GPU and host sample left out."""
    from loadlab.analyze.analysis import analyze_run
    from loadlab.analyze.blackbox import client_only
    from loadlab.store.reader import load_run

    return analyze_run(client_only(load_run(folder, without=("token_times",))))


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(analyze)
