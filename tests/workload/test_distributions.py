"""Length distributions: the strings users write, and lengths drawn with the right shape."""

import random
import statistics

import pytest

from loadlab.config import LengthDist
from loadlab.errors import UserError
from loadlab.workload.distributions import (
    parse_length,
    parse_seconds,
    sample_length,
    sample_seconds,
)


def draws(text: str, n: int = 20000, seed: int = 1) -> list[int]:
    d = parse_length(text)
    rng = random.Random(seed)
    return [sample_length(d, rng) for _ in range(n)]


@pytest.mark.parametrize("text", ["128", "fixed:128", " 128 "])
def test_fixed_forms_always_give_the_value(text):
    assert parse_length(text) == LengthDist(kind="fixed", mean=128, std=0, min=128, max=128)
    assert set(draws(text, 100)) == {128}


def test_fixed_above_the_default_clip_is_not_clipped():
    assert set(draws("fixed:10000", 10)) == {10000}


def test_uniform_covers_its_range_evenly():
    xs = draws("uniform:64:256")
    assert min(xs) == 64 and max(xs) == 256
    assert statistics.mean(xs) == pytest.approx(160, rel=0.02)


def test_normal_has_its_mean_and_std():
    xs = draws("normal:500:50")
    assert statistics.mean(xs) == pytest.approx(500, rel=0.01)
    assert statistics.pstdev(xs) == pytest.approx(50, rel=0.05)


def test_lognormal_mean_and_std_are_of_the_length_itself():
    xs = draws("lognormal:200:100")
    assert statistics.mean(xs) == pytest.approx(200, rel=0.03)
    assert statistics.pstdev(xs) == pytest.approx(100, rel=0.08)
    assert statistics.median(xs) < statistics.mean(xs)  # right-skewed


def test_draws_are_clipped_to_min_max_and_never_below_one():
    xs = draws("normal:10:50")
    assert min(xs) == 1
    xs = draws("normal:100:60:80:120")
    assert min(xs) == 80 and max(xs) == 120


def test_same_seed_same_draws():
    assert draws("lognormal:300:200", 50, seed=5) == draws("lognormal:300:200", 50, seed=5)
    assert draws("lognormal:300:200", 50, seed=5) != draws("lognormal:300:200", 50, seed=6)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "poisson:3",
        "fixed:0",
        "fixed:-3",
        "fixed:1.5",
        "uniform:10",
        "uniform:9:3",
        "normal:100",
        "normal:0:5",
        "normal:100:-1",
        "lognormal:1:2:3",
        "uniform:a:b",
        "fixed:nan",
    ],
)
def test_bad_strings_raise_user_error(text):
    with pytest.raises(UserError):
        parse_length(text)


def test_seconds_allow_fractions_and_zero():
    d = parse_seconds("uniform:0.5:2")
    rng = random.Random(0)
    xs = [sample_seconds(d, rng) for _ in range(2000)]
    assert 0.5 <= min(xs) and max(xs) <= 2.0
    assert statistics.mean(xs) == pytest.approx(1.25, rel=0.05)
    assert sample_seconds(parse_seconds("0"), rng) == 0.0
    with pytest.raises(UserError):
        parse_seconds("fixed:-1")


@pytest.mark.parametrize("text", ["uniform:a:2", "uniform:3:1", "normal:1", "fixed:1:2", "lognormal:-1:1"])
def test_a_bad_duration_is_called_a_duration_not_a_length(text):
    with pytest.raises(UserError, match="bad duration distribution") as e:
        parse_seconds(text)
    assert "length" not in str(e.value)
