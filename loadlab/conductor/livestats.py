"""The one live counter of a run: the status line of `loadlab run` and the web UI's LLM tab.

Fed from the `llm_request` event in the process that holds all records (the master, or the only
process). It counts what the run's summary counts: measured requests only (warm-up ones are
left out), and a request cut off by a stop is counted apart as aborted, never as done or failed.
Records from worker processes arrive in batches and out of order; the recent-throughput window
is kept by end time (a heap), so a late batch neither double counts nor stays in the window.
Percentiles are exact (over all values, never bucketed): Locust's own response-time buckets are
too coarse for inter-token latencies.
"""

from __future__ import annotations

import heapq
import math
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from loadlab.clock import now
from loadlab.metrics.requests import inter_token_gaps, output_tokens, request_start, time_per_output_token
from loadlab.metrics.stats import Distribution, percentile
from loadlab.store.schema import ErrorCategory, RequestRecord

RATE_WINDOW_S = 10.0  # tokens/s and requests/s are averaged over this many recent seconds
_RECENT_DELAYS = 200  # start delays kept for the live client-limited warning


@dataclass(frozen=True)
class Latencies:
    """The metrics of one successful request: latencies in seconds (NaN where undefined)."""

    ttft: float
    e2e: float
    tpot: float
    itls: list[float]
    output_tokens: int


def request_latencies(record: RequestRecord, open_loop: bool) -> Latencies:
    """One record's metrics, by the run summary's formulas (loadlab.metrics.requests)."""
    start = float(request_start(record.scheduled_time, record.send_time, open_loop))
    tokens = int(output_tokens(record.completion_tokens, record.client_tokens))
    return Latencies(
        ttft=record.first_token_time - start,
        e2e=record.end_time - start,
        tpot=float(time_per_output_token(record.first_token_time, record.end_time, tokens)),
        itls=inter_token_gaps(record.token_times).tolist(),
        output_tokens=tokens,
    )


class LiveStats:
    """Accumulates records; `snapshot()` gives the numbers the LLM tab and the status line show.

    `in_flight` says how many requests are in flight right now (the users' counter in a single
    process, the sum of the workers' last reports on a master). With `keep_latencies` off only
    the counts are kept (the status line of a long run needs no percentiles, nor their memory).
    """

    def __init__(self, open_loop: bool, in_flight: Callable[[], int] = lambda: 0, keep_latencies: bool = True) -> None:
        self.open_loop = open_loop
        self.in_flight = in_flight
        self.keep_latencies = keep_latencies
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget every request so far (Locust's "reset stats")."""
        with self._lock:
            self._latencies: dict[str, list[float]] = {"ttft": [], "itl": [], "tpot": [], "e2e": []}
            self._errors: Counter[str] = Counter()
            self._ok = 0
            self._aborted = 0
            self._output_tokens = 0
            # heap of (end_time, arrival number, output tokens, TTFT, ITLs): what ended recently
            self._recent: list[tuple[float, int, int, float, list[float]]] = []
            self._start_delays: deque[float] = deque(maxlen=_RECENT_DELAYS)

    def add(self, record: RequestRecord) -> None:
        """Count one finished request (warm-up requests are left out, as in the results)."""
        if record.warmup:
            return
        with self._lock:
            if math.isfinite(record.send_time):
                self._start_delays.append(record.send_time - record.scheduled_time)
            if record.error == ErrorCategory.ABORTED.value:  # cut off by the stop: no failure
                self._aborted += 1
                return
            if not record.ok:
                self._errors[record.error] += 1
                return
            self._ok += 1
            if not self.keep_latencies:  # counts only: no latencies worked out per request
                tokens = int(output_tokens(record.completion_tokens, record.client_tokens))
                self._output_tokens += tokens
                heapq.heappush(self._recent, (record.end_time, self._ok, tokens, math.nan, []))
                return
            lat = request_latencies(record, self.open_loop)
            self._output_tokens += lat.output_tokens
            heapq.heappush(self._recent, (record.end_time, self._ok, lat.output_tokens, lat.ttft, lat.itls))
            for name, value in (("ttft", lat.ttft), ("e2e", lat.e2e), ("tpot", lat.tpot)):
                if not math.isnan(value):
                    self._latencies[name].append(value)
            self._latencies["itl"].extend(lat.itls)

    @property
    def done(self) -> int:
        """Measured requests that finished, successful or failed (aborted ones aside)."""
        return self._ok + sum(self._errors.values())

    @property
    def failed(self) -> int:
        """Measured requests that failed (aborted ones aside)."""
        return sum(self._errors.values())

    @property
    def output_tokens(self) -> int:
        """Output tokens of the successful measured requests (as the summary counts them)."""
        return self._output_tokens

    def start_delay_p99(self) -> float:
        """p99 of the recent requests' start delays (send − scheduled), seconds; NaN before any."""
        with self._lock:
            return percentile(self._start_delays, 99)

    def recent_rates(self) -> tuple[float, float]:
        """(output tokens/s, requests/s) of the successful requests that ended in the last
        RATE_WINDOW_S seconds (a request's tokens count when it ends): in steady state, the rates."""
        with self._lock:
            self._drop_old()
            return sum(r[2] for r in self._recent) / RATE_WINDOW_S, len(self._recent) / RATE_WINDOW_S

    def recent_latencies(self) -> dict[str, dict]:
        """TTFT and ITL percentiles in ms (as `snapshot()`'s) of the successful requests that ended in
        the last RATE_WINDOW_S seconds: the live charts' points (all-time percentiles hardly move)."""
        with self._lock:
            self._drop_old()
            ttft = [r[3] for r in self._recent if not math.isnan(r[3])]
            itl = [gap for r in self._recent for gap in r[4]]
        return {"ttft": _percentiles_ms(ttft), "itl": _percentiles_ms(itl)}

    def _drop_old(self) -> None:
        cutoff = now() - RATE_WINDOW_S
        while self._recent and self._recent[0][0] < cutoff:
            heapq.heappop(self._recent)

    def snapshot(self) -> dict:
        """Latency percentiles in ms, recent throughput, requests in flight, errors by category
        (requests cut off by a stop are counted apart, as in the run's summary)."""
        tokens_per_s, requests_per_s = self.recent_rates()
        with self._lock:
            latencies = {name: _percentiles_ms(values) for name, values in self._latencies.items()}
            return {
                "requests_ok": self._ok,
                "requests_failed": sum(self._errors.values()),
                "requests_aborted": self._aborted,
                "errors": dict(self._errors),
                "in_flight": self.in_flight(),
                "output_tokens_per_s": tokens_per_s,
                "requests_per_s": requests_per_s,
                "window_s": RATE_WINDOW_S,
                "latency_ms": latencies,
            }


def _percentiles_ms(values: list[float]) -> dict:
    """count, mean, p50/p90/p99 in ms; None (JSON null) where there are no values."""
    d = Distribution.of([v * 1000.0 for v in values], unit="ms")
    return {
        "count": d.count,
        **{
            k: (None if math.isnan(v) else v)
            for k, v in (("mean", d.mean), ("p50", d.p50), ("p90", d.p90), ("p99", d.p99))
        },
    }
