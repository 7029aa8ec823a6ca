"""`loadlab diagnose [URL]`: the first thing to run against an unknown endpoint (without a URL, the
one on this host's usual ports): a sweep to the knee with every collector that answers, the
analysis, the HTML report; ends with the answer in plain words. `--serve CMD` starts the server
itself (and ends it); `--verify` then puts the verdict to the test (loadlab/conductor/tune.py)."""

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
    url: str | None = typer.Argument(
        None,
        help="Endpoint base URL, e.g. http://127.0.0.1:8000; without it (and without --serve), the one server "
        "listening on this host's usual ports (vLLM 8000, SGLang 30000, llama.cpp/TGI 8080, Ollama 11434, "
        "LM Studio 1234, TGI 3000).",
    ),
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
    its report, say where it is and end with the answer in plain words: one user's speed, the
    users held within the SLO (--slo, else ttft_p99=2s,tps_user_p50=10), what limits it and
    the change to try. The workload flags are `loadlab run`'s (a trace gives its lengths only)."""
    from loadlab.cli.running import exit_on_outcome
    from loadlab.errors import UserError

    if url is not None and serve is not None:
        raise UserError("diagnose takes the endpoint's URL or --serve CMD to start it, not both")
    if verify and serve is None:
        raise UserError("--verify needs --serve CMD: it starts the server again with the verdict's knob turned")
    if serve is None:
        url = url or _server_here(client)
        exit_on_outcome(_diagnose(url, out, report_file, limits, workload, client, collectors).run)
        return
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
    """The diagnosis of the endpoint at `url`: sweep, analysis, report, and the answer; printed."""
    from loadlab.analyze.answer import build_answer
    from loadlab.cli.running import analyze_folder, print_final_summary
    from loadlab.cli.sweeping import print_sweep, start_sweep
    from loadlab.conductor.placement import beside_server
    from loadlab.report.answer import print_answer
    from loadlab.report.console import table_console
    from loadlab.report.html import DEFAULT_FOLDER
    from loadlab.report.verdict import print_analysis
    from loadlab.store.reader import load_run

    with beside_server(url, collectors.server_pid or 0) as placement:
        for line in placement.lines:
            print(line, flush=True)
        if placement.server_pids and not collectors.server_pid:  # found on this host: its CPU is sampled too
            collectors = replace(collectors, server_pid=placement.server_pids[0])
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
    print(f"report: {report_path}" if report_path else "report: not written (see the line above)")
    answer = build_answer(run, analysis)
    if answer is not None:
        print_answer(answer, sys.stdout)
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


def _server_here(client: ClientFlags) -> str:
    """The URL of the one server on this host's usual ports, saying what it is (UserError when
    none or several answer: loadlab.client.discovery)."""
    from loadlab.cli.running import import_load_generator
    from loadlab.client.discovery import api_key_from_env, local_server
    from loadlab.terminal import inert

    import_load_generator()  # before urllib imports ssl: Locust patches sockets on import
    found = local_server(client.api_key or api_key_from_env())
    print(inert(f"no URL given: found {found.describe()}"))
    return found.url


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
