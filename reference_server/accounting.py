"""The work of one engine step from the model's shape: FLOPs and HBM bytes per GPU.

One module serves both the GPU twin's timing model and the `vllm:estimated_*_per_gpu` counters
that the real engine and the twin export (vLLM's `--enable-mfu-metrics`). Counted as a roofline
counts them: every weight read once per step, the KV of each sequence's context read once, the
new tokens' KV written; matmul FLOPs (2 per multiply-add) for the projections, the MLP and the
LM head (sampled rows only), and attention over each query's context. Activations' traffic,
norms and RoPE are left out (a few percent of a step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from reference_server.shapes import ModelShape

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class ChunkWork(NamedTuple):
    """One scheduled chunk: `tokens` new tokens after `start` cached ones; `sampled` when it yields a token.

    A tuple rather than a frozen dataclass: a step makes one per sequence, cheaply."""

    tokens: int
    start: int
    sampled: bool


@dataclass(frozen=True)
class StepWork:
    """What one step asks of each GPU."""

    flops: float
    read_bytes: float
    write_bytes: float
    tokens: int  # tokens computed in the step (the all-reduce message size follows them)
    sequences: int


@dataclass(frozen=True)
class ModelCost:
    """A model shape's per-GPU constants under tensor parallelism `tp` and a dtype of `dtype_bytes`."""

    shape: ModelShape
    tp: int = 1
    dtype_bytes: int = 2

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (all ranks together)."""
        s = self.shape
        q_out, kv_out = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        attention = s.hidden_size * (q_out + 2 * kv_out) + q_out * s.hidden_size
        bias = q_out + 2 * kv_out if s.qkv_bias else 0
        return attention + bias + 3 * s.hidden_size * s.intermediate_size + 2 * s.hidden_size

    @property
    def total_params(self) -> int:
        """Every parameter of the model: layers, embeddings (and an untied LM head), final norm."""
        s = self.shape
        tables = s.vocab_size * s.hidden_size * (1 if s.tie_embeddings else 2)
        return s.num_layers * self.layer_params + tables + s.hidden_size

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Weights one GPU holds (all sharded over tp, as vLLM shards even the vocabulary)."""
        return self.total_params * self.dtype_bytes / self.tp

    @property
    def read_weight_bytes_per_gpu(self) -> float:
        """Weights one GPU reads per step: layers and LM head (the embedding table is only indexed)."""
        s = self.shape
        return (s.num_layers * self.layer_params + s.vocab_size * s.hidden_size) * self.dtype_bytes / self.tp

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes one token occupies on one GPU (KV heads are replicated when tp exceeds them)."""
        s = self.shape
        heads = max(1, s.num_kv_heads // self.tp)
        return 2 * s.num_layers * heads * s.head_dim * self.dtype_bytes

    def step(self, chunks: list[ChunkWork]) -> StepWork:
        """The per-GPU work of one step made of these chunks."""
        s = self.shape
        tokens = sampled = keys = context = 0
        for n, start, sampling in chunks:  # one pass: a step has a chunk per running sequence
            tokens += n
            sampled += sampling
            # Each query attends to its cached context and to the new tokens up to itself (causal).
            keys += n * start + n * (n + 1) // 2
            context += start
        linear = s.num_layers * (self.layer_params - 2 * s.hidden_size)
        attention = 4 * s.num_layers * s.num_heads * s.head_dim * keys
        flops = (2 * linear * tokens + 2 * s.vocab_size * s.hidden_size * sampled + attention) / self.tp
        read = self.read_weight_bytes_per_gpu + context * self.kv_bytes_per_token
        return StepWork(flops, read, tokens * self.kv_bytes_per_token, tokens, len(chunks))
