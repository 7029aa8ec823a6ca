"""`loadlab plan --what-if`: one GPU twin's answer, from its simulated sweep and capacity plan.

Pure arithmetic on what capacity.py planned: the users one replica serves within the SLOs (the
users whose busy streams fill its capacity, by Little's law at the E2E measured there) and the
GPUs the replicas take.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from loadlab.analyze.capacity import MEASURED, CapacityPlan, CurvePoint, busy_share, read_curve

TOP_STEP = "the top step (every SLO met)"


@dataclass(frozen=True)
class WhatIf:
    """One spec's answer: its simulated sweep's curve and knee, the plan for N users on it, and
    the analyzer's verdict at the knee."""

    spec: str  # GPU:MODEL[:tpN] as given
    tp: int  # GPUs per replica
    folder: Path  # the sweep's run folder
    points: list[CurvePoint]
    knee: float | None  # the knee's concurrency (analyzer's rule); None: none seen
    plan: CapacityPlan
    constraint: str  # the analyzer's constraint at the knee (the whole run's when no knee)
    headline: str  # the analyzer's headline for the run
    stop: str  # why the sweep stopped, one line

    @property
    def users_per_replica(self) -> float:
        """Users one replica serves within the SLOs (NaN: none)."""
        return users_per_replica(self.plan, self.points)

    @property
    def gpus(self) -> int | None:
        """GPUs for N users: replicas x tensor-parallel size (None: no replica count meets the SLOs)."""
        return None if self.plan.replicas is None else self.plan.replicas * self.tp

    @property
    def binds(self) -> str:
        """What sets one replica's capacity: the tightest SLO objective, the knee, or the sweep's
        top step when every objective still held there (the capacity is at least that)."""
        if not self.plan.limits:
            return self.plan.capacity_how
        tightest = min(self.plan.limits, key=lambda lim: -math.inf if math.isnan(lim.concurrency) else lim.concurrency)
        if tightest.how == MEASURED and tightest.concurrency >= max(p.concurrency for p in self.points):
            return TOP_STEP
        return tightest.objective


def users_per_replica(plan: CapacityPlan, points: list[CurvePoint]) -> float:
    """The users whose busy streams fill one replica's capacity: capacity / busy share at the E2E
    measured at that capacity (Little's law, as the plan counts streams). While E2E rises with
    the load, N users on `plan.replicas` replicas never exceed it: replicas x this >= N."""
    if not (math.isfinite(plan.capacity) and plan.capacity > 0):
        return math.nan
    ordered = sorted(points, key=attrgetter("concurrency"))
    e2e = read_curve(ordered, plan.capacity, attrgetter("e2e")).value
    return plan.capacity / busy_share(e2e, plan.think_time)
