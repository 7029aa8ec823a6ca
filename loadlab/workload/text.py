"""Synthetic prompt text whose length in the reference server's tokens is known.

The reference server tokenizes one byte per token, so N ASCII characters are N tokens. Every
piece of text starts with a random tag, so no two prompts share a prefix by accident and prefix
caching cannot make the server look faster than it is.
"""

from __future__ import annotations

import random

_WORDS = (
    "the of and to in is that it for on was with as be at by this had not are but from or have an "
    "they which one you were all we her she there would their will when who him been has more if no "
    "out so said what up its about into than them can only other new some could time these two may "
    "first then do any like my now over such our man me even most made after also did many before "
    "must through back years where much your way well down should because each just those people "
    "how too little state good very make world still own see men work long get here between both "
    "life being under never day same another know while last might us great old year off come since "
    "against go came right used take three water light server token cache batch queue stream model"
).split()

_TAG_CHARS = "0123456789abcdefghijklmnopqrstuvwxyz"


def token_count(text: str) -> int:
    """Length in the reference server's tokens: one per UTF-8 byte."""
    return len(text.encode("utf-8"))


class TextSource:
    """Cuts prompt text of exact lengths (in ASCII characters) out of a seeded pool of words."""

    def __init__(self, rng: random.Random, pool_chars: int = 1 << 16) -> None:
        self._rng = rng
        self._pool = ""
        self._grow(pool_chars)

    def text(self, length: int, rng: random.Random | None = None) -> str:
        """ASCII text of exactly `length` characters that starts with a fresh random tag; `rng`
        (default: the source's own) draws the tag and where the text is cut from the pool."""
        if length <= 0:
            return ""
        rng = rng or self._rng
        tag = "".join(rng.choice(_TAG_CHARS) for _ in range(8)) + " "
        if length <= len(tag):
            return tag[:length]
        body = length - len(tag)
        if body > len(self._pool) // 2:
            self._grow(2 * body)
        # Start on a word boundary; the margin covers the longest word.
        start = self._pool.index(" ", rng.randrange(len(self._pool) - body - 16)) + 1
        return tag + self._pool[start : start + body]

    def _grow(self, chars: int) -> None:
        words: list[str] = [self._pool] if self._pool else []
        size = len(self._pool)
        while size < chars:
            word = self._rng.choice(_WORDS)
            words.append(word)
            size += len(word) + 1
        self._pool = " ".join(words)
