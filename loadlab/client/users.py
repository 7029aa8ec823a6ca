"""loadlab's Locust users: closed loop (one request at a time per user) and open loop (a scheduler).

Users read everything from `environment.loadlab` (a ClientContext) and report each finished
request twice: once through Locust's own `request` event (so Locust's counts stay honest: one
entry per request, never per token) and once through `llm_request` with the full record. That is
all a worker process needs, so the same users run unchanged locally or on distributed workers.
"""

from __future__ import annotations

from locust import task
from locust.contrib.fasthttp import FastHttpUser
from locust.env import Environment
from locust.user.users import LOCUST_STATE_STOPPING

import functools
import itertools
import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

import gevent
from gevent import GreenletExit
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from gevent.pool import Group
from geventhttpclient.url import URL
from greenlet import greenlet

from loadlab.client.context import ClientContext, LoadlabEvents, add_loadlab_events, context_of
from loadlab.client.stream import Endpoint, StreamResult, stream_request
from loadlab.clock import now
from loadlab.config import RunConfig
from loadlab.store.schema import ErrorCategory, RequestRecord, StepInfo
from loadlab.workload import make_workload
from loadlab.workload.arrivals import arrival_gaps
from loadlab.workload.base import Workload
from loadlab.workload.distributions import sample_seconds
from loadlab.workload.limits import OPEN_LOOP_MAX_IN_FLIGHT
from loadlab.workload.spec import RequestSpec
from loadlab.workload.trace import TraceWorkload, replays_trace

# Open loop: most requests one process keeps in flight (OPEN_LOOP_MAX_IN_FLIGHT, a bound of
# loadlab/workload/limits.py); arrivals beyond it wait for a slot (their start delay grows, which
# the self-check reports as client-limited).
_IDLE_S = 0.05  # how often an idle user looks for a new step / budget
# A user held for a step about to begin waits for that step's `llm_step` (at most this long)
# instead of looking 20 times a second: the conductor opens a step's connections first, and
# hundreds of users polling meanwhile cost the client ~0.1-0.4 s of CPU per step.
HELD_WAIT_S = 1.0
# The event loop's timers wait in whole milliseconds (epoll), rounded up: a nap lands a send
# 0.5-1 ms late. The scheduler naps until this long before an arrival, then yields to the other
# greenlets until it is due: at most this much CPU per request, for sends within ~0.1 ms.
ARRIVAL_SPIN_S = 0.0012
# A closed-loop user that just failed pauses before its next request, twice as long after each
# failure in a row (reset by a success): a failing endpoint answers at once, and without a pause
# every user would send thousands of requests per second at it.
FAILURE_PAUSE_S = (0.05, 1.0)  # first pause, longest pause


Draw = Callable[[], RequestSpec]  # makes the request an arrival sends
Arrival = tuple[float, Draw | None]  # when it is due (perf_counter), and its request (None: the workload's next)
_NO_ARRIVAL: Arrival = (math.inf, None)  # after a trace's last request


class RequestFailed(Exception):
    """What Locust's statistics see for a failed request: its error category."""


class CutOff(GreenletExit):
    """Thrown into a request still in flight at its step's end (ProcessState.cut_off): recorded
    as aborted with this detail; the user goes on."""


class ProcessState:
    """What all users of one process share: the endpoint, the workload, request budgets, counters."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.config: RunConfig | None = None  # what `endpoint` and `workload` were built from
        self.endpoint: Endpoint
        self.workload: Workload
        self.sync_config()
        self.in_flight = 0  # requests sent here and not finished yet
        self.cap_waits = 0  # open-loop arrivals that found every slot taken
        self.ready = 0  # closed-loop users here whose connection is open
        self._issued: dict[int, int] = defaultdict(int)
        self._ids = itertools.count()
        self._users = itertools.count()  # closed-loop users started here, in order
        self._ramp_places = itertools.count()  # closed-loop users that took a place in a ramp-up
        self._step_begun = Event()  # set (and replaced) when a step begins: see `listen`
        self._listening = False
        self.streaming: set[greenlet] = set()  # greenlets inside stream_request now
        self.cut: set[greenlet] = set()  # ... of those, the ones cut off

    def cut_off(self, reason: str) -> None:
        """Cut off every request in flight here: each is recorded as aborted with `reason` and
        its user goes on."""
        for request in self.streaming:
            gevent.get_hub().loop.run_callback(self._throw, request, reason)

    def _throw(self, request: greenlet, reason: str) -> None:
        # From the event loop, as gevent's own kill: the greenlet waits inside stream_request
        # (it may have finished its request meanwhile: then nothing is thrown).
        if request in self.streaming:
            self.cut.add(request)
            request.throw(CutOff(reason))

    def listen(self, events: LoadlabEvents) -> None:
        """Hear when a step begins (`llm_step`), once per process: `wait_for_step` needs it."""
        if not self._listening:
            events.llm_step.add_listener(self._on_step)
            self._listening = True

    def _on_step(self, **_: object) -> None:
        begun, self._step_begun = self._step_begun, Event()
        begun.set()

    def wait_for_step(self, timeout: float) -> None:
        """Wait until the next step begins, at most `timeout` seconds."""
        self._step_begun.wait(timeout)

    @property
    def ctx(self) -> ClientContext:
        return context_of(self.environment)

    def sync_config(self) -> None:
        """(Re)build the endpoint and the workload when the context's config differs from the one
        they were built from: a test started again from Locust's web UI (or its master) may
        bring a new host or new lengths. An equal config (sent again with every step) keeps
        them, and the workload's place in its sequence."""
        ctx = self.ctx
        if ctx.config == self.config:
            return
        self.endpoint = Endpoint.from_config(ctx.config)
        # Each process draws its own requests (its worker index is its stream): the same
        # sequence everywhere would send identical prompts from every worker and let a prefix
        # cache flatter the server. Shared-prefix workloads keep one prefix pool across streams.
        self.workload = make_workload(ctx.config.workload, ctx.config.api, stream=ctx.worker_index)
        self.config = ctx.config

    def claim(self, step: int) -> bool | None:
        """Take the next request of `step`: True if it is a warm-up request, False if measured,
        None when this process's share of --requests (plus warm-up) for the step is used up."""
        cfg = self.ctx.config
        n = self._issued[step]
        warmup = self._share(cfg.warmup_requests)
        if cfg.requests and n >= warmup + self._share(cfg.requests):
            return None
        self._issued[step] = n + 1
        return n < warmup

    def _share(self, total: int) -> int:
        # Split a count over processes: the first `total % count` processes take one more.
        count, index = max(1, self.ctx.worker_count), self.ctx.worker_index
        return total // count + (1 if index < total % count else 0)

    def next_id(self) -> str:
        return f"{self.ctx.worker}-{next(self._ids)}"

    def think_rng(self) -> random.Random:
        """The think-time generator of the next user started here: seeded by the workload seed,
        this process's worker index and the user's number, so a run with the same seed and
        users draws the same think times."""
        ctx = self.ctx
        return random.Random(f"{ctx.config.workload.seed}-think-{ctx.worker_index}-{next(self._users)}")

    def ramp_place(self) -> float:
        """Where the next new user starts within a step's ramp-up, as a fraction of it in [0, 1).

        Van der Corput's sequence over this process's users, interleaved with the other
        processes' (worker index): however many users a step adds, their starts spread evenly
        without the processes agreeing on anything.
        """
        ctx = self.ctx
        return van_der_corput(next(self._ramp_places) * max(1, ctx.worker_count) + ctx.worker_index)


def van_der_corput(n: int) -> float:
    """The n-th point of the base-2 van der Corput sequence: 0, 1/2, 1/4, 3/4, 1/8, ..."""
    x, scale = 0.0, 0.5
    while n:
        n, bit = divmod(n, 2)
        x += bit * scale
        scale /= 2
    return x


# The Locust Environment attribute that holds the ProcessState (Locust has no place for it);
# read and set only here.
_STATE = "loadlab_state"


def _state_of(environment: Environment) -> ProcessState | None:
    state: ProcessState | None = getattr(environment, _STATE, None)
    return state


def process_state(environment: Environment) -> ProcessState:
    """The ProcessState of this environment, made on first use from its ClientContext and
    brought up to date with its config at every later call."""
    state = _state_of(environment)
    if state is None:
        state = ProcessState(environment)
        setattr(environment, _STATE, state)
    else:
        state.sync_config()  # users are made when a test starts: the config may be new
    return state


def in_flight(environment: Environment) -> int:
    """Requests in flight in this process (0 where no user has run, e.g. on a master)."""
    state = _state_of(environment)
    return state.in_flight if state is not None else 0


def cut_off(environment: Environment, reason: str) -> None:
    """Cut off the requests in flight in this process (ProcessState.cut_off)."""
    state = _state_of(environment)
    if state is not None:
        state.cut_off(reason)


def ready_users(environment: Environment) -> int:
    """Closed-loop users of this process whose connection is open (0 where none has started)."""
    state = _state_of(environment)
    return state.ready if state is not None else 0


class LLMUser(FastHttpUser):
    """Common part: an HTTP pool sized for the user's in-flight requests, and one request's life."""

    abstract = True
    max_in_flight = 1

    def __init__(self, environment: Environment) -> None:
        self.state = process_state(environment)
        self.loadlab_events = add_loadlab_events(environment.events)
        self.state.listen(self.loadlab_events)
        timeout = self.state.endpoint.timeout
        # Read by FastHttpUser.__init__: the pool must never make a request wait for a socket.
        self.concurrency = self.max_in_flight
        # No socket timeout: it would arm a timer on every recv (per token); the per-request
        # timeout in stream_request covers stalls. (Locust types it float; geventhttpclient takes None.)
        self.network_timeout = None  # type: ignore[assignment]
        self.connection_timeout = min(timeout, 10.0)
        super().__init__(environment)
        self.http = self.client.client.clientpool.get_client(URL(self.state.endpoint.base_url))

    def send_one(self, scheduled: float, step: int, warmup: bool, draw: Draw | None = None) -> RequestRecord:
        """Send one request due at `scheduled` (perf_counter) and report it; re-raises a kill.
        `draw` makes the request (default: the workload's next one)."""
        state = self.state
        workload = state.workload  # the one that answers for this request, even if replaced meanwhile
        spec = draw() if draw is not None else workload.next_request()
        ctx = state.ctx
        request_id = state.next_id()
        state.in_flight += 1
        current = gevent.getcurrent()
        self.loadlab_events.llm_request_sent.fire(
            request_id=request_id,
            step=step,
            warmup=warmup,
            api=state.endpoint.api,
            scheduled_time=ctx.anchor.to_wall(scheduled),
            input_tokens=spec.input_tokens,
            max_tokens=spec.max_tokens,
        )
        state.streaming.add(current)  # (no switch between this and the request: see _throw)
        try:
            result = stream_request(
                self.http,
                state.endpoint,
                spec,
                request_id,
                scheduled,
                ctx.anchor,
                worker=ctx.worker,
                step=step,
                warmup=warmup,
            )
        finally:
            state.in_flight -= 1
            state.streaming.discard(current)
        workload.complete(spec, result.text, result.record.ok)
        self._report(result)
        if current in state.cut:
            state.cut.discard(current)  # cut off at its step's end: the user goes on
        elif result.aborted:
            raise gevent.GreenletExit
        return result.record

    def _report(self, result: StreamResult) -> None:
        rec = result.record
        events = self.loadlab_events
        # A request cut off by the tester's stop says nothing about the server: it is kept in the
        # run folder (category "aborted") but not counted as a failure in Locust's statistics.
        if not result.aborted:
            events.request.fire(
                request_type="POST",
                name=self.state.endpoint.path,
                response_time=_ms(rec.end_time - rec.send_time),
                response_length=result.response_bytes,
                exception=None if rec.ok else RequestFailed(rec.error),
                context={},
            )
        events.llm_request.fire(record=rec)


class ClosedLoopUser(LLMUser):
    """One request at a time, then the think time (none unless --think-time is set).

    A user opens its connection when it starts, before its first request, so the connection
    set-up stays out of every TTFT. While the context holds new users (the run conductor opens a
    step's connections before the step begins), a user started now joins only the next step,
    and its first request waits for its place in that step's ramp-up (StepInfo.ramp_end).
    """

    def wait_time(self) -> float:
        think = self.state.ctx.config.think_time
        return sample_seconds(think, self._rng) if think is not None else 0.0

    def on_start(self) -> None:
        self._rng = self.state.think_rng()
        self._failures = 0  # failed requests in a row
        ctx = self.state.ctx
        self._joins_after = ctx.step.index if ctx.hold_new_users and ctx.step is not None else -1
        self._started = False  # it sent its first request (or waited for its place to)
        self._open_connection()
        self.state.ready += 1

    def on_stop(self) -> None:
        self.state.ready -= 1

    def _open_connection(self) -> None:
        # geventhttpclient has no public way to connect ahead: take a socket from the user's
        # pool (which connects it) and give it back.
        pool = self.http._connection_pool
        try:
            pool.return_socket(pool.get_socket())
        except OSError:
            pass  # the first request fails the same way, and is counted (category connect)

    def _step(self) -> StepInfo | None:
        """The closed-loop step this user takes part in now, if any."""
        step = self.state.ctx.step
        if step is None or step.mode != "closed" or step.index <= self._joins_after:
            return None
        return step

    def _wait_for_place(self, step: StepInfo) -> None:
        """A new user's first request waits for its place within the step's ramp-up."""
        self._started = True
        ramp = step.ramp_end - step.start_time
        if ramp > 0:  # (NaN: no ramp-up of ours; Locust's spawn rate spreads the users)
            place = step.start_time + ramp * self.state.ramp_place()
            gevent.sleep(max(0.0, place - now()))

    def _pause_after(self, record: RequestRecord) -> None:
        if record.ok:
            self._failures = 0
            return
        first, longest = FAILURE_PAUSE_S
        gevent.sleep(min(longest, first * 2**self._failures))
        self._failures = min(self._failures + 1, 16)  # (bounded: no float overflow)

    @task
    def one_request(self) -> None:
        step = self._step()
        if step is not None and not self._started:
            self._wait_for_place(step)
            step = self._step()
        warmup = None if step is None else self.state.claim(step.index)
        if step is None or warmup is None:  # no closed-loop step running, or its budget is spent
            if self.state.ctx.hold_new_users:  # a step is about to begin: it wakes us
                self.state.wait_for_step(HELD_WAIT_S)
            else:
                gevent.sleep(_IDLE_S)
            return
        record = self.send_one(time.perf_counter(), step.index, warmup)
        if record.error == ErrorCategory.ABORTED.value:  # cut off at its step's end: not a failure
            self._open_connection()  # (its socket closed with it) ready before the next step
            return
        self._pause_after(record)


class OpenLoopUser(LLMUser):
    """A scheduler: draws arrival times and starts one greenlet per request at its time.

    One such user runs per process and takes its share of the rate (ClientContext.rate_share).
    Latency counts from the scheduled time, so a late start shows up instead of hiding.
    """

    max_in_flight = OPEN_LOOP_MAX_IN_FLIGHT

    @task
    def schedule(self) -> None:
        ctx = self.state.ctx
        requests = Group()
        slots = BoundedSemaphore(self.max_in_flight)
        rng = random.Random(f"{ctx.config.workload.seed}-arrivals-{ctx.worker_index}")
        current: StepInfo | None = None
        due, draw = math.inf, None
        arrivals: Iterator[Arrival] = iter(())
        try:
            while self._state != LOCUST_STATE_STOPPING:
                ctx = self.state.ctx
                step = ctx.step
                if step is None or step.mode != "open":
                    gevent.sleep(_IDLE_S)
                    continue
                if current is None or step.index != current.index:  # a new step: a new rate from now on
                    current = step
                    arrivals = self._arrivals(ctx, rng)
                    due, draw = next(arrivals, _NO_ARRIVAL)
                wait = due - time.perf_counter()
                if wait > 0:
                    # Short naps, so a step change or a stop is seen even at a low rate; the last
                    # stretch is yielded away instead (see ARRIVAL_SPIN_S).
                    gevent.sleep(min(wait - ARRIVAL_SPIN_S, _IDLE_S) if wait > ARRIVAL_SPIN_S else 0)
                    continue
                warmup = self.state.claim(step.index)
                if warmup is None:
                    due = math.inf
                    continue
                requests.spawn(self._arrival, slots, due, step.index, warmup, draw)
                due, draw = next(arrivals, _NO_ARRIVAL)
                gevent.sleep(0)  # behind schedule, still let the step loop and the streams run
            requests.join()  # drain: each request is bounded by the per-request timeout
        finally:
            requests.kill()

    def _arrivals(self, ctx: ClientContext, rng: random.Random) -> Iterator[Arrival]:
        """When each request of the step that begins now is due (perf_counter), and what makes
        it: a trace's own clock and requests, else the arrival process at this process's share
        of the rate (the workload draws the request when it is sent)."""
        start = time.perf_counter()
        workload = self.state.workload
        if isinstance(workload, TraceWorkload) and replays_trace(ctx.config):
            for offset, n in workload.schedule(ctx.worker_index, max(1, ctx.worker_count)):
                yield start + offset, functools.partial(workload.request, n)
            return
        due = start
        for gap in arrival_gaps(ctx.config.arrival, ctx.rate_share(), ctx.config.burstiness, rng):
            due += gap
            yield due, None

    def _arrival(self, slots: BoundedSemaphore, due: float, step: int, warmup: bool, draw: Draw | None) -> None:
        if slots.locked():
            self.state.cap_waits += 1
        with slots:
            self.send_one(due, step, warmup, draw)


def _ms(seconds: float) -> float:
    return seconds * 1000.0 if math.isfinite(seconds) else 0.0
