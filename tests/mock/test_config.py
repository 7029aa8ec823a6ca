"""Mock settings: validation, and faults drawn from the seed at their rates."""

import random
from collections import Counter

import pytest

from loadlab.errors import UserError
from loadlab.mock.config import MockConfig, parse_codes


@pytest.mark.parametrize(
    "settings",
    [
        {"error_rate": 2},
        {"error_rate": -0.1},
        {"error_rate": 0.6, "stall_rate": 0.6},
        {"itl": -1},
        {"jitter": 1.5},
        {"output_len": 0},
        {"truth_limit": 0},
        {"error_codes": [200]},
        {"error_codes": []},
        {"ttft": float("inf")},
        {"itl": float("nan")},
        {"stall_seconds": float("inf")},
        {"model": ""},
    ],
)
def test_impossible_settings_are_user_errors(settings):
    with pytest.raises(UserError):
        MockConfig(**settings).check()


def test_error_codes_parse():
    assert parse_codes("500, 429") == [500, 429]
    with pytest.raises(UserError):
        parse_codes("500,oops")
    with pytest.raises(UserError):
        parse_codes("500,,429")


def test_faults_follow_their_rates_and_the_seed():
    cfg = MockConfig(error_rate=0.1, disconnect_rate=0.2, malformed_rate=0.05, stall_rate=0.05, not_sse_rate=0.1)
    cfg.check()
    rng = random.Random(4)
    draws = [cfg.draw_fault(rng) for _ in range(20000)]
    counts = Counter(draws)
    for fault, rate in [
        ("error", 0.1),
        ("disconnect", 0.2),
        ("malformed", 0.05),
        ("stall", 0.05),
        ("not_sse", 0.1),
        (None, 0.5),
    ]:
        assert counts[fault] / len(draws) == pytest.approx(rate, abs=0.015), fault
    rng = random.Random(4)
    assert [cfg.draw_fault(rng) for _ in range(100)] == draws[:100]


def test_jitter_scales_delays_within_its_bounds():
    rng = random.Random(0)
    assert MockConfig(jitter=0).delay(0.02, rng) == 0.02
    delays = [MockConfig(jitter=0.5).delay(0.02, rng) for _ in range(1000)]
    assert 0.01 <= min(delays) < 0.012 and 0.028 < max(delays) <= 0.03
