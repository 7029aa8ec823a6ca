"""The sweep's stepping logic on hand-made step results: doubling, bisecting, each stop reason."""

from __future__ import annotations

from loadlab.conductor.stepping import (
    CLIENT,
    ERRORS,
    KNEE,
    MAX_LOAD,
    MAX_STEPS,
    SLO,
    StepResult,
    SweepLimits,
    judge_all,
    next_step,
)

LIMITS = SweepLimits(mode="closed", start=1, max_load=512, max_steps=12)


def step(index: int, target: float, tps: float, e2e: float = 1.0, **kw: object) -> StepResult:
    derived = {
        "output_tokens_per_s": tps,
        "e2e_p50": e2e,
        "refused_share": 0.0,
        "completed_per_s": target / e2e,
        "waiting_mean": 0.0,
    }
    return StepResult(index, f"concurrency={target:g}", target, derived, **kw)


def sweep(server, limits: SweepLimits = LIMITS) -> tuple[list[float], object]:
    """Drive next_step against a server model `server(target) -> StepResult kwargs` until it stops."""
    results: list[StepResult] = []
    decision = next_step(results, limits)
    while decision.next_target is not None:
        target = decision.next_target
        results.append(step(len(results), target, **server(target)))
        decision = next_step(results, limits)
    return [r.target for r in results], decision


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


def test_a_step_that_scales_less_than_the_load_but_not_flat_is_still_good():
    targets, decision = sweep(knee_at(10), SweepLimits("closed", 1, 16, 12))
    assert targets == [1, 2, 4, 8, 16] and decision.stop == MAX_LOAD  # 16: +25 % for +100 %: at the knee


def test_a_flat_step_is_judged_against_the_highest_good_step_below_it():
    results = [step(0, 8, 800), step(1, 16, 810), step(2, 12, 1000)]
    judged = {j.step.target: j.bad for j in judge_all(results, "closed")}
    assert judged == {8: "", 16: KNEE, 12: ""}  # 12 vs 8: +25 % throughput, still scaling


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
    assert "2.0% of requests failed" in decision.reason


def test_a_client_limited_step_stops_the_sweep_at_the_lowest_load():
    targets, decision = sweep(lambda c: {"tps": 100 * c, "client_limited": "event loop lag p99 40 ms"})
    assert targets == [1]
    assert decision.stop == CLIENT and decision.good is None and "lowest load" in decision.reason


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
    assert "completes 5.00 req/s of 6 arriving" in decision.reason
