"""What every Locust user of a loadlab run reads from `environment.loadlab`, and loadlab's events."""

from __future__ import annotations

from locust.env import Environment
from locust.event import EventHook, Events

from dataclasses import dataclass, field
from typing import cast

from loadlab.clock import ClockAnchor, process_anchor
from loadlab.config import RunConfig
from loadlab.store.schema import StepInfo


@dataclass
class ClientContext:
    """Per-process state of a run, set on `environment.loadlab` before users start.

    In distributed runs the master sends the config and each step to the workers, which update
    their own context; users read `step` at every request, so a step change takes effect at once.
    """

    config: RunConfig
    worker: str  # this process's id, e.g. "host:pid"
    worker_index: int = 0
    worker_count: int = 1
    step: StepInfo | None = None
    hold_new_users: bool = False  # users started now wait for the next step (see ClosedLoopUser)
    anchor: ClockAnchor = field(default_factory=process_anchor)

    def rate_share(self) -> float:
        """This process's share of the open-loop rate: independent Poisson streams sum to Poisson(R)."""
        if self.step is None or self.step.mode != "open":
            return 0.0
        return self.step.target / max(1, self.worker_count)


class LoadlabEvents(Events):
    """Locust's events with loadlab's own: the type add_loadlab_events gives (never made itself).

    Locust's own `request` event is fired once per HTTP request (never per token), so Locust's
    request counts stay honest.
    """

    llm_request: EventHook
    """`llm_request(record: RequestRecord)`: once per finished request (failed ones too), in the
    process that measured it; in distributed runs, also on the master for shipped records."""

    llm_step: EventHook
    """`llm_step(step: StepInfo)`: a load step begins."""

    llm_worker_anchor: EventHook
    """`llm_worker_anchor(worker: str, anchor: ClockAnchor)`: on a master, when a worker process
    joins, and again for every worker when a step begins, with that worker's clock anchor (for
    run.json's `worker_anchors`)."""

    llm_samples: EventHook
    """`llm_samples(samples: list[Sample])`: on a master, the self-check samples (client CPU,
    event-loop lag) a worker process shipped, so every process's self-check is stored."""

    llm_request_sent: EventHook
    """`llm_request_sent(request_id, step, warmup, api, scheduled_time, input_tokens, max_tokens)`:
    a request is about to be sent, in the process that sends it (a worker tells its master at
    once, so the master can record it as aborted should the worker die)."""

    llm_worker_lost: EventHook
    """`llm_worker_lost(loss: WorkerLoss)`: on a master, a worker process died mid-run (after
    its requests in flight were fired as aborted records)."""


def add_loadlab_events(events: Events) -> LoadlabEvents:
    """Add loadlab's event hooks (LoadlabEvents) to a Locust Events object, once; returns it, typed."""
    for name in LoadlabEvents.__annotations__:
        if not hasattr(events, name):
            setattr(events, name, EventHook())
    return cast(LoadlabEvents, events)


# Locust's Environment has no place for a run's own state: the ClientContext is kept in this
# attribute, read and set only through the two functions below (which give it its type).
_CONTEXT = "loadlab"


def context_of(environment: Environment) -> ClientContext:
    """The run's context on this Locust environment (AttributeError before set_context)."""
    context: ClientContext = getattr(environment, _CONTEXT)
    return context


def find_context(environment: Environment) -> ClientContext | None:
    """The run's context on this Locust environment, None before set_context."""
    context: ClientContext | None = getattr(environment, _CONTEXT, None)
    return context


def set_context(environment: Environment, context: ClientContext) -> None:
    """Give this Locust environment the run's context (before users start)."""
    setattr(environment, _CONTEXT, context)
