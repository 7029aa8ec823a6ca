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
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from loadlab.cli.options import ClientFlags, CollectorFlags, LoadFlags, WorkloadFlags, configure, takes_flags

if TYPE_CHECKING:
    from rich.console import Console

    from loadlab.conductor.runloop import RunOutcome
    from loadlab.config import RunConfig

EXIT_INTERRUPTED = 130
EXIT_CODES = {"error-budget": 3, "rejected": 4, "write-error": 5}  # by RunOutcome.cause
EXIT_DEGRADED = 6


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
    folder, console = prepare_run(cfg, out, max(cfg.concurrency, default=0), "run")
    from loadlab.conductor.runloop import run_load

    outcome = run_load(cfg, folder, console)
    print_final_summary(folder)
    print_final_analysis(folder)
    gate_code = _gate(folder, cfg.slo) if cfg.slo and outcome.status != "interrupted" else 0
    exit_on_outcome(outcome)
    sys.exit(gate_code)


def prepare_run(cfg: RunConfig, out: Path | None, streams: int, command: str) -> tuple[Path, Console]:
    """Check a complete config, choose and check the run folder, find the model and the API key
    (`cfg.api_key`, else the environment's),
    raise the open-file limit for `streams` connections (0: open loop's cap) and make Ctrl-C and
    SIGTERM end the run cleanly; prints the first line. Shared by `run`, `sweep` and `diagnose`."""
    from loadlab.errors import UserError
    from loadlab.urls import without_credentials
    from loadlab.workload import make_workload
    from loadlab.workload.scenario import check

    check(cfg, complete=True)
    if cfg.workload.dataset and not Path(cfg.workload.dataset).is_file():
        raise UserError(f"dataset file not found: {cfg.workload.dataset}")
    make_workload(cfg.workload, cfg.api)  # fails here, not mid-run, on a bad data set
    if cfg.api_key and cfg.parsed_url().has_credentials:
        raise UserError(
            "--url holds credentials (sent as Basic auth) and --api-key is set: both are "
            "the Authorization header; drop one"
        )
    folder = out or Path(cfg.out or Path("runs") / time.strftime("%Y%m%d-%H%M%S"))
    check_out_folder(folder)
    cfg.out = str(folder)
    import_load_generator()
    from loadlab.cli.output import say
    from loadlab.client.discovery import api_key_from_env, discover_model
    from loadlab.client.fdlimit import descriptor_warning, raise_open_file_limit
    from loadlab.client.users import OPEN_LOOP_MAX_IN_FLIGHT
    from loadlab.terminal import inert_console

    cfg.api_key = cfg.api_key or api_key_from_env()
    if not cfg.model:
        cfg.model = discover_model(cfg.parsed_url(), cfg.api_key, min(cfg.timeout, 10.0))
    if cfg.token_count == "auto":
        from loadlab.collect.slots import slot_cap

        # llama.cpp merges a token that ends inside a UTF-8 character into the next chunk; asked,
        # its every chunk says how many tokens it has generated (its own field: sent to it alone).
        cfg.token_count = "timings" if slot_cap(cfg.parsed_url()) else "chunks"
    streams = streams or OPEN_LOOP_MAX_IN_FLIGHT * cfg.processes
    warning = descriptor_warning(-(-streams // cfg.processes), raise_open_file_limit())
    if warning:
        say("warning", warning)

    # SIGTERM (a CI job's time limit, `kill`) ends the run like Ctrl-C: what is in flight is
    # recorded as aborted, and the run folder is closed with its summary.
    from loadlab.conductor.interrupts import deliver_interrupts_to_main

    deliver_interrupts_to_main()
    console = inert_console(stderr=True)
    console.print(
        f"loadlab {command} -> {folder}  ({without_credentials(cfg.url)}, model {cfg.model}, api {cfg.api})",
        highlight=False,
        markup=False,
    )
    return folder, console


def import_load_generator() -> None:
    """Import Locust, which patches sockets with gevent on import: before anything that opens one
    or imports ssl (the conductor's modules do, through the analyzer's)."""
    import locust  # noqa: F401


def exit_on_outcome(outcome: RunOutcome) -> None:
    """Exit with the code of a run that did not finish well (interrupted, stopped itself, failed,
    degraded; one `error:` line); return when it finished."""
    if outcome.status == "interrupted":
        sys.exit(EXIT_INTERRUPTED)
    if outcome.cause:
        from loadlab.cli.output import say

        say("error", outcome.reason)
        sys.exit(EXIT_CODES[outcome.cause])
    if outcome.status == "degraded":
        print(
            "error: a load-generator process died during the run (status degraded; see the warning above)",
            file=sys.stderr,
        )
        sys.exit(EXIT_DEGRADED)


def _gate(folder: Path, slo: str) -> int:
    """Gate the run just written on its SLOs (the `loadlab gate` checks); returns the exit code."""
    from loadlab.cli.gate import evaluate, finish_gate
    from loadlab.metrics.slo import parse_slo

    result = evaluate(folder, parse_slo(slo))
    finish_gate(result)
    return result.exit_code


def check_out_folder(folder: Path) -> None:
    """UserError unless `folder` is new or an empty folder: a run never mixes with other files."""
    from loadlab.errors import UserError
    from loadlab.store.reader import RUN_JSON

    if not folder.exists():
        return
    if not folder.is_dir():
        raise UserError(f"--out {folder} is a file, not a folder")
    if (folder / RUN_JSON).exists():
        raise UserError(f"{folder} already holds a run (run.json); choose another --out folder")
    try:
        empty = not any(folder.iterdir())
    except OSError as e:
        raise UserError(f"cannot read --out {folder}: {e.strerror or e}") from None
    if not empty:
        raise UserError(f"--out {folder} is a non-empty folder that is not a run folder; choose a new or empty one")


def print_final_summary(folder: Path) -> None:
    """The summary table of the run, on stdout: the summary.json the run writer left, or, where
    it could not be written (a full disk), recomputed from what was saved."""
    from loadlab.analyze.summary import RunSummary, summarize
    from loadlab.cli.output import say
    from loadlab.errors import UserError
    from loadlab.report.console import print_summary, table_console
    from loadlab.store.reader import SUMMARY_JSON, load_run, read_stage_json

    try:
        summary = RunSummary.from_dict(read_stage_json(folder, SUMMARY_JSON) or {})
    except (UserError, ValueError, KeyError, TypeError, AttributeError) as e:
        try:  # it could not be written (a full disk): recompute it from what was saved
            summary = summarize(load_run(folder))
        except (UserError, OSError, ValueError) as again:
            # The run and its records are on disk: a missing table must not end it with a traceback.
            say(
                "warning",
                f"no summary table ({folder / SUMMARY_JSON}: {type(e).__name__}; "
                f"{again}); `loadlab summary {folder}` recomputes it",
            )
            return
    print_summary(summary, table_console())


def print_final_analysis(folder: Path) -> None:
    """The bottleneck verdict of the run, on stdout, after writing it to analysis.json."""
    from loadlab.cli.analyze import analyze_folder
    from loadlab.report.console import table_console
    from loadlab.report.verdict import print_analysis

    print_analysis(analyze_folder(folder), table_console())


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(run)
