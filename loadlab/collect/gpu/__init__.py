"""GPU sampling: NVML (and GPM on Hopper+) or a recorded replay, as `gpu_*` samples."""

from loadlab.collect.gpu.backend import GpuBackend, ReplayBackend
from loadlab.collect.gpu.collector import GpuCollector
from loadlab.collect.gpu.nvml import NvmlBackend
from loadlab.collect.gpu.reading import GpuReading, decode_clock_events, signal_names

__all__ = [
    "GpuBackend",
    "GpuCollector",
    "GpuReading",
    "NvmlBackend",
    "ReplayBackend",
    "decode_clock_events",
    "signal_names",
]
