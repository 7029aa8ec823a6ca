"""The checks that let a run stop itself: every request rejected alike, a step over its error budget."""

from __future__ import annotations

import math

from loadlab.conductor.budget import MIN_REQUESTS, REJECTED_AFTER, ErrorBudget
from loadlab.store.schema import ErrorCategory, RequestRecord


def record(error: str = "", status: int = 200, step: int = 0, warmup: bool = False) -> RequestRecord:
    return RequestRecord(
        request_id="r",
        worker="w",
        step=step,
        warmup=warmup,
        api="chat",
        scheduled_time=0.0,
        send_time=0.0,
        first_token_time=math.nan,
        end_time=1.0,
        status=status,
        error=error,
        error_detail=f"HTTP {status}: no" if error else "",
    )


def test_the_same_rejection_from_the_first_requests_stops_the_run():
    budget = ErrorBudget(None)  # even with the error budget off
    for _ in range(REJECTED_AFTER - 1):
        budget.add(record(ErrorCategory.HTTP_401.value, 401))
        assert budget.check(0, "c=1") is None
    budget.add(record(ErrorCategory.HTTP_401.value, 401))
    breach = budget.check(0, "c=1")
    assert breach is not None and breach.cause == "rejected" and "HTTP 401" in breach.reason


def test_a_success_or_a_different_failure_is_not_a_rejected_run():
    after_success, mixed = ErrorBudget(None), ErrorBudget(None)
    after_success.add(record())
    mixed.add(record(ErrorCategory.HTTP_404.value, 404))
    mixed.add(record(ErrorCategory.HTTP_4XX.value, 403))
    for _ in range(10):
        after_success.add(record(ErrorCategory.HTTP_401.value, 401))
        mixed.add(record(ErrorCategory.HTTP_404.value, 404))
    assert after_success.check(0, "s") is None and mixed.check(0, "s") is None
    assert after_success.final({0: "s"}) is None


def test_the_error_budget_waits_for_enough_measured_requests():
    budget = ErrorBudget(0.5)
    for _ in range(MIN_REQUESTS * 2):  # warm-up and aborted requests are not judged
        budget.add(record(ErrorCategory.HTTP_5XX.value, 500, warmup=True))
        budget.add(record(ErrorCategory.ABORTED.value, 0))
    budget.add(record())
    for _ in range(MIN_REQUESTS - 2):
        budget.add(record(ErrorCategory.HTTP_5XX.value, 500))
    assert budget.check(0, "s") is None  # 19 requests: too few to judge
    budget.add(record(ErrorCategory.HTTP_5XX.value, 500))
    breach = budget.check(0, "s")
    assert breach is not None and breach.cause == "error-budget" and breach.step == 0
    assert budget.check(1, "t") is None  # judged per step


def test_at_the_end_every_step_is_judged_on_all_its_requests():
    budget = ErrorBudget(0.5)
    budget.add(record())
    budget.add(record(ErrorCategory.TIMEOUT.value, 0, step=1))
    breach = budget.final({0: "c=1", 1: "c=2"})
    assert breach is not None and "c=2" in breach.reason
    off = ErrorBudget(None)
    off.add(record(ErrorCategory.TIMEOUT.value, 0))
    assert off.final({0: "c=1"}) is None
