"""The answer in plain words: every figure is a measured step's, as the summary has it; the
capacity is the highest load up to which every judged step holds the SLO, and where no step
measured a figure the answer says so instead of inventing one."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from loadlab.analyze.analysis import analyze_run
from loadlab.analyze.answer import DEFAULT_SLO, NO_VERDICT, StepFigures, build_answer, confidence_words
from loadlab.analyze.summary import StepSummary, summarize
from loadlab.store.reader import RunData, load_run
from tests.support.records import T, closed, paced
from tests.support.runs import run_of, with_failures, write_drawn_run

# (users, TTFT s, gap s): the first token later and the tokens slower as the users grow.
CURVE = ((1, 0.05, 0.02), (2, 0.5, 0.03), (4, 3.0, 0.05))


def sweep(curve=CURVE, config: dict | None = None, failures: dict[int, int] | None = None) -> RunData:
    """One closed-loop step of 12 requests per (users, TTFT, gap), 10 s each; `failures`: step -> failed."""
    records, steps = [], []
    for i, (users, ttft, gap) in enumerate(curve):
        step = paced(i, T + 10 * i, ttft, gap)
        records += with_failures(step, failures[i]) if failures and i in failures else step
        steps.append(closed(users, T + 10 * i, T + 10 * (i + 1), i))
    return run_of(records, steps, config=config)


def figures_of(step: StepSummary) -> StepFigures:
    return StepFigures(
        step.label, step.target, step.ttft.p50, step.ttft.p99, step.user_tokens_per_s.p50, step.output_tokens_per_s
    )


def test_one_user_and_the_capacity_are_the_summarys_figures_of_measured_steps():
    run = sweep()
    analysis = analyze_run(run)
    answer = build_answer(run, analysis)
    steps = summarize(run).steps
    assert answer is not None and answer.slo == DEFAULT_SLO and answer.slo_is_default and answer.loads == 3
    assert answer.one_user == figures_of(steps[0]) and answer.one_user_note == ""
    capacity = answer.capacity
    # 4 users: TTFT p99 3 s against the default's 2 s; 2 users is the highest load that held it
    assert capacity is not None and capacity.unit == "users" and not capacity.beyond
    assert capacity.held == figures_of(steps[1])
    assert capacity.breach == "concurrency=4: ttft_p99=2s (measured 3 s)"
    assert answer.verdict == analysis.overall.headline
    assert answer.confidence == analysis.overall.confidence
    assert answer.confidence_words == confidence_words(analysis.overall.confidence, analysis.overall.constraint)
    assert answer.change == analysis.overall.advice[0]


def test_when_every_measured_step_holds_the_slo_the_capacity_is_at_least_the_top_one():
    answer = build_answer(sweep(), None, "ttft_p99=5s")
    assert answer is not None and answer.slo == "ttft_p99=5s" and not answer.slo_is_default
    assert answer.capacity is not None and answer.capacity.beyond and answer.capacity.breach == ""
    assert answer.capacity.held is not None and answer.capacity.held.label == "concurrency=4"
    assert answer.verdict == "" and answer.confidence_words == NO_VERDICT  # no analysis given


def test_when_the_lowest_step_breaches_the_slo_no_capacity_is_claimed():
    answer = build_answer(sweep(), None, "ttft_p99=10ms")
    assert answer is not None and answer.capacity is not None
    assert answer.capacity.held is None and answer.capacity.breach == "concurrency=1: ttft_p99=10ms (measured 50 ms)"


def test_without_a_step_at_one_user_there_is_no_one_user_figure():
    answer = build_answer(sweep(CURVE[1:]), None)
    assert answer is not None and answer.one_user is None
    assert answer.one_user_note.startswith("no step ran one user")


def test_the_runs_own_slo_judges_unless_it_has_no_per_step_objective():
    own = build_answer(sweep(config={"slo": "ttft_p99=100ms"}), None)
    assert own is not None and own.slo == "ttft_p99=100ms" and not own.slo_is_default
    assert own.capacity is not None and own.capacity.held is not None and own.capacity.held.label == "concurrency=1"
    # per-request objectives define goodput only: the default's objectives judge, the run's settings kept
    goodput = build_answer(sweep(config={"slo": "ttft=100,client_limited=any"}), None)
    assert goodput is not None and goodput.slo == f"{DEFAULT_SLO},ttft=100,client_limited=any"
    assert goodput.slo_is_default


def test_a_step_whose_requests_fail_holds_no_slo():
    # 2 of 12 requests of the 2-user step fail (17 %, over the sweep's 1 %)
    answer = build_answer(sweep(failures={1: 2}), None, "ttft_p99=5s")
    assert answer is not None and answer.capacity is not None
    assert answer.capacity.held is not None and answer.capacity.held.label == "concurrency=1"
    assert answer.capacity.breach == "concurrency=2: 17 % of requests failed (> 1 %)"


def test_a_step_that_measured_too_little_is_not_judged():
    records = paced(0, T, 0.05, 0.02) + paced(1, T + 10, 9.0, 0.03, n=3) + paced(2, T + 20, 0.5, 0.03)
    steps = [closed(1, T, T + 10, 0), closed(2, T + 10, T + 20, 1), closed(4, T + 20, T + 30, 2)]
    answer = build_answer(run_of(records, steps), None)
    # the 2-user step's 3 requests (TTFT 9 s) judge nothing: 4 users is the next judged load
    assert answer is not None and answer.capacity is not None and answer.capacity.beyond
    assert answer.capacity.held is not None and answer.capacity.held.label == "concurrency=4"


@pytest.mark.parametrize(
    "confidence, constraint, words",
    [
        (0.95, "kv_capacity", "sure"),
        (0.9, "compute", "sure"),
        (0.8, "compute", "fairly sure"),
        (0.7, "compute", "fairly sure"),
        (0.65, "compute", "somewhat sure"),
        (0.3, "compute", "unsure"),
        (0.0, "insufficient_data", NO_VERDICT),
        (0.9, "insufficient_data", NO_VERDICT),
    ],
)
def test_confidence_in_words(confidence, constraint, words):
    assert confidence_words(confidence, constraint) == words


def test_a_run_that_streamed_no_token_has_no_answer():
    records = paced(0, T, 0.05, 0.02)
    empty = [
        replace(r, completion_tokens=0, client_tokens=0, token_times=[], first_token_time=math.nan) for r in records
    ]
    assert build_answer(run_of(empty, [closed(1)]), None) is None


def test_a_step_the_load_generator_fell_short_of_is_judged_at_what_it_delivered(tmp_path):
    # drawn requests keep ~2 in flight whatever the users: 3 users get two thirds of their load
    # (short, yet judged at it), 4 users half of it less a little (not deliverable: judges nothing)
    write_drawn_run(tmp_path / "run", seed=1, targets=(1, 2, 3, 4), n=40)
    run = load_run(tmp_path / "run")
    steps = summarize(run).steps
    assert steps[2].client.limited and not steps[2].client.untrusted and steps[3].client.untrusted
    answer = build_answer(run, None)
    assert answer is not None and answer.capacity is not None
    assert answer.capacity.held == replace(figures_of(steps[2]), delivered=steps[2].achieved)
    assert (
        answer.capacity.breach
        == f"concurrency=4: the load generator could not deliver it ({steps[3].client.untrusted[0]})"
    )
