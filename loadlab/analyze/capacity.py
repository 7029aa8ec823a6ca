"""Capacity planning from a sweep's measured curve (`loadlab plan`): pure arithmetic.

The curve: per closed-loop step, its concurrency (streams in flight) and what was measured there
(output tokens/s, per-user tokens/s, E2E and every SLO statistic). With N users who pause
`think` seconds between requests, Little's law gives the streams they keep busy:
busy share = E2E / (E2E + think), active streams = N x busy share. One replica meets the SLOs up
to the highest concurrency where every objective still holds (linear interpolation between the
last measured step that meets it and the first that does not); N users then need
ceil(streams / that concurrency) replicas. Values outside the measured concurrencies are never
extrapolated: they come back as NaN with the range named.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter

from loadlab.metrics.slo import Objective

MEASURED, INTERPOLATED, ABOVE, BELOW, KNEE = (
    "measured",
    "interpolated",
    "above the measured range",
    "below the measured range",
    "the knee",
)
_EPS = 1e-9
_FIXED_POINT_ROUNDS = 100


@dataclass(frozen=True)
class CurvePoint:
    """One measured closed-loop step."""

    concurrency: float
    output_tps: float  # output tokens/s, all streams together
    user_tps: float  # per-user tokens/s, p50
    e2e: float  # mean E2E, seconds (Little's law)
    values: dict[str, float] = field(default_factory=dict)  # objective text -> measured value


@dataclass(frozen=True)
class Reading:
    """A value read off the curve at some concurrency, and how (`how`: measured, interpolated,
    or outside the measured range, then `value` is NaN)."""

    value: float
    how: str


@dataclass(frozen=True)
class Limit:
    """The highest concurrency one objective allows, and how it was found."""

    objective: str
    concurrency: float  # NaN: even the lowest measured step breaches it
    how: str  # interpolated | measured (the top step still meets it: at least) | below ...


@dataclass(frozen=True)
class CapacityPlan:
    """The answer of `loadlab plan` (NaN where the curve does not reach)."""

    users: int
    think_time: float  # mean seconds between a user's requests
    busy_share: float
    streams: float  # active streams, all replicas together
    capacity: float  # highest concurrency one replica serves within the SLOs
    capacity_how: str
    limits: list[Limit]
    replicas: int | None  # None: no capacity known (SLO breached at the lowest step)
    per_replica: float  # streams per replica with that many replicas
    user_tps: Reading  # per-user tokens/s at `per_replica`
    streams_one_replica: float  # the streams if all N users hit one replica (E2E held at the top beyond it)
    user_tps_one_replica: Reading  # ... and the per-user tokens/s there
    output_tps: Reading  # per replica at `per_replica`
    measured_range: tuple[float, float]


def read_curve(points: list[CurvePoint], concurrency: float, value_of: Callable[[CurvePoint], float]) -> Reading:
    """`value_of(point)` at `concurrency` on the curve (points sorted by concurrency): at a
    measured point, or linear between the two around it; NaN outside the measured range."""
    if concurrency < points[0].concurrency - _EPS:
        return Reading(math.nan, BELOW)
    if concurrency > points[-1].concurrency + _EPS:
        return Reading(math.nan, ABOVE)
    for point in points:
        if abs(concurrency - point.concurrency) <= _EPS:
            return Reading(value_of(point), MEASURED)
    lo, hi = next((a, b) for a, b in itertools.pairwise(points) if a.concurrency < concurrency < b.concurrency)
    share = (concurrency - lo.concurrency) / (hi.concurrency - lo.concurrency)
    return Reading(value_of(lo) + share * (value_of(hi) - value_of(lo)), INTERPOLATED)


def objective_limit(points: list[CurvePoint], objective: Objective) -> Limit:
    """The highest concurrency at which `objective` holds: the top measured step when all meet it
    (at least that; the curve ends there), the crossing between the last step that meets it and
    the first that does not, or NaN when the lowest step already breaches it."""
    text = objective.text
    for i, point in enumerate(points):
        value = point.values.get(text, math.nan)
        if objective.passes(value):
            continue
        if i == 0:
            return Limit(text, math.nan, BELOW)
        before = points[i - 1]
        v0 = before.values[text]
        if math.isnan(value) or value == v0:
            return Limit(text, before.concurrency, MEASURED)
        share = (objective.limit - v0) / (value - v0)
        return Limit(text, before.concurrency + share * (point.concurrency - before.concurrency), INTERPOLATED)
    return Limit(text, points[-1].concurrency, MEASURED)


def busy_share(e2e: float, think_time: float) -> float:
    """The share of its time a user has a request in flight (Little's law): E2E / (E2E + think)."""
    return e2e / (e2e + think_time) if e2e + think_time > 0 else 1.0


def streams_per(points: list[CurvePoint], users: int, think_time: float, replicas: int) -> float:
    """The streams each of `replicas` replicas keeps busy when `users` spread over them. E2E
    depends on the streams and the streams on E2E: from the lowest E2E upwards to where they
    agree (E2E grows with the streams, so this converges; beyond the measured range E2E is held
    at its last measured value, and the caller reads nothing there)."""
    top = points[-1].concurrency
    streams = users * busy_share(points[0].e2e, think_time) / replicas
    for _ in range(_FIXED_POINT_ROUNDS):
        e2e = read_curve(points, min(max(streams, points[0].concurrency), top), attrgetter("e2e")).value
        after = users * busy_share(e2e, think_time) / replicas
        if abs(after - streams) <= 1e-9 * max(streams, 1.0):
            break
        streams = after
    return streams


def plan_capacity(
    points: list[CurvePoint],
    users: int,
    think_time: float,
    objectives: tuple[Objective, ...],
    knee: float | None = None,
) -> CapacityPlan:
    """The capacity plan for `users` users with mean think time `think_time` (see the module's
    docstring). Without objectives a replica's capacity is the knee's concurrency (the analyzer's
    saturation rule, given by the caller), else the step of highest throughput."""
    points = sorted(points, key=lambda p: p.concurrency)
    if not points:
        raise ValueError("no closed-loop step to plan from")
    limits = [objective_limit(points, o) for o in objectives]
    if limits:
        tightest = min(limits, key=lambda lim: -math.inf if math.isnan(lim.concurrency) else lim.concurrency)
        capacity, how = tightest.concurrency, tightest.how
    elif knee is not None:
        capacity, how = knee, KNEE
    else:
        best = max(points, key=lambda p: p.output_tps)
        capacity, how = best.concurrency, MEASURED
    replicas: int | None = None
    per_replica = streams_per(points, users, think_time, 1)
    if math.isfinite(capacity) and capacity > 0:
        # The fewest replicas whose share of the busy streams stays within one replica's capacity.
        replicas = max(1, math.floor(users * busy_share(points[0].e2e, think_time) / capacity))
        while (per_replica := streams_per(points, users, think_time, replicas)) > capacity + _EPS:
            replicas += 1
    streams = per_replica * (replicas or 1)
    alone = streams_per(points, users, think_time, 1)
    user_tps = read_curve(points, per_replica, lambda p: p.user_tps) if replicas else Reading(math.nan, BELOW)
    output_tps = read_curve(points, per_replica, lambda p: p.output_tps) if replicas else Reading(math.nan, BELOW)
    return CapacityPlan(
        users=users,
        think_time=think_time,
        busy_share=streams / users,
        streams=streams,
        capacity=capacity,
        capacity_how=how,
        limits=limits,
        replicas=replicas,
        per_replica=per_replica,
        user_tps=user_tps,
        streams_one_replica=alone,
        user_tps_one_replica=read_curve(points, alone, lambda p: p.user_tps),
        output_tps=output_tps,
        measured_range=(points[0].concurrency, points[-1].concurrency),
    )
