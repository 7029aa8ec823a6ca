"""Tensor-parallel state of one process: its rank, the group size and the time spent in collectives."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class TensorParallel:
    """Rank r of N; `all_reduce` sums across ranks and accumulates its wall time."""

    rank: int = 0
    world_size: int = 1
    collective_seconds: float = 0.0  # since the last `take_collective_seconds()`

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum x over all ranks in place (no-op when alone)."""
        if self.world_size == 1:
            return x
        # Synchronise so the timer measures the collective, not queued kernels (CUDA is async).
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
        start = time.perf_counter()
        dist.all_reduce(x)
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
        self.collective_seconds += time.perf_counter() - start
        return x

    def take_collective_seconds(self) -> float:
        """Collective time since the last call, and reset the counter."""
        spent, self.collective_seconds = self.collective_seconds, 0.0
        return spent

    def shard(self, size: int, what: str) -> int:
        """This rank's share of `size` (heads, channels); it must divide evenly."""
        if size % self.world_size:
            raise ValueError(f"tensor_parallel={self.world_size} does not divide {what}={size}")
        return size // self.world_size
