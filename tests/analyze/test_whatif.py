"""A what-if answer's arithmetic: the users one replica serves within the SLOs, and the GPUs the
plan's replicas take, agree with the capacity plan they come from."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from loadlab.analyze.capacity import CurvePoint, plan_capacity
from loadlab.analyze.whatif import WhatIf, users_per_replica
from loadlab.metrics.slo import parse_slo


def curve(e2e_growth: float) -> list[CurvePoint]:
    """A measured curve whose E2E grows by `e2e_growth` per stream and whose TTFT p99 grows with it."""
    points = []
    for c in (1, 2, 4, 8, 16, 32):
        e2e = 2.0 + e2e_growth * c
        points.append(CurvePoint(c, 50.0 * c / e2e, 100.0 / e2e, e2e, {"ttft_p99=1s": 0.05 * c}))
    return points


def answer(points: list[CurvePoint], users: int, think: float, slo: str, tp: int = 1) -> WhatIf:
    objectives = parse_slo(slo).objectives
    plan = plan_capacity(points, users, think, objectives, knee=None)
    return WhatIf("h100:llama-3-8b", tp, Path("run"), points, None, plan, "compute", "", "")


@pytest.mark.parametrize("users", [1, 7, 100, 1000, 12345])
@pytest.mark.parametrize("think", [0.0, 1.5, 30.0])
@pytest.mark.parametrize("growth", [0.0, 0.1, 1.0])
def test_the_replicas_times_the_users_each_serves_cover_every_user(users: int, think: float, growth: float) -> None:
    a = answer(curve(growth), users, think, "ttft_p99=1s")
    assert a.plan.replicas is not None
    assert a.plan.replicas * a.users_per_replica >= users * (1 - 1e-9)
    # ... and not by a whole replica more than needed
    assert (a.plan.replicas - 1) * a.users_per_replica < users


def test_without_think_time_a_replica_serves_as_many_users_as_its_capacity_in_streams() -> None:
    a = answer(curve(0.1), 100, 0.0, "ttft_p99=1s")
    assert a.plan.capacity == pytest.approx(20.0)  # TTFT p99 0.05 s per stream reaches 1 s at 20
    assert a.users_per_replica == pytest.approx(20.0)
    assert a.plan.replicas == 5
    assert a.binds == "ttft_p99=1s"


def test_think_time_lets_a_replica_serve_more_users_than_streams() -> None:
    a = answer(curve(0.1), 100, 4.0, "ttft_p99=1s")
    e2e = 2.0 + 0.1 * 20  # at the capacity of 20 streams
    assert a.users_per_replica == pytest.approx(20.0 * (e2e + 4.0) / e2e)


def test_gpus_are_replicas_times_the_tensor_parallel_size() -> None:
    a = answer(curve(0.1), 100, 0.0, "ttft_p99=1s", tp=4)
    assert a.gpus == 4 * a.plan.replicas


def test_an_slo_breached_at_the_lowest_load_leaves_no_replica_count() -> None:
    a = answer(curve(0.1), 100, 0.0, "ttft_p99=10ms")
    assert a.plan.replicas is None and a.gpus is None
    assert math.isnan(a.users_per_replica)
    assert math.isnan(users_per_replica(a.plan, a.points))


def test_a_curve_that_meets_every_objective_to_its_top_says_so_rather_than_name_one() -> None:
    points = [dataclasses.replace(p, values={"ttft_p99=5s": p.values["ttft_p99=1s"]}) for p in curve(0.1)]
    a = answer(points, 100, 0.0, "ttft_p99=5s")
    assert a.plan.capacity == 32 and a.binds == "the top step (every SLO met)"
