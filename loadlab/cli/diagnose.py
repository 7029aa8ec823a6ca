"""`loadlab diagnose URL`: the first thing to run against an unknown endpoint: a sweep to the knee
with every collector that answers, the analysis, the HTML report; prints the verdict and the
report's path. `--serve CMD` starts the server itself (and ends it); `--verify` then puts the
verdict to the test (loadlab/conductor/tune.py)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from loadlab.cli.options import ClientFlags, CollectorFlags, SweepFlags, WorkloadFlags, takes_flags

if TYPE_CHECKING:
    from loadlab.conductor.sweep import SweepOutcome
    from loadlab.store.reader import RunData


@takes_flags
def diagnose(
    url: str | None = typer.Argument(None, help="Endpoint base URL, e.g. http://127.0.0.1:8000 (or --serve)."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/<timestamp>)."),
    report_file: Path | None = typer.Option(
        None,
        "--report",
        help="HTML report to write (default reports/<run name>.html).",
    ),
    serve: str | None = typer.Option(
        None,
        "--serve",
        help="Instead of a URL: start the server with this command ({port} where its port goes), diagnose "
        "it and end it by its PID; --out is then a tune folder (docs/tune.md).",
    ),
    verify: bool = typer.Option(
        False,
        "--verify",
        help="With --serve: then turn the knob the verdict names one step, sweep again and say whether the "
        "verdict holds (verified, refuted, undecided), as `loadlab tune --verify`.",
    ),
    *,
    limits: SweepFlags,
    workload: WorkloadFlags,
    client: ClientFlags,
    collectors: CollectorFlags,
) -> None:
    """Sweep the concurrency to the knee (as `loadlab sweep`) with the server's metrics (probed at
    /metrics, then /prometheus/metrics) and the GPUs when NVML answers; analyze the run, write
    its report, print the verdict and where the report is. The workload flags are `loadlab run`'s
    (a trace gives its lengths only)."""
    from loadlab.cli.running import exit_on_outcome
    from loadlab.errors import UserError

    if (url is None) == (serve is None):
        raise UserError("diagnose needs the endpoint's URL or --serve CMD to start it (one of them)")
    if verify and serve is None:
        raise UserError("--verify needs --serve CMD: it starts the server again with the verdict's knob turned")
    if url is not None:
        exit_on_outcome(_diagnose(url, out, report_file, limits, workload, client, collectors).run)
        return
    assert serve is not None
    _diagnose_served(serve, verify, out, report_file, limits, workload, client, collectors)


def _diagnose(
    url: str,
    out: Path | None,
    report_file: Path | None,
    limits: SweepFlags,
    workload: WorkloadFlags,
    client: ClientFlags,
    collectors: CollectorFlags,
) -> SweepOutcome:
    """The diagnosis of the endpoint at `url`: sweep, analysis, report; printed."""
    from loadlab.cli.running import analyze_folder, print_final_summary
    from loadlab.cli.sweeping import print_sweep, start_sweep
    from loadlab.conductor.placement import place_beside_server
    from loadlab.report.console import table_console
    from loadlab.report.html import DEFAULT_FOLDER
    from loadlab.report.verdict import print_analysis
    from loadlab.store.reader import load_run

    placement = place_beside_server(url, collectors.server_pid or 0)
    for line in placement.lines:
        print(line, flush=True)
    outcome = start_sweep(url, "closed", 1.0, limits, out, "diagnose", workload, client, collectors)
    folder = outcome.folder
    print_final_summary(folder)
    analysis = analyze_folder(folder)
    console = table_console()
    print_analysis(analysis, console)
    print_sweep(outcome)
    run = load_run(folder)
    for c in run.meta.coverage:
        if c.enabled:
            state = f"{c.ok_samples} samples" if c.ok_samples else "did not answer"
            console.print(
                f"collector {c.source}: {state}{f' ({c.error})' if c.error else ''}", highlight=False, markup=False
            )
    report_path = _write_report(run, report_file or DEFAULT_FOLDER / f"{folder.resolve().name}.html")
    console.print(f"verdict: {analysis.overall.headline}", highlight=False, markup=False)
    print(f"report: {report_path}" if report_path else "report: not written (see the line above)")
    return outcome


def _diagnose_served(
    serve: str,
    verify: bool,
    out: Path | None,
    report_file: Path | None,
    limits: SweepFlags,
    workload: WorkloadFlags,
    client: ClientFlags,
    collectors: CollectorFlags,
) -> None:
    """Start the server from `serve`, diagnose it, end it by its PID (loadlab/conductor/tune.py);
    with `verify`, then put the verdict to the test. Exit 1 when the server did not start, 130
    when interrupted."""
    import time

    from loadlab.cli.running import EXIT_INTERRUPTED
    from loadlab.cli.sweeping import check_sweep_flags, sweep_on_server
    from loadlab.report.console import table_console
    from loadlab.report.tune import print_verifications
    from loadlab.store.run_folder import check_out_folder

    check_sweep_flags(limits, workload, client, collectors)  # imports Locust first, as the conductor needs
    from loadlab.conductor import grid, tune as tuning
    from loadlab.conductor.interrupts import deliver_interrupts_to_main

    grid.check_command(serve, {})
    folder = out or Path("runs") / time.strftime("%Y%m%d-%H%M%S-diagnose")
    check_out_folder(folder)
    folder.mkdir(parents=True, exist_ok=True)
    deliver_interrupts_to_main()  # SIGTERM too ends the server that runs, by its PID

    def diagnose_at(url: str, run: Path, pid: int) -> SweepOutcome:
        own = replace(collectors, server_pid=collectors.server_pid or pid)
        return _diagnose(url, run, report_file or folder / "diagnose.html", limits, workload, client, own)

    result = tuning.run_configuration(serve, grid.Configuration({}), folder, diagnose_at)
    if result.status != tuning.MEASURED:
        sys.exit(EXIT_INTERRUPTED if result.status == "interrupted" else 1)
    if verify:
        sweep_at = sweep_on_server(limits, "diagnose --verify", workload, client, collectors)
        outcome = tuning.verify_run(Path(result.folder), serve, folder, sweep_at)
        print_verifications(outcome.verifications, table_console())
        print(f"verification: {folder / tuning.TUNE_JSON}", file=sys.stderr)
        if outcome.interrupted:
            sys.exit(EXIT_INTERRUPTED)


def _write_report(run: RunData, out: Path) -> Path | None:
    """The HTML report, or None with one line when it cannot be written."""
    from loadlab.errors import UserError
    from loadlab.report.html import write_report
    from loadlab.terminal import say

    try:
        return write_report(run, out)
    except UserError as e:
        say("warning", str(e))
        return None


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(diagnose)
