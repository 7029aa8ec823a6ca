"""`loadlab sweep`'s loop in virtual time: the sweep's rules (stepping.py) choose the steps, the GPU
twin's simulator (simulate.py) runs them.

The simulator runs a fixed list of steps, so the sweep simulates each step it chooses after the
steps chosen before it (one run, users carrying on from step to step as in the run folder), judges
it with them, and once it stops simulates every step again, in the order chosen, into the one run
folder. So the steps the sweep decided on are the folder's steps, which sweep.json judges, the
analyzer reads and plan sizes from: a step simulated alone would start all its users at once,
and that opening burst of prefills would set its TTFT p99. The price: n steps cost about
n(n+1)/2 step simulations.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from loadlab.conductor.runloop import RunOutcome, StepPlan
from loadlab.conductor.simulate import EngineSettings, simulate_steps
from loadlab.conductor.stepping import Decision, StepResult, SweepLimits, judge_all, next_step
from loadlab.conductor.sweep import SweepOutcome, read_step, read_steps, step_plan, write_sweep_json
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.metrics.slo import SloSpec
from loadlab.metrics.verdicts import RUN_STOPPED
from loadlab.store.meta import FINISHED


def simulate_sweep(
    config: RunConfig, engine: EngineSettings, folder: Path, limits: SweepLimits, spec: SloSpec | None
) -> SweepOutcome:
    """Sweep the closed-loop load on the twin `engine` as stepping.py decides, writing the run
    folder `folder` (new or empty) and its sweep.json. A step whose simulation fails ends the
    sweep (`run-stopped`) with the steps before it; UserError when the first one fails."""
    plans: list[StepPlan] = []
    results: list[StepResult] = []
    decision = next_step(results, limits)
    with tempfile.TemporaryDirectory(prefix="loadlab-simsweep-") as scratch:
        while decision.next_target is not None:
            plan = step_plan(len(plans), decision.next_target, limits.mode, decision.seconds or limits.step_seconds)
            so_far = [*plans, plan]
            try:
                simulate_steps(_config(config, so_far), engine, so_far, Path(scratch) / str(plan.index))
                result = read_step(Path(scratch) / str(plan.index), plan, spec)
            except (UserError, OSError, ValueError, KeyError) as e:
                if not plans:
                    raise
                why = f"the simulation of {plan.label} failed ({e}): the sweep ends here"
                decision = Decision(None, RUN_STOPPED, why)
                break
            plans.append(plan)
            results.append(result)
            decision = next_step(results, limits)
    simulate_steps(_config(config, plans), engine, plans, folder)
    results = read_steps(folder, plans, spec)
    decision = dataclasses.replace(decision, knee=judge_all(results, limits.mode)[1])
    write_sweep_json(folder, limits, decision, results)
    return SweepOutcome(RunOutcome(FINISHED), decision, results, folder, limits)


def _config(config: RunConfig, plans: list[StepPlan]) -> RunConfig:
    """The run's config with the steps' loads (run.json records them)."""
    return dataclasses.replace(config, concurrency=[int(p.target) for p in plans], rate=[])
