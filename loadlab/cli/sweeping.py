"""A sweep as `sweep` and `diagnose` start it and print it. Not a command: the commands share it
(tests/test_layering.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from loadlab.cli.options import CollectorFlags, ConfigFlags, SweepFlags, configure

if TYPE_CHECKING:
    from loadlab.conductor.stepping import Judgement, SweepLimits
    from loadlab.conductor.sweep import SweepOutcome
    from loadlab.config import RunConfig
    from loadlab.metrics.slo import SloSpec
    from loadlab.store.schema import Mode


def start_sweep(
    url: str, mode: Mode, start: float, flags: SweepFlags, out: Path | None, command: str, *groups: ConfigFlags
) -> SweepOutcome:
    """Check the flags (UserError, one line) and run the sweep; shared with `loadlab diagnose`."""
    from loadlab.cli.running import prepare_run
    from loadlab.conductor.sweep import run_sweep
    from loadlab.terminal import say

    limits, spec, cfg = sweep_setup(url, mode, start, flags, *groups)
    note = goodput_note(spec)
    if note:
        say("note", note)
    folder, console = prepare_run(cfg, out, int(limits.max_load) if mode == "closed" else 0, command)
    return run_sweep(cfg, folder, console, limits, spec)


def sweep_on_server(
    flags: SweepFlags, command: str, workload: ConfigFlags, client: ConfigFlags, collectors: CollectorFlags
) -> Callable[[str, Path, int], SweepOutcome]:
    """What `loadlab tune` runs against each server it starts (URL, run folder, the server's PID,
    whose CPU is sampled unless --server-pid names another): the sweep, the load generator placed
    beside the server as `diagnose` places it, its table and analysis.json."""

    def sweep_at(url: str, run: Path, pid: int) -> SweepOutcome:
        from loadlab.cli.running import analyze_folder
        from loadlab.conductor.placement import beside_server

        own = replace(collectors, server_pid=collectors.server_pid or pid)
        with beside_server(url, own.server_pid or 0) as placement:
            for line in placement.lines:
                print(line, flush=True)
            outcome = start_sweep(url, "closed", 1.0, flags, run, command, workload, client, own)
        print_sweep(outcome)
        analyze_folder(run)
        return outcome

    return sweep_at


def check_sweep_flags(flags: SweepFlags, *groups: ConfigFlags) -> None:
    """A closed-loop sweep's flags checked as `start_sweep` checks them (UserError, one line),
    before anything is started: `loadlab tune` starts its servers only for flags that will run."""
    from loadlab.workload.scenario import check

    _, _, cfg = sweep_setup("http://127.0.0.1:1", "closed", 1.0, flags, *groups)  # (the servers' URLs come later)
    check(cfg, complete=True)


def sweep_setup(
    url: str, mode: Mode, start: float, flags: SweepFlags, *groups: ConfigFlags
) -> tuple[SweepLimits, SloSpec | None, RunConfig]:
    """The sweep's limits, SLO and first config from its flags (UserError, one line, for a bad
    one); imports Locust first, as the conductor needs."""
    from loadlab.cli.running import import_load_generator

    import_load_generator()
    from loadlab.conductor.sweep import sweep_config, sweep_limits
    from loadlab.config import RunConfig
    from loadlab.metrics.slo import read_slo

    limits = sweep_limits(mode, start, flags.max_load, flags.max_steps, flags.step_duration)
    spec = read_slo(flags.slo) if flags.slo is not None else None
    return limits, spec, sweep_config(configure(RunConfig(), *groups, url=url, slo=spec.text if spec else None), limits)


def goodput_note(spec: SloSpec | None) -> str:
    """What to add when the SLO's per-request objectives would otherwise judge nothing ("" if fine)."""
    if spec is None or spec.per_request is None or any(o.metric == "goodput" for o in spec.objectives):
        return ""
    return (
        "per-request objectives (ttft=, itl=, tpot=, e2e=) only define goodput; add e.g. goodput=95% "
        "to judge steps by them"
    )


def print_sweep(outcome: SweepOutcome) -> None:
    """The sweep's steps as judged (load order), the line saying why it stopped and the knee by
    the analyzer's rule (the one its verdict and the report name)."""
    from rich.table import Table

    from loadlab.conductor.stepping import judge_all
    from loadlab.numbers import format_number, format_value
    from loadlab.report.console import table_console

    table = Table(title="sweep", title_justify="left")
    # Output tokens/s: the successful requests that ended in the step's steady-state window over
    # its length, the same figure as `loadlab summary`, the report and plan (docs/metrics.md).
    for name in ("step", "s", "ok", "tok/s", "user tok/s p50", "E2E p50 s", "errors", "judged"):
        table.add_column(name, justify="left" if name in ("step", "judged") else "right")
    judgements, knee = judge_all(outcome.results, outcome.limits.mode)
    for j in sorted(judgements, key=lambda j: (j.step.target, j.step.index)):
        d = j.step.derived
        if not j.measured:
            verdict = f"[yellow]{j.reason}[/yellow]"
        else:
            verdict = f"[red]{j.bad}[/red]: {j.reason}" if j.bad else f"good: {j.reason}"
        table.add_row(
            j.step.label,
            f"{j.step.seconds:g}",
            str(j.step.succeeded) + (f" +{j.step.aborted} cut off" if j.step.aborted else ""),
            format_number(d.get("output_tokens_per_s")),
            format_number(d.get("tokens_per_s_per_user_p50")),
            format_number(d.get("e2e_p50")),
            format_value(j.step.error_rate, "fraction"),
            verdict + (" [bold](the knee)[/bold]" if j is knee else ""),
        )
    console = table_console()
    console.print(table)
    decision = outcome.decision
    console.print(f"sweep stopped ({decision.stop}): {decision.reason}", highlight=False, markup=False)
    console.print(knee_line(decision.knee), highlight=False, markup=False)
    if decision.good is not None:
        console.print(
            f"highest good load: {decision.good.label}; plan capacity with `loadlab plan {outcome.folder} --users N`",
            highlight=False,
            markup=False,
        )
    print(f"run folder: {outcome.folder}", file=sys.stderr)


def knee_line(knee: Judgement | None) -> str:
    """Where the knee is, by the analyzer's saturation rule (docs/diagnosis.md)."""
    if knee is None:
        return "knee: none seen among the steps measured"
    return f"knee: {knee.step.label} ({knee.reason})"
