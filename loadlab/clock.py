"""One clock for every record of a run.

Each process takes an anchor (wall clock and monotonic clock read together) when it starts.
Events are timed with the monotonic clock (immune to NTP steps) and stored as wall-clock epoch
seconds computed from the anchor, so records from many processes and hosts line up.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ClockAnchor:
    """Wall clock (epoch seconds) and monotonic clock (time.perf_counter) read at one instant."""

    wall: float
    monotonic: float

    @classmethod
    def take(cls) -> ClockAnchor:
        """Read both clocks as close together as possible (the middle of two wall reads)."""
        w0 = time.time()
        m = time.perf_counter()
        w1 = time.time()
        return cls(wall=(w0 + w1) / 2, monotonic=m)

    def to_wall(self, monotonic: float) -> float:
        """Convert a perf_counter() reading of this process to epoch seconds."""
        return self.wall + (monotonic - self.monotonic)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


_ANCHOR = ClockAnchor.take()


def process_anchor() -> ClockAnchor:
    """The anchor of this process, taken once at import."""
    return _ANCHOR


def now() -> float:
    """Current time in epoch seconds, on this process's monotonic clock."""
    return _ANCHOR.to_wall(time.perf_counter())
