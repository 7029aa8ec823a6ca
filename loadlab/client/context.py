"""What every Locust user of a loadlab run reads from `environment.loadlab`, and loadlab's events."""

from __future__ import annotations

from locust.event import EventHook, Events

from dataclasses import dataclass, field

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
    worker: str                          # this process's id, e.g. "host:pid"
    worker_index: int = 0
    worker_count: int = 1
    step: StepInfo | None = None
    hold_new_users: bool = False         # users started now wait for the next step (see ClosedLoopUser)
    anchor: ClockAnchor = field(default_factory=process_anchor)

    def rate_share(self) -> float:
        """This process's share of the open-loop rate: independent Poisson streams sum to Poisson(R)."""
        if self.step is None or self.step.mode != "open":
            return 0.0
        return self.step.target / max(1, self.worker_count)


def add_loadlab_events(events: Events) -> Events:
    """Add loadlab's event hooks to a Locust Events object (idempotent).

    - `llm_request(record: RequestRecord)`: fired once per finished request (failed ones too),
      in the process that measured it; in distributed runs, also on the master for shipped records.
    - `llm_step(step: StepInfo)`: fired when a load step begins.
    - `llm_worker_anchor(worker: str, anchor: ClockAnchor)`: fired on a master when a worker
      process joins, and again for every worker when a step begins, with that worker's clock
      anchor (for run.json's `worker_anchors`).
    - `llm_samples(samples: list[Sample])`: fired on a master for the self-check samples (client
      CPU, event-loop lag) that a worker process shipped, so every process's self-check is stored.
    - `llm_request_sent(request_id, step, warmup, api, scheduled_time, input_tokens, max_tokens)`:
      fired when a request is about to be sent, in the process that sends it (a worker tells its
      master at once, so the master can record it as aborted should the worker die).
    - `llm_worker_lost(loss: WorkerLoss)`: fired on a master when a worker process died mid-run,
      after its requests in flight were fired as aborted records.
    Locust's own `request` event is fired once per HTTP request (never per token), so Locust's
    request counts stay honest.
    """
    for name in ("llm_request", "llm_step", "llm_worker_anchor", "llm_samples", "llm_request_sent",
                 "llm_worker_lost"):
        if not hasattr(events, name):
            setattr(events, name, EventHook())
    return events
