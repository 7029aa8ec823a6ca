from loadlab.client.selfcheck import SelfCheck
from loadlab.metrics.limits import LOOP_LAG_P99_MAX
from loadlab.metrics.stats import percentile


def test_warnings_name_a_lagging_event_loop_only_above_the_limit():
    check = SelfCheck("w")
    assert check.warnings() == []
    check.recent_lags.extend([0.001] * 99)
    assert check.warnings() == []
    check.recent_lags.extend([LOOP_LAG_P99_MAX * 5] * 2)
    assert any("event-loop lag p99" in w for w in check.warnings())


def test_the_live_warning_takes_the_p99_the_summary_takes():
    # One late probe in 100: nearest-rank p99 is that probe (0.5 s), the summary's interpolated
    # p99 is 5 ms, under the 10 ms limit. Both must give the same verdict.
    lags = [0.0] * 99 + [0.5]
    check = SelfCheck("w")
    check.recent_lags.extend(lags)
    assert percentile(lags, 99) <= LOOP_LAG_P99_MAX
    assert check.warnings() == []
