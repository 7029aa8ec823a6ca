"""Saturation across steps: under-loaded while throughput scales, the knee, past it, overloaded."""

from __future__ import annotations

from loadlab.analyze.derive import Derived
from loadlab.analyze.saturation import StepLoad, saturation


def step(
    index: int, target: float, tokens_per_s: float, mode: str = "closed", succeeded: int = 50, **more: float
) -> StepLoad:
    values = {"output_tokens_per_s": tokens_per_s, "e2e_p50": 1.0, **more}
    return StepLoad(index, mode, target, {k: Derived(v, "", [], "client") for k, v in values.items()}, succeeded)


def test_the_last_step_that_scaled_before_a_flat_one_is_the_knee():
    states, knee = saturation(
        [step(0, 1, 100, waiting_mean=0), step(1, 2, 195), step(2, 4, 380), step(3, 8, 390, e2e_p50=2.0)]
    )
    assert [s.state for s in states] == ["under_loaded", "under_loaded", "at_knee", "past_knee"]
    assert knee == 2 and "latency +100%" in states[3].reason


def test_scaling_less_than_half_the_load_is_at_the_knee():
    states, knee = saturation([step(0, 4, 100, waiting_mean=0), step(1, 8, 130)])
    assert [s.state for s in states] == ["under_loaded", "at_knee"] and knee == 1


def test_refusals_or_a_growing_open_loop_queue_are_overloaded():
    states, _ = saturation([step(0, 8, 100, refused_share=0.2), step(1, 10, 100, mode="open", completed_per_s=6.0)])
    assert [s.state for s in states] == ["overloaded", "overloaded"]


def test_one_step_is_judged_on_the_server_queue():
    assert saturation([step(0, 16, 50, waiting_mean=12)])[0][0].state == "past_knee"
    assert saturation([step(0, 1, 50, waiting_mean=0)])[0][0].state == "under_loaded"
    assert saturation([step(0, 1, 50)])[0][0].state == "unknown"


def test_steps_are_judged_in_load_order_whatever_order_they_ran_in():
    # a sweep's bisection: 1, 2, 4, then 3; 4 is compared with 3, the load below it
    states, knee = saturation([step(0, 1, 100), step(1, 2, 200), step(2, 4, 290), step(3, 3, 285)])
    assert [s.state for s in states] == ["unknown", "under_loaded", "past_knee", "at_knee"]
    assert states[2].versus == 3 and knee == 3


def test_a_step_with_too_few_successful_requests_is_not_judged_nor_compared_with():
    # concurrency=2 finished 2 requests: its throughput (here absurdly high) says
    # nothing; 4 is judged against 1, and the knee is not placed on the unjudged step.
    states, knee = saturation([step(0, 1, 100), step(1, 2, 900, succeeded=2), step(2, 4, 380)])
    assert states[1].state == "unknown" and "only 2 successful request(s)" in states[1].reason
    assert states[2].state == "under_loaded" and states[2].versus == 0 and knee is None


def test_refusals_judge_a_step_even_when_few_requests_finished():
    states, _ = saturation([step(0, 64, 0, refused_share=0.9, succeeded=0)])
    assert states[0].state == "overloaded"
