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


GRACE = """
import json
from loadlab.conductor.runloop import step_grace
print(json.dumps([step_grace(s, t) for s, t in ((1, 300), (20, 300), (600, 300), (20, 1.5), (0, 300))]))
"""


def test_a_steps_requests_in_flight_get_a_quarter_of_it_bounded_by_2_s_and_the_timeout() -> None:
    # 1 s step: 2 s; 20 s: 5 s; 600 s: its quarter, 150 s; a 1.5 s timeout caps it; a step ended
    # by its request count (0 s) keeps the whole timeout.
    assert python_json("-c", GRACE) == [2.0, 5.0, 150.0, 1.5, 300]
