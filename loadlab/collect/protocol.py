"""The collector protocol: a background sampler and where its samples go."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from loadlab.store.schema import Coverage, Sample

SampleSink = Callable[[list[Sample]], None]
"""Where collectors put samples; the run writer persists them (thread-safe)."""


class Collector(Protocol):
    """A background sampler. start() returns at once; stop() joins and flushes."""

    source: str

    def start(self, sink: SampleSink) -> None: ...

    def stop(self) -> None: ...

    def coverage(self) -> Coverage: ...

    def notes(self) -> list[str]:
        """What the run's warnings should say of this collector beyond its coverage: a fallback
        it took (a metrics page found at another path). Called once the collector stopped."""
        ...
