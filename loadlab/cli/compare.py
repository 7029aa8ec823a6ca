"""`loadlab compare A B [C ...]`: runs side by side against the first (the baseline)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer


def compare(
    folders: list[Path] = typer.Argument(
        ...,
        help="Run folders (or `loadlab tune`'s configuration folders): the first is the baseline, each other "
        "is compared with it.",
    ),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed (the same seed gives the same intervals)."),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print the comparisons as JSON (a list, one per run after the first).",
    ),
) -> None:
    """Compare runs per step and metric: change, 95 % interval, noise, and regression/improvement."""
    from loadlab.analyze.compare import compare_runs
    from loadlab.analyze.measures import measure
    from loadlab.cli.output import read_run
    from loadlab.errors import UserError
    from loadlab.report.compare import print_comparison
    from loadlab.report.console import table_console
    from loadlab.store.meta import json_safe
    from loadlab.store.run_folder import run_folder_in

    if len(folders) < 2:
        raise UserError("compare needs at least two run folders: BASELINE RUN [RUN ...]")
    runs = [measure(read_run(run_folder_in(f), named=True)) for f in folders]
    comparisons = [compare_runs(runs[0], other, seed=seed) for other in runs[1:]]
    if as_json:
        print(json.dumps(json_safe([asdict(c) for c in comparisons]), indent=2))
        return
    console = table_console()
    for comparison in comparisons:
        print_comparison(comparison, console)


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(compare)
