"""The Workload interface the load generator drives, and a helper shared by the workload kinds."""

from __future__ import annotations

import random
import threading
from abc import ABC, abstractmethod

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.limits import token_range
from loadlab.workload.media import MediaSource
from loadlab.workload.spec import RequestSpec

POOLING_APIS = ("embeddings", "rerank")  # answered whole, no stream and no output tokens
APIS = ("chat", "completions", *POOLING_APIS)
TOKEN_COUNTS = ("auto", "chunks", "logprobs", "timings")  # RunConfig.token_count


class Workload(ABC):
    """A seeded source of requests: the same config and seed give the same sequence of requests.

    `next_request` may be called from many greenlets or threads: a lock serialises the draws so the
    sequence stays reproducible. The work under the lock is pure computation, so it never waits.
    `stream` tells load-generator processes apart: each gets its own reproducible sequence, so two
    processes never send the same prompts (which a prefix cache would reward).
    """

    def __init__(self, cfg: WorkloadConfig, api: str, stream: int = 0) -> None:
        if api not in APIS:
            raise UserError(f"unknown api {api!r} (use one of {', '.join(APIS)})")
        self.cfg = cfg
        self.api = api
        self.stream = stream
        self.rng = random.Random(cfg.seed if stream == 0 else f"{cfg.seed}/{stream}")
        self._lock = threading.Lock()
        media = MediaSource(cfg)
        self._media = media if media.active else None
        if self._media is not None and api != "chat":
            raise UserError("images and audio travel in chat messages: use --api chat")

    def next_request(self) -> RequestSpec:
        """The next request to send, with its images and audio when the config asks for them."""
        with self._lock:
            spec = self._next()
            if self.api in POOLING_APIS:
                self._add_items(spec)
            if self._media is not None:
                self._media.attach(spec, self.rng)
            return spec

    def _add_items(self, spec: RequestSpec) -> None:
        """Fill a pooling request's items (workload.items of them, drawn as prompts): embeddings embed
        the spec's prompt and items - 1 more; rerank ranks `items` documents against the prompt."""
        more = self.cfg.items - 1 if self.api == "embeddings" else self.cfg.items
        drawn = [self._next() for _ in range(more)]
        spec.documents = ([spec.prompt] if self.api == "embeddings" else []) + [d.prompt for d in drawn]
        spec.input_tokens += sum(d.input_tokens for d in drawn)
        spec.max_tokens = 0

    def token_range(self) -> tuple[int, int]:
        """The fewest and the most tokens, prompt and output, one request asks for (to hold against
        the endpoint's context window)."""
        return token_range(self.cfg, self.api)

    def complete(self, spec: RequestSpec, response_text: str, ok: bool) -> None:  # noqa: B027  (optional hook)
        """Called after every request with the text it received; single-turn kinds ignore it."""

    @abstractmethod
    def _next(self) -> RequestSpec:
        """Draw the next request (called under the lock)."""


def single_turn(prompt: str, max_tokens: int, input_tokens: int, pin_output: bool = True) -> RequestSpec:
    """A one-message request, usable by both the chat and the completions API."""
    return RequestSpec(
        prompt=prompt,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        input_tokens=input_tokens,
        pin_output=pin_output,
    )
