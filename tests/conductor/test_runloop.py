"""The run's live status line: client strain (event-loop lag, CPU) is a warning, not the
client-limited question that late sends raise (docs/metrics.md, client self-check)."""

from __future__ import annotations

from tests.support.procs import python_json

# Conductor._warning on a stand-in conductor: one strained client, then one that also sends late.
# In a fresh process: importing the conductor imports Locust, which patches the standard library.
LINE = """
import json
from types import SimpleNamespace as NS
from loadlab.conductor.runloop import Conductor
lag = NS(warnings=lambda: ["event-loop lag p99 50 ms > 10 ms"])
def line(delay):
    live = NS(start_delay_p99=lambda: delay)
    return Conductor._warning(NS(losses=[], selfcheck=lag, env=NS(), mode="open", live=live))
print(json.dumps({"strained": line(0.001), "late": line(0.05)}))
"""


def test_loop_lag_reads_as_strain_and_only_late_sends_ask_client_limited() -> None:
    lines = python_json("-c", LINE)
    assert lines["strained"] == "client under strain: event-loop lag p99 50 ms > 10 ms"
    assert lines["late"] == (
        "client-limited? start delay p99 50 ms > 10 ms; client under strain: event-loop lag p99 50 ms > 10 ms"
    )
