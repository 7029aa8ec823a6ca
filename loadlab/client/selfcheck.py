"""The load generator watching itself: a CPU-starved client measures its own delays, not the server's.

Two signals per process, stored as samples with source "client" and label `worker`:
- `client_cpu`: cores this process used over the last second;
- `client_loop_lag`: how late a 100 ms sleep of the event loop woke up (seconds), every 100 ms;
- `client_host_cpu`: cores busy on this process's host over the last second (label `cores`: how
  many it has), and `client_run_wait`: the share of that second its event loop's thread was
  runnable but waiting for a CPU (Linux): they tell a client starved by other work from one
  doing too much itself.
The live warning uses the thresholds of loadlab/metrics/limits.py and the percentile of
loadlab/metrics/stats.py, as the summary's strain warnings do.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque

import gevent

from loadlab.clock import now
from loadlab.collect.host import HostCpu, ProcessCpu, RunWait
from loadlab.collect.protocol import SampleSink
from loadlab.metrics.limits import CLIENT_CPU_P90_MAX, LOOP_LAG_P99_MAX
from loadlab.numbers import format_number, format_value
from loadlab.store.schema import Coverage, Sample

_PROBE_S = 0.1


class SelfCheck:
    """Samples this process's CPU every `interval` seconds and its event-loop lag every 100 ms."""

    source = "client"

    def __init__(self, worker: str, interval: float = 1.0) -> None:
        self.worker = worker
        self.interval = interval
        self._cpu = ProcessCpu(os.getpid())
        self._host = HostCpu()
        self._wait = RunWait()
        self._host_labels = {"worker": worker, "cores": str(self._host.cores)}
        self._pending: list[Sample] = []
        self._greenlets: list[gevent.Greenlet] = []
        self._sink: SampleSink | None = None
        self._count = 0
        self.last_cpu = 0.0
        self.recent_lags: deque[float] = deque(maxlen=100)  # the last ~10 s of probes

    def start(self, sink: SampleSink) -> None:
        """Start sampling in background greenlets; returns at once."""
        self._sink = sink
        self._cpu.sample()  # primes the CPU counter
        self._greenlets = [gevent.spawn(self._probe_lag), gevent.spawn(self._sample_cpu)]

    def stop(self) -> None:
        """Stop sampling and hand over what is pending (a second call does nothing)."""
        gevent.killall(self._greenlets)
        self._greenlets = []
        self._flush()

    def coverage(self) -> Coverage:
        return Coverage(source=self.source, enabled=True, ok_samples=self._count)

    def warnings(self) -> list[str]:
        """Signs of strain right now (empty when it is fine): a warning, not the summary's
        client-limited verdict, which needs an effect on the load."""
        from loadlab.metrics.stats import percentile  # numpy here: workers never ask, they stay without it

        found = []
        if self.last_cpu > CLIENT_CPU_P90_MAX:
            found.append(f"client CPU {format_number(self.last_cpu)} cores > {CLIENT_CPU_P90_MAX}")
        lag = percentile(self.recent_lags, 99)
        if lag > LOOP_LAG_P99_MAX:
            found.append(f"event-loop lag p99 {format_value(lag, 's')} > {format_value(LOOP_LAG_P99_MAX, 's')}")
        return found

    def _probe_lag(self) -> None:
        while True:
            t0 = time.perf_counter()
            gevent.sleep(_PROBE_S)
            lag = max(0.0, time.perf_counter() - t0 - _PROBE_S)
            self.recent_lags.append(lag)
            self._pending.append(self._sample("client_loop_lag", lag))

    def _sample_cpu(self) -> None:
        while True:
            gevent.sleep(self.interval)
            self.last_cpu = self._cpu.sample()
            self._pending.append(self._sample("client_cpu", self.last_cpu))
            host = Sample(now(), self.source, "client_host_cpu", self._host.sample(), self._host_labels)
            self._pending.append(host)
            waited = self._wait.sample()
            if math.isfinite(waited):  # NaN: the kernel keeps no such figure
                self._pending.append(self._sample("client_run_wait", waited))
            self._flush()

    def _sample(self, signal: str, value: float) -> Sample:
        return Sample(now(), self.source, signal, value, {"worker": self.worker})

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if batch and self._sink is not None:
            self._count += len(batch)
            self._sink(batch)
