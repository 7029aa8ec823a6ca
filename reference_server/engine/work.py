"""An analytic estimate of one engine step's work, exported as vLLM's `--enable-mfu-metrics`
counters (`vllm:estimated_flops_per_gpu`, `vllm:estimated_read_bytes_per_gpu`,
`vllm:estimated_write_bytes_per_gpu`), so that one analyzer rule serves both servers.

Per step, from the model's shape (a Llama-family decoder):
- FLOPs: 2 per weight per token of the linear layers, 2 x vocab x hidden per sampled token (the LM
  head), and attention 4 x layers x hidden per (query token, context token) pair, causal within
  a chunk;
- bytes read: every weight once, plus the K and V of each chunk's earlier context;
- bytes written: the K and V of the step's tokens.
Divided by the tensor-parallel ranks: each GPU holds and computes its share.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_server.config import ModelShape

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class StepWork:
    flops: float
    read_bytes: float
    write_bytes: float


def step_work(shape: ModelShape, dtype: str, tensor_parallel: int, chunks: list[tuple[int, int]],
              sampled: int) -> StepWork:
    """The work of one step per GPU; `chunks` holds (tokens in the chunk, context before it) of
    each sequence in the step, `sampled` the sequences that produced a token."""
    h, kv_width = shape.hidden_size, shape.num_kv_heads * shape.head_dim
    per_layer = 2 * h * h + 2 * h * kv_width + 3 * h * shape.intermediate_size   # q, o; k, v; gate, up, down
    weights = shape.num_layers * per_layer + shape.vocab_size * h
    tokens = sum(n for n, _ in chunks)
    pairs = sum(n * before + n * (n + 1) / 2 for n, before in chunks)   # causal attention pairs
    flops = 2 * tokens * shape.num_layers * per_layer + 2 * sampled * shape.vocab_size * h \
        + 4 * shape.num_layers * h * pairs
    b = DTYPE_BYTES[dtype]
    kv_per_token = 2 * shape.num_layers * kv_width * b
    read = weights * b + kv_per_token * sum(before for _, before in chunks)
    write = kv_per_token * tokens
    return StepWork(flops / tensor_parallel, read / tensor_parallel, write / tensor_parallel)
