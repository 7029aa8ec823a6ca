"""KV-cache block bookkeeping: which blocks each sequence owns, and which are free.

Two managers with one interface: `PagedBlocks` hands out blocks one at a time as a sequence's
tokens need them (and reuses cached prompt prefixes); `ContiguousBlocks` reserves a whole slab
of consecutive blocks per sequence, the A/B baseline.
"""

from __future__ import annotations

import hashlib
import heapq
from array import array
from collections import OrderedDict
from typing import Protocol

from reference_server.engine.sequence import Sequence


class BlockManager(Protocol):
    """What the scheduler and the engine core need from a KV block manager."""

    block_size: int
    total: int

    @property
    def num_free(self) -> int:
        """Blocks no running sequence holds."""

    def cached_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks holding seq's leading full blocks; seq must hold no blocks yet."""

    def can_allocate(self, seq: Sequence, num_tokens: int, prefix: list[int]) -> bool:
        """Whether seq, starting from `prefix` if it holds no blocks yet, can hold `num_tokens` tokens.
        True, with nothing for `allocate` to do, when seq's blocks already span them (block_size
        tokens each): the scheduler skips both then."""

    def allocate(self, seq: Sequence, num_tokens: int, prefix: list[int]) -> None:
        """Grow seq's block table (from `prefix`) to hold `num_tokens` tokens (caller checked can_allocate)."""

    def cache_blocks(self, seq: Sequence, start: int, end: int) -> None:
        """Tokens start..end-1 of seq now have their KV computed: offer the blocks they fill for reuse."""

    def free(self, seq: Sequence) -> None:
        """Return seq's blocks."""

    def reset_prefix_cache(self) -> None:
        """Forget every cached block, so that no later request reuses KV computed before now."""


def block_hash(previous: bytes, tokens: list[int]) -> bytes:
    """The identity of a full block: its tokens and the hash of the block before it (so its whole prefix)."""
    return hashlib.blake2b(previous + array("q", tokens).tobytes(), digest_size=16).digest()


class PagedBlocks:
    """Blocks from anywhere in the pool, one at a time, with hash-based prefix caching (as vLLM, nano-vllm).

    A full block whose KV is computed is remembered by its hash. A later sequence with the same
    leading tokens shares it (reference counted) instead of recomputing it. A block nobody holds
    is free but keeps its content until it is handed out again, least recently freed first.
    """

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True) -> None:
        self.block_size = block_size
        self.total = num_blocks
        self.prefix_caching = prefix_caching
        self._refs = [0] * num_blocks
        self._hash: list[bytes | None] = [None] * num_blocks  # the content a block holds, if cached
        self._cached: dict[bytes, int] = {}  # hash -> block
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # oldest first

    @property
    def num_free(self) -> int:
        return len(self._free)

    def cached_prefix(self, seq: Sequence) -> list[int]:
        if not self.prefix_caching:
            return []
        # The last token is always computed: its logits give the first new token.
        full = (seq.num_tokens - 1) // self.block_size
        hashes = self._hashes(seq, full)
        prefix = []
        for h in hashes:
            block = self._cached.get(h)
            if block is None:
                break
            prefix.append(block)
        return prefix

    def can_allocate(self, seq: Sequence, num_tokens: int, prefix: list[int]) -> bool:
        held = seq.block_table or prefix
        new = max(0, -(-num_tokens // self.block_size) - len(held))
        revived = 0 if seq.block_table else sum(1 for b in prefix if self._refs[b] == 0)  # cached, but free
        return new + revived <= len(self._free)

    def allocate(self, seq: Sequence, num_tokens: int, prefix: list[int]) -> None:
        if not seq.block_table:
            for block in prefix:
                self._take(block)
            seq.block_table = list(prefix)
        for _ in range(-(-num_tokens // self.block_size) - len(seq.block_table)):
            block, _ = self._free.popitem(last=False)  # the least recently freed: evict what it cached
            evicted = self._hash[block]
            if evicted is not None:
                del self._cached[evicted]
                self._hash[block] = None
            self._refs[block] = 1
            seq.block_table.append(block)

    def cache_blocks(self, seq: Sequence, start: int, end: int) -> None:
        if not self.prefix_caching:
            return
        first, last = start // self.block_size, end // self.block_size  # blocks filled in this range
        if first == last:  # most decode steps
            return
        hashes = self._hashes(seq, last)
        for i in range(first, last):
            block = seq.block_table[i]
            # Another sequence may have computed the same block meanwhile: keep the first one cached.
            if self._hash[block] is None and hashes[i] not in self._cached:
                self._cached[hashes[i]] = block
                self._hash[block] = hashes[i]

    def free(self, seq: Sequence) -> None:
        # The tail first, so that a prefix's first blocks, shared most widely, are evicted last.
        for block in reversed(seq.block_table):
            if self._refs[block] <= 0:
                raise RuntimeError(f"KV block {block} freed twice")
            self._refs[block] -= 1
            if self._refs[block] == 0:
                if self._hash[block] is None:
                    self._free[block] = None
                    self._free.move_to_end(block, last=False)  # nothing cached in it: hand it out first
                else:
                    self._free[block] = None
        seq.block_table = []

    def reset_prefix_cache(self) -> None:
        # Held blocks keep their KV for their own sequences; they are just no longer shared.
        self._cached.clear()
        self._hash = [None] * self.total

    def _take(self, block: int) -> None:
        if self._refs[block] == 0:
            del self._free[block]
        self._refs[block] += 1

    def _hashes(self, seq: Sequence, num_blocks: int) -> list[bytes]:
        """The hashes of seq's first num_blocks full blocks (computed once per sequence)."""
        size = self.block_size
        while len(seq.block_hashes) < num_blocks:
            i = len(seq.block_hashes)
            previous = seq.block_hashes[-1] if seq.block_hashes else b""
            seq.block_hashes.append(block_hash(previous, seq.token_ids(i * size, (i + 1) * size)))
        return seq.block_hashes[:num_blocks]


class ContiguousBlocks:
    """One slab of consecutive blocks (for max_model_len tokens) per sequence, reserved at its first allocation.

    The lowest free slab goes first, so a batch admitted together owns neighbouring slabs, which
    attention reads without a copy. No prefix caching: a slab is one sequence's alone.
    """

    def __init__(self, num_blocks: int, block_size: int, blocks_per_slab: int) -> None:
        self.block_size = block_size
        self.blocks_per_slab = blocks_per_slab
        self.total = num_blocks // blocks_per_slab * blocks_per_slab
        self._free = list(range(self.total // blocks_per_slab))  # free slabs, a min-heap

    @property
    def num_free(self) -> int:
        return len(self._free) * self.blocks_per_slab

    def cached_prefix(self, seq: Sequence) -> list[int]:
        return []

    def can_allocate(self, seq: Sequence, num_tokens: int, prefix: list[int]) -> bool:
        return bool(seq.block_table) or bool(self._free)

    def allocate(self, seq: Sequence, num_tokens: int, prefix: list[int]) -> None:
        if not seq.block_table:
            first = heapq.heappop(self._free) * self.blocks_per_slab
            seq.block_table = list(range(first, first + self.blocks_per_slab))

    def cache_blocks(self, seq: Sequence, start: int, end: int) -> None:
        pass

    def reset_prefix_cache(self) -> None:
        pass

    def free(self, seq: Sequence) -> None:
        if seq.block_table:
            heapq.heappush(self._free, seq.block_table[0] // self.blocks_per_slab)
        seq.block_table = []
