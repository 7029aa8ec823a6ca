"""Drive one run: load steps, stop conditions, the run folder, the live display and the self-check.

The same loop drives a LocalRunner (one process) or a MasterRunner (`--processes N`): it only
calls runner.start/stop/quit, sets `environment.loadlab.step` and listens to `llm_request`.

Stop conditions: each step lasts `--step-duration` (or `--duration`) seconds and/or until its
`--requests` (plus `--warmup-requests`) have finished. With neither given a step lasts
DEFAULT_STEP_SECONDS. After the last step no new request starts; requests in flight get up to the
per-request timeout to finish; on Ctrl-C they are aborted (counted, category "aborted").

A run also stops itself, aborting what is in flight: when the endpoint rejects every request or a
step misses its error budget (status `stopped`, see budget.py), or when the run folder cannot be
written (status `failed`: the records stay in memory for the writer's last tries).
A run whose worker process died (`--processes N`) ends `degraded`, with a warning naming it.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import gevent
from locust.env import Environment
from locust.runners import LocalRunner
from rich.console import Console

from loadlab.analyze.summary import write_summary
from loadlab.conductor.budget import Breach, ErrorBudget
from loadlab.client.context import ClientContext, add_loadlab_events
from loadlab.client.selfcheck import SelfCheck
from loadlab.client.shipping import WorkerLoss, in_flight_total, worker_id
from loadlab.client.stream import Endpoint
from loadlab.client.users import OPEN_LOOP_MAX_IN_FLIGHT, ClosedLoopUser, OpenLoopUser
from loadlab.clock import ClockAnchor, now, process_anchor
from loadlab.collect import build_collectors
from loadlab.config import RunConfig
from loadlab.metrics.limits import START_DELAY_P99_MAX
from loadlab.metrics.stats import percentile
from loadlab.report.live import LiveDisplay, LiveStatus
from loadlab.store.meta import DEGRADED, FAILED, FINISHED, INTERRUPTED, STOPPED
from loadlab.store.reader import load_run
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import RequestRecord, StepInfo

DEFAULT_STEP_SECONDS = 60.0
_TICK_S = 0.25           # how often the loop checks stop conditions and redraws
_RATE_WINDOW_S = 5.0     # tokens/s on screen: over the last few seconds


@dataclass(frozen=True)
class StepPlan:
    """One step to run: its label and target, and when it ends."""

    index: int
    label: str
    mode: str                 # "closed" | "open"
    target: float             # users or requests/s
    seconds: float            # 0: no time limit (ends by request count)
    requests: int             # finished requests (warm-up included) that end it; 0: no count limit


def plan_steps(config: RunConfig) -> list[StepPlan]:
    """The steps of a run: one per --concurrency / --rate value."""
    mode = "closed" if config.concurrency else "open"
    values: list[float] = list(config.concurrency or config.rate)
    if len(values) > 1:
        seconds = config.step_duration or config.duration
    else:
        seconds = config.duration or config.step_duration
    if not seconds and not config.requests:
        seconds = DEFAULT_STEP_SECONDS
    requests = config.requests + config.warmup_requests if config.requests else 0
    name = "concurrency" if mode == "closed" else "rate"
    return [StepPlan(i, f"{name}={v:g}", mode, float(v), seconds, requests) for i, v in enumerate(values)]


@dataclass
class Tally:
    """Running counts over the records this process receives (the only process, or the master)."""

    done: int = 0
    errors: int = 0
    output_tokens: int = 0
    per_step: dict[int, int] = field(default_factory=dict)
    recent_tokens: deque = field(default_factory=deque)         # (end time, tokens)
    recent_start_delays: deque = field(default_factory=lambda: deque(maxlen=200))

    def add(self, rec: RequestRecord) -> None:
        self.done += 1
        self.per_step[rec.step] = self.per_step.get(rec.step, 0) + 1
        if not rec.ok:
            self.errors += 1
        tokens = rec.completion_tokens if rec.completion_tokens >= 0 else rec.client_tokens
        self.output_tokens += tokens
        self.recent_tokens.append((rec.end_time, tokens))
        if math.isfinite(rec.send_time):
            self.recent_start_delays.append(rec.send_time - rec.scheduled_time)

    def tokens_per_s(self, t: float) -> float:
        while self.recent_tokens and self.recent_tokens[0][0] < t - _RATE_WINDOW_S:
            self.recent_tokens.popleft()
        return sum(n for _, n in self.recent_tokens) / _RATE_WINDOW_S


@dataclass(frozen=True)
class RunOutcome:
    status: str               # finished | degraded | interrupted | stopped | failed (as in run.json)
    folder: Path
    requests: int
    errors: int
    cause: str = ""           # "" | "rejected" | "error-budget" | "write-error"
    reason: str = ""          # one line saying why, when there is a cause


class _StopRun(Exception):
    """The run stops itself: `status` is stopped (a Breach) or failed (a write error)."""

    def __init__(self, status: str, breach: Breach | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.breach = breach


def run_load(config: RunConfig, folder: Path, console: Console) -> RunOutcome:
    """Run the load the config describes, writing the run folder; returns how it ended."""
    endpoint = Endpoint.from_config(config)   # validates url and api before anything starts
    plans = plan_steps(config)
    anchor = process_anchor()
    collectors = build_collectors(config)
    env, runner = _start_environment(config, endpoint.base_url, plans[0].mode, anchor)
    try:
        writer = RunWriter(folder, config, anchor)
    except BaseException:
        runner.quit()   # e.g. the folder already holds a run: end the workers too
        raise
    writer.start_autoflush(1.0)
    tally = Tally()
    budget = ErrorBudget(config.max_error_rate)

    def on_record(record: RequestRecord, **_: object) -> None:
        writer.add_requests([record])
        tally.add(record)
        budget.add(record)

    env.events.llm_request.add_listener(on_record)
    env.events.llm_worker_anchor.add_listener(
        lambda worker, anchor, **_: writer.set_worker_anchor(worker, anchor))
    env.events.llm_samples.add_listener(lambda samples, **_: writer.add_samples(samples))
    losses: list[WorkerLoss] = []   # worker processes that died (--processes N)

    def on_worker_lost(loss: WorkerLoss, **_: object) -> None:
        losses.append(loss)
        writer.add_warning(loss.message())

    env.events.llm_worker_lost.add_listener(on_worker_lost)
    selfcheck = SelfCheck(env.loadlab.worker)
    selfcheck.start(writer.add_samples)
    for c in collectors:
        c.start(writer.add_samples)

    status = FINISHED
    breach: Breach | None = None
    started = time.perf_counter()
    with LiveDisplay(console) as live:
        def show(label: str) -> None:
            live.update(LiveStatus(elapsed=time.perf_counter() - started, step_label=label,
                                  in_flight=in_flight_total(env), done=tally.done, errors=tally.errors,
                                  output_tokens=tally.output_tokens, tokens_per_s=tally.tokens_per_s(now()),
                                  warning=_warning(env, selfcheck, tally, plans[0].mode, losses)))
        try:
            for plan in plans:
                _run_step(plan, env, runner, writer, tally, budget, show, len(plans))
        except KeyboardInterrupt:
            status = INTERRUPTED
        except _StopRun as stop:
            status, breach = stop.status, stop.breach
        # No new requests from here (users idle without a step); those in flight get the
        # per-request timeout to finish (none on Ctrl-C or when the run stopped itself).
        env.loadlab.step = None
        try:
            if status == FINISHED and isinstance(runner, LocalRunner):
                _drain(env, config.timeout, show)   # (a master's stop drains its workers)
        except KeyboardInterrupt:
            status = INTERRUPTED
        selfcheck.stop()   # what follows is shutdown, not measurement
        env.stop_timeout = config.timeout if status == FINISHED else 0
        runner.stop()
        runner.quit()
        show("done")

    for c in collectors:
        c.stop()
    if status == FINISHED:   # judged on all its requests now, however few
        breach = budget.final({p.index: p.label for p in plans})
        if losses:
            status = DEGRADED
    reason = breach.reason if breach else ""
    writer.close(status, coverage=[c.coverage() for c in collectors] + [selfcheck.coverage()], reason=reason)
    try:
        write_summary(load_run(folder))
    except OSError as e:   # the parts are there: `loadlab summary` recomputes it
        writer.fail(e)
    if writer.failure:
        return RunOutcome(FAILED, Path(folder), tally.done, tally.errors, "write-error", writer.failure_line())
    return RunOutcome(status, Path(folder), tally.done, tally.errors,
                      breach.cause if breach else "", reason)


class _NoSpawnRateWarning(logging.Filter):
    """Locust warns about spawn rates above 100/s; loadlab starts a step's users at once on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


def _start_environment(config: RunConfig, host: str, mode: str, anchor: ClockAnchor):
    logging.getLogger("locust.runners").addFilter(_NoSpawnRateWarning())
    user = ClosedLoopUser if mode == "closed" else OpenLoopUser
    env = Environment(user_classes=[user], host=host)
    add_loadlab_events(env.events)
    env.loadlab = ClientContext(config=config, worker=worker_id(),
                                worker_count=config.processes, anchor=anchor)
    if config.processes > 1:
        from loadlab.client.distributed import start_master_with_workers

        runner = start_master_with_workers(env, config.processes)
    else:
        runner = env.create_local_runner()
        env.events.init.fire(environment=env, runner=runner, web_ui=None)
        # Users stopped by a smaller next step finish the request they are on. (Not on a master:
        # workers keep the stop_timeout of their spawn message, and Ctrl-C must stop them at once.)
        env.stop_timeout = config.timeout
    return env, runner


def _run_step(plan: StepPlan, env: Environment, runner, writer: RunWriter, tally: Tally,
              budget: ErrorBudget, show, step_count: int) -> None:
    info = StepInfo(index=plan.index, label=plan.label, mode=plan.mode, target=plan.target,
                    start_time=now())
    env.loadlab.step = info
    writer.begin_step(info)
    env.events.llm_step.fire(step=info)
    users = int(plan.target) if plan.mode == "closed" else env.loadlab.worker_count
    if plan.mode == "closed" or plan.index == 0:
        # Spawn everyone within ~0.1 s; the open-loop schedulers keep running across steps.
        runner.start(users, spawn_rate=max(10.0, users * 10.0))
    label = plan.label if step_count == 1 else f"step {plan.index + 1}/{step_count} {plan.label}"
    end = time.perf_counter() + plan.seconds if plan.seconds else math.inf
    stop: _StopRun | None = None
    try:
        while True:
            show(label)
            left = end - time.perf_counter()
            if left <= 0:
                break
            if plan.requests and tally.per_step.get(plan.index, 0) >= plan.requests:
                break
            stop = _stop_now(writer, budget, plan)
            if stop:
                break
            gevent.sleep(min(_TICK_S, left))   # a step ends on time, not on the next tick
    finally:
        # Also on Ctrl-C: the step ends at the interrupt, not once the workers are down (their
        # shutdown would count as idle time and lower the achieved concurrency).
        writer.end_step(plan.index, now())
    if stop:
        raise stop


def _stop_now(writer: RunWriter, budget: ErrorBudget, plan: StepPlan) -> _StopRun | None:
    """A reason for the run to stop before its step ends: the folder fails, or a Breach."""
    if writer.failure:
        return _StopRun(FAILED)
    breach = budget.check(plan.index, plan.label)
    return _StopRun(STOPPED, breach) if breach else None


def _drain(env: Environment, limit: float, show) -> None:
    """Wait until this process has nothing in flight (at most `limit` seconds).

    Done before runner.stop(), which blocks the event loop for tens of ms (it inspects the call
    stack for a debug message) and would delay the timestamps of requests still streaming.
    """
    deadline = time.perf_counter() + limit
    while in_flight_total(env) and time.perf_counter() < deadline:
        show("finishing requests in flight")
        gevent.sleep(0.02)


def _warning(env: Environment, selfcheck: SelfCheck, tally: Tally, mode: str,
             losses: list[WorkerLoss]) -> str:
    lost = "; ".join(f"worker {loss.worker} died, {loss.aborted} aborted" for loss in losses)
    reasons = selfcheck.warnings()
    state = getattr(env, "loadlab_state", None)
    if state is not None and state.cap_waits:
        reasons.append(f"{state.cap_waits} arrivals waited for one of {OPEN_LOOP_MAX_IN_FLIGHT} in-flight slots")
    if mode == "open":
        delay = percentile(tally.recent_start_delays, 99)
        if delay > START_DELAY_P99_MAX:
            reasons.append(f"start delay p99 {delay * 1000:.0f} ms > {START_DELAY_P99_MAX * 1000:.0f} ms")
    limited = "client-limited? " + "; ".join(reasons) if reasons else ""
    return "; ".join(text for text in (lost, limited) if text)
