"""Reads GPU counters through NVML (`pynvml`, from the nvidia-ml-py package).

Every query is guarded on its own: a counter a GPU does not support is dropped for that GPU
after its first failure (no retry cost on every tick); any other error loses only that value.
Rates (PCIe, NVLink) come from cumulative counters, so the first reading after `open()` has
none. PCIe uses GPM on Hopper+ and the byte-counter fields elsewhere, never the legacy
nvmlDeviceGetPcieThroughput: it blocks for 20 ms per call, which would stall a gevent process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from loadlab.collect.gpu.reading import GpuReading

UINT_MAX = 0xFFFFFFFF  # NVLink field scope meaning "summed over all links"
GPM_MIN_INTERVAL = 0.1  # seconds; GPM metrics over shorter windows are noise, so wait longer

# Errors meaning "this GPU/driver will never answer this query": stop asking.
_PERMANENT = (
    "NVMLError_NotSupported",
    "NVMLError_FunctionNotFound",
    "NVMLError_NoPermission",
    "NVMLError_InvalidArgument",
)


@dataclass
class _Gpu:
    index: int
    handle: Any
    uuid: str
    unsupported: set[str] = field(default_factory=set)
    gpm_samples: list[Any] = field(default_factory=list)  # [previous, current] when GPM works
    gpm_since: float = 0.0  # monotonic time of the previous GPM sample
    counters: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (time s, value)


class NvmlBackend:
    """All GPUs NVML can see. `open()` raises pynvml's error when NVML is missing."""

    name = "nvml"

    def __init__(self, nvml: Any = None) -> None:
        """`nvml`: the pynvml module (default); tests without a GPU pass a stand-in."""
        self._module = nvml
        self._gpus: list[_Gpu] = []
        self._nvml: Any = None  # set while open
        self.errors = 0  # transient per-query failures (the collector reports the count)

    def open(self) -> None:
        """Initialise NVML and find the GPUs; does nothing when already open."""
        if self._nvml is not None:
            return
        if self._module is None:
            import pynvml  # the module imports fine without a driver; nvmlInit() is what fails

            self._module = pynvml
        nv = self._module
        nv.nvmlInit()
        self._nvml = nv
        for i in range(nv.nvmlDeviceGetCount()):
            handle = nv.nvmlDeviceGetHandleByIndex(i)
            gpu = _Gpu(index=i, handle=handle, uuid=self._text(nv.nvmlDeviceGetUUID(handle)))
            self._open_gpm(gpu)
            self._gpus.append(gpu)

    def close(self) -> None:
        if self._nvml is None:
            return
        for gpu in self._gpus:
            for s in gpu.gpm_samples:
                self._guard(gpu, "gpm_free", partial(self._nvml.nvmlGpmSampleFree, s))
        self._gpus = []
        try:
            self._nvml.nvmlShutdown()
        finally:
            self._nvml = None

    def read(self) -> list[GpuReading]:
        return [self._read_gpu(gpu) for gpu in self._gpus]

    # -- one GPU ----------------------------------------------------------------------------
    def _read_gpu(self, gpu: _Gpu) -> GpuReading:
        nv, h = self._nvml, gpu.handle
        r = GpuReading(index=gpu.index, uuid=gpu.uuid)
        rates = self._guard(gpu, "utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
        if rates is not None:
            r.util, r.mem_util = rates.gpu / 100.0, rates.memory / 100.0
        mem = self._guard(gpu, "memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            r.mem_used, r.mem_total = float(mem.used), float(mem.total)
        mw = self._guard(gpu, "power", lambda: nv.nvmlDeviceGetPowerUsage(h))
        r.power = None if mw is None else mw / 1000.0
        r.sm_clock = self._guard(gpu, "sm_clock", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        r.clock_events = self._guard(gpu, "clock_events", lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h))
        if r.clock_events is None:  # drivers older than the "event" rename
            r.clock_events = self._guard(
                gpu, "throttle_reasons", lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            )
        r.nvlink_tx, r.nvlink_rx = self._field_rates(
            gpu,
            "nvlink",
            [
                (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, UINT_MAX),
                (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, UINT_MAX),
            ],
            scale=1024.0,
        )
        gpm = self._read_gpm(gpu)
        if gpm:
            r.sm_active, r.sm_occupancy = gpm.get("sm_active"), gpm.get("sm_occupancy")
            r.tensor_active, r.dram_active = gpm.get("tensor_active"), gpm.get("dram_active")
            r.pcie_tx, r.pcie_rx = gpm.get("pcie_tx"), gpm.get("pcie_rx")
        if r.pcie_tx is None and not gpu.gpm_samples:
            r.pcie_tx, r.pcie_rx = self._field_rates(
                gpu, "pcie", [nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES], scale=1.0
            )
        return r

    def _guard(self, gpu: _Gpu, query: str, fn: Callable[[], Any]) -> Any:
        """fn() or None; a permanent 'not supported' disables the query for this GPU."""
        if query in gpu.unsupported:
            return None
        try:
            return fn()
        except self._nvml.NVMLError as e:
            if type(e).__name__ in _PERMANENT:
                gpu.unsupported.add(query)
            else:
                self.errors += 1
            return None

    def _field_rates(self, gpu: _Gpu, query: str, field_ids: list, scale: float) -> tuple[float | None, ...]:
        """Rates (per second, x scale) of cumulative counter fields, from the previous reading."""
        values = self._guard(gpu, query, lambda: self._nvml.nvmlDeviceGetFieldValues(gpu.handle, field_ids))
        if values is None:
            return (None,) * len(field_ids)
        if all(v.nvmlReturn != 0 for v in values):
            gpu.unsupported.add(query)
            return (None,) * len(field_ids)
        rates: list[float | None] = []
        for i, v in enumerate(values):
            key = f"{query}{i}"
            if v.nvmlReturn != 0:
                rates.append(None)
                continue
            now, count = v.timestamp / 1e6, float(self._field_value(v))
            prev = gpu.counters.get(key)
            gpu.counters[key] = (now, count)
            if prev is not None and now > prev[0] and count >= prev[1]:
                rates.append((count - prev[1]) * scale / (now - prev[0]))
            else:  # the first reading, or a reset/wrap: skip one
                rates.append(None)
        return tuple(rates)

    def _field_value(self, v: Any) -> float:
        nv = self._nvml
        by_type = {
            nv.NVML_VALUE_TYPE_DOUBLE: "dVal",
            nv.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
            nv.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
            nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
            nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
            nv.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        }
        return getattr(v.value, by_type.get(v.valueType, "ullVal"))

    # -- GPM (Hopper and newer) ---------------------------------------------------------------
    _GPM_METRICS = {  # our name -> (NVML metric id, scale to our unit)
        "sm_active": (2, 0.01),  # NVML_GPM_METRIC_SM_UTIL, percent
        "sm_occupancy": (3, 0.01),  # NVML_GPM_METRIC_SM_OCCUPANCY, percent
        "tensor_active": (5, 0.01),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL, percent
        "dram_active": (10, 0.01),  # NVML_GPM_METRIC_DRAM_BW_UTIL, percent
        "pcie_tx": (20, 1024.0 * 1024.0),  # NVML_GPM_METRIC_PCIE_TX_PER_SEC, MiB/s
        "pcie_rx": (21, 1024.0 * 1024.0),  # NVML_GPM_METRIC_PCIE_RX_PER_SEC, MiB/s
    }

    def _open_gpm(self, gpu: _Gpu) -> None:
        nv = self._nvml
        support = self._guard(gpu, "gpm", lambda: nv.nvmlGpmQueryDeviceSupport(gpu.handle))
        if support is None or not support.isSupportedDevice:
            return
        samples = [self._guard(gpu, "gpm", nv.nvmlGpmSampleAlloc) for _ in range(2)]
        if None in samples or self._guard(gpu, "gpm", lambda: nv.nvmlGpmSampleGet(gpu.handle, samples[0])) is None:
            for s in samples:
                if s is not None:
                    self._guard(gpu, "gpm_free", partial(nv.nvmlGpmSampleFree, s))
            return
        gpu.gpm_samples, gpu.gpm_since = samples, time.monotonic()

    def _read_gpm(self, gpu: _Gpu) -> dict[str, float]:
        """GPM metrics since the previous GPM sample; {} when unavailable or too soon (the first
        tick right after open, a last tick right after the previous one)."""
        if not gpu.gpm_samples or "gpm" in gpu.unsupported:
            return {}
        if time.monotonic() - gpu.gpm_since < GPM_MIN_INTERVAL:
            return {}
        nv = self._nvml
        prev, cur = gpu.gpm_samples
        if self._guard(gpu, "gpm_sample", lambda: nv.nvmlGpmSampleGet(gpu.handle, cur)) is None:
            return {}
        gpu.gpm_since = time.monotonic()
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self._GPM_METRICS)
        request.sample1, request.sample2 = prev, cur
        for i, (metric_id, _) in enumerate(self._GPM_METRICS.values()):
            request.metrics[i].metricId = metric_id
        gpu.gpm_samples = [cur, prev]  # the current sample is the next interval's start
        if self._guard(gpu, "gpm_metrics", lambda: nv.nvmlGpmMetricsGet(request)) is None:
            return {}
        out: dict[str, float] = {}
        for i, (name, (_, scale)) in enumerate(self._GPM_METRICS.items()):
            metric = request.metrics[i]
            if metric.nvmlReturn == 0:
                out[name] = metric.value * scale
        return out

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)
