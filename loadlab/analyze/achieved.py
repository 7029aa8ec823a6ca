"""The load a step achieved: requests sent per second (open loop) or requests in flight (closed
loop), the figure the summary reports and the client self-check holds against the target."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def achieved(
    measured: pd.DataFrame, mode: str, window: tuple[float, float, float], ramp_end: float = math.nan
) -> float:
    """Open loop: requests sent per second. Closed loop: the time-weighted mean number of requests
    in flight over the window (Little's law by integration): a request that straddles the
    window's start or end counts only its time inside, so a step's last, long requests do not
    push the figure above the number of users. It counts from the end of the step's ramp-up
    (`ramp_end`, when recorded): while the users start, fewer are busy by design."""
    start, end, seconds = window
    if seconds <= 0:
        return math.nan
    if mode == "open":
        return len(measured) / seconds
    if start < ramp_end < end:
        start, seconds = ramp_end, end - ramp_end
    sent = measured["send_time"].to_numpy(dtype=float)
    ended = measured["end_time"].to_numpy(dtype=float)
    known = np.isfinite(sent) & np.isfinite(ended)
    inside = np.minimum(ended[known], end) - np.maximum(sent[known], start)
    return float(np.clip(inside, 0.0, None).sum() / seconds) if known.any() else math.nan
