"""The twin's simulated GPUs as `loadlab gpu-exporter` publishes real ones: `loadlab_gpu_<x>{gpu, uuid}`.

Every modelled step is recorded; each scrape reports the last WINDOW seconds: kernel-time
utilisation, SM / tensor / DRAM activity, memory used (the pre-allocated pool, as on a real engine),
power and NVLink traffic, all from the timing model. loadlab's server-metrics collector maps these
names onto its `gpu_*` signals, so a run against the twin records GPU signals with nothing special.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from reference_server.accounting import StepWork
from reference_server.engine.clock import Clock
from reference_server.twin.timing import StepTime, TimingModel

WINDOW = 1.0  # seconds each scrape averages over
PREFIX = "loadlab_gpu_"


@dataclass(frozen=True)
class _Step:
    end: float
    time: StepTime
    work: StepWork
    link_bytes: float


class TwinGpuSignals(Collector):
    """A prometheus_client collector: one series per simulated GPU (all ranks do the same work)."""

    def __init__(self, model: TimingModel, memory_utilization: float, clock: Clock) -> None:
        self.model = model
        self.clock = clock
        self.memory_used = model.gpu.memory * memory_utilization
        self._steps: deque[_Step] = deque()
        self._lock = threading.Lock()
        self._started = clock.now()

    def record(self, end: float, step_time: StepTime, work: StepWork) -> None:
        """A step the twin ran, ending at `end` (on the engine's clock)."""
        with self._lock:
            self._steps.append(_Step(end, step_time, work, self.model.collective_bytes(work)))
            while self._steps and self._steps[0].end < end - WINDOW:
                self._steps.popleft()

    def readings(self, now: float) -> dict[str, float]:
        """The GPU signals over the last WINDOW seconds (ratios 0..1, bytes, watts, MHz, bytes/s)."""
        with self._lock:
            steps = [s for s in self._steps if s.end >= now - WINDOW]
        window = max(1e-3, min(WINDOW, now - self._started))
        gpu = self.model.gpu
        kernels = sum(s.time.kernels for s in steps) / window
        sm = sum(max(s.time.memory, s.time.compute) for s in steps) / window
        memory_busy = sum(s.time.memory for s in steps) / window
        dram = sum(s.work.read_bytes + s.work.write_bytes for s in steps) / (gpu.hbm_bandwidth * window)
        tensor = sum(s.work.flops for s in steps) / (gpu.bf16_flops * window)
        link = sum(s.link_bytes for s in steps) / window
        sm, dram, tensor = min(1.0, sm), min(1.0, dram), min(1.0, tensor)
        power = gpu.idle_power + (gpu.tdp - gpu.idle_power) * min(1.0, 0.45 * sm + 0.35 * dram + 0.2 * tensor)
        readings = {
            "util": min(1.0, kernels),
            "mem_util": min(1.0, memory_busy),
            "sm_active": sm,
            "tensor_active": tensor,
            "dram_active": dram,
            "mem_used": self.memory_used,
            "mem_total": gpu.memory,
            "power": power,
            "sm_clock": gpu.sm_clock,
        }
        if self.model.spec.tp > 1:
            readings |= {"nvlink_tx": link, "nvlink_rx": link}
        return readings

    def collect(self) -> Iterator[GaugeMetricFamily]:
        spec = self.model.spec
        for name, value in self.readings(self.clock.now()).items():
            # modelName as dcgm-exporter names it: the analyzer finds the GPU's data sheet by it.
            family = GaugeMetricFamily(
                PREFIX + name, f"simulated {spec.gpu} GPU signal {name}", labels=["gpu", "uuid", "modelName"]
            )
            for rank in range(spec.tp):
                family.add_metric([str(rank), f"GPU-twin-{spec.gpu}-{rank}", self.model.gpu.name], value)
            yield family
