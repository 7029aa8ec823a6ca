"""Saturation across steps: under-loaded while throughput scales, the knee, past it, overloaded."""

from __future__ import annotations

from loadlab.analyze.derive import Derived
from loadlab.analyze.saturation import StepLoad, held_at_admission, saturated_at_delivered_load, saturation


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
    assert knee == 2 and "latency +100 %" in states[3].reason


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


def _derived(**values: float) -> dict[str, Derived]:
    return {k: Derived(v, "", [], "server_metrics") for k, v in values.items()}


# The lab's admission-cap runs on the busy 2-core host: the reference server (--max-num-seqs 2,
# its cap exported) and vLLM (--max-num-seqs 2, no cap exported, its starved API server reading
# running at 78 % of the most seen while every waiting request waited for capacity).
REFERENCE_AT_CAP = _derived(waiting_mean=12.25, kv_usage_p90=0.003, running_at_cap=1.0)
VLLM_AT_CAP = _derived(waiting_mean=10.2, kv_usage_p90=0.001, running_at_cap=0.78, capacity_wait_share=1.0)


def test_a_queue_before_free_kv_at_the_cap_is_held_at_admission():
    assert held_at_admission(REFERENCE_AT_CAP) and held_at_admission(VLLM_AT_CAP)
    assert saturated_at_delivered_load(REFERENCE_AT_CAP).startswith("running at 100 % of its cap with 12.2")
    assert saturated_at_delivered_load(VLLM_AT_CAP).startswith("waiting for a seat (KV cache 0.1 % full)")


def test_a_full_kv_pool_or_a_running_count_below_its_cap_is_not_admission():
    kv_bound = _derived(waiting_mean=23.8, kv_usage_p90=1.0, running_at_cap=0.71)
    assert not held_at_admission(kv_bound)
    assert saturated_at_delivered_load(kv_bound).startswith("KV cache 100 % full with 23.8 requests waiting")
    # A prefill-bound queue (requests waiting for the next long step): 0.9 running of a 32 cap.
    prefill = _derived(waiting_mean=1.33, kv_usage_p90=0.03, running_at_cap=0.03)
    assert not held_at_admission(prefill) and saturated_at_delivered_load(prefill) == ""
    assert saturated_at_delivered_load(_derived(waiting_mean=0.4, kv_usage_p90=1.0)) == ""  # no queue


def test_a_dip_that_later_steps_scale_out_of_is_not_the_knee():
    # Measured on the tiny reference server: 2 users gained only +36 %, 4 and 8 scaled again, 32
    # was the last step before a flat one. The knee is there, not at the early dip.
    loads = [(1, 164), (2, 224), (4, 406), (8, 619), (16, 781), (32, 898), (40, 707), (48, 683), (64, 871)]
    steps = [step(i, users, tps, waiting_mean=0) for i, (users, tps) in enumerate(loads)]
    states, knee = saturation(steps)
    assert states[1].state == "at_knee" and states[6].state == "past_knee"
    assert knee == 5
    # Without a flat step, the first dip no later step scales past.
    states, knee = saturation([step(0, 1, 100, waiting_mean=0), step(1, 2, 130), step(2, 4, 250), step(3, 8, 300)])
    assert [s.state for s in states] == ["under_loaded", "at_knee", "under_loaded", "at_knee"] and knee == 3


def test_steps_that_stream_no_tokens_are_compared_on_requests_per_s():
    # Embeddings: no output tokens, so requests/s is the throughput that scales or goes flat.
    def pooled(index: int, users: int, per_s: float) -> StepLoad:
        return step(index, users, 0.0, completed_per_s=per_s, waiting_mean=0)

    states, knee = saturation([pooled(0, 1, 50), pooled(1, 2, 98), pooled(2, 4, 120), pooled(3, 8, 121)])
    assert [s.state for s in states] == ["under_loaded", "under_loaded", "at_knee", "past_knee"]
    assert knee == 2 and "throughput +0.83 % for load +100 %" in states[3].reason


def test_an_empty_queue_and_held_token_times_outweigh_throughput_that_fell_short_on_a_busy_host():
    # 1 then 2 users on a shared host: throughput +30 % for +100 % load, yet nothing waits and the
    # server's own ITL grew 4 %: the shortfall is the host's, the server has headroom.
    states, knee = saturation(
        [
            step(0, 1, 100, waiting_mean=0, server_itl_p50=0.010),
            step(1, 2, 130, waiting_mean=0, server_itl_p50=0.0104),
        ]
    )
    assert [s.state for s in states] == ["under_loaded", "under_loaded"] and knee is None
    assert "the server's queue is empty" in states[1].reason and "server itl p50 +4" in states[1].reason
    # Its own token time grew with the load (a batch that costs per token): its knee after all.
    states, knee = saturation(
        [
            step(0, 1, 100, waiting_mean=0, server_itl_p50=0.010),
            step(1, 2, 130, waiting_mean=0, server_itl_p50=0.015),
        ]
    )
    assert states[1].state == "at_knee" and knee == 1
    # A queue: throughput decides, as without server metrics.
    states, _ = saturation(
        [
            step(0, 1, 100, waiting_mean=0, server_itl_p50=0.010),
            step(1, 2, 101, waiting_mean=3, server_itl_p50=0.010),
        ]
    )
    assert states[1].state == "past_knee"


def test_steps_are_set_against_the_load_they_delivered_and_an_undeliverable_one_is_never_the_knee():
    # 16 users asked, 8 delivered (the client fell short): against 8 users, +0 % load, so not
    # flat; the throughput of 8 against 4 scaled.
    states, knee = saturation(
        [
            step(0, 4, 400),
            step(1, 8, 790),
            step(2, 16, 800, achieved_concurrency_ratio=0.5),
            step(3, 32, 300, achieved_concurrency_ratio=0.25),
        ]
    )
    assert states[2].state != "past_knee"
    states, knee = saturation(
        [
            StepLoad(0, "closed", 4, {"output_tokens_per_s": Derived(400, "", [], "client")}, 50),
            StepLoad(1, "closed", 8, {"output_tokens_per_s": Derived(400, "", [], "client")}, 50, "25 % delivered"),
        ]
    )
    assert states[1].state == "unknown" and states[1].reason.startswith("not judged: the load generator could not")
    assert knee is None
