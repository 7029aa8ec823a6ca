"""The answer's lines: what each kind of answer says, figures formatted as everywhere else."""

from __future__ import annotations

import io
import math
from dataclasses import replace

from loadlab.analyze.answer import Answer, Capacity, StepFigures
from loadlab.report.answer import answer_lines, print_answer, slo_note

FOUR = StepFigures("concurrency=4", 4, 0.043, 0.12, 136.0, 361.0)


def answer(capacity: Capacity | None, one_user: StepFigures | None = None, **kw) -> Answer:
    fields = dict(
        slo="ttft_p99=2s,tps_user_p50=10",
        slo_is_default=True,
        loads=3,
        one_user=one_user,
        one_user_note="" if one_user else "no step ran one user (closed loop, enough requests to judge)",
        capacity=capacity,
        verdict="KV capacity binds at concurrency=8 (the knee)",
        confidence=0.82,
        confidence_words="fairly sure",
        change="raise --gpu-memory-utilization (more KV blocks)",
    )
    return Answer(**{**fields, **kw})


def lines(a: Answer) -> dict[str, str]:
    return dict(answer_lines(a))


def test_the_capacity_with_its_figures_and_the_step_that_broke_the_slo():
    said = lines(answer(Capacity("users", FOUR, False, "concurrency=8: ttft_p99=2s (measured 2.4 s)")))
    assert said["capacity"] == (
        "4 users within the SLO; at 4 users 361 tokens/s in total, 136 tokens/s each (median), "
        "first token p99 120 ms; concurrency=8 broke it: ttft_p99=2s (measured 2.4 s)"
    )
    assert said["what limits it"] == "KV capacity binds at concurrency=8 (the knee) (fairly sure, confidence 0.82)"
    assert said["try"] == "raise --gpu-memory-utilization (more KV blocks)"
    short = lines(answer(Capacity("users", replace(FOUR, delivered=3.1), False, "")))
    assert short["capacity"].startswith("4 users (the load generator delivered 3.1) within the SLO; at 4 users 361")


def test_what_was_not_measured_is_said_not_invented():
    said = lines(answer(Capacity("users", FOUR, True, "")))
    assert said["capacity"].startswith("at least 4 users within the SLO (beyond the measured range); at 4 users")
    assert said["one user"] == "not measured: no step ran one user (closed loop, enough requests to judge)"
    nothing = lines(answer(Capacity("users", None, False, "concurrency=1: ttft_p99=2s (measured 3 s)")))
    assert nothing["capacity"] == (
        "not even the lowest measured load holds the SLO (concurrency=1: ttft_p99=2s (measured 3 s))"
    )
    unanalyzed = lines(answer(None, verdict="", confidence=math.nan, confidence_words="no verdict", change=""))
    assert unanalyzed["what limits it"].startswith("not analyzed yet")
    assert unanalyzed["try"] == "no change named for this verdict"


def test_one_user_and_the_slo_in_the_heading():
    a = answer(None, one_user=StepFigures("concurrency=1", 1, 0.043, 0.05, 203.0, 203.0))
    assert lines(a)["one user"] == "first token in 43 ms, then 203 tokens/s (concurrency=1, medians)"
    assert slo_note(a) == "SLO ttft_p99=2s, tps_user_p50=10: loadlab's default objectives; --slo sets yours"
    out = io.StringIO()
    print_answer(a, out)
    assert out.getvalue().splitlines()[1:3] == [f"the answer ({slo_note(a)})", f"  one user: {lines(a)['one user']}"]
