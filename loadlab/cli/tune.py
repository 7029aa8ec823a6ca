"""`loadlab tune --serve CMD`: start the server per configuration of its flags (a grid, or the
knob a verdict names with --verify RUN), sweep it as `loadlab sweep` does, end it by its PID;
a table of knee, goodput and verdict per configuration, tune.json and tune.html.

Exit codes: 0 every configuration measured; 1 one could not be (its server did not start, or its
run folder cannot be read: the table says why); 2 bad input (one line, before any server starts);
130 interrupted.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from loadlab.cli.options import ClientFlags, CollectorFlags, SweepFlags, WorkloadFlags, takes_flags
from loadlab.conductor.grid import DEFAULT_MAX_CONFIGS
from loadlab.metrics.verdicts import CONSTRAINTS


@takes_flags
def tune(
    serve: str | None = typer.Option(
        None,
        "--serve",
        help="The command that starts the server, with {port} (e.g. 'loadlab serve --preset tiny --port {port}'); "
        "a configuration's value goes where {name} stands, else it is appended as --name value.",
    ),
    grid: list[str] = typer.Option(
        [], "--grid", help="A server flag and its values, e.g. max-num-seqs=2,8,32 (repeatable: every combination)."
    ),
    grid_file: Path | None = typer.Option(
        None,
        "--grid-file",
        help="JSON or TOML: a table of flag = [values] (every combination) or a list of configurations.",
    ),
    verify: Path | None = typer.Option(
        None,
        "--verify",
        help="A run folder: turn the knob its verdict names one step, sweep again and say whether the "
        "verdict holds (verified, refuted, undecided).",
    ),
    claim: str = typer.Option(
        "",
        "--claim",
        help="With --verify: put this class to the test instead of RUN's verdict (e.g. scheduling), alone.",
    ),
    max_configs: int = typer.Option(
        DEFAULT_MAX_CONFIGS, "--max-configs", help="Refuse a grid of more configurations than this."
    ),
    resume: bool = typer.Option(False, "--resume", help="Skip the configurations already measured in --out."),
    knobs: bool = typer.Option(False, "--knobs", help="Print the knob each verdict turns, per engine, and exit."),
    start_timeout: float = typer.Option(
        300.0, "--start-timeout", help="Seconds a server may take to answer /health before it counts as failed."
    ),
    out: Path | None = typer.Option(None, "--out", help="Tune folder (default runs/<timestamp>-tune)."),
    report_file: Path | None = typer.Option(None, "--report", help="HTML page to write (default <out>/tune.html)."),
    *,
    limits: SweepFlags,
    workload: WorkloadFlags,
    client: ClientFlags,
    collectors: CollectorFlags,
) -> None:
    """Run a sweep per configuration of the server's flags, each on a server it starts and ends
    itself; with --verify RUN, put RUN's verdict to the test by turning the knob it names."""
    from loadlab.cli.running import EXIT_INTERRUPTED
    from loadlab.cli.sweeping import check_sweep_flags, sweep_on_server
    from loadlab.errors import UserError
    from loadlab.report.console import table_console
    from loadlab.report.tune import print_configurations, print_knobs, print_verifications

    console = table_console()
    if knobs:
        print_knobs(console)
        return
    if serve is None:
        raise UserError("tune needs --serve CMD: the command that starts the server, with {port}")
    if verify is not None and (grid or grid_file):
        raise UserError("--verify turns the verdict's knob itself: leave out --grid and --grid-file")
    if claim and verify is None:
        raise UserError("--claim names the class --verify RUN puts to the test: give --verify RUN too")
    if claim and claim not in CONSTRAINTS:
        raise UserError(f"--claim {claim!r} is not a class: one of {', '.join(CONSTRAINTS)}")
    if not start_timeout > 0:
        raise UserError(f"--start-timeout must be a number of seconds > 0, got {start_timeout:g}")
    if grid and grid_file:
        raise UserError("give the grid as --grid or as --grid-file, not both")
    check_sweep_flags(limits, workload, client, collectors)  # imports Locust first, as the conductor needs
    from loadlab.conductor import grid as grids, tune as tuning
    from loadlab.report.html.tune import write_tune_report
    from loadlab.store.run_folder import check_out_folder

    folder = out or Path("runs") / time.strftime("%Y%m%d-%H%M%S-tune")
    if not resume:
        check_out_folder(folder)
    if verify is None:
        values = grids.read_grid_file(grid_file) if grid_file else grids.cartesian(grids.parse_grid(grid))
        configs = grids.configurations(serve, values, max_configs)
    else:
        grids.check_command(serve, {})
    folder.mkdir(parents=True, exist_ok=True)
    from loadlab.conductor.interrupts import deliver_interrupts_to_main

    deliver_interrupts_to_main()  # SIGTERM too ends the server that runs, by its PID

    sweep_at = sweep_on_server(limits, "tune", workload, client, collectors)
    if verify is None:
        outcome = tuning.run_tune(serve, configs, folder, sweep_at, resume, start_timeout)
    else:
        outcome = tuning.verify_run(verify, serve, folder, sweep_at, start_timeout, claim=claim)
    print_configurations(outcome.results, console)
    print_verifications(outcome.verifications, console)
    try:
        page = write_tune_report(outcome.results, outcome.verifications, serve, report_file or folder / "tune.html")
        print(f"report: {page}")
    except UserError as e:
        print(f"warning: {e}", file=sys.stderr)
    print(f"tune folder: {folder} ({tuning.TUNE_JSON})", file=sys.stderr)
    if outcome.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if any(r.status == "failed" for r in outcome.results):
        sys.exit(1)


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(tune)
