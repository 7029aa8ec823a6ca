"""The steady-state window: from in-flight reaching the target to the last send."""

from __future__ import annotations

import math

import pandas as pd

from loadlab.analyze.window import steady_window
from loadlab.store.schema import StepInfo
from tests.support.records import T, closed, opened


def sends(*pairs: tuple[float, float]) -> pd.DataFrame:
    return pd.DataFrame({"send_time": [T + s for s, _ in pairs], "end_time": [T + e for _, e in pairs]})


def test_closed_loop_drops_the_ramp_and_the_drain():
    # Users join at 0, 1, 2 (the third makes three in flight at 2); the last send is at 6.
    requests = sends((0, 4), (1, 5), (2, 6), (4, 8), (5, 9), (6, 10))
    w = steady_window(closed(3), requests)
    assert (w.start, w.end, w.seconds) == (T + 2, T + 6, 4)
    assert w.how == "from in-flight reaching 3 to the last send"


def test_a_request_ending_as_the_next_is_sent_does_not_count_twice():
    # One user back to back: never two in flight, although times touch.
    w = steady_window(closed(2), sends((0, 1), (1, 2), (2, 3)))
    assert w.start == T and w.end == T + 2 and "never reached 2" in w.how


def test_open_loop_runs_from_the_first_to_the_last_send():
    w = steady_window(opened(5), sends((0.5, 3), (1, 2), (4, 9)))
    assert (w.start, w.end) == (T + 0.5, T + 4) and w.how == "from the first send to the last send"


def test_no_request_keeps_the_step_as_recorded():
    w = steady_window(StepInfo(0, "x", "closed", 2, T, math.nan), sends())
    assert w.start == T and w.seconds == 0 and "no request" in w.how


def test_unfinished_requests_stay_in_flight():
    w = steady_window(closed(2), sends((0, math.nan), (3, 4), (5, 6)))
    assert w.start == T + 3
