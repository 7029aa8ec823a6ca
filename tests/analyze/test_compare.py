"""Run comparison: a change is called only when its bootstrap interval lies beyond the runs' noise;
two runs drawn from one distribution get no call, a shifted one does, and the same seed gives
the same intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadlab.analyze.compare import (
    IMPROVEMENT,
    NO_CHANGE,
    NOT_COMPARABLE,
    REGRESSION,
    compare_runs,
    judge,
    weighted_bootstrap,
)
from loadlab.analyze.measures import RunValues, measure
from tests.support.records import T, closed, req
from tests.support.runs import DRAWN_EVERY, drawn_records, run_of, with_failures

N = 200
LATENCIES = ("ttft_p50", "itl_p50", "tpot_p50", "e2e_p50")


def drawn(seed: int, slower: float = 1.0, n: int = N, target: float = 2, **config: object) -> RunValues:
    step = closed(target, start=T, end=T + n * DRAWN_EVERY)
    return measure(run_of(drawn_records(T, seed, n, slower), [step], config=dict(config)))


def calls(base: RunValues, new: RunValues) -> dict[str, str]:
    return {c.metric: c.call for c in compare_runs(base, new).changes}


@pytest.mark.parametrize("seeds", [(1, 2), (3, 4), (5, 6), (7, 8)])
def test_two_runs_from_one_distribution_get_no_call(seeds: tuple[int, int]) -> None:
    found = calls(drawn(seeds[0]), drawn(seeds[1]))
    assert set(found.values()) <= {NO_CHANGE, NOT_COMPARABLE}
    assert found["ttft_p50"] == NO_CHANGE and found["output_tps"] == NO_CHANGE  # judged, not skipped
    assert found["e2e_p99"] == NOT_COMPARABLE  # 200 requests: 2 beyond p99, too few to judge it


def test_a_slower_run_is_a_regression_and_a_faster_one_an_improvement() -> None:
    base = drawn(1)
    slower = calls(base, drawn(2, slower=1.25))
    assert all(slower[m] == REGRESSION for m in LATENCIES)
    assert slower["tps_user_p50"] == REGRESSION  # per-user speed fell: higher is better
    assert slower["output_tps"] == NO_CHANGE  # same sends, same tokens: throughput held
    faster = calls(base, drawn(2, slower=0.8))
    assert all(faster[m] == IMPROVEMENT for m in LATENCIES) and faster["tps_user_p50"] == IMPROVEMENT


def test_the_interval_and_the_noise_are_reported_and_seeded() -> None:
    base, new = drawn(1), drawn(2, slower=1.25)
    first = compare_runs(base, new, seed=7).changes
    assert first == compare_runs(base, new, seed=7).changes
    ttft = next(c for c in first if c.metric == "ttft_p50")
    assert ttft.low < ttft.change < ttft.high and ttft.low > ttft.noise > 0
    assert ttft.change == pytest.approx(ttft.new / ttft.base - 1)


def test_the_rule_needs_the_whole_interval_beyond_the_noise_and_the_allowed_regression() -> None:
    assert judge(0.06, 0.10, noise=0.05, higher_is_better=False) == REGRESSION
    assert judge(0.04, 0.10, noise=0.05, higher_is_better=False) == NO_CHANGE  # overlaps the noise
    assert judge(-0.01, 0.10, noise=0.0, higher_is_better=False) == NO_CHANGE  # includes zero
    assert judge(-0.10, -0.06, noise=0.05, higher_is_better=False) == IMPROVEMENT
    assert judge(0.06, 0.10, noise=0.05, higher_is_better=True) == IMPROVEMENT  # throughput rose
    assert judge(0.06, 0.10, noise=0.01, higher_is_better=False, max_regression=0.08) == NO_CHANGE
    assert judge(0.09, 0.10, noise=0.01, higher_is_better=False, max_regression=0.08) == REGRESSION
    assert judge(math.nan, 0.1, noise=0.01, higher_is_better=False) == NOT_COMPARABLE


def test_runs_are_compared_where_their_steps_match_and_differences_are_listed() -> None:
    base = drawn(1, target=2, workload={"kind": "synthetic"})
    new = drawn(2, target=4, workload={"kind": "sharegpt"})
    comparison = compare_runs(base, new)
    assert comparison.changes == []
    assert any(d.startswith("workload:") for d in comparison.differences)
    assert any("step 'concurrency=2' only in" in d for d in comparison.differences)
    assert any("step 'concurrency=4' only in" in d for d in comparison.differences)


def test_the_bootstrap_resamples_whole_requests() -> None:
    rng = np.random.default_rng(0)
    # Two requests: one whose gaps are all 1, one whose gaps are all 3. Resampling gaps one by one
    # would mix them in every replicate; resampling requests gives replicates of only 1 or 3 often.
    values = np.array([1.0] * 50 + [3.0] * 50)
    owner = np.array([0] * 50 + [1] * 50)
    reps = weighted_bootstrap(values, owner, "mean", rng)
    assert np.mean((reps == 1.0) | (reps == 3.0)) > 0.4  # both draws the same request: p = 1/2
    assert np.isnan(weighted_bootstrap(values, np.zeros(100, dtype=int), "mean", rng)).all()  # one request
    assert np.isnan(weighted_bootstrap(values, np.arange(100), "p99", rng)).all()  # 1 value beyond p99


def failing(seed: int, failed: int, slower: float = 1.0, n: int = 80) -> RunValues:
    step = closed(2, start=T, end=T + n * DRAWN_EVERY)
    return measure(run_of(with_failures(drawn_records(T, seed, n, slower), failed), [step]))


def test_the_error_rate_is_compared_first_in_points() -> None:
    changes = compare_runs(failing(1, 0), failing(2, 47)).changes
    first = changes[0]
    assert (first.metric, first.unit, first.call) == ("error_rate", "fraction", REGRESSION)
    assert first.change == pytest.approx(47 / 80) and first.low > 0.4  # a difference, not a ratio


def test_a_run_whose_error_rate_differs_never_reads_as_an_improvement() -> None:
    # 47 of 80 failed fast, and the 33 that succeeded were faster: every latency "improved".
    changes = compare_runs(failing(1, 0), failing(2, 47, slower=0.8)).changes
    rest = [c for c in changes if c.metric != "error_rate"]
    assert rest and all(c.call == NOT_COMPARABLE and "error rate differs" in c.note for c in rest)
    fewer = compare_runs(failing(2, 47, slower=0.8), failing(1, 0)).changes  # errors fixed: flagged too
    assert fewer[0].call == IMPROVEMENT and all(c.call == NOT_COMPARABLE for c in fewer[1:])


def test_the_same_error_rate_leaves_the_latencies_judged() -> None:
    changes = compare_runs(failing(1, 4), failing(2, 4, slower=1.25)).changes
    assert changes[0].call == NO_CHANGE and not any(c.note for c in changes)
    assert {c.metric: c.call for c in changes}["ttft_p50"] == REGRESSION


def test_a_rate_that_measured_nothing_is_not_comparable_and_says_why() -> None:
    # The same label, once as a steady step and once as a burst in which nothing ended in the
    # steady window: its throughput is no figure, so no call, and the note says why.
    base = drawn(1, target=1e9)
    burst = [req(i, T + i * 0.01, [T + i * 0.01 + 0.2], T + i * 0.01 + 0.5) for i in range(20)]
    new = measure(run_of(burst, [closed(1e9, start=T, end=T + 1)]))
    changes = {c.metric: c for c in compare_runs(base, new).changes}
    for metric in ("output_tps", "rps"):
        assert math.isfinite(changes[metric].base) and math.isnan(changes[metric].new)
        assert changes[metric].call == NOT_COMPARABLE
        assert changes[metric].note.startswith("not measured in the new run: no request ended in the steady window")
    assert not changes["ttft_p50"].note  # the latencies were measured
