"""Run one lab scenario for real: start its server (or use one shared with earlier scenarios), load
it with `loadlab run`, read the verdict.

Every process is a child started here and ended here by its PID, in a `finally`, within a time
limit: the server (SIGTERM, then SIGKILL; vLLM's whole process group), `loadlab run`
(SIGTERM past its limit, which ends the run like Ctrl-C with its records kept) and the client
scenario's rival processes (lab/rival.py: when the load's steps end). The verdict
comes from the run folder's analysis.json (docs/run-folder.md), written by `loadlab analyze RUN`
when the run did not leave one, and read back by the analyzer's own typed reader.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from loadlab.analyze.analysis import Analysis, read_analysis
from loadlab.collect.host import least_used_cores
from loadlab.lab.engines import VLLM, Engine, reference_engine
from loadlab.lab.processes import (
    NotReady,
    cores,
    end_child,
    free_port,
    freest_cores,
    placed,
    start_child,
    usable,
    wait_healthy,
)
from loadlab.lab.rival import starve_client
from loadlab.lab.scenarios import Scenario
from loadlab.metrics.verdicts import CLIENT, INSUFFICIENT_DATA
from loadlab.store.reader import ANALYSIS_JSON, RunFolderError

FULL_SECONDS = 30.0  # seconds per load step
SHORT_SECONDS = 12.0  # --short: enough for the analyzer's steady window on a busy 2-core host
MIN_SECONDS = 2.0  # --step-seconds below this leaves no steady window to judge
RUN_MARGIN = 90.0  # a run's limit: its steps plus this (start-up, drain, summary)
ANALYZE_TIMEOUT = 120.0

MATCH, MISMATCH, SKIPPED, FAILED = "match", "mismatch", "skipped", "failed"
# The client rule fired in a scenario about the server, whose server-side verdict is the expected
# one: the provocation worked, but this host could not keep the load generator unstarved.
CLIENT_LIMITED = "client_limited"


@dataclass
class Result:
    """One scenario's outcome: the expected class against the analyzer's verdict on its last step."""

    name: str
    expect: str  # the expected constraint; "" when only the saturation is judged
    expect_saturation: list[str]
    status: str  # match | client_limited | mismatch | skipped | failed
    constraint: str = ""
    saturation: str = ""
    confidence: float | None = None
    runner_up: str = ""
    server_side: str = ""  # a client-limited step: what the server-side evidence alone named
    headline: str = ""
    evidence: list[str] = field(default_factory=list)  # the chosen class's rows that spoke for it
    reason: str = ""  # why skipped or failed
    # The cores the server and the load generator could run on, read back from the processes
    # ("0", "0-1"; "" where not started): pinned apart, neither starves the other.
    server_cores: str = ""
    client_cores: str = ""
    # How the load generator was starved on purpose (the client scenario's rival process, lab/rival.py).
    client_rival: str = ""
    folder: str = ""
    seconds: float = 0.0  # wall time of the scenario, server start included

    @property
    def expected(self) -> str:
        """What the scenario expects, as the confusion table labels it."""
        return self.expect or "/".join(self.expect_saturation)

    @property
    def verdict(self) -> str:
        """The analyzer's answer in the same terms as `expected` (the saturation when only it is judged)."""
        return self.constraint if self.expect else self.saturation


@dataclass(frozen=True)
class Served:
    """A server running for one or more scenarios: where it answers, its PID, its log, and the
    cores it may run on."""

    url: str
    pid: int
    log: Path
    cores: str = ""
    # The host's cores, freest first when the server started: scenarios' cores are places in it.
    order: tuple[int, ...] = ()


@contextmanager
def serving(
    scenario: Scenario, engine: Engine, folder: Path, device: str, say: Callable[[str], None] = lambda line: None
) -> Iterator[Served]:
    """Start `engine`'s server with `scenario`'s flags (its log in folder/server.log), wait until
    it is healthy, and end it by its PID when the block ends; NotReady if it never got there."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = engine.command(scenario.server, port, device, scenario.twin)
    order = freest_cores() if scenario.server_cpus or scenario.client_cpus else ()
    pinned = usable(placed(scenario.server_cpus, order))
    env = engine.env_for(pinned, scenario.server)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "server.log", "wb") as log:
        server = start_child(args, log, scenario.server_nice, pinned, env=env, own_group=engine.name == VLLM)
    try:
        on = cores(server.pid)
        binds = "".join(f" {k}={v}" for k, v in env.items() if k not in engine.env)
        say(f"{scenario.name}: server {' '.join(args[3:])} (pid {server.pid}, cores {on or '?'}{binds})")
        wait_healthy(url + "/health", server, engine.ready_timeout)
        yield Served(url, server.pid, folder / "server.log", on, order)
    finally:
        end_child(server)


def run_scenario(
    scenario: Scenario,
    folder: Path,
    step_seconds: float,
    device: str,
    say: Callable[[str], None] = lambda line: None,
    engine: Engine | None = None,
    server: Served | None = None,
) -> Result:
    """Run `scenario` into `folder` (server.log, run.log and the run folder `run/`) and judge it:
    on `server` when one is given (a server shared with earlier scenarios: its log is linked),
    else on a server of `engine` (the reference server by default) started for it alone."""
    started = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    result = Result(scenario.name, scenario.expect or "", list(scenario.expect_saturation), FAILED, folder=str(folder))
    try:
        run = folder / "run"
        if server is not None:
            if server.log.parent != folder:  # the first scenario on a shared server holds its log
                (folder / "server.log").symlink_to(os.path.relpath(server.log, folder))
            code = _load(scenario, folder, run, server, step_seconds, device, say, result)
        else:
            with serving(scenario, engine or reference_engine(), folder, device, say) as served:
                code = _load(scenario, folder, run, served, step_seconds, device, say, result)
        if not (run / "run.json").exists():
            result.reason = f"loadlab run wrote no run folder (exit code {code}; see {folder / 'run.log'})"
        else:
            _judge(result, _analysis(run), scenario)
    except (LabFailure, NotReady) as e:
        result.reason = str(e) + (" (see server.log)" if isinstance(e, NotReady) else "")
    result.seconds = time.monotonic() - started
    return result


class LabFailure(Exception):
    """A scenario could not be judged (no analysis.json, or one without steps): one line."""


def _load(
    scenario: Scenario,
    folder: Path,
    run: Path,
    server: Served,
    step_seconds: float,
    device: str,
    say: Callable[[str], None],
    result: Result,
) -> int:
    """Run the load against `server` and end it within its limit; `loadlab run`'s exit code.
    The cores the server and the load generator may run on go into `result`, and, where the
    scenario starves the load generator with a rival process, how it did."""
    load_args = [
        sys.executable,
        "-m",
        "loadlab.cli",
        "run",
        "--url",
        server.url,
        *scenario.load,
        "--step-duration",
        f"{step_seconds:g}",
        "--out",
        str(run),
        "--server-pid",
        str(server.pid),
    ]
    if device == "cpu":
        load_args.append("--no-gpu")
    client_cpus = placed(scenario.client_cpus, server.order)
    if scenario.client_beside:
        client_cpus = _beside(server.pid)
    with open(folder / "run.log", "wb") as log:  # niced on purpose only once its steps begin (below)
        client = start_child(load_args, log, min(scenario.client_nice, 0), client_cpus)
    result.server_cores, result.client_cores = server.cores, cores(client.pid)
    say(
        f"{scenario.name}: loadlab run {' '.join(scenario.load)} ({scenario.steps} x {step_seconds:g} s, "
        f"cores {result.client_cores or '?'}; the server's {server.cores or '?'})"
    )
    deadline = time.monotonic() + scenario.steps * step_seconds + RUN_MARGIN
    try:
        if scenario.client_nice > 0 or scenario.client_rival:
            rivalry = starve_client(
                client, run, client_cpus, scenario.steps, deadline, scenario.client_nice, scenario.client_rival
            )
            result.client_rival = rivalry.describe(scenario.client_nice)
            if scenario.client_rival:
                how = result.client_rival or "nothing (no core to pin)"
                say(f"{scenario.name}: the load generator starved by {how}")
        return client.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        say(f"{scenario.name}: loadlab run overran its limit; stopping it (its records are kept)")
        return end_child(client)
    finally:
        end_child(client)


def _analysis(run: Path) -> Analysis:
    """The run's analysis.json, typed; `loadlab analyze` writes it when the run did not."""
    if not (run / ANALYSIS_JSON).exists():
        done = subprocess.run(
            [sys.executable, "-m", "loadlab.cli", "analyze", str(run), "--json"],
            capture_output=True,
            text=True,
            timeout=ANALYZE_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise LabFailure(f"loadlab analyze failed (exit code {done.returncode}): {last}")
    try:
        analysis = read_analysis(run)
    except RunFolderError as e:
        raise LabFailure(f"unreadable {run / ANALYSIS_JSON}: {e}") from None
    if analysis is None:
        raise LabFailure(f"no {run / ANALYSIS_JSON}")
    return analysis


def _judge(result: Result, analysis: Analysis, scenario: Scenario) -> None:
    """Fill `result` from the last step's verdict of analysis.json."""
    if not analysis.steps:
        raise LabFailure(f"{ANALYSIS_JSON} has no steps")
    step = analysis.steps[-1]
    result.constraint = step.constraint
    result.saturation = step.saturation
    result.confidence = step.confidence
    result.runner_up = step.runner_up.constraint if step.runner_up else ""
    result.server_side = step.server_side.constraint if step.server_side else ""
    result.headline = step.headline
    result.evidence = [e.text for e in step.evidence if e.constraint == result.constraint and e.direction == "for"]
    saturation_ok = not scenario.expect_saturation or result.saturation in scenario.expect_saturation
    if result.constraint == CLIENT and scenario.expect != CLIENT:
        # (a light-load scenario is judged on saturation alone, which the analyzer still reports)
        server_side_ok = result.server_side == scenario.expect if scenario.expect else True
        result.status = CLIENT_LIMITED if server_side_ok and saturation_ok else MISMATCH
    elif scenario.expect is None:  # judged on saturation; any server-side class may set the latency
        result.status = MATCH if saturation_ok and result.constraint != INSUFFICIENT_DATA else MISMATCH
    else:
        result.status = MATCH if result.constraint == scenario.expect and saturation_ok else MISMATCH


def _beside(pid: int) -> tuple[int, ...]:
    """The cores the server `pid` (and its children) used least: where diagnose puts its load generator."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return ()
    return tuple(least_used_cores(tree, sorted(os.sched_getaffinity(0))))


def skipped(scenario: Scenario, reason: str) -> Result:
    """The result of a scenario this machine cannot run (no GPU twin), saying why."""
    return Result(scenario.name, scenario.expect or "", list(scenario.expect_saturation), SKIPPED, reason=reason)
