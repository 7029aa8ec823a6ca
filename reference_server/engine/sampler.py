"""Turns logits into next tokens: greedy, temperature, top-k, top-p, min-p, seeded per request.

Only printable ASCII bytes (and EOS) can be sampled, so every output token is one byte of valid
UTF-8 text that any client can count.
"""

from __future__ import annotations

import torch

from reference_server.engine.sequence import Sequence

PRINTABLE = [9, 10] + list(range(32, 127))  # tab, newline, space .. '~'


class Sampler:
    """Samples one token per sequence from the candidate tokens (printable bytes + EOS)."""

    def __init__(self, eos_token_id: int, seed: int) -> None:
        self.candidates = torch.tensor(PRINTABLE + [eos_token_id])
        self.generator = torch.Generator().manual_seed(seed)

    def sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        """Next token of each sequence; logits: [len(seqs), vocab] float32 (any device)."""
        scores = logits[:, self.candidates.to(logits.device)].cpu()
        for row, seq in enumerate(seqs):
            p = seq.params
            if p.ignore_eos or len(seq.output_ids) < p.min_tokens:
                scores[row, -1] = float("-inf")
        picks = scores.argmax(dim=-1)
        for row, seq in enumerate(seqs):
            if seq.params.temperature > 0:
                picks[row] = self._sample_row(scores[row], seq)
        return self.candidates[picks].tolist()

    def _sample_row(self, scores: torch.Tensor, seq: Sequence) -> int:
        """Draw one candidate index; the top candidate always keeps a non-zero chance, whatever the params.

        float64 and the top score moved to 0 before scaling: a tiny temperature cannot overflow, a
        huge one cannot make 0/0, and a top_p or min_p near the smallest float does not round to 0.
        """
        p = seq.params
        scores = scores.double()
        scores = (scores - scores.max()) / p.temperature
        if 0 < p.top_k < scores.numel():
            kth = torch.topk(scores, p.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if p.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            # Keep the smallest set of top tokens whose mass reaches top_p, and always the first.
            drop = sorted_probs.cumsum(0) - sorted_probs >= p.top_p
            drop[0] = False
            probs = probs.clone()
            probs[order[drop]] = 0.0
        if p.min_p > 0.0:
            probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
        return int(torch.multinomial(probs, 1, generator=seq.generator or self.generator))
