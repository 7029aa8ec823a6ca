"""The model shapes the reference server serves, and their presets: plain numbers, no torch, so
the twin, the cost accounting and the server's --help read them without loading PyTorch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """The shape of a Llama-family decoder. Serving speed depends on shapes, not weight values."""

    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_position: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2 has biases on q/k/v projections

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


PRESETS: dict[str, ModelShape] = {
    # Byte-level toy models that run on a laptop CPU.
    "tiny": ModelShape(
        "tiny",
        vocab_size=512,
        hidden_size=256,
        intermediate_size=768,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        max_position=1024,
    ),
    "small": ModelShape(
        "small",
        vocab_size=512,
        hidden_size=512,
        intermediate_size=1536,
        num_layers=8,
        num_heads=8,
        num_kv_heads=4,
        max_position=2048,
    ),
    # Few layers of large matrices: a decode step's time is its 0.5 GB of weight reads, not the
    # engine's Python work per layer and per step (the lab's memory-bandwidth scenario on a CPU).
    "wide": ModelShape(
        "wide",
        vocab_size=512,
        hidden_size=2048,
        intermediate_size=8192,
        num_layers=2,
        num_heads=16,
        num_kv_heads=8,
        max_position=2048,
    ),
    # Real shapes (performance twins). Llama 3's RoPE frequency scaling is not modelled.
    "qwen2.5-0.5b": ModelShape(
        "qwen2.5-0.5b",
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_layers=24,
        num_heads=14,
        num_kv_heads=2,
        max_position=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_embeddings=True,
        qkv_bias=True,
    ),
    "llama-3-8b": ModelShape(
        "llama-3-8b",
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        max_position=8192,
        rope_theta=500000.0,
    ),
    "llama-3-70b": ModelShape(
        "llama-3-70b",
        vocab_size=128256,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        max_position=8192,
        rope_theta=500000.0,
    ),
    "qwen2.5-7b": ModelShape(
        "qwen2.5-7b",
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        max_position=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        qkv_bias=True,
    ),
}
