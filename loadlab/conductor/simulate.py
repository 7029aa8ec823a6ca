"""`loadlab simulate`: the run `loadlab run` would make against `serve --twin`, in virtual time.

loadlab plans the load (steps, arrivals, think times) and draws the requests from its own
workloads, as its users would, and builds the bodies its client would send; the reference server's
simulator (`python -m reference_server.simulate`, a separate process: loadlab never imports the
server, nor torch) runs them through the twin's engine on a virtual clock and writes back each
request's timings and the engine's /metrics every metrics interval. This module then writes an
ordinary run folder from them, with virtual epoch times starting now, marked simulated in run.json.
"""

from __future__ import annotations

import base64
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from loadlab.analyze.summary import write_summary
from loadlab.clock import ClockAnchor
from loadlab.collect.prom_text import parse_metrics_text
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.metrics.slo import parse_slo
from loadlab.store.meta import FINISHED
from loadlab.store.reader import load_run
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import Coverage, RequestRecord, StepInfo
from loadlab.workload import make_workload
from loadlab.workload.arrivals import arrival_gaps
from loadlab.workload.distributions import sample_seconds
from loadlab.workload.limits import (
    MAX_SIMULATED_REQUESTS,
    MAX_SIMULATED_SECONDS,
    MAX_SIMULATED_USER_SECONDS,
    SIMULATION_MINUTES,
)
from loadlab.workload.trace import replays_trace

if TYPE_CHECKING:
    from loadlab.conductor.runloop import StepPlan
    from loadlab.conductor.stepping import SweepLimits

SIMULATED_URL = "http://simulated"  # no endpoint: the config's URL only has to be well formed
WORKER = "simulated"
SERVER_MODULE = "reference_server.simulate"
MODEL_NAME = "loadlab-reference"  # the reference server's default --model-name
FLUSH_REQUESTS = 5000  # the run folder is written every this many requests (memory stays bounded)
PROGRESS_EVERY_S = 10.0  # how often a simulation says how far it got
_METRICS_TIME = b'{"kind":"metrics","time":'  # how the simulator starts a /metrics line


@dataclass(frozen=True)
class EngineSettings:
    """The simulated server: `--twin GPU:MODEL[:tpN]` and the engine flags `serve --twin` takes."""

    twin: str
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    gpu_memory_utilization: float = 0.9
    prefix_caching: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The EngineConfig fields the simulator gets."""
        return {
            "twin": self.twin,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "prefix_caching": self.prefix_caching,
            "model_name": MODEL_NAME,
            **self.extra,
        }


@dataclass
class SimulationResult:
    """What the simulation gave: virtual seconds simulated, wall seconds it took, why it ended early."""

    virtual_seconds: float
    wall_seconds: float
    requests: int
    reason: str = ""


def planned_requests(cfg: RunConfig) -> Iterator[dict[str, Any]]:
    """Endless request lines, in the order users take them: the body the client would send, the
    think time after it (closed loop), the arrival gap at rate 1 (open loop: divided by the rate)."""
    from loadlab.client.stream import Endpoint, build_body

    endpoint = Endpoint("http://simulated", "", cfg.api, cfg.model, cfg.timeout)
    workload = make_workload(cfg.workload, cfg.api)
    think_rng = random.Random(f"{cfg.workload.seed}-think")
    gaps = arrival_gaps(cfg.arrival, 1.0, cfg.burstiness, random.Random(f"{cfg.workload.seed}-arrivals"))
    while True:
        spec = workload.next_request()
        think = sample_seconds(cfg.think_time, think_rng) if cfg.think_time is not None else 0.0
        yield {
            "body": json.loads(build_body(spec, endpoint)),
            "think": think,
            "gap": next(gaps),
            "meta": [spec.input_tokens, spec.max_tokens, spec.images, spec.image_pixels, spec.audio_seconds],
        }


def check_simulable(cfg: RunConfig) -> None:
    """UserError (one line) for a run the simulation cannot make as `loadlab run` would."""
    if cfg.api not in ("chat", "completions"):
        raise UserError(f"the simulation sends chat and completions requests: --api {cfg.api} is not simulated")
    if cfg.workload.kind in ("multiturn", "tools"):
        raise UserError(
            f"the simulation plans every request ahead, so a session's later turns (which carry the "
            f"server's answers) cannot be planned: --workload {cfg.workload.kind} is not simulated"
        )
    if replays_trace(cfg):
        raise UserError(
            "the simulation does not keep a trace's clock: add --concurrency or --rate to take its lengths only"
        )
    if cfg.concurrency or cfg.rate:
        check_simulation_size(cfg)


def check_simulation_size(cfg: RunConfig) -> None:
    """UserError for a simulation beyond the bounds that keep it to ~10 minutes of wall time
    (MAX_SIMULATED_SECONDS of virtual time, MAX_SIMULATED_USER_SECONDS of users x seconds)."""
    from loadlab.conductor.runloop import plan_steps

    plans = plan_steps(cfg)
    seconds = sum(p.seconds for p in plans)
    flag = "--step-duration" if len(plans) > 1 and cfg.step_duration else "--duration"
    if seconds > MAX_SIMULATED_SECONDS:
        raise UserError(
            f"{flag}: {seconds:,.0f} simulated seconds in all is more than the bound of {MAX_SIMULATED_SECONDS:,.0f} "
            f"one simulation may take (~{SIMULATION_MINUTES} minutes of wall time; docs/simulate.md)"
        )
    if plans[0].mode == "closed":
        load = sum(p.target * p.seconds for p in plans)
        if load > MAX_SIMULATED_USER_SECONDS:
            raise UserError(
                f"--concurrency x simulated seconds, {load:,.0f} user-seconds in all, is more than the bound of "
                f"{MAX_SIMULATED_USER_SECONDS:,.0f} one simulation may take (~{SIMULATION_MINUTES} minutes of wall "
                "time; docs/simulate.md): shorten the steps or lower the load"
            )
    # Open loop sends rate x seconds requests; a step ended by its count, that count.
    requests = sum(p.requests if not p.seconds else p.target * p.seconds if p.mode == "open" else 0 for p in plans)
    if requests > MAX_SIMULATED_REQUESTS:
        raise UserError(
            f"{requests:,.0f} simulated requests is more than the bound of {MAX_SIMULATED_REQUESTS:,} one simulation "
            f"may take (~{SIMULATION_MINUTES} minutes of wall time; docs/simulate.md): shorten the steps or lower "
            "--rate or --requests"
        )


def check_sweep_size(limits: SweepLimits) -> None:
    """UserError for a simulated sweep (`plan --what-if`) beyond the bounds of one simulation:
    all its steps' simulated seconds, and its work, each step simulated again with the steps
    before it (with loads doubling, ~4 x its highest load x a step's seconds in user-seconds)."""
    seconds = limits.step_seconds * limits.max_steps
    if seconds > MAX_SIMULATED_SECONDS:
        raise UserError(
            f"--step-duration {limits.step_seconds:g} x up to {limits.max_steps} steps is more than the bound of "
            f"{MAX_SIMULATED_SECONDS:,.0f} simulated seconds a simulation may take (~{SIMULATION_MINUTES} minutes "
            "of wall time; docs/simulate.md)"
        )
    work = 4 * limits.max_load * limits.step_seconds
    if work > MAX_SIMULATED_USER_SECONDS:
        raise UserError(
            f"a simulated sweep up to {limits.max_load:,.0f} users of {limits.step_seconds:g} s steps is ~{work:,.0f} "
            f"user-seconds of simulation: more than the bound of {MAX_SIMULATED_USER_SECONDS:,.0f} "
            f"(~{SIMULATION_MINUTES} minutes of wall time; docs/simulate.md): lower --max or --step-duration"
        )


def simulate_run(cfg: RunConfig, engine: EngineSettings, folder: Path) -> SimulationResult:
    """Simulate the run `cfg` describes on the twin `engine`, writing the run folder `folder`."""
    from loadlab.conductor.runloop import plan_steps

    return simulate_steps(cfg, engine, plan_steps(cfg), folder)


def check_engine(engine: EngineSettings) -> None:
    """Build the simulated engine without running a step: UserError (one line) when the twin
    spec or the engine flags are wrong or the model does not fit."""
    _run_simulator(_header(RunConfig(), engine, []), iter(()), Path(os.devnull))


def simulate_steps(cfg: RunConfig, engine: EngineSettings, plans: list[StepPlan], folder: Path) -> SimulationResult:
    """Simulate the load steps `plans` (in that order) of the run `cfg` describes on the twin
    `engine`, writing the run folder `folder`."""
    cfg.model = MODEL_NAME
    header = _header(cfg, engine, plans)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="loadlab-simulate-") as tmp:
        out = Path(tmp) / "results.jsonl"
        _run_simulator(header, planned_requests(cfg), out, sum(p.seconds for p in plans) + _grace(cfg, plans))
        wall = time.perf_counter() - started
        origin = time.time()
        with out.open() as results:
            return _write_folder(cfg, engine, plans, results, folder, origin, wall)


def _header(cfg: RunConfig, engine: EngineSettings, plans: list[StepPlan]) -> dict[str, Any]:
    """The simulator's first line: the engine, the API, the steps, and the grace after the last
    (the requests still in flight then are cut off, as `loadlab run` cuts them off)."""
    from loadlab.conductor.runloop import cut_off_detail

    grace = _grace(cfg, plans)
    return {
        "engine": engine.to_dict(),
        "api": cfg.api,
        "steps": [
            {
                "mode": p.mode,
                "target": p.target,
                "seconds": p.seconds,
                "requests": p.requests,
                "warmup": cfg.warmup_requests,
            }
            for p in plans
        ],
        "ramp_up": cfg.ramp_up,
        "timeout": cfg.timeout,
        "metrics_interval": cfg.metrics_interval,
        "grace": grace,
        "cut_off": cut_off_detail(plans[-1].label, grace) if plans else "",
    }


def _grace(cfg: RunConfig, plans: list[StepPlan]) -> float:
    """How long the requests in flight at the last step's end get to finish (`loadlab run`'s grace)."""
    from loadlab.conductor.runloop import step_grace

    return step_grace(plans[-1].seconds, cfg.timeout) if plans else cfg.timeout


def _run_simulator(header: dict[str, Any], requests: Iterator[dict[str, Any]], out: Path, seconds: float = 0) -> None:
    """Start the simulator, feed it the plan as it reads it, and wait for it (UserError when it fails),
    saying every PROGRESS_EVERY_S how far it got of the `seconds` planned (0: silent). Ctrl-C and
    SIGTERM end the simulator too."""
    proc = subprocess.Popen(
        [sys.executable, "-m", SERVER_MODULE, "--out", str(out)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stderr is not None

    def feed(stdin: IO[str]) -> None:
        try:
            stdin.write(json.dumps(header) + "\n")
            for line in requests:  # the pipe blocks while the simulator has enough
                stdin.write(json.dumps(line, separators=(",", ":")) + "\n")
            stdin.close()  # a plan that ends: flush it and say so
        except (BrokenPipeError, ValueError, OSError):  # the simulator has read all it needs
            pass

    feeder = threading.Thread(target=feed, args=(proc.stdin,), daemon=True)
    feeder.start()
    done = threading.Event()
    if seconds:
        threading.Thread(target=_progress, args=(out, seconds, done), daemon=True).start()
    try:
        errors = proc.stderr.read()
        code = proc.wait()
    finally:  # an interrupt (KeyboardInterrupt) or an error here: the simulator goes too
        done.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    if code != 0:
        last = [line for line in errors.splitlines() if line.strip()]
        raise UserError(f"the simulation failed: {last[-1].removeprefix('error: ') if last else f'exit code {code}'}")


def _progress(out: Path, seconds: float, done: threading.Event) -> None:
    """Every PROGRESS_EVERY_S until `done`: how many of the `seconds` planned the simulator has
    simulated (its last /metrics render, read off the end of its results)."""
    started = time.monotonic()
    while not done.wait(PROGRESS_EVERY_S):
        try:
            with out.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - (1 << 20)))
                tail = f.read()
        except OSError:
            continue
        at = tail.rfind(_METRICS_TIME)
        end = tail.find(b",", at + len(_METRICS_TIME))
        try:
            now = float(tail[at + len(_METRICS_TIME) : end]) if at >= 0 and end > 0 else 0.0
        except ValueError:
            continue
        print(
            f"simulate: {now:,.0f} of {seconds:,.0f} simulated s ({now / seconds:.0%}) in "
            f"{time.monotonic() - started:,.0f} s of wall time",
            file=sys.stderr,
            flush=True,
        )


def _write_folder(
    cfg: RunConfig,
    engine: EngineSettings,
    plans: list[StepPlan],
    results: IO[str],
    folder: Path,
    origin: float,
    wall: float,
) -> SimulationResult:
    """Turn the simulator's results into a run folder whose epoch times start at `origin`."""
    from loadlab.conductor.runloop import cut_off_warning

    virtual = {"now": 0.0}
    writer = RunWriter(folder, cfg, ClockAnchor(origin, 0.0), clock=lambda: origin + virtual["now"])
    writer.meta.simulated = {"twin": engine.twin, "engine": engine.to_dict(), "wall_seconds": round(wall, 3)}
    scrapes = requests = 0
    reason = ""
    for line in results:
        item = json.loads(line)
        kind = item["kind"]
        if kind == "request":
            writer.add_requests([_record(item, cfg.api, origin)])
            requests += 1
            if requests % FLUSH_REQUESTS == 0:
                writer.flush()
        elif kind == "metrics":
            writer.add_samples(parse_metrics_text(item["text"], origin + item["time"], "server"))
            scrapes += 1
        elif kind == "step":
            plan = plans[item["index"]]
            if item["end"] is None:
                start = origin + item["start"]
                ramp = start + cfg.ramp_up if plan.mode == "closed" else math.nan
                writer.begin_step(StepInfo(plan.index, plan.label, plan.mode, plan.target, start, ramp_end=ramp))
            else:
                writer.end_step(item["index"], origin + item["end"])
        elif kind == "end":
            virtual["now"] = item["time"]
            reason = item["reason"]
            if item["cut_off"]:
                writer.add_warning(cut_off_warning(plans[-1].label, item["cut_off"], _grace(cfg, plans)))
    coverage = [
        Coverage("server", True, ok_samples=scrapes),
        Coverage("client", False, error="simulated: no load generator, so no client self-check"),
    ]
    writer.close(FINISHED, coverage, reason)
    try:
        write_summary(load_run(folder), parse_slo(cfg.slo).per_request if cfg.slo else None)
    except OSError as e:  # the parts are there: `loadlab summary` recomputes it
        writer.fail(e)
    return SimulationResult(virtual["now"], wall, requests, reason)


def _record(item: dict[str, Any], api: str, origin: float) -> RequestRecord:
    tokens = (np.frombuffer(base64.b64decode(item["tokens"]), dtype=np.float64) + origin).tolist()
    input_tokens, max_tokens, images, image_pixels, audio_seconds = item["meta"]
    return RequestRecord(
        request_id=item["id"],
        worker=WORKER,
        step=item["step"],
        warmup=item["warmup"],
        api=api,
        scheduled_time=origin + item["scheduled"],
        send_time=origin + item["send"],
        first_token_time=tokens[0] if tokens else math.nan,
        end_time=origin + item["end"],
        token_times=tokens,
        token_clock="simulated" if tokens else "",
        prompt_tokens=item["prompt_tokens"],
        completion_tokens=item["completion_tokens"],
        client_tokens=len(tokens),
        input_tokens=input_tokens,
        max_tokens=max_tokens,
        images=images,
        image_pixels=image_pixels,
        audio_seconds=audio_seconds,
        finish_reason=item["finish"],
        status=item["status"],
        error=item["error"],
        error_detail=item["detail"],
    )
