"""What every collector produces: samples in long form, on the run's clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol


@dataclass
class Sample:
    """One value of one signal at one time.

    `signal` is a canonical name when the collector knows one (see docs/signals.md: e.g.
    `requests_running`, `kv_usage`, `gpu_sm_active`) or the raw series name otherwise.
    Histograms are stored as one sample per bucket with the `le` label, plus `_sum`/`_count`.
    """

    time: float                      # epoch seconds (loadlab.clock.now())
    source: str                      # "server", "prometheus", "gpu", "nccl", "host", "client"
    signal: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)


SampleSink = Callable[[list[Sample]], None]
"""Where collectors put samples; the run writer persists them (thread-safe)."""


@dataclass
class Coverage:
    """What a collector managed to collect, written into summary.json."""

    source: str
    enabled: bool
    ok_samples: int = 0
    failed_samples: int = 0
    error: str = ""                  # the first error seen, reported once


class Collector(Protocol):
    """A background sampler. start() returns at once; stop() joins and flushes."""

    source: str

    def start(self, sink: SampleSink) -> None: ...

    def stop(self) -> None: ...

    def coverage(self) -> Coverage: ...
