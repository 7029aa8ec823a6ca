"""When a sequence stops, and how much of its text may be streamed yet.

Text that could be the start of a stop string is held back until it is clear either way, so a
client never sees part of a stop string; the stop string itself is never sent.
"""

from __future__ import annotations

from reference_server.engine.sequence import Sequence
from reference_server.tokenizer import ByteTokenizer


def advance(seq: Sequence, token: int, tokenizer: ByteTokenizer, max_model_len: int) -> tuple[str, str | None]:
    """Account for seq's newest token (already in output_ids): the text to send now and the finish
    reason ("stop", "length") or None."""
    p = seq.params
    if not p.stop:  # no stop string to hold text back for: only an incomplete character waits (the hot path)
        if token == tokenizer.eos_token_id:
            return seq.utf8.decode(b"", final=True), "stop"
        out = seq.output_ids
        done = len(out) >= p.max_tokens or len(seq.prompt_ids) + len(out) >= max_model_len
        reason = "length" if done else None
        # An ASCII byte after an ASCII byte (or first): the decoder holds nothing, the byte is its text.
        if token < 0x80 and (len(out) < 2 or out[-2] < 0x80):
            return chr(token), reason
        return seq.utf8.decode(tokenizer.token_bytes(token), final=done), reason
    if token == tokenizer.eos_token_id:
        seq.text += seq.utf8.decode(b"", final=True)  # a character left incomplete is replaced
        return _take(seq, len(seq.text)), "stop"
    # Incremental UTF-8: the bytes of an incomplete character wait for the rest (this token's
    # text is then ""), as vLLM's detokenizer holds them back; invalid bytes become U+FFFD.
    seq.text += seq.utf8.decode(tokenizer.token_bytes(token))
    for stop in p.stop:
        # A stop string can only end at the newest character: search just the tail.
        at = seq.text.find(stop, max(0, len(seq.text) - len(stop) - 1)) if stop else -1
        if at >= 0:
            return _take(seq, at), "stop"
    if len(seq.output_ids) >= p.max_tokens or seq.num_tokens >= max_model_len:
        seq.text += seq.utf8.decode(b"", final=True)
        return _take(seq, len(seq.text)), "length"
    return _take(seq, len(seq.text) - _held_back(seq)), None


def _held_back(seq: Sequence) -> int:
    """How many characters at the end of the text may be the start of a stop string."""
    held = 0
    for stop in seq.params.stop:
        for n in range(min(len(stop) - 1, len(seq.text)), held, -1):
            if seq.text.endswith(stop[:n]):
                held = n
                break
    return held


def _take(seq: Sequence, end: int) -> str:
    """The text from what was already sent up to `end`, now marked as sent."""
    text = seq.text[seq.emitted : end]
    seq.emitted = max(seq.emitted, end)
    return text
