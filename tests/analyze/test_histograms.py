"""Window quantiles of server histograms from bucket samples, as PromQL's histogram_quantile."""

from __future__ import annotations

import math

import pytest

from loadlab.analyze.histograms import SampleIndex, near, window_histogram, window_increase
from loadlab.analyze.window import Window
from loadlab.store.schema import Sample
from loadlab.store.tables import samples_table
from tests.support.records import T


def histogram(t: float, buckets: dict[str, float], total: float, engine: str = "0") -> list[Sample]:
    """One scrape of histogram `ttft`: cumulative buckets, _sum and _count."""
    out = [Sample(T + t, "server", "ttft", v, {"le": le, "engine": engine}) for le, v in buckets.items()]
    count = buckets["+Inf"]
    return out + [
        Sample(T + t, "server", "ttft_sum", total, {"engine": engine}),
        Sample(T + t, "server", "ttft_count", count, {"engine": engine}),
    ]


def index_of(samples: list[Sample]) -> SampleIndex:
    return SampleIndex(samples_table(samples).to_pandas())


def window(start: float, end: float) -> Window:
    return Window(T + start, T + end, end - start, "test")


def test_quantile_interpolates_inside_the_bucket_of_the_increase():
    samples = histogram(0, {"0.1": 10, "0.5": 10, "1": 10, "+Inf": 10}, 0.5) + histogram(
        10, {"0.1": 20, "0.5": 50, "1": 60, "+Inf": 60}, 15.5
    )
    h = window_histogram(index_of(samples), "ttft", window(1, 10).as_bins())
    # Cumulative increases: 10 <= 0.1, 40 <= 0.5, 50 <= 1: 30 in (0.1, 0.5], 10 in (0.5, 1].
    assert list(h.cumulative) == [10, 40, 50, 50]
    assert h.count == 50 and h.mean == pytest.approx(15 / 50)
    # p50: rank 25, in (0.1, 0.5] after 10: 0.1 + 0.4 * 15/30
    assert h.quantile(0.5) == pytest.approx(0.1 + 0.4 * 15 / 30)
    assert h.quantile(0.05) == pytest.approx(0.1 * 2.5 / 10)  # rank 2.5; the lowest bucket starts at 0


def test_a_counter_reset_inside_the_window_is_handled_once():
    samples = (
        histogram(0, {"0.1": 100, "+Inf": 100}, 5)
        + histogram(5, {"0.1": 4, "+Inf": 6}, 1)  # the server restarted
        + histogram(10, {"0.1": 8, "+Inf": 10}, 2)
    )
    h = window_histogram(index_of(samples), "ttft", window(1, 10).as_bins())
    # After the reset: 4 + 4 below 0.1, 6 + 4 in all (never the 100 before it, never negative).
    assert list(h.cumulative) == [8, 10] and h.count == 10 and h.sum == pytest.approx(2)


def test_a_quantile_in_the_inf_bucket_is_the_highest_finite_bound():
    samples = histogram(0, {"1": 0, "+Inf": 0}, 0) + histogram(10, {"1": 1, "+Inf": 10}, 50)
    assert window_histogram(index_of(samples), "ttft", window(1, 10).as_bins()).quantile(0.9) == 1.0


def test_engines_add_up_bucket_by_bucket():
    samples = (
        histogram(0, {"1": 0, "+Inf": 0}, 0, "0")
        + histogram(0, {"1": 0, "+Inf": 0}, 0, "1")
        + histogram(10, {"1": 3, "+Inf": 4}, 2, "0")
        + histogram(10, {"1": 1, "+Inf": 4}, 6, "1")
    )
    h = window_histogram(index_of(samples), "ttft", window(1, 10).as_bins())
    assert list(h.cumulative) == [4, 8] and h.mean == pytest.approx(1.0)


def test_no_samples_no_histogram_and_nan_increase():
    index = index_of([Sample(T, "server", "kv_usage", 0.5, {})])
    assert window_histogram(index, "ttft", window(0, 10).as_bins()) is None
    assert math.isnan(window_increase(index, "preemptions", window(0, 10).as_bins()))


def test_a_late_window_of_a_long_series_reads_only_its_neighbourhood_and_the_same_increase():
    # A counter growing 2 a second for 100 s, reset at 70; the window 60..80 sees 2 x 20 = 40.
    samples = [Sample(T + t, "server", "preemptions", 2.0 * (t if t < 70 else t - 70), {}) for t in range(101)]
    index = index_of(samples)
    bins = window(60, 80).as_bins()
    assert window_increase(index, "preemptions", bins) == pytest.approx(40)
    kept = near(index.of("preemptions"), bins)["time"]
    assert kept.min() == T + 59 and kept.max() == T + 80
