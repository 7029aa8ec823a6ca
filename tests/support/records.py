"""Request records and steps built by hand for tests: times in epoch seconds from T."""

from __future__ import annotations

import math
from typing import Any

from loadlab.store.schema import RequestRecord, StepInfo

T = 1000.0


def req(
    i: int,
    send: float,
    tokens: list[float],
    end: float | None = None,
    *,
    scheduled: float | None = None,
    step: int = 0,
    **kw: Any,
) -> RequestRecord:
    """A successful request unless `error` is given; completion_tokens defaults to len(tokens)."""
    n = len(tokens)
    fields: dict[str, Any] = dict(
        request_id=f"r{i}",
        worker="w",
        step=step,
        warmup=False,
        api="chat",
        scheduled_time=send if scheduled is None else scheduled,
        send_time=send,
        first_token_time=tokens[0] if tokens else math.nan,
        end_time=end if end is not None else (tokens[-1] if tokens else send),
        token_times=tokens,
        token_clock="kernel",
        completion_tokens=n,
        client_tokens=n,
        max_tokens=n,
        status=200,
    )
    return RequestRecord(**{**fields, **kw})


def closed(target: float = 2, start: float = T, end: float = T + 10, index: int = 0) -> StepInfo:
    return StepInfo(index, f"concurrency={target:g}", "closed", target, start, end)


def opened(rate: float, start: float = T, end: float = T + 10, index: int = 0) -> StepInfo:
    return StepInfo(index, f"rate={rate:g}", "open", rate, start, end)


def record(i: int, t: float, **kw: Any) -> RequestRecord:
    """A whole request as a load-test user records it, scheduled at `t`: three tokens over 0.2 s."""
    whole = dict(
        scheduled=t, worker="host:1", token_clock="", prompt_tokens=12, input_tokens=12, finish_reason="length"
    )
    return req(i, t + 0.001, [t + 0.1, t + 0.2, t + 0.3], **{**whole, **kw})


def four_users_back_to_back() -> list[RequestRecord]:
    """4 users x 10 requests of 1 s each: 4 requests always in flight over 10 s."""
    return [req(u * 10 + k, T + k, [T + k + 0.5, T + k + 1.0]) for u in range(4) for k in range(10)]


def paced(step: int, start: float, ttft: float, gap: float, n: int = 12, prompt: int = 64) -> list[RequestRecord]:
    """`n` requests of 10 tokens, one every 0.8 s from `start`, each with this TTFT and token gap."""
    out = []
    for i in range(n):
        send = start + 0.8 * i
        tokens = [send + ttft + gap * k for k in range(10)]
        out.append(req(step * 1000 + i, send, tokens, step=step, prompt_tokens=prompt, input_tokens=prompt))
    return out
