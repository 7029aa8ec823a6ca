"""The sweep's stepping logic on hand-made step results: doubling, bisecting, each stop reason."""

from __future__ import annotations

from loadlab.analyze.saturation import MIN_SUCCEEDED
from loadlab.conductor.stepping import MAX_STRETCH, StepResult, SweepLimits, judge_all, next_step
from loadlab.metrics.verdicts import CLIENT_LIMITED, ERRORS, KNEE, MAX_LOAD, MAX_STEPS, SLO, TOO_FEW

LIMITS = SweepLimits(mode="closed", start=1, max_load=512, max_steps=12, step_seconds=10)


def step(
    index: int, target: float, tps: float, e2e: float = 1.0, succeeded: int = 50, seconds: float = 10, **kw: object
) -> StepResult:
    derived = {
        "output_tokens_per_s": tps,
        "e2e_p50": e2e,
        "refused_share": 0.0,
        "completed_per_s": target / e2e,
        "waiting_mean": 0.0,
    }
    return StepResult(index, f"concurrency={target:g}", target, derived, succeeded=succeeded, seconds=seconds, **kw)


def sweep(server, limits: SweepLimits = LIMITS) -> tuple[list[float], object]:
    """Drive next_step against a server model `server(target) -> StepResult kwargs` until it stops."""
    results, decision = sweep_steps(lambda target, _seconds: server(target), limits)
    return [r.target for r in results], decision


def sweep_steps(server, limits: SweepLimits = LIMITS) -> tuple[list[StepResult], object]:
    """As sweep, with a server model that also sees each step's length: `server(target, seconds)`."""
    results: list[StepResult] = []
    decision = next_step(results, limits)
    while decision.next_target is not None:
        target, seconds = decision.next_target, decision.seconds or limits.step_seconds
        results.append(step(len(results), target, seconds=seconds, **server(target, seconds)))
        decision = next_step(results, limits)
    return results, decision


def knee_at(knee: float):
    """Throughput 100 tok/s per user up to `knee` users, flat after; latency grows past it."""
    return lambda c: {"tps": 100 * min(c, knee), "e2e": max(1.0, c / knee)}


def test_doubles_from_one_then_bisects_to_the_knee():
    targets, decision = sweep(knee_at(8))
    # doubling; 16 is flat against 8: halfway, 12, is flat too; then 10, flat against 8 (+25 %
    # load); 8..10 is as close as the knee rule can tell apart (it needs +25 % load).
    assert targets == [1, 2, 4, 8, 16, 12, 10]
    assert decision.stop == KNEE and decision.good.target == 8 and decision.bad.step.target == 10
    assert "past the knee at concurrency=10 vs concurrency=8" in decision.reason
    assert "highest good load: concurrency=8" in decision.reason


def test_a_step_that_scales_less_than_the_load_but_not_flat_is_still_good_and_is_the_knee():
    targets, decision = sweep(knee_at(10), SweepLimits("closed", 1, 16, 12))
    assert targets == [1, 2, 4, 8, 16] and decision.stop == MAX_LOAD  # 16: +25 % for +100 %: at the knee
    assert decision.knee.step.target == 16 and "scaling less than the load" in decision.knee.reason
    assert "without a knee" not in decision.reason


def test_reaching_max_past_a_knee_names_the_knee_the_analyzer_names():
    # A real vLLM's shape: still growing at 32 and 64, but far less than the load. No step is
    # past the knee (bad), so the sweep reaches --max; the knee is 32 (the first step that
    # scaled less than its load), as the analyzer's saturation rule says.
    tps = {1: 60, 2: 120, 4: 240, 8: 470, 16: 930, 32: 1160, 64: 1580}
    targets, decision = sweep(lambda c: {"tps": tps[int(c)]}, SweepLimits("closed", 1, 64, 12))
    assert targets == [1, 2, 4, 8, 16, 32, 64] and decision.stop == MAX_LOAD
    assert decision.knee.step.target == 32 and decision.good.target == 64


def test_steps_are_judged_together_in_load_order_whatever_order_they_ran_in():
    results = [step(0, 8, 800), step(1, 16, 810), step(2, 12, 1000)]
    judgements, knee = judge_all(results, "closed")
    assert {j.step.target: j.bad for j in judgements} == {8: "", 16: KNEE, 12: ""}
    # 16 is now compared with 12, the load below it; 12 (vs 8: +25 % for +50 %) still scaled
    # and is the knee: the last step that scaled before a flat one.
    assert "past the knee at concurrency=16 vs concurrency=12" in judgements[1].reason
    assert knee is not None and knee.step.target == 12


def slow_endpoint(succeeded_per_s: float):
    """Requests too slow for the step: `succeeded_per_s` x seconds succeed in a step."""
    return lambda c, seconds: {"tps": 10 * c, "succeeded": int(succeeded_per_s * seconds)}


def test_a_step_with_too_few_requests_is_neither_good_nor_bad_and_is_run_again_longer():
    results, decision = sweep_steps(slow_endpoint(0.3), SweepLimits("closed", 1, 2, 12, step_seconds=10))
    # 10 s: 3 successful requests (< MIN_SUCCEEDED): not judged; 20 s: 6, judged; the next load
    # starts at --step-duration again and is lengthened the same way.
    assert [(r.target, r.seconds) for r in results] == [(1, 10), (1, 20), (2, 10), (2, 20)]
    judgements, _ = judge_all(results, "closed")
    assert [j.measured for j in judgements] == [False, True, False, True]
    assert all(j.bad == "" for j in judgements)
    assert f"at least {MIN_SUCCEEDED} are needed" in judgements[0].reason
    assert decision.stop == MAX_LOAD and decision.good.target == 2


def test_a_sweep_that_never_measures_enough_stops_saying_why_and_judges_nothing_good():
    results, decision = sweep_steps(slow_endpoint(0.01), SweepLimits("closed", 1, 8, 12, step_seconds=3))
    # Lengthened up to MAX_STRETCH x --step-duration, then the sweep stops: it never sizes on a
    # step that measured (almost) nothing.
    assert [r.seconds for r in results] == [3, 6, 12] and 12 == MAX_STRETCH * 3
    assert decision.stop == TOO_FEW and decision.good is None and decision.knee is None
    assert "rerun with a longer --step-duration" in decision.reason


def test_reruns_count_toward_the_step_limit():
    results, decision = sweep_steps(slow_endpoint(0.3), SweepLimits("closed", 1, 64, 3, step_seconds=10))
    assert len(results) == 3 and decision.stop == MAX_STEPS


def test_still_scaling_at_max_stops_there():
    targets, decision = sweep(lambda c: {"tps": 100 * c}, SweepLimits("closed", 1, 20, 12))
    assert targets == [1, 2, 4, 8, 16, 20]
    assert decision.stop == MAX_LOAD and decision.good.target == 20


def test_slo_breach_is_bisected_like_the_knee():
    def server(c):
        return {"tps": 100 * c, "slo_failures": ["ttft_p99=2s measured 3 s"] if c > 5 else []}

    targets, decision = sweep(server)
    assert targets == [1, 2, 4, 8, 6, 5]
    assert decision.stop == SLO and decision.good.target == 5 and decision.bad.step.target == 6
    assert "ttft_p99=2s" in decision.reason


def test_errors_above_one_percent_are_bad():
    targets, decision = sweep(lambda c: {"tps": 100 * c, "error_rate": 0.02 if c >= 4 else 0.005})
    assert decision.stop == ERRORS and decision.good.target == 3 and decision.bad.step.target == 4
    assert "2 % of requests failed" in decision.reason


def test_a_client_limited_step_stops_the_sweep_at_the_lowest_load():
    targets, decision = sweep(lambda c: {"tps": 100 * c, "client_limited": "event loop lag p99 40 ms"})
    assert targets == [1]
    assert decision.stop == CLIENT_LIMITED and decision.good is None and "lowest load" in decision.reason


def test_the_step_limit_bounds_the_sweep():
    targets, decision = sweep(lambda c: {"tps": 100 * c}, SweepLimits("closed", 1, 10_000, 4))
    assert targets == [1, 2, 4, 8] and decision.stop == MAX_STEPS


def test_open_loop_rates_bisect_in_fractions():
    # completes at most 5 req/s: beyond, the queue grows (the analyzer's "overloaded"); a rate
    # starts low (0.5/s) and bisects in fractions of a request per second where needed
    def server(rate):
        return {"tps": 10 * min(rate, 5), "e2e": 1.0}

    results: list[StepResult] = []
    limits = SweepLimits("open", 0.5, 64, 12)
    decision = next_step(results, limits)
    while decision.next_target is not None:
        r = decision.next_target
        s = step(len(results), r, **server(r))
        s.derived["completed_per_s"] = min(r, 5)
        results.append(s)
        decision = next_step(results, limits)
    assert [r.target for r in results] == [0.5, 1, 2, 4, 8, 6, 5]
    assert decision.stop == KNEE and decision.good.target == 5 and decision.bad.step.target == 6
    assert "completes 5 req/s of 6 arriving" in decision.reason
