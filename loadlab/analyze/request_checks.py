"""Checks over a step's successful requests: their token counts, how they were counted, and
which met the SLO."""

from __future__ import annotations

import pandas as pd

from loadlab.analyze.summary_types import TokenCheck
from loadlab.analyze.tokens import TokenTimes
from loadlab.metrics.slo import Slo
from loadlab.store.schema import TOKEN_EVENTS_LOGPROBS


def token_check(ok: pd.DataFrame) -> TokenCheck:
    """Count the successful requests (per_request rows) whose token counts disagree or were timed
    less exactly."""
    capped = ok["max_tokens"] > 0
    has_usage = ok["completion_tokens"] >= 0
    return TokenCheck(
        usage_missing=int((~has_usage).sum()),
        usage_mismatch=int((has_usage & (ok["completion_tokens"] != ok["client_tokens"])).sum()),
        over_max_tokens=int((capped & (ok["out_tokens"] > ok["max_tokens"])).sum()),
        under_max_tokens=int((capped & (ok["out_tokens"] < ok["max_tokens"])).sum()),
        read_timed=int((ok["token_clock"] == "read").sum()),
    )


def token_count_fallback(requests: pd.DataFrame, token_count: str) -> str:
    """The line that says `--token-count logprobs` fell back to counting chunks (successful
    streamed requests whose chunks carried no logprobs: the server sent none), "" when it did not
    or was not asked; `requests`: per_request rows."""
    if token_count != TOKEN_EVENTS_LOGPROBS:
        return ""
    streamed = requests[requests["ok"] & requests["api"].isin(("chat", "completions"))]
    fell = int((streamed["token_events"] != TOKEN_EVENTS_LOGPROBS).sum())
    if not fell:
        return ""
    return (
        f"--token-count logprobs: {fell:,} of {len(streamed):,} successful requests carried no logprobs "
        "(the server sent none): their tokens were counted by chunks"
    )


def meets_slo(ok: pd.DataFrame, tokens: TokenTimes, slo: Slo) -> pd.Series:
    """Which successful requests meet every objective (an undefined metric, e.g. the TPOT of a
    one-token answer, cannot miss)."""
    met = pd.Series(True, index=ok.index)
    for column, limit_ms in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2e", slo.e2e_ms)):
        if limit_ms is not None:
            met &= ~(ok[column] > limit_ms / 1000)
    if slo.itl_ms is not None:
        worst_gap = tokens.worst_gaps()[ok.index]
        met &= worst_gap <= slo.itl_ms / 1000
    return met
