"""`loadlab tune`'s loop: per configuration of the server's flags, start the server from the serve
command, wait for its health, run a sweep against it, end it by its PID; then a summary of what
each configuration measured (tune.json). Also the verify mode's one turned knob (knobs.py).

The configurations and their commands: grid.py. The tune folder holds one folder per
configuration: `server.log` and the sweep's run folder `run/`; and tune.json.
"""

from __future__ import annotations

import itertools
import json
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from loadlab.analyze.analysis import analyze_run, read_analysis
from loadlab.analyze.knobs import engine_of, knob_for
from loadlab.analyze.measures import RunValues, measure
from loadlab.analyze.verify import REFUTED, Figures, Measured, Verification, figures_of, verify
from loadlab.conductor.grid import Configuration, flag_value, render_command
from loadlab.conductor.stepping import SWEEP_JSON
from loadlab.errors import UserError
from loadlab.lab.processes import NotReady, end_child, free_port, start_child, wait_healthy
from loadlab.metrics.verdicts import INTERRUPTED
from loadlab.store.meta import json_safe, write_json_atomic
from loadlab.store.reader import load_run
from loadlab.store.run_folder import INNER_RUN
from loadlab.terminal import say

if TYPE_CHECKING:  # the sweep itself imports Locust: the caller's to import first
    from loadlab.conductor.sweep import SweepOutcome

TUNE_JSON = "tune.json"
SERVER_LOG = "server.log"
MEASURED = "measured"  # a configuration's status once its sweep ended (else resumed, failed, interrupted; base)
STARTUP_TIMEOUT = 300.0  # vLLM on CPU takes 1-2 minutes to start here

# Runs a sweep against the URL into the run folder (the CLI's `loadlab sweep`, with its flags);
# the PID is the server's, for its CPU samples.
Measure = Callable[[str, Path, int], "SweepOutcome"]


@dataclass
class TuneOutcome:
    """Every configuration's result, in order, and whether Ctrl-C ended the tune."""

    results: list[Measured] = field(default_factory=list)
    verifications: list[Verification] = field(default_factory=list)
    interrupted: bool = False


def run_tune(
    template: str,
    configs: list[Configuration],
    out: Path,
    run_sweep: Measure,
    resume: bool = False,
    start_timeout: float = STARTUP_TIMEOUT,
) -> TuneOutcome:
    """Run every configuration in turn (those measured before skipped with `resume`), writing
    tune.json after each; stops at Ctrl-C, after ending the server that runs."""
    outcome = TuneOutcome()
    for config in configs:
        result = run_configuration(template, config, out, run_sweep, resume, start_timeout)
        outcome.results.append(result)
        outcome.interrupted = result.status == "interrupted"
        write_tune_json(out, template, outcome)
        if outcome.interrupted:
            break
    return outcome


def run_configuration(
    template: str,
    config: Configuration,
    out: Path,
    run_sweep: Measure,
    resume: bool = False,
    start_timeout: float = STARTUP_TIMEOUT,
) -> Measured:
    """Start the server with the configuration's flags, sweep it, end it by its PID (also on
    Ctrl-C and on a failed start, whose log stays, with one line saying why)."""
    folder = out / config.name
    run = folder / INNER_RUN
    if resume and _swept(run):
        say("note", f"{config.name}: measured before ({run}), not run again (--resume)")
        return _measured(config, run, "resumed")
    if folder.exists():  # a configuration cut off before: kept beside, never overwritten
        folder.rename(_aside(folder))
    folder.mkdir(parents=True)
    port = free_port()
    args = render_command(template, config.values, port)
    log_path = folder / SERVER_LOG
    with log_path.open("wb") as log:
        log.write(f"$ {shlex.join(args)}\n".encode())
        log.flush()
        server = start_child(args, log, own_group=True)
        try:
            try:
                wait_healthy(f"http://127.0.0.1:{port}/health", server, start_timeout)
            except NotReady as e:
                why = f"{config.name}: the server did not start ({e}); its log: {log_path}"
                say("warning", why)
                return Measured(config.name, config.values, str(run), "failed", why)
            say("note", f"{config.name}: server PID {server.pid} on port {port}: {shlex.join(args)}")
            swept = run_sweep(f"http://127.0.0.1:{port}", run, server.pid)
        except KeyboardInterrupt:
            return Measured(config.name, config.values, str(run), "interrupted", "interrupted (Ctrl-C)")
        finally:
            end_child(server)
    if swept.run.status == "interrupted":
        return Measured(config.name, config.values, str(run), "interrupted", "interrupted (Ctrl-C)")
    return _measured(config, run, MEASURED)


def _swept(run: Path) -> bool:
    """Whether the run folder holds a sweep that ended by its own rules (not interrupted)."""
    try:
        return json.loads((run / SWEEP_JSON).read_text(encoding="utf-8")).get("stop") != INTERRUPTED
    except (OSError, ValueError, AttributeError):
        return False


def _aside(folder: Path) -> Path:
    for n in itertools.count(1):
        candidate = folder.with_name(f"{folder.name}.incomplete-{n}")
        if not candidate.exists():
            return candidate
    raise AssertionError("unreachable")


def _measured(config: Configuration, run: Path, status: str) -> Measured:
    """The configuration's figures read back from its run folder (failed, saying why, when they cannot be)."""
    try:
        values, figures = read_figures(run)
    except (UserError, OSError, ValueError, KeyError) as e:
        return Measured(config.name, config.values, str(run), "failed", f"cannot read {run}: {e}")
    return Measured(config.name, config.values, str(run), status, figures=figures)


def read_figures(run: Path) -> tuple[RunValues, Figures]:
    """A run folder's values and figures (its analysis.json when written, else analyzed here)."""
    data = load_run(run, without=("token_times",))
    analysis = read_analysis(run) or analyze_run(data)
    values = measure(data)
    return values, figures_of(values, analysis)


@dataclass(frozen=True)
class Turn:
    """A knob to turn for a class: the flag, and its value before and after one step."""

    constraint: str
    flag: str
    before: int
    after: int


def knob_turn(constraint: str, engine: str, template: str) -> Turn | str:
    """The turn of `constraint`'s knob on `engine` from the value the serve command gives it
    (else the engine's default), or why there is none."""
    knob = knob_for(constraint, engine)
    if knob is None:
        return f"no knob for {constraint} on {engine or 'an engine its command does not name'} (loadlab tune --knobs)"
    given = flag_value(template, knob.flag)
    current = given if given is not None else knob.default
    if current is None:
        return f"{knob.flag} has no default to turn from on {engine}: give it in --serve"
    try:
        value = int(float(current))
    except ValueError:
        return f"{knob.flag} {current!r} in --serve is not a number to turn"
    if knob.turned(value) == value:
        return f"{knob.flag} {value} cannot be turned further ({knob.what})"
    return Turn(constraint, knob.flag, value, knob.turned(value))


def verify_run(
    base: Path,
    template: str,
    out: Path,
    run_sweep: Measure,
    start_timeout: float = STARTUP_TIMEOUT,
    seed: int = 0,
    claim: str = "",
) -> TuneOutcome:
    """Put the verdict of run folder `base` to the test: turn its class's knob one step, sweep
    again, judge (verify.py); when refuted, the runner-up's knob the same way. `claim`: put that
    class to the test instead, alone (a rival reading of the run, which a refutation answers).
    UserError before anything starts when the class names no knob that can be turned."""
    base_values, before = read_figures(base)
    engine = engine_of(template) or before.server
    first = knob_turn(claim or before.constraint, engine, template)
    if isinstance(first, str):
        raise UserError(
            f"{'the claim' if claim else f'the verdict of {base}'} is {claim or before.constraint}: {first}"
        )
    # The run under test heads the table and the chart: its curve is what the turned knob should move.
    outcome = TuneOutcome([Measured("the verdict's run", {}, str(base), "base", figures=before)])
    turn: Turn | str = first
    while isinstance(turn, Turn):
        say("note", f"testing {turn.constraint}: {turn.flag} {turn.before} -> {turn.after}")
        result = run_configuration(
            template,
            Configuration({turn.flag.removeprefix("--"): str(turn.after)}),
            out,
            run_sweep,
            start_timeout=start_timeout,
        )
        outcome.results.append(result)
        if result.status != MEASURED:
            outcome.interrupted = result.status == "interrupted"
            break
        verification = verify(
            turn.constraint,
            turn.flag,
            (turn.before, turn.after),
            (base_values, before),
            read_figures(Path(result.folder)),
            seed,
        )
        outcome.verifications.append(verification)
        write_tune_json(out, template, outcome)
        tried = {v.constraint for v in outcome.verifications}
        if verification.outcome != REFUTED or claim or not before.runner_up or before.runner_up in tried:
            break
        turn = knob_turn(before.runner_up, engine, template)
        if isinstance(turn, str):
            say("note", f"the runner-up, {before.runner_up}: {turn}")
    write_tune_json(out, template, outcome)
    return outcome


def write_tune_json(out: Path, template: str, outcome: TuneOutcome) -> None:
    """tune.json: the serve command, each configuration's result and figures, any verification."""
    data = {
        "format": 1,
        "written_at": time.time(),
        "serve": template,
        "interrupted": outcome.interrupted,
        "configurations": [asdict(r) for r in outcome.results],
        "verifications": [asdict(v) for v in outcome.verifications],
    }
    write_json_atomic(out / TUNE_JSON, json_safe(data))
