"""`GpuCollector`: samples every GPU at a fixed interval (default 250 ms) from a backend."""

from __future__ import annotations

from loadlab.clock import now
from loadlab.collect.gpu.backend import GpuBackend
from loadlab.collect.gpu.nvml import NvmlBackend
from loadlab.collect.poller import PollingCollector
from loadlab.store.schema import Coverage, Sample


class GpuCollector(PollingCollector):
    """Source "gpu": `gpu_*` signals per GPU (labels gpu, uuid); see docs/signals.md.

    Without NVML (no driver, no GPU) it logs "GPU signals unavailable" once, records the
    reason in its coverage (enabled=False) and takes no samples; the run goes on.
    """

    source = "gpu"

    def __init__(self, interval: float = 0.25, backend: GpuBackend | None = None) -> None:
        super().__init__(interval)
        self.backend: GpuBackend = backend if backend is not None else NvmlBackend()
        self.latest: list[Sample] = []  # the last tick's samples (the exporter serves these)

    def open(self) -> bool:
        try:
            self.backend.open()
        except Exception as e:  # NVMLError_LibraryNotFound, driver mismatch, no permission...
            self.disable(f"GPU signals unavailable ({self.backend.name}): {type(e).__name__}: {e}")
            return False
        return True

    def poll(self) -> list[Sample]:
        readings = self.backend.read()
        t = now()
        self.latest = [s for r in readings for s in r.to_samples(t, self.source)]
        return self.latest

    def close(self) -> None:
        self.backend.close()

    def coverage(self) -> Coverage:
        cov = super().coverage()
        errors = getattr(self.backend, "errors", 0)
        if errors and not cov.error:
            cov.error = f"{errors} NVML queries failed"
        return cov
