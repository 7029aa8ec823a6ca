"""Arrival processes: mean rate and burstiness (coefficient of variation of the gaps)."""

import itertools
import random
import statistics

import pytest

from loadlab.errors import UserError
from loadlab.workload.arrivals import arrival_gaps


def gaps(kind: str, rate: float = 4.0, burstiness: float = 1.0, n: int = 20000) -> list[float]:
    return list(itertools.islice(arrival_gaps(kind, rate, burstiness, random.Random(3)), n))


def cv(xs: list[float]) -> float:
    return statistics.pstdev(xs) / statistics.mean(xs)


@pytest.mark.parametrize("kind,burstiness", [("poisson", 1.0), ("constant", 1.0), ("gamma", 0.25), ("gamma", 4.0)])
def test_mean_gap_is_one_over_rate(kind, burstiness):
    assert statistics.mean(gaps(kind, 4.0, burstiness)) == pytest.approx(0.25, rel=0.03)


def test_poisson_gaps_have_cv_one():
    assert cv(gaps("poisson")) == pytest.approx(1.0, abs=0.03)


def test_constant_gaps_have_cv_zero():
    assert cv(gaps("constant")) == 0


def test_gamma_burstiness_below_one_is_burstier_than_poisson():
    assert cv(gaps("gamma", burstiness=0.25)) == pytest.approx(2.0, rel=0.1)
    assert cv(gaps("gamma", burstiness=1.0)) == pytest.approx(1.0, abs=0.05)
    assert cv(gaps("gamma", burstiness=4.0)) == pytest.approx(0.5, rel=0.1)


def test_same_seed_same_gaps():
    assert gaps("poisson", n=100) == gaps("poisson", n=100)


@pytest.mark.parametrize(
    "kind,rate,burstiness",
    [
        ("poisson", 0, 1),
        ("poisson", -1, 1),
        ("poisson", float("nan"), 1),
        ("uniform", 1, 1),
        ("gamma", 1, 0),
    ],
)
def test_bad_arguments_raise_user_error_at_call_time(kind, rate, burstiness):
    with pytest.raises(UserError):
        arrival_gaps(kind, rate, burstiness, random.Random(0))
