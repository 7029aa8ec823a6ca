"""Configuration of the reference server: model shape, engine limits, A/B modes."""

from __future__ import annotations

from dataclasses import dataclass

# The values each string setting of EngineConfig accepts: the server's flag choices and the engine's
# validation both read them.
CHOICES: dict[str, tuple[str, ...]] = {
    "device": ("cpu", "cuda"),
    "dtype": ("float32", "bfloat16", "float16"),
    "batching": ("continuous", "static"),
    "kv": ("paged", "contiguous"),
}


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
    qkv_bias: bool = False               # Qwen2 has biases on q/k/v projections

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass
class EngineConfig:
    """Everything the engine needs; `loadlab serve` / `python -m reference_server` flags map 1:1."""

    preset: str = "tiny"                 # a key of reference_server.model.PRESETS
    weights: str = ""                    # local safetensors file with HF tensor names ("" = seeded random)
    device: str = "cpu"                  # cpu | cuda
    dtype: str = "float32"               # float32 | bfloat16 | float16
    seed: int = 0
    max_model_len: int = 0               # 0 = the preset's max_position
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    long_prefill_token_threshold: int = 0  # 0 = no cap on one prompt's share of a step
    block_size: int = 16
    num_kv_blocks: int = 0               # 0 = derive from kv_memory_gb
    kv_memory_gb: float = 0.25
    batching: str = "continuous"         # continuous | static
    static_batch_timeout: float = 0.05   # static batching: wait this long to fill a batch
    kv: str = "paged"                    # paged | contiguous
    tensor_parallel: int = 1
    cpu_threads: int = 0                 # torch threads per rank on CPU; 0 = all cores but one, split over ranks
    max_waiting: int = 1024              # waiting-queue limit; beyond it the API answers 429
    model_name: str = "loadlab-reference"
