"""The per-request formulas of docs/metrics.md, defined once for the run's summary and timeline
(whole columns of records) and the web UI's LLM tab (one record at a time).

Each function takes floats or equal-length arrays/Series and returns numpy values of that shape;
NaN where a metric is undefined. numpy only: the live client imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike  # a float, a numpy array or a pandas Series


def request_start(scheduled_time: ArrayLike, send_time: ArrayLike, open_loop: ArrayLike) -> np.ndarray:
    """What TTFT and E2E count from: the scheduled time in open loop (no coordinated omission),
    the send time in closed loop."""
    return np.where(open_loop, scheduled_time, send_time)


def output_tokens(completion_tokens: ArrayLike, client_tokens: ArrayLike) -> np.ndarray:
    """usage.completion_tokens; the client's count of content events when the server gave none (-1)."""
    return np.where(np.asarray(completion_tokens) >= 0, completion_tokens, client_tokens)


def time_per_output_token(first_token_time: ArrayLike, end_time: ArrayLike, out_tokens: ArrayLike) -> np.ndarray:
    """(E2E − TTFT) / (output tokens − 1) = (last event − first content event) / (output tokens − 1);
    NaN for an answer of one token or none."""
    out_tokens = np.asarray(out_tokens, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = (np.asarray(end_time, dtype=float) - np.asarray(first_token_time, dtype=float)) / (out_tokens - 1)
    return np.where(out_tokens > 1, tpot, np.nan)


def user_tokens_per_s(first_token_time: ArrayLike, end_time: ArrayLike, out_tokens: ArrayLike) -> np.ndarray:
    """Per-user speed: output tokens / (E2E − TTFT) = output tokens / (last event − first content
    event), the tokens/s one user saw once the answer started (DESIGN.md); NaN when that time is
    not positive."""
    with np.errstate(divide="ignore", invalid="ignore"):
        decode = np.asarray(end_time, dtype=float) - np.asarray(first_token_time, dtype=float)
        speed = np.asarray(out_tokens, dtype=float) / decode
    return np.where(decode > 0, speed, np.nan)


def inter_token_gaps(token_times: Sequence[float] | np.ndarray | None) -> np.ndarray:
    """ITL's gaps of one request: between consecutive token events, bunched ones left out (see
    `read_gaps`; empty when it had under two events)."""
    return read_gaps(np.diff(np.asarray(token_times if token_times is not None else [], dtype=float)))


def read_gaps(gaps: np.ndarray) -> np.ndarray:
    """The gaps that ITL counts: a gap of exactly 0 joins events that arrived in one read (the
    client gives the events of one read one time) and says nothing of the time between two
    tokens, so it is left out; `bunched_share` says how many there were."""
    return gaps[gaps != 0]


def bunched_share(gaps: np.ndarray) -> float:
    """The share of gaps between token events that are bunched (0: read together); NaN for none."""
    return float(np.mean(gaps == 0)) if len(gaps) else float("nan")
