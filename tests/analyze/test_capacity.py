"""loadlab plan's arithmetic on a hand-built curve: Little's law, interpolation, replicas, and
nothing read outside the measured range."""

from __future__ import annotations

import math

import pytest

from loadlab.analyze.capacity import (
    ABOVE,
    INTERPOLATED,
    KNEE,
    MEASURED,
    CurvePoint,
    busy_share,
    plan_capacity,
    read_curve,
)
from loadlab.metrics.slo import parse_slo

# concurrency, output tok/s, per-user tok/s p50, E2E mean: per-user speed falls as batches grow.
ROWS = [(1, 50, 50, 1.0), (2, 100, 50, 1.0), (4, 190, 47.5, 1.05), (8, 320, 40, 1.25), (16, 400, 25, 2.0)]
SLO = parse_slo("tps_user_p50=30").objectives


def curve(objectives=SLO) -> list[CurvePoint]:
    return [CurvePoint(c, tps, user, e2e, {o.text: user for o in objectives}) for c, tps, user, e2e in ROWS]


def test_littles_law_busy_share():
    assert busy_share(1.0, 4.0) == pytest.approx(0.2)
    assert busy_share(2.0, 0.0) == 1.0


def test_read_curve_interpolates_and_never_extrapolates():
    points = curve()
    assert (
        read_curve(points, 8, lambda p: p.user_tps).value == 40
        and read_curve(points, 8, lambda p: p.user_tps).how == MEASURED
    )
    mid = read_curve(points, 12, lambda p: p.user_tps)
    assert mid.value == pytest.approx(32.5) and mid.how == INTERPOLATED
    beyond = read_curve(points, 17, lambda p: p.user_tps)
    assert math.isnan(beyond.value) and beyond.how == ABOVE


def test_the_slo_crossing_is_interpolated_between_the_last_good_and_first_bad_step():
    plan = plan_capacity(curve(), users=16, think_time=0.0, objectives=SLO)
    # 40 tok/s at 8 streams, 25 at 16: 30 is crossed two thirds of the way, at 13.33.
    assert plan.capacity == pytest.approx(8 + 8 * 10 / 15)
    assert plan.limits[0].how == INTERPOLATED


def test_users_back_to_back_need_streams_over_capacity_replicas():
    plan = plan_capacity(curve(), users=100, think_time=0.0, objectives=SLO)
    assert plan.busy_share == 1.0 and plan.streams == pytest.approx(100)
    assert plan.replicas == 8  # ceil(100 / 13.33)
    assert plan.per_replica == pytest.approx(12.5)
    assert plan.user_tps.value == pytest.approx(40 - 15 * 4.5 / 8) and plan.user_tps.how == INTERPOLATED
    # all 100 on one replica: far outside the measured 1-16 streams, so no number
    assert math.isnan(plan.user_tps_one_replica.value) and plan.user_tps_one_replica.how == ABOVE


def test_think_time_lowers_the_busy_streams_where_e2e_and_streams_agree():
    plan = plan_capacity(curve(), users=100, think_time=4.0, objectives=SLO)
    # per replica c = 100/R x E2E(c) / (E2E(c) + 4): R = 2 settles above 13.33 streams, R = 3 below
    assert plan.replicas == 3
    c = plan.per_replica
    e2e = read_curve(curve(), c, lambda p: p.e2e).value
    assert c == pytest.approx(100 / 3 * e2e / (e2e + 4), rel=1e-6)
    assert plan.streams == pytest.approx(3 * c) and 0 < plan.busy_share < 1
    assert c <= plan.capacity
    # all on one replica: more streams, each request longer (E2E held at the top, 2 s, past 16)
    assert plan.streams_one_replica == pytest.approx(100 * 2.0 / 6.0) and plan.user_tps_one_replica.how == ABOVE


def test_a_breach_at_the_lowest_step_gives_no_replica_count():
    strict = parse_slo("tps_user_p50=60").objectives
    plan = plan_capacity(curve(strict), users=10, think_time=0.0, objectives=strict)
    assert plan.replicas is None and math.isnan(plan.capacity) and math.isnan(plan.user_tps.value)


def test_an_slo_met_at_every_step_is_a_lower_bound_at_the_top():
    loose = parse_slo("tps_user_p50=10").objectives
    plan = plan_capacity(curve(loose), users=40, think_time=0.0, objectives=loose)
    assert plan.capacity == 16 and plan.limits[0].how == MEASURED and plan.replicas == 3


def test_without_slo_or_knee_the_capacity_is_the_step_of_highest_throughput():
    plan = plan_capacity(curve(()), users=16, think_time=0.0, objectives=())
    assert plan.capacity == 16 and plan.replicas == 1 and plan.user_tps.value == 25


def test_without_slo_the_capacity_is_the_knee_the_analyzer_names():
    # 8 -> 16 users: +25 % throughput for +100 % load: the knee is 8 (saturation.py); past it,
    # more streams on one replica mostly wait, so 16 users need two replicas of 8.
    plan = plan_capacity(curve(()), users=16, think_time=0.0, objectives=(), knee=8)
    assert (plan.capacity, plan.capacity_how, plan.replicas) == (8, KNEE, 2) and plan.user_tps.value == 40
