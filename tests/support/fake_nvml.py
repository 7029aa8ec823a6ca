"""A stand-in for NVML where there is no GPU: pynvml's real constants, structs and error classes,
with canned device answers (used by the NVML backend's tests and bench/collector_cost.py)."""

import pynvml

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


class FakeNvml:
    """GPU 0: Hopper-like (GPM, NVLink). GPU 1: older (no GPM, no NVLink, no power reading,
    driver without the clock-events rename, PCIe byte counters instead)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.clock_us = 1_000_000  # field timestamps; tests move it forward
        self.counters = {138: 0, 139: 0, 197: 0, 198: 0}
        # Per call: NVLink TX +1 MiB, RX +2 MiB (counted in KiB); PCIe TX +5 MB, RX +10 MB (bytes).
        self.steps = {138: 1024, 139: 2048, 197: 5_000_000, 198: 10_000_000}

    def __getattr__(self, name):  # constants, structs, error classes
        return getattr(pynvml, name)

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-fake-{h}".encode()

    def nvmlDeviceGetUtilizationRates(self, h):
        return pynvml.c_nvmlUtilization_t(gpu=97, memory=64)

    def nvmlDeviceGetMemoryInfo(self, h):
        return pynvml.c_nvmlMemory_t(total=80 * 2**30, free=10 * 2**30, used=70 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h):
        self._count(f"power{h}")
        if h == 1:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        return 512_345

    def nvmlDeviceGetClockInfo(self, h, clock):
        assert clock == pynvml.NVML_CLOCK_SM
        return 1755

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        if h == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return 0x4 | 0x1

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return 0x40

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, fid in enumerate(field_ids):
            fid = fid[0] if isinstance(fid, tuple) else fid
            v = values[i]
            v.fieldId, v.timestamp, v.valueType = fid, self.clock_us, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            if h == 1 and fid in (138, 139):
                v.nvmlReturn = NOT_SUPPORTED
                continue
            self.counters[fid] += self.steps[fid]
            v.value.ullVal = self.counters[fid]
        return values

    def nvmlGpmQueryDeviceSupport(self, h):
        return pynvml.c_nvmlGpmSupport_t(isSupportedDevice=1 if h == 0 else 0)

    def nvmlGpmSampleAlloc(self):
        return pynvml.c_nvmlGpmSample_t()

    def nvmlGpmSampleFree(self, s):
        self._count("gpm_free")

    def nvmlGpmSampleGet(self, h, s):
        self._count("gpm_sample")
        return s

    def nvmlGpmMetricsGet(self, request):
        canned = {2: 61.0, 3: 23.0, 5: 18.0, 10: 74.0, 20: 50.0, 21: 100.0}  # percent, MiB/s
        for i in range(request.numMetrics):
            m = request.metrics[i]
            m.value, m.nvmlReturn = canned[m.metricId], 0
        return request
