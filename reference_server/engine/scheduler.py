"""Decides which tokens of which sequences run in the next step (vLLM V1 style).

There are no prefill/decode phases: each sequence has `num_computed` tokens in the KV cache and the
step computes the next ones, under a shared token budget. Running sequences go first (a decode token
or their next prompt chunk), then waiting ones while budget, `max_num_seqs` and KV blocks allow.
When blocks run out, the newest running sequence is preempted by recompute: its blocks are freed and
it goes back to the front of the waiting queue, keeping the tokens it generated. A sequence admitted
with a cached prefix starts computing after it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from reference_server.config import EngineConfig
from reference_server.engine.block_manager import BlockManager
from reference_server.engine.sequence import Sequence, Status


class ScheduledChunk:
    """`num_tokens` tokens of seq, from seq.num_computed on, run in this step.

    `completes`: whether the chunk reaches the sequence's last token, so the step samples a new
    one; computed here unless the scheduler knows it (a step makes one chunk per sequence, and the
    sequence does not change between scheduling and running the step)."""

    __slots__ = ("seq", "num_tokens", "completes")

    def __init__(self, seq: Sequence, num_tokens: int, completes: bool | None = None) -> None:
        self.seq = seq
        self.num_tokens = num_tokens
        self.completes = seq.num_computed + num_tokens == seq.num_tokens if completes is None else completes


@dataclass
class SchedulerStats:
    """What the scheduler counted since the last `take_stats()`."""

    preemptions: int = 0
    prefix_queries: int = 0  # tokens of the sequences admitted
    prefix_hits: int = 0  # of which their KV came from the prefix cache


class Scheduler:
    """Waiting queue, running list and the per-step scheduling decision."""

    def __init__(self, config: EngineConfig, blocks: BlockManager) -> None:
        self.config = config
        self.blocks = blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = SchedulerStats()

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take seq out (finished or aborted) and free its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.free(seq)
        seq.status = Status.FINISHED

    def take_stats(self) -> SchedulerStats:
        stats, self.stats = self.stats, SchedulerStats()
        return stats

    def _chunk_size(self, seq: Sequence, budget: int, start: int) -> int:
        n = min(seq.num_tokens - start, budget)
        cap = self.config.long_prefill_token_threshold
        return min(n, cap) if cap > 0 else n

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.blocks.free(seq)
        seq.num_computed = 0
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        self.stats.preemptions += 1

    def schedule(self, now: float) -> list[ScheduledChunk]:
        """The chunks of the next step (empty: nothing to do yet)."""
        budget = self.config.max_num_batched_tokens
        block_size = self.blocks.block_size
        chunks: list[ScheduledChunk] = []
        preempted = False
        for seq in list(self.running):
            if seq.status is not Status.RUNNING:  # preempted earlier in this loop
                continue
            end = seq.num_computed + 1
            completes = end == seq.num_tokens
            if completes and budget > 0:  # a decode (the hot path): one token, whatever the cap
                n = 1
            else:
                n = self._chunk_size(seq, budget, seq.num_computed)
                if n <= 0:
                    continue
                end = seq.num_computed + n
                completes = end == seq.num_tokens
            # Blocks are needed only past the end of those it holds (the block managers' contract).
            if len(seq.block_table) * block_size < end:
                # Free blocks by preempting from the back (the newest) until this sequence fits.
                while not self.blocks.can_allocate(seq, end, []):
                    victim = self.running[-1]
                    self._preempt(victim)
                    preempted = True
                    if victim is seq:
                        break
                if seq.status is not Status.RUNNING:
                    continue
                self.blocks.allocate(seq, end, [])
            chunks.append(ScheduledChunk(seq, n, completes))
            budget -= n
        if not preempted and self._may_admit(now):
            self._admit(now, budget, chunks)
        return chunks

    def _may_admit(self, now: float) -> bool:
        """Continuous batching admits every step; static batching only a full (or timed-out) new batch."""
        if not self.waiting:
            return False
        if self.config.batching == "continuous":
            return True
        if self.running:
            return False
        full = len(self.waiting) >= self.config.max_num_seqs
        return full or now - self.waiting[0].arrival >= self.config.static_batch_timeout

    def _admit(self, now: float, budget: int, chunks: list[ScheduledChunk]) -> None:
        """Move waiting sequences to running (oldest first) while seats, budget and blocks allow."""
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            prefix = self.blocks.cached_prefix(seq)
            cached = len(prefix) * self.blocks.block_size
            n = self._chunk_size(seq, budget, cached)
            static = self.config.batching == "static"
            if n <= 0 and not static:
                break
            if n > 0 and not self.blocks.can_allocate(seq, cached + n, prefix):
                break
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)
            if seq.first_scheduled is None:
                seq.first_scheduled = now
                seq.cached_tokens = cached  # (a preempted sequence's re-admission is not the client's hit)
            if n > 0:  # a static batch member without budget left starts its prompt next step
                self.blocks.allocate(seq, cached + n, prefix)
                seq.num_computed = cached
                self.stats.prefix_queries += seq.num_tokens
                self.stats.prefix_hits += cached
                chunks.append(ScheduledChunk(seq, n))
                budget -= n
