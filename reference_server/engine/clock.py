"""The engine's clock: the real one, or a virtual one that jumps where the real one would sleep.

`serve --twin` runs the engine core and the twin executor on `RealClock`; `python -m
reference_server.simulate` runs the same code on a `VirtualClock`, so a simulated minute takes
only as long as the scheduling and bookkeeping of its steps.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds and a way to let them pass."""

    def now(self) -> float:
        """Seconds on a monotonic clock (time.monotonic() for the real one)."""

    def sleep(self, seconds: float) -> None:
        """Let `seconds` pass (> 0)."""


class RealClock:
    """time.monotonic() and time.sleep()."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class VirtualClock:
    """Time that moves only when told: sleeping jumps ahead at once, and `advance_to` jumps to an event."""

    def __init__(self, start: float = 0.0) -> None:
        self.time = start

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.time += seconds

    def advance_to(self, when: float) -> None:
        """Jump to `when` (never backwards)."""
        self.time = max(self.time, when)
