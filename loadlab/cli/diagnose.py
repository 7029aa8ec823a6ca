"""`loadlab diagnose URL`: the first thing to run against an unknown endpoint: a sweep to the knee
with every collector that answers, the analysis, the HTML report; prints the verdict and the
report's path."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from loadlab.cli.sweep import DEFAULT_STEP_SECONDS
from loadlab.client.discovery import API_KEY_ENV

if TYPE_CHECKING:
    from loadlab.store.reader import RunData


def diagnose(
    url: str = typer.Argument(..., help="Endpoint base URL, e.g. http://127.0.0.1:8000."),
    slo: str | None = typer.Option(
        None,
        "--slo",
        help="Stop the sweep at the first step that breaches these SLOs (docs/slo.md).",
    ),
    max_load: float | None = typer.Option(None, "--max", help="Highest concurrency to try (default 512)."),
    step_duration: float = typer.Option(DEFAULT_STEP_SECONDS, "--step-duration", help="Seconds per step."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Most steps to run (default 12)."),
    model: str | None = typer.Option(None, "--model", help="Model name; default: the first id from GET /v1/models."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/<timestamp>)."),
    report_file: Path | None = typer.Option(
        None,
        "--report",
        help="HTML report to write (default reports/<run name>.html).",
    ),
    input_len: str | None = typer.Option(None, "--input-len", help="Prompt tokens (as `loadlab run`)."),
    output_len: str | None = typer.Option(None, "--output-len", help="Output tokens (as `loadlab run`)."),
    processes: int | None = typer.Option(None, "--processes", help="Load-generator processes on this host."),
    no_server_metrics: bool = typer.Option(
        False,
        "--no-server-metrics",
        help="Do not scrape the server: the verdict comes from the client's curves alone (docs/diagnosis.md).",
    ),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        help=f"API key (else ${API_KEY_ENV[0]} or ${API_KEY_ENV[1]}); never written to disk.",
    ),
) -> None:
    """Sweep the concurrency to the knee (as `loadlab sweep`) with the server's metrics (probed at
    /metrics, then /prometheus/metrics) and the GPUs when NVML answers; analyze the run, write
    its report, print the verdict and where the report is."""
    from loadlab.cli.analyze import analyze_folder
    from loadlab.cli.report import DEFAULT_FOLDER
    from loadlab.cli.run import exit_on_outcome, print_final_summary
    from loadlab.cli.sweep import print_sweep, start_sweep
    from loadlab.report.console import table_console
    from loadlab.report.verdict import print_analysis
    from loadlab.store.reader import load_run

    outcome = start_sweep(
        url=url,
        slo=slo,
        max_load=max_load,
        rate=None,
        start=1.0,
        step_duration=step_duration,
        max_steps=max_steps,
        model=model,
        api=None,
        out=out,
        input_len=input_len,
        output_len=output_len,
        workload=None,
        dataset=None,
        timeout=None,
        processes=processes,
        server_metrics=None,
        no_server_metrics=no_server_metrics,
        no_gpu=False,
        api_key=api_key,
        command="diagnose",
    )
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
    exit_on_outcome(outcome.run)


def _write_report(run: RunData, out: Path) -> Path | None:
    """The HTML report, or None with one line when it cannot be written."""
    from loadlab.cli.output import say
    from loadlab.errors import UserError
    from loadlab.report.html import write_report

    try:
        return write_report(run, out)
    except UserError as e:
        say("warning", str(e))
        return None


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(diagnose)
