"""When a run should stop itself: the endpoint rejects everything, or a step fails too often.

Two checks over the records of a run, both read by the run loop at every tick:

- Rejected: the first REJECTED_AFTER requests of the run all failed with the same HTTP 401, 403
  or 404 (wrong key, wrong model or path) and none succeeded. Nothing will change that; going on
  would send thousands of failing requests per second.
- Error budget (`--max-error-rate R`): a step whose measured requests (warm-up and aborted ones
  aside) fail at a rate above R, once it has at least MIN_REQUESTS of them. The minimum keeps a
  few early failures (a cold server, one hiccup) from ending a step that would have been fine.
  At the run's end every step is judged on all its requests, however few.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from loadlab.client.discovery import KEY_REFUSED
from loadlab.numbers import format_value
from loadlab.store.schema import ErrorCategory, RequestRecord

REJECTED_AFTER = 3  # first requests that must all be rejected alike
MIN_REQUESTS = 20  # measured requests a step needs before its error rate can end it
_REJECTED_STATUS = {**KEY_REFUSED, 404: "check --model and --url"}  # what to do about each


@dataclass(frozen=True)
class Breach:
    """Why a run stops itself: `cause` is "rejected" or "error-budget"; `reason` is one line."""

    cause: str
    reason: str
    step: int = -1


class ErrorBudget:
    """Counts what the checks need from each finished request (call `add` for every record)."""

    def __init__(self, max_error_rate: float | None) -> None:
        self.max_error_rate = max_error_rate  # None: no error budget
        self._sent: dict[int, int] = defaultdict(int)
        self._failed: dict[int, int] = defaultdict(int)
        self._succeeded = 0
        self._rejections: list[RequestRecord] = []  # the first failures, while all are alike
        self._rejected_alike = True

    def add(self, rec: RequestRecord) -> None:
        """Take one finished request."""
        if rec.error == ErrorCategory.ABORTED.value:
            return  # cut off by the tester's own stop: says nothing about the endpoint
        if rec.ok:
            self._succeeded += 1
        elif self._rejected_alike and len(self._rejections) < REJECTED_AFTER:
            first = self._rejections[0] if self._rejections else rec
            self._rejected_alike = rec.status in _REJECTED_STATUS and rec.status == first.status
            self._rejections.append(rec)
        if not rec.warmup:
            self._sent[rec.step] += 1
            self._failed[rec.step] += 0 if rec.ok else 1

    def check(self, step: int, label: str) -> Breach | None:
        """While a step runs: a reason to stop now, or None."""
        return self._rejected(REJECTED_AFTER) or self._over_budget(step, label, MIN_REQUESTS)

    def final(self, labels: dict[int, str]) -> Breach | None:
        """At the run's end: was every request rejected, or did any step miss its error budget?"""
        rejected = self._rejected(1)
        if rejected:
            return rejected
        for step, label in sorted(labels.items()):
            breach = self._over_budget(step, label, 1)
            if breach:
                return breach
        return None

    def _rejected(self, minimum: int) -> Breach | None:
        if self._succeeded or not self._rejected_alike or len(self._rejections) < minimum:
            return None
        rec = self._rejections[0]
        return Breach(
            "rejected", f"the endpoint rejected every request ({rec.error_detail}): {_REJECTED_STATUS[rec.status]}"
        )

    def _over_budget(self, step: int, label: str, minimum: int) -> Breach | None:
        sent, failed = self._sent[step], self._failed[step]
        limit = self.max_error_rate
        if limit is None or sent < minimum or failed <= limit * sent:
            return None
        return Breach(
            "error-budget",
            f"step {label}: {failed} of {sent} measured requests failed "
            f"({format_value(failed / sent, 'fraction')} > --max-error-rate {limit:g})",
            step,
        )
