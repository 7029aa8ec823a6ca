"""`loadlab plan --what-if GPU:MODEL[:tpN],... --users N`: a simulated sweep per GPU twin, each
sized for N users by plan's rules, answered in one table and one HTML page.

Per spec: the sweep's steps (conductor/simsweep.py: `loadlab sweep`'s rules in virtual time)
into its own run folder under --out, the analyzer's verdict on it (analysis.json), the curve and
the capacity plan `loadlab plan RUN` reads from a sweep (analyze/curve.py, analyze/capacity.py).
The command (cli/plan.py) turns its flags into the specs' engines, the run config and the limits.
"""

from __future__ import annotations

import math
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

    from loadlab.analyze.whatif import WhatIf
    from loadlab.conductor.simulate import EngineSettings
    from loadlab.conductor.stepping import SweepLimits
    from loadlab.config import RunConfig
    from loadlab.metrics.slo import Objective, SloSpec

TP = re.compile(r"tp(\d+)")


def parse_specs(text: str) -> list[str]:
    """The comma-separated GPU:MODEL[:tpN] specs, lower case (UserError: empty, repeated, or not
    of that shape; which GPUs and models exist, the simulator says)."""
    from loadlab.errors import UserError

    specs = [s.strip().lower() for s in text.split(",")]
    if not any(specs) or not all(specs):
        raise UserError(f"--what-if takes GPU:MODEL[:tpN],... (e.g. h100:llama-3-8b,a100:llama-3-8b), not {text!r}")
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not all(parts) or (len(parts) == 3 and not TP.fullmatch(parts[2])):
            raise UserError(f"--what-if: {spec!r} is not GPU:MODEL[:tpN] (e.g. h100:llama-3-70b:tp4)")
    repeated = sorted({s for s in specs if specs.count(s) > 1})
    if repeated:
        raise UserError(f"--what-if names {repeated[0]} twice")
    return specs


def tensor_parallel(spec: str) -> int:
    """The GPUs one replica of `spec` takes (its tpN; 1 without)."""
    match = TP.fullmatch(spec.split(":")[-1])
    return int(match.group(1)) if match else 1


def what_if(
    engines: list[EngineSettings],
    cfg: RunConfig,
    limits: SweepLimits,
    users: int,
    think: float,
    slo: SloSpec | None,
    objectives: tuple[Objective, ...],
    out: Path | None,
    report: Path | None,
) -> None:
    """Check every spec's engine and run folder (UserError, one line, before any sweep), sweep
    each in virtual time with `cfg` (whatif_config) within `limits` (whatif_limits), plan N users
    on it, print the table and write the comparison page (`report`, default under reports/);
    the run folders go under `out` (default runs/<timestamp>-whatif)."""
    from loadlab.conductor.simulate import check_engine
    from loadlab.errors import UserError
    from loadlab.report.console import table_console
    from loadlab.report.html import DEFAULT_FOLDER
    from loadlab.report.html.whatif import write_whatif_report
    from loadlab.store.run_folder import check_out_folder
    from loadlab.terminal import say

    for settings in engines:
        try:
            check_engine(settings)
        except UserError as e:
            why = re.sub(r"^--twin( \S+)?: ", "", str(e).removeprefix("the simulation failed: "))
            raise UserError(f"--what-if {settings.twin}: {why}") from None
    base = out or Path("runs") / (time.strftime("%Y%m%d-%H%M%S") + "-whatif")
    folders = [base / settings.twin.replace(":", "_") for settings in engines]
    for folder in folders:
        check_out_folder(folder)
    answers: list[WhatIf] = []
    for settings, folder in zip(engines, folders, strict=True):
        print(f"loadlab plan --what-if: sweeping {settings.twin} in virtual time -> {folder}", file=sys.stderr)
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            answers.append(_answer(settings, folder, cfg, limits, users, think, slo, objectives))
        except UserError as e:  # the other specs' answers stand without this one
            say("warning", f"{settings.twin} left out of the table: {e}")
    if not answers:
        raise UserError("no spec's simulated sweep gave a curve to plan from (the warnings above say why)")
    console = table_console()
    console.print(whatif_table(answers, users))
    for a in answers:
        console.print(f"{a.spec}: {a.stop}", highlight=False, markup=False)
    say("note", "simulated: the engine's scheduling, KV cache and the twin's step times; no network or HTTP time")
    page = report or DEFAULT_FOLDER / f"{base.resolve().name}.html"
    try:
        print(f"report: {write_whatif_report(answers, users, slo, page)}")
    except UserError as e:  # the run folders and the table stand without it
        say("warning", str(e))


def whatif_limits(users: int, max_load: int | None, step_seconds: float) -> SweepLimits:
    """Each spec's sweep: closed loop from 1 user to --max (`max_load`, default the users), in steps
    of `step_seconds`, with room to double up to the top and then bisect."""
    from loadlab.conductor.stepping import DEFAULT_MAX_STEPS
    from loadlab.conductor.sweep import sweep_limits
    from loadlab.errors import UserError

    top = users if max_load is None else max_load
    if top < 1:
        raise UserError(f"--max must be >= 1 user, got {top}")
    # Doubling from 1 to the top takes log2(top) steps; leave the default's room to bisect after.
    steps = max(DEFAULT_MAX_STEPS, math.ceil(math.log2(top)) + DEFAULT_MAX_STEPS // 2)
    return sweep_limits("closed", 1.0, float(top), steps, step_seconds)


def whatif_config(base: RunConfig, limits: SweepLimits) -> RunConfig:
    """The sweeps' run config from `base` (the workload flags' config, its URL SIMULATED_URL),
    checked as `loadlab simulate` checks its own: UserError (one line) for what cannot be simulated."""
    from loadlab.conductor.simulate import check_simulable, check_sweep_size
    from loadlab.conductor.sweep import sweep_config
    from loadlab.workload import make_workload
    from loadlab.workload.scenario import check

    cfg = sweep_config(base, limits)
    check(cfg, complete=True)
    check_simulable(cfg)
    check_sweep_size(limits)
    make_workload(cfg.workload, cfg.api)  # a bad data set fails here, before any sweep
    return cfg


def _answer(
    engine: EngineSettings,
    folder: Path,
    cfg: RunConfig,
    limits: SweepLimits,
    users: int,
    think: float,
    slo: SloSpec | None,
    objectives: tuple[Objective, ...],
) -> WhatIf:
    """One spec: its simulated sweep, the analyzer's verdict, the curve and the plan."""
    from loadlab.analyze.analysis import save_analysis
    from loadlab.analyze.capacity import plan_capacity
    from loadlab.analyze.curve import curve_points
    from loadlab.analyze.whatif import WhatIf
    from loadlab.conductor.simsweep import simulate_sweep
    from loadlab.store.reader import load_run
    from loadlab.terminal import say

    outcome = simulate_sweep(cfg, engine, folder, limits, slo)
    run = load_run(folder)
    for warning in run.warnings:
        say("warning", warning)
    analysis, failed = save_analysis(run)
    if failed:
        say("warning", failed)
    points, knee = curve_points(run, objectives, slo, lambda text: say("note", text), analysis)
    at_knee = next((s for s in analysis.steps if s.index == analysis.overall.knee_step), None)
    return WhatIf(
        spec=engine.twin,
        tp=tensor_parallel(engine.twin),
        folder=folder,
        points=points,
        knee=knee,
        plan=plan_capacity(points, users, think, objectives, knee),
        constraint=at_knee.constraint if at_knee is not None else analysis.overall.constraint,
        headline=analysis.overall.headline,
        stop=f"sweep stopped ({outcome.decision.stop}): {outcome.decision.reason}",
    )


def whatif_table(answers: list[WhatIf], users: int) -> Table:
    """One row per spec: knee, users per replica within the SLOs, replicas and GPUs for `users`,
    per-user tokens/s there, what binds a replica's capacity and the analyzer's constraint at the knee."""
    from rich.table import Table

    from loadlab.numbers import DASH, format_number

    table = Table(title=f"what-if: {users:,} users (simulated)", title_justify="left")
    for name in ("spec", "knee", "users/replica", "replicas", "GPUs", "user tok/s", "capacity set by", "at the knee"):
        table.add_column(name, justify="left" if name in ("spec", "capacity set by", "at the knee") else "right")
    for a in answers:
        p = a.plan
        tps = p.user_tps.value if p.replicas else math.nan
        table.add_row(
            a.spec,
            "none seen" if a.knee is None else format_number(a.knee, group=True),
            format_number(a.users_per_replica, group=True),
            "none" if p.replicas is None else f"{p.replicas:,}",
            DASH if a.gpus is None else f"{a.gpus:,}",
            format_number(tps),
            a.binds,
            a.constraint,
        )
    return table
