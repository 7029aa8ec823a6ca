"""KV-cache block bookkeeping: a free list and one block table per sequence."""

from __future__ import annotations

import heapq
from collections import deque

from reference_server.engine.sequence import Sequence


class BlockManager:
    """Hands out KV blocks of `block_size` token slots.

    paged (blocks_per_slab == 0): a sequence gets blocks one at a time, as its tokens need them.
    contiguous (blocks_per_slab > 0): a sequence gets a whole slab of consecutive blocks for
    max_model_len tokens at its first allocation, whether it will use them or not. The lowest free
    slab goes first, so a batch admitted together owns neighbouring slabs (read without a copy).
    """

    def __init__(self, num_blocks: int, block_size: int, blocks_per_slab: int = 0) -> None:
        self.block_size = block_size
        self.blocks_per_slab = blocks_per_slab
        if blocks_per_slab:
            self.total = num_blocks // blocks_per_slab * blocks_per_slab
            self._free = list(range(self.total // blocks_per_slab))       # free slabs, a min-heap
        else:
            self.total = num_blocks
            self._free = deque(range(num_blocks))                          # free blocks

    @property
    def num_free(self) -> int:
        """Free blocks (in contiguous mode: blocks of free slabs)."""
        return len(self._free) * (self.blocks_per_slab or 1)

    def _blocks_short(self, seq: Sequence, num_tokens: int) -> int:
        return max(0, -(-num_tokens // self.block_size) - len(seq.block_table))

    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Whether seq can hold `num_tokens` tokens in total."""
        if self.blocks_per_slab:
            return bool(seq.block_table) or bool(self._free)
        return self._blocks_short(seq, num_tokens) <= len(self._free)

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        """Grow seq's block table to hold `num_tokens` tokens (caller checked can_allocate)."""
        if self.blocks_per_slab:
            if not seq.block_table:
                first = heapq.heappop(self._free) * self.blocks_per_slab
                seq.block_table = list(range(first, first + self.blocks_per_slab))
            return
        for _ in range(self._blocks_short(seq, num_tokens)):
            seq.block_table.append(self._free.popleft())

    def free(self, seq: Sequence) -> None:
        """Return all of seq's blocks to the pool."""
        if self.blocks_per_slab and seq.block_table:
            heapq.heappush(self._free, seq.block_table[0] // self.blocks_per_slab)
        elif not self.blocks_per_slab:
            self._free.extend(seq.block_table)
        seq.block_table = []
