"""One request as the engine tracks it: tokens, KV blocks, progress and timestamps."""

from __future__ import annotations

import codecs
import enum
from dataclasses import dataclass, field

import torch

from reference_server.interface import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """A request's prompt and output so far. `num_computed` tokens have their KV in the cache."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: float  # time.monotonic() when the engine accepted it
    generator: torch.Generator | None = None  # per-request seed; None = the engine's generator
    output_ids: list[int] = field(default_factory=list)
    num_computed: int = 0
    block_table: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    first_scheduled: float | None = None  # times, time.monotonic()
    first_token_time: float | None = None
    last_token_time: float | None = None
    block_hashes: list[bytes] = field(default_factory=list)  # of its leading full blocks (prefix caching)
    cached_tokens: int = 0  # prompt tokens whose KV the prefix cache gave it when first admitted
    text: str = ""  # decoded output, for stop strings
    # Decodes the output's bytes as they come, holding back an incomplete character.
    utf8: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))
    emitted: int = 0  # characters of `text` already handed out

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def token_ids(self, start: int, end: int) -> list[int]:
        """Tokens start..end-1 of prompt + output."""
        # Slice each part rather than concatenate them: a decode step asks for one token.
        p = len(self.prompt_ids)
        if end <= p:
            return self.prompt_ids[start:end]
        if start >= p:
            return self.output_ids[start - p : end - p]
        return self.prompt_ids[start:] + self.output_ids[: end - p]
