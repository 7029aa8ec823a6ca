"""What the commands share about a run: starting one (`run`, `sweep`, `diagnose`), its exit code
(docs/run-folder.md), and what is printed and written when it ends: the summary table, the
analysis (also `analyze`, `simulate`) and the gate's checks (also `gate`). Not a command: no
command module imports another; they share this (tests/test_layering.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from loadlab.analyze.analysis import Analysis
    from loadlab.analyze.peaks import Peaks
    from loadlab.analyze.roofline import ModelSize
    from loadlab.conductor.runloop import RunOutcome
    from loadlab.config import RunConfig
    from loadlab.gate.checks import GateResult
    from loadlab.metrics.slo import SloSpec

EXIT_INTERRUPTED = 130
EXIT_CODES = {"error-budget": 3, "rejected": 4, "write-error": 5}  # by RunOutcome.cause
EXIT_DEGRADED = 6


def prepare_run(cfg: RunConfig, out: Path | None, streams: int, command: str) -> tuple[Path, Console]:
    """Check a complete config, choose and check the run folder, find the model and the API key
    (`cfg.api_key`, else the environment's),
    raise the open-file limit for `streams` connections (0: open loop's cap) and make Ctrl-C and
    SIGTERM end the run cleanly; prints the first line. Shared by `run`, `sweep` and `diagnose`."""
    from loadlab.errors import UserError
    from loadlab.store.run_folder import check_out_folder
    from loadlab.urls import without_credentials
    from loadlab.workload import make_workload
    from loadlab.workload.limits import check_in_flight, context_warning, request_bytes
    from loadlab.workload.scenario import check
    from loadlab.workload.trace import check_replay

    check(cfg, complete=True)
    if cfg.workload.dataset and not Path(cfg.workload.dataset).is_file():
        raise UserError(f"dataset file not found: {cfg.workload.dataset}")
    workload = make_workload(cfg.workload, cfg.api)  # fails here, not mid-run, on a bad data set
    check_replay(cfg)
    check_in_flight(cfg, max(request_bytes(cfg), workload.token_range()[1]))  # a data set's own lengths
    if cfg.api_key and cfg.parsed_url().has_credentials:
        raise UserError(
            "--url holds credentials (sent as Basic auth) and --api-key is set: both are "
            "the Authorization header; drop one"
        )
    folder = out or Path(cfg.out or Path("runs") / time.strftime("%Y%m%d-%H%M%S"))
    check_out_folder(folder)
    cfg.out = str(folder)
    import_load_generator()
    from loadlab.client.discovery import advertised_context, api_key_from_env, api_key_variable, discover_model
    from loadlab.client.fdlimit import descriptor_warning, raise_open_file_limit
    from loadlab.terminal import inert_console, say
    from loadlab.workload.limits import OPEN_LOOP_MAX_IN_FLIGHT

    if not cfg.api_key and api_key_variable() and cfg.parsed_url().has_credentials:
        # Only one Authorization header: the URL's own credentials, given for this run, win.
        say("warning", f"--url holds credentials, sent as Basic auth: ${api_key_variable()} is not sent")
    else:
        cfg.api_key = cfg.api_key or api_key_from_env()
    if not cfg.model:
        cfg.model = discover_model(cfg.parsed_url(), cfg.api_key, min(cfg.timeout, 10.0))
    if cfg.token_count == "auto":
        from loadlab.collect.slots import slot_cap

        # llama.cpp merges a token that ends inside a UTF-8 character into the next chunk; asked,
        # its every chunk says how many tokens it has generated (its own field: sent to it alone).
        cfg.token_count = "timings" if slot_cap(cfg.parsed_url()) else "chunks"
    context = advertised_context(cfg.parsed_url(), cfg.api_key, min(cfg.timeout, 10.0), cfg.model)
    too_long = context_warning(workload.token_range(), context) if context else ""
    if too_long:
        say("warning", too_long)
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
        from loadlab.terminal import say

        say("error", outcome.reason)
        sys.exit(EXIT_CODES[outcome.cause])
    if outcome.status == "degraded":
        print(
            "error: a load-generator process died during the run (status degraded; see the warning above)",
            file=sys.stderr,
        )
        sys.exit(EXIT_DEGRADED)


def print_final_summary(folder: Path) -> None:
    """The summary table of the run, on stdout: the summary.json the run writer left, or, where
    it could not be written (a full disk), recomputed from what was saved."""
    from loadlab.analyze.summary import RunSummary, summarize
    from loadlab.errors import UserError
    from loadlab.report.console import print_summary, table_console
    from loadlab.store.reader import SUMMARY_JSON, load_run, read_stage_json
    from loadlab.terminal import say

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
    from loadlab.cli.running import analyze_folder
    from loadlab.report.console import table_console
    from loadlab.report.verdict import print_analysis

    print_analysis(analyze_folder(folder), table_console())


def analyze_folder(folder: Path, device: Peaks | None = None, model: ModelSize | None = None) -> Analysis:
    """Load the run (without per-token times, which the analysis does not need), analyze it and
    write analysis.json; a folder that cannot be written to only costs a warning line. `device`:
    a CPU server's peaks (None: calibrated here where the run needs them); `model`: the served
    model's size (None: as the run recorded it)."""
    from loadlab.analyze.analysis import save_analysis
    from loadlab.cli.output import read_run
    from loadlab.terminal import say

    analysis, failed = save_analysis(read_run(folder, without=("token_times",)), device, model)
    if failed:
        say("warning", failed)
    return analysis


def evaluate(
    folder: Path, spec: SloSpec | None, baseline: Path | None = None, max_regression: float = 0.0, seed: int = 0
) -> GateResult:
    """The gate's checks of the run; when they cannot be evaluated (an unreadable run folder, or
    any error of the gate itself) one `error:` line and a result in error: exit 2, written to
    JUnit like any other, never 1 (an SLO failed) and never a traceback."""
    from loadlab.errors import UserError
    from loadlab.gate.checks import gate_run, unevaluated
    from loadlab.terminal import say

    try:
        result = gate_run(folder, spec, baseline, max_regression, seed)
        for warning in result.warnings:  # as every reader of a run folder prints them
            say("warning", warning)
        return result
    except UserError as e:
        why = str(e)
    except Exception as e:  # CI must read "not gated", not "an SLO failed"
        why = f"the gate failed unexpectedly ({type(e).__name__}: {e})"
    say("error", why)
    return unevaluated(str(folder), why)


def finish_gate(result: GateResult, junit: Path | None = None, markdown: Path | None = None) -> None:
    """Print a gate's result and write the files asked for (also `loadlab run --slo`)."""
    from loadlab.errors import UserError
    from loadlab.gate.console import print_gate
    from loadlab.gate.junit import junit_xml
    from loadlab.gate.markdown import gate_markdown
    from loadlab.report.console import table_console

    print_gate(result, table_console())
    for path, text in ((junit, junit_xml), (markdown, gate_markdown)):
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text(result), encoding="utf-8")
            except OSError as e:
                raise UserError(f"cannot write {path}: {e.strerror or e}") from None
