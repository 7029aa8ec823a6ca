"""Counter totals per interval and the collective share, worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadlab.analyze.intervals import Bins, collective_share, interval_totals
from loadlab.store.schema import Sample
from loadlab.store.tables import samples_table

WINDOW = Bins(start=0.0, width=10.0, count=1)  # one interval: the whole window


def frame(samples: list[Sample]):
    return samples_table(samples).to_pandas()


def s(signal: str, t: float, value: float, source: str = "server", **labels: str) -> Sample:
    return Sample(t, source, signal, value, labels)


def share(samples: list[Sample]) -> float:
    return float(collective_share(frame(samples), WINDOW)[0])


# A reference-server step-time histogram over a window: 40 steps, 20 ms of step time in all.
STEPS = [
    s("step_time_sum", 0, 1.000, phase="decode"),
    s("step_time_sum", 5, 1.015, phase="decode"),
    s("step_time_count", 0, 100, phase="decode"),
    s("step_time_count", 5, 130, phase="decode"),
    s("step_time_sum", 0, 0.200, phase="prefill"),
    s("step_time_sum", 5, 0.205, phase="prefill"),
    s("step_time_count", 0, 10, phase="prefill"),
    s("step_time_count", 5, 20, phase="prefill"),
    s("step_time", 5, 130, phase="decode", le="0.01"),
]  # a bucket: ignored

NCCL = [
    s("collective_seconds", 1, 0.001, "nccl", rank="0"),
    s("collective_seconds", 2, 0.002, "nccl", rank="0"),
    s("collective_seconds", 1, 0.005, "nccl", rank="1"),
    s("collective_time", 1, 0.004, "nccl", rank="1", coll="AllReduce"),
]  # one collective: not a total


def test_share_from_nccl_interval_totals_averages_over_ranks():
    assert share(NCCL + STEPS) == pytest.approx(0.004 / 0.020)


def test_share_from_a_server_collective_histogram_uses_counter_increases_across_resets():
    server = [
        s("collective_time_sum", 0, 0.50),
        s("collective_time_sum", 2, 0.503),
        s("collective_time_sum", 3, 0.001),
        s("collective_time_sum", 5, 0.002),  # restarted
        s("collective_time_count", 5, 999),
        s("ttft_sum", 5, 99.0),
    ]  # ignored
    assert share(server + STEPS) == pytest.approx(0.005 / 0.020)


def test_the_engine_histogram_and_nccl_inspector_are_never_added_up():
    # Both measure the same collectives: the engine's histogram wins, as in the timeline.
    server = [s("collective_time_sum", 0, 0.50), s("collective_time_sum", 5, 0.505)]
    assert share(server + NCCL + STEPS) == pytest.approx(0.005 / 0.020)


def test_share_is_nan_when_either_side_is_missing():
    assert math.isnan(share(NCCL))
    assert math.isnan(share(STEPS))
    assert math.isnan(share(NCCL + [s("step_time_sum", 0, 5.0)]))  # no increase


def test_interval_totals_credit_each_increase_to_the_later_samples_interval():
    bins = Bins(start=0.0, width=1.0, count=4)
    counter = frame([s("preemptions", 0.5, 10), s("preemptions", 1.5, 12), s("preemptions", 3.5, 3)])  # reset
    assert interval_totals(counter, bins) == pytest.approx(np.array([0.0, 2.0, np.nan, 3.0]), nan_ok=True)


@pytest.mark.parametrize("count", [5, 70_000])  # 70,000 intervals: past the 16-bit radix sort
def test_bins_index_and_median_match_a_per_interval_definition(count: int) -> None:
    rng = np.random.default_rng(1)
    bins = Bins(start=100.0, width=0.5, count=count)
    times = np.concatenate([rng.uniform(99.0, 100.0 + 0.5 * count + 1.0, 4000), [math.nan, math.inf, 100.0]])
    values = rng.normal(0, 1, times.size)
    values[::7] = math.nan  # an unmeasured value counts in no median
    index = bins.index(times)
    for t, i in zip(times, index, strict=True):
        inside = math.isfinite(t) and 100.0 <= t < 100.0 + 0.5 * count
        assert i == (math.floor((t - 100.0) / 0.5) if inside else -1)
    medians = bins.median(times, values)
    for k in range(count):
        of_k = values[(index == k) & np.isfinite(values)]
        if of_k.size:
            assert medians[k] == np.median(of_k)  # even counts: the mean of the middle two
        else:
            assert math.isnan(medians[k])
