"""`loadlab simulate --twin GPU:MODEL[:tpN]`: a run against the GPU twin in virtual time.

The load and workload flags are `loadlab run`'s, the engine flags `loadlab serve --twin`'s and
`loadlab plan --what-if`'s (cli/options.py). The run folder is an ordinary one, marked simulated in run.json
(docs/simulate.md says what is in its numbers).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import typer

from loadlab.cli.options import EngineFlags, LoadFlags, WorkloadFlags, configure, takes_flags
from loadlab.errors import UserError


@takes_flags
def simulate(
    twin: str = typer.Option(..., "--twin", help="GPU:MODEL[:tpN], e.g. h100:llama-3-8b (docs/twin.md)."),
    scenario: Path | None = typer.Option(None, "-c", "--scenario", help="TOML scenario file; flags override it."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/<timestamp>-sim)."),
    *,
    load: LoadFlags,
    timeout: float | None = typer.Option(None, "--timeout", help="Per-request timeout in simulated seconds."),
    workload: WorkloadFlags,
    engine: EngineFlags,
) -> None:
    """Simulate a `loadlab run` against `loadlab serve --twin` in virtual time (no HTTP, no sleeping).
    Seconds are simulated seconds; chat and completions only, no sessions (docs/simulate.md)."""
    from loadlab.cli.running import EXIT_INTERRUPTED, print_final_analysis, print_final_summary
    from loadlab.conductor.interrupts import deliver_interrupts_to_main
    from loadlab.conductor.simulate import SIMULATED_URL, check_simulable, simulate_run
    from loadlab.config import RunConfig
    from loadlab.numbers import format_value
    from loadlab.store.run_folder import check_out_folder
    from loadlab.workload import make_workload
    from loadlab.workload.scenario import check, load_scenario

    if importlib.util.find_spec("torch") is None:
        raise UserError("the simulation runs the reference server's engine: pip install 'loadlab[server]'")
    base = load_scenario(scenario) if scenario is not None else RunConfig()
    cfg = configure(base, load, workload, url=SIMULATED_URL, timeout=timeout)
    check(cfg, complete=True)
    check_simulable(cfg)
    make_workload(cfg.workload, cfg.api)  # a bad data set fails here, before the simulator starts
    folder = out or Path(cfg.out or Path("runs") / (time.strftime("%Y%m%d-%H%M%S") + "-sim"))
    check_out_folder(folder)
    cfg.out = str(folder)
    print(f"loadlab simulate -> {folder}  (twin {twin}, virtual time)", file=sys.stderr)
    deliver_interrupts_to_main()  # SIGTERM ends the simulation as Ctrl-C does
    try:
        result = simulate_run(cfg, engine.engine(twin), folder)
    except KeyboardInterrupt:
        left = f"; {folder} is incomplete" if folder.exists() else ""
        print(f"interrupted: the simulation stopped{left}", file=sys.stderr, flush=True)
        # At once: tearing down the interpreter (the analyzer's modules) took seconds on a busy host.
        os._exit(EXIT_INTERRUPTED)
    print(
        f"simulated {format_value(result.virtual_seconds, 's')} in "
        f"{format_value(result.wall_seconds, 's')} of wall time "
        f"({result.requests} requests){'; ' + result.reason if result.reason else ''}",
        file=sys.stderr,
    )
    print_final_summary(folder)
    print_final_analysis(folder)


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(simulate)
