"""The figures SLO checks read, on the hand-built run whose numbers are worked out in
tests/support/runs.py: any percentile, the rates, the error rate and goodput."""

from __future__ import annotations

import math

import pytest

from loadlab.analyze.measures import measure, statistic
from loadlab.metrics.slo import Slo
from tests.support.runs import hand_built


def test_values_of_the_hand_built_run() -> None:
    step = measure(hand_built(), Slo(ttft_ms=150)).steps[0]
    assert step.count == 3
    assert step.value("ttft", "max") == pytest.approx(0.3) and step.value("ttft", "p50") == pytest.approx(0.2)
    assert step.value("itl", "mean") == pytest.approx((0.1 + 0.2 + 0.1 + 0.3) / 4)
    assert step.value("itl", "p100") == pytest.approx(0.3)
    assert step.value("tps_user", "min") == pytest.approx(5.0)
    # the summary's rates: r0 and r1 ended in the 3 s steady-state window (test_summary.py)
    assert step.value("output_tps") == pytest.approx(2.0) and step.value("rps") == pytest.approx(2 / 3)
    assert step.value("error_rate") == pytest.approx(1 / 4)  # one timeout of four sent
    assert step.value("goodput", share=True) == pytest.approx(1 / 4)  # r1 alone has TTFT <= 150 ms
    assert step.value("goodput") == pytest.approx(1 / 3)  # per second of the 3 s window, as rps
    assert list(step.itl_owner) == [0, 0, 0, 1]  # gaps know their request


def test_goodput_without_per_request_objectives_is_nan_and_empty_statistics_too() -> None:
    step = measure(hand_built()).steps[0]
    assert math.isnan(step.value("goodput"))
    assert math.isnan(statistic(step.itl[:0], "p99"))
