"""The steady-state window of a load step: the part of it that measures the load it asked for.

A step starts with a ramp (users connecting, the server's queue filling) and ends with a drain
(requests still finishing after the last one was sent, fewer and fewer in flight). Both would
mix another load into the figures, so the analyzer judges a step only between:
- closed loop: the moment the number of requests in flight first reaches the step's users, and
- the step's last send (after it, in-flight only falls).
Open loop has no in-flight target: its window runs from the first send to the last send.
When in-flight never reaches the target (a starved client), the window starts at the first send
and says so: the client check will have the last word on such a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from loadlab.analyze.intervals import Bins
from loadlab.numbers import format_value
from loadlab.store.schema import StepInfo


@dataclass
class Window:
    """[start, end] in epoch seconds, its length, and in words how it was chosen."""

    start: float
    end: float
    seconds: float
    how: str

    def contains(self, times: np.ndarray | pd.Series) -> np.ndarray:
        """Which of `times` fall inside the window (ends included)."""
        t = np.asarray(times, dtype=float)
        return (t >= self.start) & (t <= self.end)

    def completed(self, requests: pd.DataFrame) -> pd.DataFrame:
        """The successful requests (column `ok`) that ended inside the window: what a step's
        throughput, its latencies and the judgement of the step rest on."""
        return requests[requests["ok"].astype(bool) & self.contains(requests["end_time"])]

    def as_bins(self) -> Bins:
        """One interval spanning the window, its end included (for loadlab.analyze.intervals)."""
        return Bins(self.start, np.nextafter(max(self.seconds, 1e-9), np.inf), 1)


def steady_window(step: StepInfo, requests: pd.DataFrame) -> Window:
    """The steady-state window of `step` from its measured requests (send_time and end_time;
    unfinished ones count as in flight until the step's last event)."""
    sent = requests["send_time"].to_numpy(dtype=float)
    sent = sent[np.isfinite(sent)]
    if not sent.size:
        start, end = step.start_time, step.end_time
        return Window(start, end, _length(start, end), "no request was sent: the step as recorded")
    first, last = float(sent.min()), float(sent.max())
    if step.mode == "closed" and step.target > 0:
        reached = _first_reaching(requests, step.target)
        if math.isnan(reached):
            return Window(
                first,
                last,
                _length(first, last),
                f"in-flight never reached {step.target:g}: from the first send to the last send",
            )
        if reached < last:
            return Window(
                reached, last, _length(reached, last), f"from in-flight reaching {step.target:g} to the last send"
            )
        return Window(
            first,
            last,
            _length(first, last),
            f"in-flight reached {step.target:g} only at the last send: from the first send to the last",
        )
    return Window(first, last, _length(first, last), "from the first send to the last send")


def unmeasured_rates(ended: int, window: float, fastest: float) -> str:
    """Why rates (requests/s, tokens/s, goodput) measure nothing, "" when they do: `ended`
    requests (any outcome) ended in the steady window of `window` seconds, and the fastest
    successful request took `fastest` seconds from its send to its end.

    A window in which nothing ended has no rate to show (0 would read as a server that delivered
    nothing); in one shorter than the fastest request, whatever ended was sent before the window
    (a trace replayed at 1e9x sends everything in milliseconds)."""
    if window <= 0:
        return "no steady window to measure them over (no request, or all sent at one moment)"
    if ended == 0:
        return f"no request ended in the steady window ({format_value(window, 's')})"
    if window < fastest:
        return (
            f"the steady window ({format_value(window, 's')}) is shorter than the fastest request "
            f"({format_value(fastest, 's')} from send to end): what ended in it was sent before it"
        )
    return ""


def _first_reaching(requests: pd.DataFrame, target: float) -> float:
    """The first time the number of requests in flight (sent, not ended) reaches `target`."""
    sent = requests["send_time"].to_numpy(dtype=float)
    ended = requests["end_time"].to_numpy(dtype=float)
    known = np.isfinite(sent)
    sent, ended = sent[known], np.where(np.isfinite(ended[known]), ended[known], np.inf)
    times = np.concatenate([sent, ended])
    change = np.concatenate([np.ones(sent.size), -np.ones(ended.size)])
    # At equal times ends come first: a user's next send at the moment its last request ended
    # does not make two in flight.
    order = np.lexsort((change, times))
    level = np.cumsum(change[order])
    hits = np.flatnonzero(level >= target - 1e-9)
    return float(times[order][hits[0]]) if hits.size else math.nan


def _length(start: float, end: float) -> float:
    seconds = end - start
    return float(seconds) if math.isfinite(seconds) and seconds > 0 else 0.0
