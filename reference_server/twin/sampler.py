"""Output tokens for the twin: cheap draws from the same candidates as the real sampler, no logits."""

from __future__ import annotations

import random

from reference_server.engine.sampler import PRINTABLE
from reference_server.engine.sequence import Sequence


class TwinSampler:
    """A printable byte per sequence, or EOS with the chance a uniform model gives it (1 in 98).

    EOS is held back as the real sampler holds it (ignore_eos, min_tokens). A request with a seed,
    or greedy (temperature 0), gets the same tokens every time: its draw is seeded by (seed, position).
    """

    def __init__(self, eos_token_id: int, seed: int) -> None:
        self.eos = eos_token_id
        self.candidates = PRINTABLE + [eos_token_id]
        self.random = random.Random(seed)

    def sample(self, seqs: list[Sequence]) -> list[int]:
        """Next token of each sequence (one loop: it runs once per token)."""
        candidates, everything, printable = self.candidates, len(self.candidates), len(PRINTABLE)
        shared = self.random.randrange
        tokens = []
        for seq in seqs:
            p = seq.params
            draw = shared
            if p.seed is not None or p.temperature == 0:
                draw = random.Random((p.seed or 0) * 1_000_003 + len(seq.output_ids)).randrange
            allow_eos = not p.ignore_eos and len(seq.output_ids) >= p.min_tokens
            tokens.append(candidates[draw(everything if allow_eos else printable)])
        return tokens
