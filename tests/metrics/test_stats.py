"""Distribution: exact percentiles over raw values."""

from __future__ import annotations

import math

import pytest

from loadlab.metrics.stats import Distribution, percentile


def test_percentiles_interpolate_between_ranks() -> None:
    d = Distribution.of([4.0, 1.0, 3.0, 2.0], "s")
    # ranks 0..3; p50 at rank 1.5 -> 2.5, p90 at 2.7 -> 3.7, p99 at 2.97 -> 3.97
    assert (d.count, d.mean, d.min, d.max) == (4, 2.5, 1.0, 4.0)
    assert (d.p50, d.p90, d.p99) == pytest.approx((2.5, 3.7, 3.97))
    assert d.unit == "s"


def test_exact_values_not_buckets() -> None:
    values = [0.0101 + i * 1e-5 for i in range(101)]  # 10.10 ms .. 11.10 ms in 10 µs steps
    d = Distribution.of(values, "s")
    assert d.p50 == pytest.approx(values[50]) and d.p90 == pytest.approx(values[90])
    assert d.p99 == pytest.approx(values[99])


def test_nan_and_inf_are_dropped_and_empty_is_nan() -> None:
    d = Distribution.of([1.0, math.nan, math.inf, 3.0], "tok/s")
    assert d.count == 2 and d.p50 == 2.0
    empty = Distribution.of([], "s")
    assert empty.count == 0 and math.isnan(empty.p99) and math.isnan(empty.mean)
    assert math.isnan(percentile([math.nan], 50)) and percentile([1, 2, 3], 50) == 2.0


def test_from_dict_reads_null_as_nan() -> None:
    d = Distribution.from_dict(
        {"unit": "s", "count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None}
    )
    assert d.count == 0 and math.isnan(d.p50)
