"""The contract between the serving engine and the HTTP API.

The API turns an OpenAI request into token ids and SamplingParams, calls
`Engine.add_requests([(request_id, prompt_ids), ...], params)` and streams the TokenOutputs of the
TokenStreams it returns. The engine owns the scheduler, the KV cache, the model and the Prometheus
registry that `/metrics` serves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from reference_server.tokenizer import ByteTokenizer


@dataclass
class SamplingParams:
    """How to sample one request's output. Validated by the API before it reaches the engine."""

    max_tokens: int = 16
    min_tokens: int = 0  # EOS is suppressed until this many tokens
    ignore_eos: bool = False  # EOS is never sampled
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0  # drop tokens below min_p x the top token's probability; 0 = off
    seed: int | None = None
    stop: list[str] = field(default_factory=list)


@dataclass
class TokenOutput:
    """One generated token, as the engine yields it."""

    token_id: int
    text: str  # this token's text ("" when it is EOS or cut by a stop string)
    finish_reason: str | None = None  # "stop" | "length" | "abort" on the last output, else None
    prompt_tokens: int = 0
    output_tokens: int = 0  # tokens generated so far, this one included
    cached_tokens: int = 0  # prompt tokens served from the prefix cache


class QueueFull(Exception):
    """The waiting queue holds --max-waiting requests: the API answers 429."""


class EngineDead(Exception):
    """The engine loop has stopped: the API answers 503."""


class StepFailed(Exception):
    """The engine step running this request raised; the request ends, the engine goes on (a 500)."""


class TokenStream(Protocol):
    """One request's outputs; the last carries finish_reason. Raises EngineDead or StepFailed instead."""

    def __aiter__(self) -> AsyncIterator[TokenOutput]: ...

    def abort(self) -> None:
        """Stop generating (the client went away); the request's KV blocks are freed at once."""


class Engine(Protocol):
    """What the HTTP API needs of a started engine (reference_server.engine.AsyncEngine)."""

    model_name: str

    @property
    def tokenizer(self) -> ByteTokenizer: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def healthy(self) -> bool:
        """False once the engine has stopped or died (GET /health answers 503)."""

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry /metrics serves."""

    def add_requests(self, prompts: list[tuple[str, list[int]]], params: SamplingParams) -> Sequence[TokenStream]:
        """Queue (request id, prompt ids) pairs all or none; raises QueueFull, EngineDead or ValueError."""

    async def reset_prefix_cache(self) -> None:
        """Forget the prefix cache before the next step (POST /reset_prefix_cache); raises EngineDead."""

    async def pool(self, prompts: list[list[int]]) -> list[list[float]]:
        """Each prompt's embedding (its final hidden states pooled); raises QueueFull, EngineDead,
        StepFailed or ValueError."""
