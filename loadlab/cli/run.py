"""`loadlab run`: load-test an OpenAI-compatible endpoint and write a run folder.

Settings come from an optional scenario file (-c), then the flags, which override it.

Exit codes (the run's status is in run.json; see docs/run-folder.md):
  0    finished, and every step met its error budget (--max-error-rate)
  2    bad input: one line on stderr, nothing was sent
  3    a step's measured requests failed more often than --max-error-rate (status `stopped`
       when that ended the run early, `finished` when the step only missed it over all its requests)
  4    the endpoint rejected every request with the same HTTP 401/403/404 (status `stopped`)
  5    the run folder could not be written, e.g. a full disk (status `failed`)
  6    a load-generator process died during the run (--processes N; status `degraded`)
  130  interrupted by Ctrl-C or SIGTERM (status `interrupted`)
Codes 3-6 print one `error:` line on stderr; the summary of what was saved is printed as usual.

With --slo (or a scenario's [slo] table) the finished run is then gated like `loadlab gate`
(docs/slo.md), and a run that would exit 0 exits with the gate's code instead: 0 every check
passed, 1 a check failed, 2 the run is invalid for gating. Codes 3-6 and 130 keep precedence
(the gate's table is still printed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from loadlab.cli.options import ClientFlags, CollectorFlags, LoadFlags, WorkloadFlags, configure, takes_flags


@takes_flags
def run(
    url: str | None = typer.Option(
        None,
        "--url",
        help="Endpoint base URL, e.g. http://127.0.0.1:8000 (with or without /v1).",
    ),
    scenario: Path | None = typer.Option(None, "-c", "--scenario", help="TOML scenario file; flags override it."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/<timestamp>)."),
    *,
    load: LoadFlags,
    max_error_rate: str | None = typer.Option(
        None,
        "--max-error-rate",
        help="End the run when a step's measured requests fail more often than this (0-1, default 0.5, judged after "
        "20 requests); off for a deliberate fault test.",
    ),
    slo: str | None = typer.Option(
        None,
        "--slo",
        help="Gate the run on these SLOs (inline or a TOML file, docs/slo.md): exit 0 pass, 1 fail, 2 invalid run.",
    ),
    workload: WorkloadFlags,
    client: ClientFlags,
    collectors: CollectorFlags,
) -> None:
    """Load-test an endpoint: closed loop (--concurrency) or open loop (--rate), one step per value,
    or replay a trace on its own clock (--trace).

    Exit codes (docs/run-folder.md):
    0 finished within the error budget;
    2 bad input;
    3 a step's requests failed more often than --max-error-rate;
    4 the endpoint rejected every request (HTTP 401/403/404);
    5 the run folder could not be written (a full disk);
    6 a load-generator process died (--processes N);
    130 interrupted.
    With --slo, a run that would exit 0 exits with the gate's code: 0 pass, 1 a check failed,
    2 invalid for gating.
    """
    from loadlab.config import RunConfig
    from loadlab.metrics.slo import read_slo
    from loadlab.workload.scenario import load_scenario

    cfg = configure(
        load_scenario(scenario) if scenario is not None else RunConfig(),
        load,
        workload,
        client,
        collectors,
        url=url,
        max_error_rate=max_error_rate,
        slo=read_slo(slo).text if slo is not None else None,
    )
    from loadlab.cli.running import exit_on_outcome, prepare_run, print_final_analysis, print_final_summary

    folder, console = prepare_run(cfg, out, max(cfg.concurrency, default=0), "run")
    from loadlab.conductor.runloop import run_load

    outcome = run_load(cfg, folder, console)
    print_final_summary(folder)
    print_final_analysis(folder)
    gate_code = _gate(folder, cfg.slo) if cfg.slo and outcome.status != "interrupted" else 0
    exit_on_outcome(outcome)
    sys.exit(gate_code)


def _gate(folder: Path, slo: str) -> int:
    """Gate the run just written on its SLOs (the `loadlab gate` checks); returns the exit code."""
    from loadlab.cli.running import evaluate, finish_gate
    from loadlab.metrics.slo import parse_slo

    result = evaluate(folder, parse_slo(slo))
    finish_gate(result)
    return result.exit_code


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(run)
