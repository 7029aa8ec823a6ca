"""Conduct one run: load steps, stop conditions, the run folder, the live display and the self-check.

The same Conductor drives a LocalRunner (one process) or a MasterRunner (`--processes N`): it
only calls runner.start/stop/quit, sets the run's context (client/context.py) and listens to `llm_request`.

A closed-loop step first starts its new users and waits until each has its connection open
(they hold until the step begins); then the step's clock starts, and the new users send their
first requests spread over `--ramp-up` seconds (StepInfo.ramp_end): neither the connection
set-up nor a burst of simultaneous first requests lands in the measured TTFT.

Stop conditions: each step lasts `--step-duration` (or `--duration`) seconds and/or until its
`--requests` (plus `--warmup-requests`) have finished. With neither given a step lasts
DEFAULT_STEP_SECONDS. Between steps that pause (a sweep deciding its next step, a prefix-cache
reset) and after the last step no new request starts, and the requests in flight get a grace to
finish (`step_grace`: a quarter of the step, 2 s at least, the per-request timeout at most); those
still in flight then are cut off, so a step ends on time however slow the endpoint: each is
recorded as aborted (category "aborted", the detail saying so, tokens received kept), counted
apart and never as the server's failure. On Ctrl-C they are aborted at once.

A run also stops itself, aborting what is in flight: when the endpoint rejects every request or a
step misses its error budget (status `stopped`, see budget.py), or when the run folder cannot be
written (status `failed`: the records stay in memory for the writer's last tries).
A run whose worker process died (`--processes N`) ends `degraded`, with a warning naming it.
"""

from __future__ import annotations

from locust.env import Environment
from locust.runners import Runner

import logging
import math
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import gevent
from rich.console import Console

from loadlab.analyze.summary import write_summary
from loadlab.client.cache_reset import NO_RESET_HINT, reset_prefix_cache
from loadlab.client.context import ClientContext, add_loadlab_events, context_of, set_context
from loadlab.client.selfcheck import SelfCheck
from loadlab.client.shipping import cut_off_total, in_flight_total, publish_context, ready_total, worker_id
from loadlab.client.stream import Endpoint
from loadlab.client.users import ClosedLoopUser, OpenLoopUser
from loadlab.clock import ClockAnchor, now, process_anchor
from loadlab.collect import build_collectors
from loadlab.conductor.budget import Breach, ErrorBudget
from loadlab.conductor.interrupts import held, interrupted
from loadlab.conductor.livestats import LiveStats
from loadlab.conductor.liveverdict import LiveVerdict
from loadlab.conductor.recording import attach_writer
from loadlab.config import RunConfig
from loadlab.metrics.limits import START_DELAY_P99_MAX
from loadlab.metrics.slo import parse_slo
from loadlab.numbers import format_value
from loadlab.report.live import LiveDisplay, LiveStatus
from loadlab.store.meta import DEGRADED, FAILED, FINISHED, INTERRUPTED, STOPPED, RunStatus
from loadlab.store.reader import load_run
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import Mode, RequestRecord, Sample, StepInfo
from loadlab.workload.limits import OPEN_LOOP_MAX_IN_FLIGHT
from loadlab.workload.trace import TraceWorkload, replays_trace

DEFAULT_STEP_SECONDS = 60.0
READY_WAIT_S = 10.0  # a step waits at most this long for its users' connections
RESET_TIMEOUT_S = 30.0  # a prefix-cache reset waits at most this long (it waits for the engine's step)
_TICK_S = 0.25  # how often the loop checks stop conditions and redraws
_SPAWN_RATE = 10_000.0  # users per second: all at once (the ramp-up spreads their first requests)
STEP_GRACE_SHARE = 0.25  # requests in flight at a step's end get this share of the step to finish,
STEP_GRACE_MIN_S = 2.0  # ... at least this long (and at most the per-request timeout)
CUT_OFF_WAIT_S = 5.0  # at most this long for the records of the requests cut off (a worker's travel)


def step_grace(seconds: float, timeout: float) -> float:
    """How long the requests in flight at the end of a step of `seconds` (0: ended by its request
    count) get to finish before they are cut off: STEP_GRACE_SHARE of the step, at least
    STEP_GRACE_MIN_S, at most the per-request timeout (all of it for a step without a time limit)."""
    if seconds <= 0:
        return timeout
    return min(timeout, max(STEP_GRACE_MIN_S, STEP_GRACE_SHARE * seconds))


def cut_off_detail(label: str, grace: float) -> str:
    """The error detail of a request cut off `grace` seconds after the end of step `label`."""
    return f"cut off {grace:g} s after the end of step {label} (the step's grace)"


def cut_off_warning(label: str, left: int, grace: float) -> str:
    """run.json's warning that `left` requests were cut off after step `label`."""
    return (
        f"{label}: {left} request(s) still in flight {grace:g} s after the step's end were cut off "
        "(recorded as aborted, not as failures)"
    )


@dataclass(frozen=True)
class StepPlan:
    """One step to run: its label and target, and when it ends."""

    index: int
    label: str
    mode: Mode
    target: float  # users or requests/s
    seconds: float  # 0: no time limit (ends by request count)
    requests: int  # finished requests (warm-up included) that end it; 0: no count limit


def plan_steps(config: RunConfig) -> list[StepPlan]:
    """The steps of a run: one per --concurrency / --rate value, or one that replays a trace."""
    if replays_trace(config):
        return [_trace_step(config)]
    mode: Mode = "closed" if config.concurrency else "open"
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


def _trace_step(config: RunConfig) -> StepPlan:
    """One open-loop step on the trace's clock: it ends once every request of the window (or of
    --requests) has finished; its target is the trace's mean rate."""
    trace = TraceWorkload(config.workload, config.api)
    requests = len(trace)
    if config.requests:
        requests = min(requests, config.requests + config.warmup_requests)
    rate = (len(trace) - 1) / trace.span if trace.span > 0 else float(len(trace))
    speed = f" x{config.workload.trace_speed:g}" if config.workload.trace_speed != 1 else ""
    return StepPlan(0, f"trace{speed}", "open", rate, config.duration, requests)


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended, for the exit code: `cause` says why it stopped itself, `reason` in one line."""

    status: str  # finished | degraded | interrupted | stopped | failed (as in run.json)
    cause: str = ""  # "" | "rejected" | "error-budget" | "write-error"
    reason: str = ""  # one line saying why, when there is a cause


class Conductor:
    """Conducts one run step by step: Locust's runner and users, the collectors, the run writer,
    the live status line and the stop rules.

    `run_step(plan)` runs one step and says whether the run may go on; the next plan can be
    chosen after it (a sweep). `interrupt()` notes a Ctrl-C; `close()` ends the run, writes
    run.json and summary.json, and returns the outcome.
    """

    def __init__(self, config: RunConfig, folder: Path, console: Console, mode: str, step_count: int = 0) -> None:
        endpoint = Endpoint.from_config(config)  # validates url and api before anything starts
        self.config = config
        self.folder = Path(folder)
        self.mode = mode
        self.step_count = step_count  # for the label "step i/N" (0: not known ahead)
        self.collectors = build_collectors(config)
        self.env, self.runner = _start_environment(config, endpoint.base_url, mode, process_anchor())
        try:
            self.writer = RunWriter(self.folder, config, context_of(self.env).anchor)
        except BaseException:
            self.runner.quit()  # e.g. the folder already holds a run: end the workers too
            raise
        self.writer.start_autoflush(1.0)
        self.status: RunStatus = FINISHED
        self.breach: Breach | None = None
        self.labels: dict[int, str] = {}  # the steps run so far
        self.live = LiveStats(mode == "open", in_flight=lambda: in_flight_total(self.env), keep_latencies=False)
        self.budget = ErrorBudget(config.max_error_rate)
        self._finished: Counter[int] = Counter()  # requests finished per step, warm-up included
        self._users = 0  # users the last step asked for (open loop: schedulers)
        self._last: StepPlan | None = None  # the step run last
        # The live verdict of the last seconds, judged in a process of its own (liveverdict.py).
        self.verdict = LiveVerdict(config.to_dict(), lambda: context_of(self.env).step, now)
        events = add_loadlab_events(self.env.events)
        self.losses = attach_writer(events, self.writer)
        events.llm_request.add_listener(self._on_record)
        events.llm_samples.add_listener(lambda samples, **_: self.verdict.add_samples(samples))
        self.selfcheck = SelfCheck(context_of(self.env).worker)
        self.selfcheck.start(self._add_samples)
        for c in self.collectors:
            c.start(self._add_samples)
        self._started = time.perf_counter()
        self._display = ExitStack()
        self._screen = self._display.enter_context(LiveDisplay(console))

    def run_step(self, plan: StepPlan) -> bool:
        """Run one step to its end; False when the run stopped itself (see `status`)."""
        self._begin(plan)
        self.labels[plan.index] = plan.label
        self._last = plan
        of = f"/{self.step_count}" if self.step_count else ""
        label = plan.label if self.step_count == 1 else f"step {plan.index + 1}{of} {plan.label}"
        end = time.perf_counter() + plan.seconds if plan.seconds else math.inf
        try:
            while True:
                self.show(label)
                left = end - time.perf_counter()
                if left <= 0 or (plan.requests and self._finished[plan.index] >= plan.requests):
                    return True
                if self._stop_now(plan):
                    return False
                if interrupted():  # its KeyboardInterrupt may have been caught and dropped
                    raise KeyboardInterrupt
                gevent.sleep(min(_TICK_S, left))  # a step ends on time, not on the next tick
        finally:
            # Also on Ctrl-C: the step ends at the interrupt, not once the workers are down (their
            # shutdown would count as idle time and lower the achieved concurrency).
            self.writer.end_step(plan.index, now())

    def pause(self) -> bool:
        """Between steps (a sweep deciding its next one): no new request starts, those in flight
        get the step's grace to finish and are then cut off (`_drain`), and the run folder is
        brought up to date, so the step just run can be read whole and nothing is sent
        meanwhile. False when the folder could not be written (the run then ends `failed`)."""
        context_of(self.env).step = None
        publish_context(self.env)
        self._drain()
        try:
            self.writer.flush()
        except OSError as e:  # the rows stay buffered for close()'s last tries
            self.writer.fail(e)
            self.status = FAILED
            return False
        return True

    def interrupt(self) -> None:
        """Ctrl-C (or SIGTERM): what is in flight is aborted when the run closes."""
        self.status = INTERRUPTED

    def close(self) -> RunOutcome:
        """End the run: drain (when it finished), stop the users, close the run folder."""
        env, runner = self.env, self.runner
        # No new requests from here (users idle without a step); those in flight get the last
        # step's grace to finish, then are cut off (none on Ctrl-C or when the run stopped itself).
        context_of(env).step = None
        try:
            if self.status == FINISHED:
                self._drain()
        except KeyboardInterrupt:
            self.status = INTERRUPTED
        self.selfcheck.stop()  # what follows is shutdown, not measurement
        env.stop_timeout = self.config.timeout if self.status == FINISHED else 0
        runner.stop()
        runner.quit()
        self.show("done")
        self._display.close()
        self.verdict.close()
        for c in self.collectors:
            c.stop()
        if self.status == FINISHED:  # judged on all its requests now, however few
            self.breach = self.budget.final(self.labels)
            if self.losses:
                self.status = DEGRADED
        writer = self.writer
        for note in (note for c in self.collectors for note in c.notes()):  # a fallback: said, not silent
            writer.add_warning(note)
        reason = self.breach.reason if self.breach else ""
        coverage = [c.coverage() for c in self.collectors] + [self.selfcheck.coverage()]
        writer.close(self.status, coverage=coverage, reason=reason)
        try:
            write_summary(load_run(self.folder), parse_slo(self.config.slo).per_request if self.config.slo else None)
        except OSError as e:  # the parts are there: `loadlab summary` recomputes it
            writer.fail(e)
        if writer.failure:
            return RunOutcome(FAILED, "write-error", writer.failure_line())
        return RunOutcome(self.status, self.breach.cause if self.breach else "", reason)

    def show(self, label: str) -> None:
        """Redraw the status line (rate-limited by the display)."""
        live = self.live
        tokens_per_s, _ = live.recent_rates()
        self._screen.update(
            LiveStatus(
                elapsed=time.perf_counter() - self._started,
                step_label=label,
                in_flight=in_flight_total(self.env),
                done=live.done,
                errors=live.failed,
                output_tokens=live.output_tokens,
                tokens_per_s=tokens_per_s,
                warning=self._warning(),
                verdict=self.verdict.poll(),
            )
        )

    def _on_record(self, record: RequestRecord, **_: object) -> None:
        self._finished[record.step] += 1
        self.live.add(record)
        self.verdict.add_record(record)
        self.budget.add(record)

    def _add_samples(self, samples: list[Sample]) -> None:
        """This process's collectors' samples: to the run folder and the live verdict's window."""
        self.writer.add_samples(samples)
        self.verdict.add_samples(samples)

    def _begin(self, plan: StepPlan) -> None:
        """Start the step's users; its clock starts once their connections are open."""
        env, ctx = self.env, context_of(self.env)
        if self.config.reset_prefix_cache:
            self._reset_prefix_cache(plan)
        if plan.mode == "closed":
            users = int(plan.target)
            new_users, self._users = max(0, users - self._users), users
            if new_users:
                ctx.hold_new_users = True  # they join this step, not the one still running
                publish_context(env)
            self.runner.start(users, spawn_rate=_SPAWN_RATE)
            self._wait_until_ready(users)
            start = now()
            ramp = self.config.ramp_up if new_users > 1 else 0.0  # (one alone starts at once)
            info = StepInfo(
                index=plan.index,
                label=plan.label,
                mode=plan.mode,
                target=plan.target,
                start_time=start,
                ramp_end=start + ramp,
            )
        else:
            start = now()
            info = StepInfo(
                index=plan.index, label=plan.label, mode=plan.mode, target=plan.target, start_time=start, ramp_end=start
            )
        ctx.step = info
        ctx.hold_new_users = False
        self.writer.begin_step(info)
        add_loadlab_events(env.events).llm_step.fire(step=info)
        if plan.mode == "open" and not self._users:
            # One scheduler per process; it keeps running across steps.
            self._users = ctx.worker_count
            self.runner.start(ctx.worker_count, spawn_rate=_SPAWN_RATE)

    def _reset_prefix_cache(self, plan: StepPlan) -> None:
        """Empty the server's prefix cache for this step, recorded in run.json; the first failure
        is also a warning (a server without a reset fails alike at every step)."""
        self.show("resetting the prefix cache")
        reset = reset_prefix_cache(
            self.config.parsed_url(), self.config.api_key, min(self.config.timeout, RESET_TIMEOUT_S)
        )
        reset.step, reset.time = plan.index, now()
        self.writer.add_cache_reset(reset)
        if not reset.ok and all(r.ok for r in self.writer.meta.cache_resets[:-1]):
            self.writer.add_warning(NO_RESET_HINT if not reset.path else f"prefix-cache reset failed: {reset.detail}")

    def _wait_until_ready(self, users: int) -> None:
        """Until every user has its connection open (at most READY_WAIT_S: a user that cannot
        connect fails its first request, which is counted)."""
        deadline = time.perf_counter() + READY_WAIT_S
        while ready_total(self.env) < users and time.perf_counter() < deadline:
            if interrupted():  # Locust's runner.start() catches the KeyboardInterrupt and quits
                raise KeyboardInterrupt
            self.show("opening connections")
            gevent.sleep(0.01)

    def _stop_now(self, plan: StepPlan) -> bool:
        """Whether the run stops before its step ends: the folder fails, or a Breach."""
        if self.writer.failure:
            self.status = FAILED
            return True
        self.breach = self.budget.check(plan.index, plan.label)
        if self.breach:
            self.status = STOPPED
        return self.breach is not None

    def _drain(self) -> None:
        """Let the requests in flight finish within the last step's grace (`step_grace`), then cut
        off the rest: recorded as aborted, saying so, with a warning in run.json counting them.

        Done before runner.stop(), which blocks the event loop for tens of ms (it inspects the call
        stack for a debug message) and would delay the timestamps of requests still streaming.
        """
        plan = self._last
        grace = step_grace(plan.seconds, self.config.timeout) if plan else self.config.timeout
        deadline = time.perf_counter() + grace
        while in_flight_total(self.env) and time.perf_counter() < deadline:
            if interrupted():  # (closing, the interrupt is held: it raises nothing itself)
                raise KeyboardInterrupt
            self.show("finishing requests in flight")
            gevent.sleep(0.02)
        left = in_flight_total(self.env)
        if not left or plan is None:
            return
        cut_off_total(self.env, cut_off_detail(plan.label, grace))
        deadline = time.perf_counter() + CUT_OFF_WAIT_S
        while in_flight_total(self.env) and time.perf_counter() < deadline:
            self.show("cutting off requests in flight")
            gevent.sleep(0.02)
        self.writer.add_warning(cut_off_warning(plan.label, left, grace))

    def _warning(self) -> str:
        lost = "; ".join(f"worker {loss.worker} died, {loss.aborted} aborted" for loss in self.losses)
        # CPU and loop lag are strain, not a verdict (docs/metrics.md); late or capped sends are effects.
        strain = "; ".join(self.selfcheck.warnings())
        reasons: list[str] = []
        state = getattr(self.env, "loadlab_state", None)
        if state is not None and state.cap_waits:
            reasons.append(f"{state.cap_waits} arrivals waited for one of {OPEN_LOOP_MAX_IN_FLIGHT} in-flight slots")
        if self.mode == "open":
            delay = self.live.start_delay_p99()
            if delay > START_DELAY_P99_MAX:
                reasons.append(f"start delay p99 {format_value(delay, 's')} > {format_value(START_DELAY_P99_MAX, 's')}")
        limited = "client-limited? " + "; ".join(reasons) if reasons else ""
        strained = f"client under strain: {strain}" if strain else ""
        return "; ".join(text for text in (lost, limited, strained) if text)


def run_load(config: RunConfig, folder: Path, console: Console) -> RunOutcome:
    """Run the load the config describes, step after step, writing the run folder; returns how it ended."""
    plans = plan_steps(config)
    with held():  # an interrupt now ends the run at the first step's first check, folder closed
        conductor = Conductor(config, folder, console, plans[0].mode, len(plans))
    try:
        for plan in plans:
            # An engine resets its cache only while no request holds KV (vLLM refuses otherwise):
            # the previous step's requests finish first, so each step starts cold and idle.
            if plan.index and config.reset_prefix_cache and not conductor.pause():
                break
            if not conductor.run_step(plan):
                break
    except KeyboardInterrupt:
        conductor.interrupt()
    with held():  # a second interrupt must not leave the run folder open
        return conductor.close()


class _NoSpawnRateWarning(logging.Filter):
    """Locust warns about spawn rates above 100/s; loadlab starts a step's users at once on purpose
    (their connections open before the step begins; --ramp-up spreads their first requests)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


def _start_environment(config: RunConfig, host: str, mode: str, anchor: ClockAnchor) -> tuple[Environment, Runner]:
    logging.getLogger("locust.runners").addFilter(_NoSpawnRateWarning())
    user = ClosedLoopUser if mode == "closed" else OpenLoopUser
    env = Environment(user_classes=[user], host=host)
    add_loadlab_events(env.events)
    set_context(env, ClientContext(config=config, worker=worker_id(), worker_count=config.processes, anchor=anchor))
    runner: Runner
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
