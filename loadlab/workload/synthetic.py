"""Synthetic prompts with input and output lengths drawn from the configured distributions."""

from __future__ import annotations

from loadlab.config import WorkloadConfig
from loadlab.workload.base import Workload, single_turn
from loadlab.workload.distributions import sample_length
from loadlab.workload.spec import RequestSpec
from loadlab.workload.text import TextSource


class SyntheticWorkload(Workload):
    """Random word text of `input_len` tokens (one ASCII character = one reference-server token)."""

    def __init__(self, cfg: WorkloadConfig, api: str, stream: int = 0) -> None:
        super().__init__(cfg, api, stream)
        self._text = TextSource(self.rng)

    def _next(self) -> RequestSpec:
        input_tokens = sample_length(self.cfg.input_len, self.rng)
        max_tokens = sample_length(self.cfg.output_len, self.rng)
        return single_turn(self._text.text(input_tokens), max_tokens, input_tokens)
