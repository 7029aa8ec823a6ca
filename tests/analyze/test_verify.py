"""A turned knob judged: verified when the throughput saturates at a higher load (the peak over
one user's rate) and the peak grew beyond its interval and the noise; refuted when the peak did not
grow; undecided between."""

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


def sweep(users: int, knee: float | None, curve: dict[float, float], e2e: float = 1.0) -> tuple[RunValues, Figures]:
    """A sweep as verify() reads it: its peak step (sweep_peak) and its figures."""
    return sweep_peak(users, e2e), figures(knee, f"concurrency={users}", curve)


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


CAPPED = {1: 10.0, 2: 20.0, 4: 20.0}  # saturates at 2 users (20 tok/s over 10 per user)
RAISED = {2: 20.0, 4: 40.0, 8: 80.0, 16: 80.0}  # at 8
CAP = ("scheduling", "--max-num-seqs", (2, 8))  # the class, its knob and the knob's two values


def test_a_higher_plateau_and_more_throughput_verify_the_class() -> None:
    v = verify(*CAP, sweep(2, 2, CAPPED), sweep(8, 8, RAISED))
    assert v.outcome == VERIFIED, v.reason
    assert v.throughput and v.throughput.low > 0
    assert "saturates at 2 -> 8 users (moved up)" in v.reason and "95 % interval" in v.reason


def test_nothing_moved_refutes_the_class() -> None:
    v = verify(*CAP, sweep(2, 2, CAPPED), sweep(2, 2, CAPPED))
    assert v.outcome == REFUTED, v.reason
    assert v.throughput and v.throughput.change < MIN_GAIN and "(did not move up)" in v.reason


def test_a_plateau_reached_later_without_more_throughput_refutes_the_class() -> None:
    # The same ceiling, reached at a higher load: on a gently flattening curve where the plateau
    # "begins" moves with the noise; the peak is what a binding knob raises.
    v = verify(*CAP, sweep(2, 2, CAPPED), sweep(2, None, {2: 15.0, 4: 17.0, 8: 20.0}))  # still rising at 8
    assert v.outcome == REFUTED, v.reason
    assert "saturates at 2 -> >= 2.7 users (moved up)" in v.reason and "knee 2 -> none (>= 8)" in v.reason


def test_a_doubled_capacity_verifies_wherever_the_first_step_near_the_peak_falls() -> None:
    # A gently rising curve: the first step within 90 % of the peak is 6 users before and 4 after
    # (seen on vLLM, a KV pool of 5 -> 10 blocks), while one user's rate stayed and the peak doubled.
    before = sweep(2, 6, {1: 250.0, 2: 400.0, 4: 410.0, 6: 460.0, 8: 450.0})
    after = sweep(2, 4, {1: 250.0, 2: 470.0, 4: 870.0, 6: 780.0, 8: 900.0}, e2e=0.5)  # twice the requests
    v = verify("kv_capacity", "--num-gpu-blocks-override", (5, 10), before, after)
    assert v.outcome == VERIFIED, v.reason
    assert "saturates at 1.8 -> >= 3.6 users (moved up)" in v.reason and "knee 6 -> 4" in v.reason


def test_more_throughput_where_the_plateau_did_not_move_is_undecided() -> None:
    v = verify(*CAP, sweep(2, 2, CAPPED), sweep(2, 2, {1: 20.0, 2: 40.0, 4: 40.0}, e2e=0.5))  # twice the requests
    assert v.throughput and v.throughput.low > v.throughput.noise  # improved beyond the noise
    assert v.outcome == UNDECIDED and "(did not move up)" in v.reason, v.reason


def test_without_a_peak_to_compare_it_is_undecided() -> None:
    before = sweep_peak(2)
    v = verify(*CAP, (before, figures(2, "concurrency=2", CAPPED)), (before, figures(8, "", RAISED)))
    assert v.outcome == UNDECIDED and v.throughput is None and "no peak throughput" in v.reason
