"""Live LLM statistics of a running test, computed exactly from every finished request's record.

Fed from the `llm_request` event in the process that holds all records (the master, or the only
process); read by the web UI's LLM tab. Percentiles are exact (over all values, never bucketed):
Locust's own response-time buckets are too coarse for inter-token latencies.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from loadlab.clock import now
from loadlab.metrics.requests import inter_token_gaps, output_tokens, request_start, time_per_output_token
from loadlab.metrics.stats import Distribution
from loadlab.store.schema import ErrorCategory, RequestRecord

RATE_WINDOW_S = 10.0   # tokens/s and requests/s are averaged over this many recent seconds


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
    return Latencies(ttft=record.first_token_time - start, e2e=record.end_time - start,
                     tpot=float(time_per_output_token(record.first_token_time, record.end_time, tokens)),
                     itls=inter_token_gaps(record.token_times).tolist(), output_tokens=tokens)


class LiveStats:
    """Accumulates records; `snapshot()` gives the numbers the LLM tab shows.

    `in_flight` says how many requests are in flight right now (the users' counter in a single
    process, the sum of the workers' last reports on a master).
    """

    def __init__(self, open_loop: bool, in_flight: Callable[[], int] = lambda: 0) -> None:
        self.open_loop = open_loop
        self.in_flight = in_flight
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget every request so far (Locust's "reset stats")."""
        with self._lock:
            self._ttft: list[float] = []
            self._e2e: list[float] = []
            self._tpot: list[float] = []
            self._itl: list[float] = []
            self._errors: Counter[str] = Counter()
            self._ok = 0
            self._aborted = 0
            self._recent: deque[tuple[float, int]] = deque()  # (end_time, output tokens) of recent requests

    def add(self, record: RequestRecord) -> None:
        """Count one finished request (warm-up requests are left out, as in the results)."""
        if record.warmup:
            return
        with self._lock:
            if record.error == ErrorCategory.ABORTED.value:   # cut off by the stop: no failure
                self._aborted += 1
                return
            if not record.ok:
                self._errors[record.error] += 1
                return
            self._ok += 1
            lat = request_latencies(record, self.open_loop)
            self._ttft.append(lat.ttft)
            self._e2e.append(lat.e2e)
            if not math.isnan(lat.tpot):
                self._tpot.append(lat.tpot)
            self._itl.extend(lat.itls)
            self._recent.append((record.end_time, lat.output_tokens))

    def snapshot(self) -> dict:
        """Latency percentiles in ms, recent throughput, requests in flight, errors by category
        (requests cut off by a stop are counted apart, as in the run's summary).

        Throughput counts the requests that finished in the last RATE_WINDOW_S seconds (a
        request's tokens count when it ends): in steady state this is the token rate.
        """
        with self._lock:
            cutoff = now() - RATE_WINDOW_S
            while self._recent and self._recent[0][0] < cutoff:
                self._recent.popleft()
            recent = [r for r in self._recent if r[0] >= cutoff]   # batches arrive out of order
            latencies = {name: _percentiles_ms(values) for name, values in
                         (("ttft", self._ttft), ("itl", self._itl), ("tpot", self._tpot), ("e2e", self._e2e))}
            return {
                "requests_ok": self._ok,
                "requests_failed": sum(self._errors.values()),
                "requests_aborted": self._aborted,
                "errors": dict(self._errors),
                "in_flight": self.in_flight(),
                "output_tokens_per_s": sum(t for _, t in recent) / RATE_WINDOW_S,
                "requests_per_s": len(recent) / RATE_WINDOW_S,
                "window_s": RATE_WINDOW_S,
                "latency_ms": latencies,
            }


def _percentiles_ms(values: list[float]) -> dict:
    """count, mean, p50/p90/p99 in ms; None (JSON null) where there are no values."""
    d = Distribution.of([v * 1000.0 for v in values], unit="ms")
    return {"count": d.count, **{k: (None if math.isnan(v) else v) for k, v in
                                 (("mean", d.mean), ("p50", d.p50), ("p90", d.p90), ("p99", d.p99))}}
