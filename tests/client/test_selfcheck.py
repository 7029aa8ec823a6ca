from loadlab.analyze.limits import LOOP_LAG_P99_MAX
from loadlab.client.selfcheck import SelfCheck, p99


def test_p99_is_the_nearest_rank_value_and_zero_without_values():
    assert p99([]) == 0.0
    assert p99([0.5]) == 0.5
    assert p99(range(1, 101)) == 100          # index int(0.99 * 100) = 99
    assert p99([3.0] * 98 + [1.0, 9.0]) == 9.0


def test_warnings_name_a_lagging_event_loop_only_above_the_limit():
    check = SelfCheck("w")
    assert check.warnings() == []
    check.recent_lags.extend([0.001] * 99)
    assert check.warnings() == []
    check.recent_lags.extend([LOOP_LAG_P99_MAX * 5] * 2)
    assert any("event-loop lag p99" in w for w in check.warnings())
