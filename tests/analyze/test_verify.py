"""A turned knob judged: verified when the throughput levels off at a higher load and the peak
grew beyond its interval and the noise; refuted when the peak did not grow; undecided between."""

from __future__ import annotations

import math

from loadlab.analyze.measures import RunValues, measure
from loadlab.analyze.verify import MIN_GAIN, REFUTED, UNDECIDED, VERIFIED, Figures, Point, verify
from tests.support.records import T, closed
from tests.support.runs import loaded_run, run_of


def sweep_peak(users: int, e2e: float = 1.0) -> RunValues:
    """A run whose one step is its peak: `users` back to back for 30 s, ten tokens per request."""
    records, samples = loaded_run(users=users, seconds=30, e2e=e2e)
    return measure(run_of(records, [closed(users, T, T + 30)], samples))


def figures(knee: float | None, peak: str, curve: dict[float, float]) -> Figures:
    """A sweep's figures: its knee and peak step, and its output tokens/s by load."""
    points = tuple(Point(f"concurrency={c:g}", c, tps, tps / c) for c, tps in curve.items())
    return Figures(
        knee=f"concurrency={knee:g}" if knee else "",
        knee_load=knee if knee else max(curve),
        peak=peak,
        peak_tps=max(curve.values()),
        goodput=math.nan,
        constraint="scheduling",
        runner_up="",
        server="reference server",
        headline="",
        points=points,
    )


CAPPED = {1: 10.0, 2: 20.0, 4: 20.0}  # levels off at 2
RAISED = {2: 20.0, 4: 40.0, 8: 80.0, 16: 80.0}  # at 8


def test_a_higher_plateau_and_more_throughput_verify_the_class() -> None:
    before, after = sweep_peak(2), sweep_peak(8)
    v = verify(
        "scheduling",
        "--max-num-seqs",
        (2, 8),
        (before, figures(2, "concurrency=2", CAPPED)),
        (after, figures(8, "concurrency=8", RAISED)),
    )
    assert v.outcome == VERIFIED, v.reason
    assert v.throughput and v.throughput.low > 0
    assert "levels off at 2 -> 8 users (moved up)" in v.reason and "95 % interval" in v.reason


def test_nothing_moved_refutes_the_class() -> None:
    before, after = sweep_peak(2), sweep_peak(2)
    v = verify(
        "scheduling",
        "--max-num-seqs",
        (2, 8),
        (before, figures(2, "concurrency=2", CAPPED)),
        (after, figures(2, "concurrency=2", CAPPED)),
    )
    assert v.outcome == REFUTED, v.reason
    assert v.throughput and v.throughput.change < MIN_GAIN and "(did not move up)" in v.reason


def test_a_plateau_reached_later_without_more_throughput_refutes_the_class() -> None:
    # The same ceiling, reached at a higher load: on a gently flattening curve where the plateau
    # "begins" moves with the noise; the peak is what a binding knob raises.
    before, after = sweep_peak(2), sweep_peak(2)
    v = verify(
        "scheduling",
        "--max-num-seqs",
        (2, 8),
        (before, figures(2, "concurrency=2", CAPPED)),
        (after, figures(None, "concurrency=2", {2: 15.0, 4: 17.0, 8: 20.0})),  # still rising at 8
    )
    assert v.outcome == REFUTED, v.reason
    assert "levels off at 2 -> >= 8 users (moved up)" in v.reason and "knee 2 -> none (>= 8)" in v.reason


def test_more_throughput_and_a_knee_that_moved_up_verify_where_the_plateau_starts_at_the_same_step() -> None:
    # On a coarse grid of loads a doubled capacity can level off at the same step as before.
    before, after = sweep_peak(2), sweep_peak(2, e2e=0.5)  # twice the requests at the same load
    v = verify(
        "kv_capacity",
        "--num-gpu-blocks-override",
        (5, 10),
        (before, figures(4, "concurrency=2", {1: 10.0, 2: 17.0, 4: 19.0, 8: 20.0})),
        (after, figures(6, "concurrency=2", {1: 10.0, 2: 20.0, 4: 38.0, 6: 40.0, 8: 40.0})),
    )
    assert v.outcome == VERIFIED, v.reason
    assert "levels off at 4 -> 4 users (did not move up), the knee did" in v.reason and "knee 4 -> 6" in v.reason


def test_more_throughput_where_the_plateau_did_not_move_is_undecided() -> None:
    before, after = sweep_peak(2), sweep_peak(2, e2e=0.5)  # twice the requests at the same load
    v = verify(
        "scheduling",
        "--max-num-seqs",
        (2, 8),
        (before, figures(2, "concurrency=2", CAPPED)),
        (after, figures(2, "concurrency=2", {1: 20.0, 2: 40.0, 4: 40.0})),
    )
    assert v.throughput and v.throughput.low > v.throughput.noise  # improved beyond the noise
    assert v.outcome == UNDECIDED and "(did not move up)" in v.reason, v.reason


def test_without_a_peak_to_compare_it_is_undecided() -> None:
    before = sweep_peak(2)
    v = verify(
        "scheduling",
        "--max-num-seqs",
        (2, 8),
        (before, figures(2, "concurrency=2", CAPPED)),
        (before, figures(8, "", RAISED)),
    )
    assert v.outcome == UNDECIDED and v.throughput is None and "no peak throughput" in v.reason
