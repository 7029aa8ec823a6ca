"""Configuration of the reference server: which model shape, engine limits, A/B modes."""

from __future__ import annotations

import os
from dataclasses import dataclass

from reference_server.shapes import PRESETS
from reference_server.twin.spec import TwinSpec, parse_twin

# The values each string setting of EngineConfig accepts: the server's flag choices and the engine's
# validation both read them.
CHOICES: dict[str, tuple[str, ...]] = {
    "device": ("cpu", "cuda"),
    "dtype": ("float32", "bfloat16", "float16"),
    "batching": ("continuous", "static"),
    "kv": ("paged", "contiguous"),
    "output_text": ("ascii", "utf8"),
}


@dataclass
class EngineConfig:
    """Everything the engine needs; `loadlab serve` / `python -m reference_server` flags map 1:1."""

    preset: str = "tiny"  # a key of reference_server.shapes.PRESETS
    weights: str = ""  # local safetensors file with HF tensor names ("" = seeded random)
    device: str = "cpu"  # cpu | cuda
    dtype: str = "float32"  # float32 | bfloat16 | float16
    seed: int = 0
    max_model_len: int = 0  # 0 = the preset's max_position
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    long_prefill_token_threshold: int = 0  # 0 = no cap on one prompt's share of a step
    block_size: int = 16
    num_kv_blocks: int = 0  # 0 = derive from kv_memory_gb
    kv_memory_gb: float = 0.25
    batching: str = "continuous"  # continuous | static
    static_batch_timeout: float = 0.05  # static batching: wait this long to fill a batch
    kv: str = "paged"  # paged | contiguous
    tensor_parallel: int = 1
    cpu_threads: int = 0  # torch threads per rank on CPU; 0 = all cores but one, split over ranks
    max_waiting: int = 1024  # waiting-queue limit; beyond it the API answers 429
    prefix_caching: bool = True  # reuse the KV blocks of prompt prefixes seen before (paged KV only)
    model_name: str = "loadlab-reference"
    twin: str = ""  # GPU:MODEL[:tpN]: keep time like that GPU instead of running the model
    gpu_memory_utilization: float = 0.9  # twin: share of the simulated GPU's memory the engine takes
    output_text: str = "ascii"  # ascii | utf8: what the sampler may draw (engine/sampler.py)

    @property
    def twin_spec(self) -> TwinSpec:
        """The parsed --twin (ValueError when it is malformed)."""
        return parse_twin(self.twin)

    @property
    def model_preset(self) -> str:
        """The shape served: the twin's model, else --preset."""
        return self.twin_spec.model if self.twin else self.preset

    def validate(self) -> None:
        """Refuse a bad configuration with one clear ValueError before anything is loaded."""
        # torch is imported here, not at the top: the server's --help reads this module and must
        # stay fast.
        import torch

        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose from {', '.join(PRESETS)}")
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "tensor_parallel", "max_waiting"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in (
            "max_model_len",
            "long_prefill_token_threshold",
            "num_kv_blocks",
            "kv_memory_gb",
            "static_batch_timeout",
            "cpu_threads",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, not {getattr(self, name)}")
        if self.twin:
            self._validate_twin()
            return
        if self.weights and not os.path.isfile(self.weights):
            raise ValueError(f"weights file {self.weights!r} does not exist")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda: PyTorch sees no CUDA GPU here")
        if self.device == "cuda" and self.tensor_parallel > torch.cuda.device_count():
            raise ValueError(
                f"tensor_parallel={self.tensor_parallel} needs that many CUDA devices; "
                f"{torch.cuda.device_count()} found"
            )

    def _validate_twin(self) -> None:
        """The twin runs no model: no weights, no device, its GPUs come with --twin."""
        parse_twin(self.twin)  # raises the ValueError that names what is wrong
        if self.tensor_parallel != 1:
            raise ValueError("with --twin, give the number of GPUs in it (GPU:MODEL:tpN), not --tensor-parallel")
        if self.weights:
            raise ValueError("--twin runs no model: --weights does not apply")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], not {self.gpu_memory_utilization}")
