"""A turned knob judged: verified when the knee moved up and the peak throughput grew beyond its
interval and the noise; refuted when neither could have; undecided between."""

from __future__ import annotations

import math

from loadlab.analyze.measures import RunValues, measure
from loadlab.analyze.verify import MIN_GAIN, REFUTED, UNDECIDED, VERIFIED, Figures, verify
from tests.support.records import T, closed
from tests.support.runs import loaded_run, run_of


def sweep_peak(users: int, e2e: float = 1.0) -> RunValues:
    """A run whose one step is its peak: `users` back to back for 30 s, ten tokens per request."""
    records, samples = loaded_run(users=users, seconds=30, e2e=e2e)
    return measure(run_of(records, [closed(users, T, T + 30)], samples))


def figures(knee: float | None, peak: str, top: float) -> Figures:
    return Figures(
        knee=f"concurrency={knee:g}" if knee else "",
        knee_load=knee if knee else top,
        peak=peak,
        peak_tps=math.nan,
        goodput=math.nan,
        constraint="scheduling",
        runner_up="",
        server="reference server",
        headline="",
    )


def test_the_knee_up_and_more_throughput_verify_the_class() -> None:
    before, after = sweep_peak(2), sweep_peak(8)
    v = verify(
        "scheduling",
        "--max-num-seqs",
        (2, 8),
        (before, figures(2, "concurrency=2", 4)),
        (after, figures(8, "concurrency=8", 16)),
    )
    assert v.outcome == VERIFIED, v.reason
    assert v.throughput and v.throughput.low > 0
    assert "knee 2 -> 8 users (moved up)" in v.reason and "95 % interval" in v.reason


def test_nothing_moved_refutes_the_class() -> None:
    before, after = sweep_peak(2), sweep_peak(2)
    v = verify(
        "scheduling",
        "--max-num-seqs",
        (2, 8),
        (before, figures(2, "concurrency=2", 4)),
        (after, figures(2, "concurrency=2", 4)),
    )
    assert v.outcome == REFUTED, v.reason
    assert v.throughput and v.throughput.change < MIN_GAIN and "(did not move up)" in v.reason


def test_a_knee_that_moved_without_more_throughput_is_undecided() -> None:
    before, after = sweep_peak(2), sweep_peak(2)
    v = verify(
        "scheduling",
        "--max-num-seqs",
        (2, 8),
        (before, figures(2, "concurrency=2", 4)),
        (after, figures(None, "concurrency=2", 8)),  # no knee up to 8: beyond the old one
    )
    assert v.outcome == UNDECIDED, v.reason
    assert "knee 2 -> none (>= 8) users (moved up)" in v.reason


def test_without_a_peak_to_compare_it_is_undecided() -> None:
    before = sweep_peak(2)
    v = verify(
        "scheduling",
        "--max-num-seqs",
        (2, 8),
        (before, figures(2, "concurrency=2", 4)),
        (before, figures(8, "", 8)),
    )
    assert v.outcome == UNDECIDED and v.throughput is None and "no peak throughput" in v.reason
