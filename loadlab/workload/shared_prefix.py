"""N shared prefixes x M suffixes: the pattern that shows whether prefix caching pays off."""

from __future__ import annotations

import random

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.base import Workload, single_turn
from loadlab.workload.distributions import sample_length
from loadlab.workload.spec import RequestSpec
from loadlab.workload.text import TextSource


class SharedPrefixWorkload(Workload):
    """`num_prefixes` prefixes of `prefix_len` tokens, each followed by `suffixes_per_prefix`
    distinct suffixes of `input_len` tokens. Every pass sends all N x M prompts once, shuffled."""

    def __init__(self, cfg: WorkloadConfig, api: str, stream: int = 0) -> None:
        super().__init__(cfg, api, stream)
        for name in ("num_prefixes", "prefix_len", "suffixes_per_prefix"):
            if getattr(cfg, name) < 1:
                raise UserError(f"workload.{name} must be >= 1, got {getattr(cfg, name)}")
        # The prompt pool comes from the seed alone, so every process shares the same prefixes.
        pool_rng = random.Random(cfg.seed)
        text = TextSource(pool_rng)
        self.prefixes = [text.text(cfg.prefix_len) for _ in range(cfg.num_prefixes)]
        # (prefix index, suffix text): fixed for the run so the same prompts recur.
        self.prompts = [
            (p, text.text(sample_length(cfg.input_len, pool_rng)))
            for p in range(cfg.num_prefixes)
            for _ in range(cfg.suffixes_per_prefix)
        ]
        self._order: list[int] = []

    def _next(self) -> RequestSpec:
        if not self._order:
            self._order = list(range(len(self.prompts)))
            self.rng.shuffle(self._order)
        prefix, suffix = self.prompts[self._order.pop()]
        prompt = self.prefixes[prefix] + suffix
        return single_turn(prompt, sample_length(self.cfg.output_len, self.rng), len(prompt))
