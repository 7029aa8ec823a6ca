"""The twin's clock: how long a step's work takes on the target GPUs, and how much KV fits there.

Roofline: a step takes max(bytes / achievable bandwidth, FLOPs / achievable tensor throughput),
plus the per-step overhead (scheduling, sampling, kernel launches) and, with tp > 1, two all-reduces
per layer (latency + ring transfer). The achievable fractions and overheads are calibrated against
published vLLM measurements (docs/twin.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_server.accounting import ModelCost, StepWork
from reference_server.shapes import PRESETS
from reference_server.twin.hardware import GPUS, Gpu
from reference_server.twin.spec import TwinSpec

BANDWIDTH_FRACTION = 0.75  # of HBM bandwidth, decode GEMV and paged-attention kernels
COMPUTE_FRACTION = 0.75  # of dense BF16 tensor throughput, prefill GEMMs
LINK_FRACTION = 0.8  # of one-direction link bandwidth, a ring all-reduce's bus bandwidth
STEP_OVERHEAD = 0.5e-3  # seconds per step: scheduling, sampling, launches (vLLM V1 with CUDA graphs)
SEQ_OVERHEAD = 5e-6  # seconds per sequence in the step: its bookkeeping, sampling, detokenising
RUNTIME_RESERVE = 1.5 * 2**30  # bytes per GPU outside PyTorch tensors: CUDA context, graphs, NCCL buffers


@dataclass(frozen=True)
class StepTime:
    """One step's modelled seconds, by part; total = max(memory, compute) + collective + overhead."""

    memory: float
    compute: float
    collective: float
    overhead: float

    @property
    def kernels(self) -> float:
        """Time the GPU runs kernels (the overhead is host time between them)."""
        return max(self.memory, self.compute) + self.collective

    @property
    def total(self) -> float:
        return self.kernels + self.overhead


class TimingModel:
    """Step times and KV capacity of one model on `tp` GPUs of one kind."""

    def __init__(self, spec: TwinSpec) -> None:
        self.spec = spec
        self.gpu: Gpu = GPUS[spec.gpu]
        shape = PRESETS[spec.model]
        if shape.num_heads % spec.tp or (shape.num_kv_heads % spec.tp and spec.tp % shape.num_kv_heads):
            raise ValueError(
                f"--twin {spec}: {shape.num_heads} attention heads and {shape.num_kv_heads} KV heads "
                f"cannot be split over {spec.tp} GPUs"
            )
        self.cost = ModelCost(shape, spec.tp, dtype_bytes=2)

    def step_time(self, work: StepWork) -> StepTime:
        """Modelled seconds of a step with this work."""
        gpu, tp = self.gpu, self.spec.tp
        memory = (work.read_bytes + work.write_bytes) / (gpu.hbm_bandwidth * BANDWIDTH_FRACTION)
        compute = work.flops / (gpu.bf16_flops * COMPUTE_FRACTION)
        collective = 0.0
        if tp > 1:
            message = work.tokens * self.cost.shape.hidden_size * self.cost.dtype_bytes
            ring = 2 * (tp - 1) / tp * message / (gpu.link_bandwidth * LINK_FRACTION)
            collective = 2 * self.cost.shape.num_layers * (gpu.link_latency + ring)
        return StepTime(memory, compute, collective, STEP_OVERHEAD + SEQ_OVERHEAD * work.sequences)

    def collective_bytes(self, work: StepWork) -> float:
        """Bytes one GPU sends over its links in the step's all-reduces (ring: 2(tp-1)/tp of each message)."""
        tp = self.spec.tp
        if tp == 1:
            return 0.0
        message = work.tokens * self.cost.shape.hidden_size * self.cost.dtype_bytes
        return 2 * self.cost.shape.num_layers * 2 * (tp - 1) / tp * message

    def activation_bytes(self, max_num_batched_tokens: int, max_num_seqs: int) -> float:
        """Peak activation memory per GPU of the largest step (as vLLM's profiling run measures it)."""
        s = self.cost.shape
        per_token = (2 * s.hidden_size + 2 * s.intermediate_size / self.spec.tp) * self.cost.dtype_bytes
        logits = max_num_seqs * s.vocab_size / self.spec.tp * 4  # float32 logits of the sampled rows
        return max_num_batched_tokens * per_token + logits + RUNTIME_RESERVE

    def kv_capacity_tokens(self, memory_utilization: float, max_num_batched_tokens: int, max_num_seqs: int) -> int:
        """Tokens of KV that fit: (memory x utilization - weights - activations) / KV bytes per token.

        Raises ValueError when the weights and activations leave no room.
        """
        budget = self.gpu.memory * memory_utilization
        weights = self.cost.weight_bytes_per_gpu
        free = budget - weights - self.activation_bytes(max_num_batched_tokens, max_num_seqs)
        if free <= 0:
            raise ValueError(
                f"--twin {self.spec}: {weights / 1e9:.1f} GB of weights per GPU and the activations do "
                f"not fit in {budget / 1e9:.1f} GB ({memory_utilization:g} of {self.gpu.name}); "
                f"use more GPUs (tpN) or a larger --gpu-memory-utilization"
            )
        return int(free // self.cost.kv_bytes_per_token)
