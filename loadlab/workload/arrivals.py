"""Open-loop arrival processes: the gaps, in seconds, between consecutive request arrivals."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from loadlab.errors import UserError

KINDS = ("poisson", "constant", "gamma")


def arrival_gaps(kind: str, rate: float, burstiness: float, rng: random.Random) -> Iterator[float]:
    """Endless gaps between arrivals at a mean of `rate` per second.

    poisson: exponential gaps (coefficient of variation 1); constant: every gap 1/rate;
    gamma: shape = `burstiness`, mean gap 1/rate, so CV = 1/sqrt(burstiness): 1 is Poisson,
    below 1 burstier, above 1 more regular.
    """
    if kind not in KINDS:
        raise UserError(f"unknown arrival process {kind!r} (use one of {', '.join(KINDS)})")
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise UserError(f"arrival rate must be a number > 0, got {rate!r}")
    if kind == "gamma" and not (math.isfinite(burstiness) and burstiness > 0):
        raise UserError(f"burstiness must be > 0 for gamma arrivals, got {burstiness!r}")
    return _gaps(kind, float(rate), float(burstiness), rng)


def _gaps(kind: str, rate: float, burstiness: float, rng: random.Random) -> Iterator[float]:
    # A separate generator so that argument errors above are raised at call time, not on first next().
    mean_gap = 1.0 / rate
    while True:
        if kind == "poisson":
            yield rng.expovariate(rate)
        elif kind == "constant":
            yield mean_gap
        else:
            yield rng.gammavariate(burstiness, mean_gap / burstiness)
