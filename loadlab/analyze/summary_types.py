"""What summary.json holds, as the dataclasses that write it and read it back: a run's steps,
the whole run, its token-count check and its client self-check (loadlab.analyze.summary computes them)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from loadlab.analyze.breakdown import MediaSummary, TurnSummary
from loadlab.metrics.slo import Slo
from loadlab.metrics.stats import Distribution
from loadlab.metrics.verdicts import ClientCause
from loadlab.store.meta import float_or_nan, json_safe
from loadlab.store.schema import Coverage


@dataclass
class TokenCheck:
    """Successful requests whose token counts disagree, or whose tokens were timed less exactly
    (counts of requests)."""

    usage_missing: int = 0  # no usage.completion_tokens from the server (client count used)
    usage_mismatch: int = 0  # usage.completion_tokens != token events counted by the client
    over_max_tokens: int = 0  # more output tokens than max_tokens: the cap was not honoured
    under_max_tokens: int = 0  # fewer than max_tokens: the server stopped early (pinned lengths not honoured)
    read_timed: int = 0  # timed when the client read them (TLS), not by the kernel's receive timestamps


@dataclass
class ClientCheck:
    """Whether the load generator itself limited the measurement, and why: the one verdict that
    the summary, the analyzer (its `client` constraint), the gate and the report all show.

    `limited` needs an effect on the load (not delivered, or sent late); strain alone (client CPU,
    event-loop lag) is only a warning: loaded clients kept their users in flight (docs/diagnosis.md).
    A limited step is still judged at the load it delivered unless it is `untrusted`.
    """

    limited: bool = False
    reasons: list[str] = field(default_factory=list)  # the effects that made it limited
    values: dict[str, float] = field(default_factory=dict)  # the measured figures the checks used
    warnings: list[str] = field(default_factory=list)  # strain without an effect: not a verdict
    cause: ClientCause | Literal[""] = ""  # a limited step's (loadlab.analyze.clientcause)
    advice: list[str] = field(default_factory=list)  # what to change for that cause
    # A limited step whose figures are too far off to judge the server at the load it delivered:
    # the lines crossed (metrics/limits.py JUDGE_MIN_DELIVERED ...). Empty: the server's verdict
    # stands at the delivered load, with the shortfall beside it.
    untrusted: list[str] = field(default_factory=list)


@dataclass
class StepSummary:
    """One load step (or, with index -1, the whole run). Latencies in seconds, rates per second."""

    index: int
    label: str
    mode: str  # closed | open | mixed (overall of a run with both)
    target: float  # users (closed) or requests/s (open); NaN for overall of several steps
    start_time: float
    end_time: float
    window: float  # seconds from the step's start (warm-up excluded) to its end
    sent: int  # non-warm-up requests: succeeded + failed + aborted
    succeeded: int
    failed: int  # failed requests, aborted ones not included
    aborted: int  # in flight when the run was stopped, or cut off at a step's end: not the server's failure
    warmup: int  # warm-up requests, stored but excluded from everything here
    errors: dict[str, int]  # failed requests by ErrorCategory value (aborted not included)
    requests_per_s: float  # `completed` / `rate_window`
    output_tokens: int  # of succeeded requests
    output_tokens_per_s: float  # of the `completed` requests / `rate_window`
    ttft: Distribution  # from scheduled time (open loop) or send time (closed loop)
    ttft_from_send: Distribution
    itl: Distribution  # the gaps between reads: bunched gaps (0, events read together) left out
    tpot: Distribution
    e2e: Distribution
    user_tokens_per_s: Distribution  # per-user speed, one value per request
    start_delay: Distribution  # send − scheduled time
    # Where the server timed each request's prefill (llama.cpp's per-request timings; count 0 where
    # none did): its prefill, and TTFT less it (waiting for a slot, the network and the client).
    server_prefill: Distribution
    ttft_waiting: Distribution
    cache_hits: int  # succeeded requests whose prompt the server served partly from its cache
    achieved: float  # closed: mean requests in flight (Little's law); open: sent requests/s
    achieved_ratio: float  # achieved / target
    tokens: TokenCheck
    client: ClientCheck
    goodput: float | None = None  # requests/s meeting every SLO (None: no SLO given), as requests_per_s
    slo_met: int | None = None
    # The share of gaps between token events that were bunched (events that arrived in one read),
    # left out of `itl`; NaN without gaps.
    itl_bunched: float = math.nan
    completed: int = 0  # successful requests that ended in the steady-state window(s)
    rate_window: float = math.nan  # seconds of the steady-state window(s) the rates are over
    rates_unmeasured: str = ""  # why the rates are NaN ("–"): nothing ended in the window, or it was too short
    # Pooling requests (embeddings, rerank; no stream, so no TTFT or ITL): the items they carried
    # (inputs, documents) and their usage.prompt_tokens, of succeeded requests, and both per second.
    items: int = 0
    items_per_s: float = math.nan
    prompt_tokens_per_s: float = math.nan

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepSummary:
        """Read back one entry of summary.json."""
        kw: dict[str, Any] = {
            k: (math.nan if v is None and k not in ("goodput", "slo_met") else v) for k, v in d.items()
        }
        for k in ("ttft", "ttft_from_send", "itl", "tpot", "e2e", "user_tokens_per_s", "start_delay"):
            kw[k] = Distribution.from_dict(d[k])
        for k in ("server_prefill", "ttft_waiting"):  # (not in a summary.json of before)
            kw[k] = Distribution.from_dict(d[k]) if d.get(k) else Distribution("s")
        kw.setdefault("cache_hits", 0)
        kw["tokens"] = TokenCheck(**d["tokens"])
        kw["client"] = ClientCheck(**d["client"])
        return cls(**kw)


@dataclass
class RunSummary:
    """What summary.json holds: every step, the whole run, coverage and the client self-check."""

    path: str
    status: str  # running (cut off) | finished | degraded | interrupted | stopped | failed
    cut_off: bool
    started_at: float
    ended_at: float
    steps: list[StepSummary]
    overall: StepSummary
    client: ClientCheck  # any step limited; reasons name the step
    coverage: list[Coverage]
    slo: Slo | None = None
    warnings: list[str] = field(default_factory=list)
    reason: str = ""  # why the run stopped or failed, or missed its error budget
    turns: list[TurnSummary] = field(default_factory=list)  # sessions' turns (multiturn, tools), else []
    media: list[MediaSummary] = field(default_factory=list)  # by images and audio carried, else []

    @property
    def client_limited(self) -> bool:
        return self.client.limited

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (NaN as null), written to summary.json."""
        return json_safe({**asdict(self), "client_limited": self.client.limited})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSummary:
        """Read back summary.json."""
        return cls(
            path=d["path"],
            status=d["status"],
            cut_off=d["cut_off"],
            started_at=float_or_nan(d["started_at"]),
            ended_at=float_or_nan(d["ended_at"]),
            steps=[StepSummary.from_dict(s) for s in d["steps"]],
            overall=StepSummary.from_dict(d["overall"]),
            client=ClientCheck(**d["client"]),
            coverage=[Coverage(**c) for c in d["coverage"]],
            slo=Slo(**d["slo"]) if d.get("slo") else None,
            warnings=list(d.get("warnings", [])),
            reason=d.get("reason") or "",
            turns=[TurnSummary.from_dict(t) for t in d.get("turns", [])],
            media=[MediaSummary.from_dict(m) for m in d.get("media", [])],
        )
