"""A background loop that calls `poll()` every `interval` seconds and hands samples to a sink.

Shared by the GPU, host and NCCL collectors. It uses `threading` and `Event.wait`, which gevent
patches into greenlets inside `loadlab run`, and which are plain OS threads elsewhere.
"""

from __future__ import annotations

import logging
import threading
import time

from loadlab.collect.protocol import SampleSink
from loadlab.store.schema import Coverage, Sample

log = logging.getLogger(__name__)


class PollingCollector:
    """Base class: subclasses set `source` and implement `poll()`; `open()`/`close()` are optional.

    A `poll()` that raises is counted as a failed sample and the loop goes on; the first error
    is logged once and kept in the coverage. Ticks are scheduled on the monotonic clock from the
    start time, so the interval does not drift; ticks missed while a poll was slow are skipped.
    """

    source = "unknown"

    def __init__(self, interval: float) -> None:
        if not interval > 0:
            raise ValueError(f"{type(self).__name__}: interval must be > 0, got {interval}")
        self.interval = interval
        self._coverage = Coverage(source=self.source, enabled=True)
        self._notes: list[str] = []  # a fallback taken, for the run's warnings (`notes`)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sink: SampleSink | None = None

    # -- for subclasses ---------------------------------------------------------------------
    def open(self) -> bool:
        """Prepare sampling; return False (after calling `disable`) when the source is unavailable."""
        return True

    def poll(self) -> list[Sample]:
        """Read the source once."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what `open()` acquired."""

    def disable(self, reason: str) -> None:
        """Mark the whole source unavailable: logged once, recorded in the coverage."""
        self._coverage.enabled = False
        self._coverage.error = reason
        log.warning("%s", reason)

    def note_error(self, message: str, always_log: bool = False) -> None:
        """Record a problem that does not stop sampling: the coverage keeps the first one, and
        only the first is logged unless `always_log` (for problems that can happen only once)."""
        first = not self._coverage.error
        if first:
            self._coverage.error = message
        if first or always_log:
            log.warning("%s collector: %s", self.source, message)

    # -- the Collector protocol -------------------------------------------------------------
    def start(self, sink: SampleSink) -> None:
        """Open the source and start the sampling loop; returns at once."""
        self._sink = sink
        try:
            available = self.open()
        except Exception as e:  # a collector must never take the run down
            self.disable(f"{self.source} collector unavailable: {e}")
            available = False
        if not available:
            return
        self._thread = threading.Thread(target=self._loop, name=f"loadlab-{self.source}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop, take one last sample, release the source."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 4 * self.interval))
            self._thread = None
            self._tick()
            self.close()

    def coverage(self) -> Coverage:
        """Counts of good and failed samples, and the first error."""
        return self._coverage

    def notes(self) -> list[str]:
        """What the run's warnings should say of this collector: the fallbacks it took."""
        return self._notes

    # -- internals --------------------------------------------------------------------------
    def _tick(self) -> None:
        try:
            samples = self.poll()
        except Exception as e:
            self._coverage.failed_samples += 1
            self.note_error(f"{type(e).__name__}: {e}")
            return
        self._coverage.ok_samples += 1
        if samples and self._sink is not None:
            self._sink(samples)

    def _loop(self) -> None:
        start = time.monotonic()
        ticks = 0
        while not self._stop.is_set():
            self._tick()
            ticks += 1
            # Next deadline on the original grid; skip the ones already missed.
            behind = time.monotonic() - start
            ticks = max(ticks, int(behind / self.interval) + 1)
            if self._stop.wait(max(0.0, start + ticks * self.interval - time.monotonic())):
                break
