"""Turns logits into next tokens: greedy, temperature, top-k, top-p, min-p, seeded per request.

Only printable ASCII bytes (and EOS) can be sampled, so every output token is one byte of valid
UTF-8 text that any client can count. With `utf8` the output may also hold CJK characters
(3 bytes, U+4000-U+9FFF) and emoji (4 bytes, U+1F000-U+1FFFF), one byte a token and always valid
UTF-8: after a lead byte only the continuation bytes it needs can be drawn (EOS neither). That
is the text a byte-fallback tokenizer streams for Chinese or emoji, 3-4 tokens a character.
"""

from __future__ import annotations

import torch

from reference_server.engine.sequence import Sequence

PRINTABLE = [9, 10] + list(range(32, 127))  # tab, newline, space .. '~'
_CJK_LEADS = list(range(0xE4, 0xEA))  # 3-byte characters U+4000-U+9FFF
_EMOJI_LEAD, _EMOJI_SECOND = 0xF0, 0x9F  # 4-byte characters U+1F000-U+1FFFF
_CONTINUATIONS = list(range(0x80, 0xC0))


def continuations_due(output_ids: list[int]) -> tuple[int, bool]:
    """How many continuation bytes the output's last character still needs, and whether the next
    one is an emoji's second byte (the sampler draws only the characters named above)."""
    n = 0
    while n < 3 and n < len(output_ids) and 0x80 <= output_ids[-1 - n] < 0xC0:
        n += 1
    if n == len(output_ids):
        return 0, False
    lead = output_ids[-1 - n]
    need = 3 if lead == _EMOJI_LEAD else 2 if lead in _CJK_LEADS else 0
    return max(need - n, 0), lead == _EMOJI_LEAD and n == 0


class Sampler:
    """Samples one token per sequence from the candidate tokens (printable bytes + EOS; with
    `utf8`, the bytes of CJK characters and emoji too)."""

    def __init__(self, eos_token_id: int, seed: int, utf8: bool = False) -> None:
        extra = _CJK_LEADS + [_EMOJI_LEAD] + _CONTINUATIONS if utf8 else []
        tokens = PRINTABLE + extra + [eos_token_id]
        self.candidates = torch.tensor(tokens)
        self.generator = torch.Generator().manual_seed(seed)
        self.utf8 = utf8
        # Which candidates may come next: a character's start (or EOS), any continuation byte, an
        # emoji's second byte.
        self._starts = torch.tensor([t < 0x80 or t >= 0xC0 for t in tokens])
        self._continuations = torch.tensor([0x80 <= t < 0xC0 for t in tokens])
        self._emoji_second = torch.tensor([t == _EMOJI_SECOND for t in tokens])

    def sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        """Next token of each sequence; logits: [len(seqs), vocab] float32 (any device)."""
        scores = logits[:, self.candidates.to(logits.device)].cpu()
        for row, seq in enumerate(seqs):
            p = seq.params
            if self.utf8:
                due, emoji_second = continuations_due(seq.output_ids)
                allowed = self._emoji_second if emoji_second else self._continuations if due else self._starts
                scores[row, ~allowed] = float("-inf")
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
