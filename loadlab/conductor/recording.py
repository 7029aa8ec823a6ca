"""Where a run's measurements go: one place attaches the run writer to the Locust events.

Used by `loadlab run` (the Conductor) and by the locustfile's --loadlab-out, so both write the
same things from the same events: every record, the self-check samples shipped by workers, each
worker's clock anchor, and a warning for each worker process that died.
"""

from __future__ import annotations

from typing import Any

from loadlab.client.context import LoadlabEvents
from loadlab.client.shipping import WorkerLoss
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import RequestRecord


def attach_writer(events: LoadlabEvents, writer: RunWriter) -> list[WorkerLoss]:
    """Send what loadlab's events carry to `writer`; returns the list that collects the worker
    processes lost during the run (a run with any ends `degraded`)."""
    losses: list[WorkerLoss] = []

    def on_record(record: RequestRecord, **_: Any) -> None:
        writer.add_requests([record])

    def on_worker_lost(loss: WorkerLoss, **_: Any) -> None:
        losses.append(loss)
        writer.add_warning(loss.message())

    events.llm_request.add_listener(on_record)
    events.llm_samples.add_listener(lambda samples, **_: writer.add_samples(samples))
    events.llm_worker_anchor.add_listener(lambda worker, anchor, **_: writer.set_worker_anchor(worker, anchor))
    events.llm_worker_lost.add_listener(on_worker_lost)
    return losses
