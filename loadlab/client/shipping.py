"""Records from Locust workers to their master, and the run's context from the master to workers.

One mechanism for `loadlab run --processes N` and for plain `locust --master/--worker` (workers
possibly on other hosts). Messages are Locust custom messages with msgpack-able payloads:

    worker -> master  HELLO    {worker, anchor}               once the worker can take a context
    master -> worker  CONTEXT  {seq, config, url, api_key, step, hold_new_users, worker_index, worker_count}
                                                              on HELLO and whenever the step changes
    worker -> master  RECORDS  {records: [RequestRecord as dict], samples: [Sample as dict],
                               started: [request sent], in_flight, ready, seq}
                                                              every SHIP_INTERVAL_S, after a CONTEXT,
                                                              and (started only) as soon as a request is sent
    master -> worker  CUT_OFF  {reason}                       requests still in flight a grace after
                                                              their step's end: cut off (aborted)
    master -> worker  FLUSH    {round}                        at the master's test_stop
    worker -> master  DONE     {round}                        after the worker's users stopped and
                                                              its last records were sent

The master fires `llm_request` for every shipped record, so listeners (the run writer, the live
LLM stats) see the same stream as in a single process; the samples are the worker's own
self-check (client CPU, event-loop lag), passed on with `llm_samples`. When a run stops without a step (step
None), the master drains first, like a local runner: it tells the workers, then waits (up to
stop_timeout) until each has answered that context with nothing in flight; only then does
Locust's stop message end the users. Locust's master waits only ~0.5 s for
workers on quit; the FLUSH/DONE handshake waits (bounded) until every worker has sent its last
record. One ZeroMQ connection per worker keeps order: a worker's DONE arrives after its records.
The API key travels in the CONTEXT message only, never to disk.

The master keeps every worker's requests that were sent and not yet reported back ("started"). When
`loadlab run --processes N` sees a worker process die (it started them and watches their PIDs, see
distributed.py), `worker_lost` records those as aborted, naming the worker, and the run goes on
with the others; the dead worker's share of the load is not replaced.
"""

from __future__ import annotations

from locust.env import Environment
from locust.exception import RPCError
from locust.rpc import Message
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

import dataclasses
import logging
import math
import os
import socket
import time
from datetime import UTC, datetime
from typing import Any

import gevent

from loadlab.client import users
from loadlab.client.context import ClientContext, add_loadlab_events, context_of, find_context, set_context
from loadlab.client.selfcheck import SelfCheck
from loadlab.clock import ClockAnchor, now, process_anchor
from loadlab.config import RunConfig
from loadlab.convert import from_json
from loadlab.store.schema import ErrorCategory, RequestRecord, Sample, StepInfo

HELLO, CONTEXT, RECORDS, CUT_OFF, FLUSH, DONE = (
    "loadlab_hello",
    "loadlab_context",
    "loadlab_records",
    "loadlab_cut_off",
    "loadlab_flush",
    "loadlab_done",
)
SHIP_INTERVAL_S = 0.5  # a worker sends its records at least this often
STEP_WATCH_S = 0.02  # the master notices a step set without llm_step this fast
FINAL_FLUSH_GRACE_S = 15.0  # the master waits this long (plus stop_timeout) for workers' DONE ...
MISSING_WORKER_WAIT_S = 5.0  # ... but only this long for one Locust marks missing (dead, or starved)

log = logging.getLogger(__name__)


# The Locust Environment attribute that holds a master's MasterShipper (Locust has no place for
# it); set by MasterShipper itself, read only through _master_of.
_MASTER = "loadlab_master"


def _master_of(environment: Environment) -> MasterShipper | None:
    shipper: MasterShipper | None = getattr(environment, _MASTER, None)
    return shipper


def in_flight_total(environment: Environment) -> int:
    """Requests in flight: over all workers on a master (as last reported), else in this process."""
    shipper = _master_of(environment)
    return shipper.in_flight_total() if shipper is not None else users.in_flight(environment)


def publish_context(environment: Environment) -> None:
    """On a master, send the context to the workers now (before a spawn message that depends on
    it); elsewhere nothing: the users read it directly."""
    shipper = _master_of(environment)
    if shipper is not None:
        shipper.send_context()


def cut_off_total(environment: Environment, reason: str) -> None:
    """Cut off the requests in flight (recorded as aborted, `reason` their detail; the users go
    on): on a master, those of every worker; elsewhere this process's."""
    shipper = _master_of(environment)
    if shipper is not None:
        for client_id in shipper.ready_workers():
            shipper.runner.send_message(CUT_OFF, {"reason": reason}, client_id=client_id)
    else:
        users.cut_off(environment, reason)


def ready_total(environment: Environment) -> int:
    """Closed-loop users with an open connection: over all workers on a master (as last
    reported), else in this process."""
    shipper = _master_of(environment)
    return shipper.ready_total() if shipper is not None else users.ready_users(environment)


def worker_id(pid: int | None = None) -> str:
    """The id in records of this process (or of process `pid` on this host): host:pid."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


@dataclasses.dataclass(frozen=True)
class WorkerLoss:
    """A worker process that died mid-run, as the master saw it."""

    worker: str  # host:pid
    time: float  # epoch seconds when the master noticed
    reason: str  # e.g. "killed by SIGKILL"
    aborted: int  # its requests in flight, recorded as aborted
    workers_left: int  # worker processes still running
    workers: int  # worker processes the run had

    def message(self) -> str:
        """One line for run.json, summary.json and the console."""
        at = datetime.fromtimestamp(self.time, UTC).isoformat(timespec="milliseconds")
        return (
            f"load-generator process {self.worker} died at {at} ({self.reason}): its {self.aborted} "
            f"requests in flight are recorded as aborted; the run went on with {self.workers_left} "
            f"of {self.workers} processes, without replacing its load"
        )


class WorkerShipper:
    """On a worker: sends every `llm_request` record to the master; takes the context from it."""

    def __init__(self, environment: Environment) -> None:
        runner = environment.runner
        assert isinstance(runner, WorkerRunner), "WorkerShipper needs a worker runner"
        self.environment = environment
        self.runner = runner
        self.worker = worker_id()
        self._buffer: list[dict[str, Any]] = []
        self._samples: list[dict[str, Any]] = []
        self._started: list[dict[str, Any]] = []  # requests sent since the last message
        self._start_notice = False  # a message for them is on its way
        self._last_counts = (-1, -1)  # (in flight, ready users) last sent
        self._seq = 0  # of the last CONTEXT taken, echoed in RECORDS
        self.events = events = add_loadlab_events(environment.events)
        events.llm_request.add_listener(self._on_record)
        events.llm_request_sent.add_listener(self._on_sent)
        # Users stopped (stop message, quit, or our FLUSH): nothing new will come, send the rest.
        events.test_stop.add_listener(lambda **_: self.ship())
        runner.register_message(CONTEXT, self._on_context)
        runner.register_message(CUT_OFF, lambda msg, **_: users.cut_off(environment, msg.data["reason"]))
        runner.register_message(FLUSH, self._on_flush)
        runner.greenlet.spawn(self._ship_loop)
        # Each load-generator process watches its own CPU and event-loop lag (for the summary's
        # client-limited verdict); it runs as long as the worker does.
        SelfCheck(self.worker).start(self._on_samples)
        # Only now can the context be received: asking for it avoids the race with Locust's connect.
        self._hello()

    def ship(self, always: bool = False, started_only: bool = False) -> None:
        """Send the requests sent meanwhile, the buffered records and samples (unless
        `started_only`), and the in-flight and ready-user counts when they changed, to the master."""
        started, self._started = self._started, []
        records, samples = ([], []) if started_only else (self._buffer, self._samples)
        if not started_only:
            self._buffer, self._samples = [], []
        counts = (users.in_flight(self.environment), users.ready_users(self.environment))
        if not (started or records or samples or always or counts != self._last_counts):
            return
        try:
            self.runner.send_message(
                RECORDS,
                {
                    "records": records,
                    "samples": samples,
                    "started": started,
                    "in_flight": counts[0],
                    "ready": counts[1],
                    "seq": self._seq,
                },
            )
            self._last_counts = counts
        except RPCError as e:  # keep them for the next try; the connection may come back
            self._started[:0] = started
            self._buffer[:0] = records
            self._samples[:0] = samples
            log.warning("could not send %d records to the master (will retry): %s", len(records), e)

    def _on_record(self, record: RequestRecord, **_: Any) -> None:
        self._buffer.append(dataclasses.asdict(record))

    def _on_sent(self, **fields: Any) -> None:
        # The master learns of a request at once (one message per turn of the event loop, sent
        # while the request waits for its answer): a kill -9 a moment later must not hide it.
        fields["send_time"] = now()
        self._started.append(fields)
        if not self._start_notice:
            self._start_notice = True
            gevent.spawn(self._notice_started)

    def _notice_started(self) -> None:
        self._start_notice = False
        self.ship(started_only=True)

    def _on_samples(self, samples: list[Sample]) -> None:
        self._samples.extend(dataclasses.asdict(s) for s in samples)

    def _hello(self) -> None:
        self.runner.send_message(HELLO, {"worker": self.worker, "anchor": process_anchor().to_dict()})

    def _ship_loop(self) -> None:
        while True:
            gevent.sleep(SHIP_INTERVAL_S)
            if self._seq == 0:  # no context yet: the master may not have listened when we said HELLO
                self._hello()
            self.ship()

    def _on_context(self, environment: Environment, msg: Message, **_: Any) -> None:
        data = msg.data
        config = from_json(RunConfig, data["config"])
        config.url = data["url"]  # secrets travel beside the stored form of the config
        config.api_key = data["api_key"]
        step = from_json(StepInfo, data["step"]) if data["step"] else None
        context = find_context(environment)
        if context is None:
            context = ClientContext(config=config, worker=self.worker)
            set_context(environment, context)
        new_step = step is not None and (context.step is None or context.step.index != step.index)
        # Updated in place: users that keep a reference see the change at once.
        context.config = config
        context.worker_index = data["worker_index"]
        context.worker_count = data["worker_count"]
        context.step = step
        context.hold_new_users = data.get("hold_new_users", False)
        self._seq = data["seq"]
        if new_step:
            self.events.llm_step.fire(step=step)
        self.ship(always=True)  # the master learns that this context arrived, and what is in flight

    def _on_flush(self, environment: Environment, msg: Message, **_: Any) -> None:
        self.runner.stop()  # fires test_stop (which ships) unless the users were already stopped
        self.ship()
        # Locust's own last statistics too: its master waits only ~0.5 s for them on quit.
        self.runner._send_stats()
        self.runner.send_message(DONE, {"round": msg.data["round"]})


class MasterShipper:
    """On a master: fires `llm_request` for workers' records, sends the context to workers."""

    def __init__(self, environment: Environment) -> None:
        runner = environment.runner
        assert isinstance(runner, MasterRunner), "MasterShipper needs a master runner"
        self.environment = environment
        self.runner = runner
        self.workers: dict[str, str] = {}  # Locust client id -> loadlab worker id (from HELLO)
        self.anchors: dict[str, ClockAnchor] = {}  # Locust client id -> that worker's clock anchor
        self.in_flight: dict[str, int] = {}  # Locust client id -> requests in flight there
        self.ready: dict[str, int] = {}  # Locust client id -> users with an open connection there
        self.seen_seq: dict[str, int] = {}  # Locust client id -> last CONTEXT it answered
        self.started: dict[str, dict[str, dict[str, Any]]] = {}  # client id -> request id -> sent, no record yet
        self.lost: dict[str, WorkerLoss] = {}  # Locust client id -> how its process died
        self.closing = False  # the final collection began: workers may exit
        self._seq = 0
        self._sent: tuple[StepInfo | None, bool] = (None, False)  # the step and hold_new_users last sent
        self._round = 0
        self._pending: set[str] = set()
        setattr(environment, _MASTER, self)
        self.events = events = add_loadlab_events(environment.events)
        events.llm_step.add_listener(self._on_step)
        events.test_stopping.add_listener(lambda **_: self.drain())
        events.test_stop.add_listener(lambda **_: self.collect_final_records())
        runner.register_message(HELLO, self._on_hello)
        runner.register_message(RECORDS, self._on_records)
        runner.register_message(DONE, self._on_done)
        runner.greenlet.spawn(self._watch_step)

    def joined_workers(self) -> list[str]:
        """Client ids of the workers that said HELLO and Locust still knows, in worker-index order.

        Workers Locust marks missing (no heartbeat for 3 s, maybe only starved of CPU) stay in:
        the worker count that splits the open-loop rate must not jump when one is slow.
        """
        ids = [c for c in self.workers if c in self.runner.clients]
        return sorted(ids, key=self.runner.get_worker_index)

    def ready_workers(self) -> list[str]:
        """The joined workers that are neither missing nor dead."""
        clients = self.runner.clients
        return [c for c in self.joined_workers() if clients[c].state != STATE_MISSING and c not in self.lost]

    def worker_lost(self, worker: str, reason: str, at: float | None = None) -> None:
        """Worker process `worker` (host:pid) died (noticed at `at`, epoch seconds; default now):
        fire its requests sent and not reported back as aborted records, then `llm_worker_lost`.
        The others go on; nothing waits for it any more."""
        client_id = next((c for c, w in self.workers.items() if w == worker), None)
        if client_id is None or client_id in self.lost:
            return  # never joined (start-up reports that itself), or already counted
        at = now() if at is None else at
        started = self.started.pop(client_id, {})
        self.in_flight.pop(client_id, None)
        self.ready.pop(client_id, None)
        self._pending.discard(client_id)
        for fields in started.values():
            self.events.llm_request.fire(
                record=RequestRecord(
                    **fields,
                    worker=worker,
                    first_token_time=math.nan,
                    end_time=at,
                    error=ErrorCategory.ABORTED.value,
                    error_detail=f"worker process died ({reason})",
                )
            )
        workers = len(self.joined_workers())
        loss = WorkerLoss(
            worker=worker,
            time=at,
            reason=reason,
            aborted=len(started),
            workers_left=workers - len(self.lost) - 1,
            workers=workers,
        )
        self.lost[client_id] = loss
        log.warning("%s", loss.message())
        self.events.llm_worker_lost.fire(loss=loss)

    def in_flight_total(self) -> int:
        """Requests in flight over all connected workers (as last reported)."""
        return sum(self.in_flight.get(c, 0) for c in self.ready_workers())

    def ready_total(self) -> int:
        """Closed-loop users with an open connection over all connected workers (as last reported)."""
        return sum(self.ready.get(c, 0) for c in self.ready_workers())

    def send_context(self) -> None:
        """Send the run's config and current step to every worker, each with its index and the count."""
        context = find_context(self.environment)
        if context is None:
            return
        workers = self.joined_workers()
        self._seq += 1
        self._sent = (context.step, context.hold_new_users)
        base = {
            "seq": self._seq,
            "config": context.config.to_dict(),
            "url": context.config.url,
            "api_key": context.config.api_key,
            "step": dataclasses.asdict(context.step) if context.step else None,
            "hold_new_users": context.hold_new_users,
            "worker_count": len(workers),
        }
        for index, client_id in enumerate(workers):
            self.runner.send_message(CONTEXT, {**base, "worker_index": index}, client_id=client_id)

    def drain(self) -> None:
        """Before Locust's stop message: with no step left, let in-flight requests finish
        (up to stop_timeout), as a local runner does."""
        self.send_context()
        context = find_context(self.environment)
        if context is None or context.step is not None:
            return  # a step is on (plain Locust's stop): Locust's own stop_timeout applies
        deadline = time.monotonic() + (self.environment.stop_timeout or 0)

        def busy() -> bool:
            return any(
                self.seen_seq.get(c, 0) < self._seq or self.in_flight.get(c, 0) > 0 for c in self.ready_workers()
            )

        while busy() and time.monotonic() < deadline:
            gevent.sleep(0.05)

    def collect_final_records(self) -> None:
        """Ask every worker to stop, send its last records and answer DONE; wait (bounded) for all.

        A worker Locust marks missing (no heartbeat for 3 s) may only be starved of CPU: it is
        asked too, but waited for at most MISSING_WORKER_WAIT_S (a dead one costs that much).
        A worker that does not answer in time is treated as lost (see worker_lost).
        """
        self.closing = True
        self._round += 1
        clients = self.runner.clients
        self._pending = set(self.joined_workers()) - set(self.lost)
        for client_id in self._pending:
            self.runner.send_message(FLUSH, {"round": self._round}, client_id=client_id)
        asked = time.monotonic()
        live_deadline = asked + (self.environment.stop_timeout or 0) + FINAL_FLUSH_GRACE_S
        missing_deadline = asked + MISSING_WORKER_WAIT_S
        while self._pending:
            self._pending &= set(clients)  # Locust forgot it: gone for good
            live = self._pending & set(self.ready_workers())
            if time.monotonic() > (live_deadline if live else missing_deadline):
                for client_id in list(self._pending):  # what they had in flight is recorded as aborted
                    self.worker_lost(self.workers[client_id], "sent no final records")
                return
            gevent.sleep(0.05)

    def _on_step(self, step: StepInfo, **_: Any) -> None:
        context_of(self.environment).step = step
        self.send_context()
        for client_id in self.joined_workers():  # again, for listeners added after the workers joined
            self._announce(client_id)

    def _watch_step(self) -> None:
        """Push a change of the step made without `llm_step` (step = None: send no more), or of
        hold_new_users, to the workers."""
        while True:
            gevent.sleep(STEP_WATCH_S)
            context = find_context(self.environment)
            if context is None:
                continue
            step, hold = self._sent
            if context.step is not step or context.hold_new_users != hold:
                self.send_context()

    def _announce(self, client_id: str) -> None:
        self.events.llm_worker_anchor.fire(worker=self.workers[client_id], anchor=self.anchors[client_id])

    def _on_hello(self, environment: Environment, msg: Message, **_: Any) -> None:
        self.workers[msg.node_id] = msg.data["worker"]
        self.anchors[msg.node_id] = ClockAnchor(**msg.data["anchor"])
        self._announce(msg.node_id)
        self.send_context()  # every worker: the worker count changed

    def _on_records(self, environment: Environment, msg: Message, **_: Any) -> None:
        if msg.node_id in self.lost:
            return  # its in-flight requests are already recorded as aborted
        self.in_flight[msg.node_id] = msg.data["in_flight"]
        self.ready[msg.node_id] = msg.data.get("ready", 0)
        self.seen_seq[msg.node_id] = msg.data["seq"]
        started = self.started.setdefault(msg.node_id, {})
        for fields in msg.data.get("started", []):
            started[fields["request_id"]] = fields
        for fields in msg.data["records"]:
            started.pop(fields["request_id"], None)
            self.events.llm_request.fire(record=RequestRecord(**fields))
        if msg.data.get("samples"):
            self.events.llm_samples.fire(samples=[Sample(**s) for s in msg.data["samples"]])

    def _on_done(self, environment: Environment, msg: Message, **_: Any) -> None:
        if msg.data["round"] == self._round:
            self._pending.discard(msg.node_id)
