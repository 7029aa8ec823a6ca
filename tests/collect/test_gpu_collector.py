"""GpuCollector: samples every GPU at its interval; without NVML it says so once and goes on."""

import itertools
import logging
import threading
import time
from pathlib import Path

import pynvml

from loadlab.collect.gpu import GpuCollector, NvmlBackend, ReplayBackend
from loadlab.store.schema import Sample
from tests.support.procs import python_json

TRACE = Path(__file__).parent / "data" / "gpu_h200_tp2_decode.jsonl"


class Sink:
    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.lock = threading.Lock()

    def __call__(self, batch: list[Sample]) -> None:
        with self.lock:
            self.samples.extend(batch)


def run_collector(collector: GpuCollector, seconds: float) -> list[Sample]:
    sink = Sink()
    collector.start(sink)
    time.sleep(seconds)
    collector.stop()
    return sink.samples


def test_replay_gives_every_signal_for_each_gpu_at_the_interval():
    samples = run_collector(GpuCollector(interval=0.05, backend=ReplayBackend(TRACE)), 0.6)
    ticks = sorted({s.time for s in samples})
    assert len(ticks) >= 4
    gaps = [b - a for a, b in itertools.pairwise(ticks[:-1])]  # the last tick is the one taken at stop()
    assert 0.02 < sorted(gaps)[len(gaps) // 2] < 0.2  # median gap near 0.05 s (noisy CI)
    first = [s for s in samples if s.time == ticks[0]]
    by_key = {(s.signal, s.labels["gpu"]): s for s in first}
    for gpu in ("0", "1"):
        for signal in (
            "gpu_util",
            "gpu_mem_util",
            "gpu_mem_used",
            "gpu_mem_total",
            "gpu_power",
            "gpu_sm_clock",
            "gpu_clock_events",
            "gpu_clock_power_cap",
            "gpu_clock_thermal",
            "gpu_clock_hw_slowdown",
            "gpu_pcie_tx",
            "gpu_pcie_rx",
            "gpu_nvlink_tx",
            "gpu_nvlink_rx",
            "gpu_sm_active",
            "gpu_sm_occupancy",
            "gpu_tensor_active",
            "gpu_dram_active",
        ):
            assert (signal, gpu) in by_key, (signal, gpu)
    # The first tick is the trace's first instant: idle GPUs, "GPU idle" clock event only.
    recorded = ReplayBackend(TRACE).frames[0]
    assert by_key[("gpu_power", "0")].value == recorded[0].power
    assert by_key[("gpu_mem_total", "1")].value == recorded[1].mem_total
    assert by_key[("gpu_util", "0")].value == 0.0
    assert by_key[("gpu_clock_events", "0")].value == 1.0
    assert by_key[("gpu_clock_power_cap", "0")].value == 0.0
    assert by_key[("gpu_util", "0")].labels["uuid"] == recorded[0].uuid
    ratios = [s.value for s in samples if s.signal in ("gpu_util", "gpu_sm_active", "gpu_dram_active")]
    assert all(0.0 <= v <= 1.0 for v in ratios)


def test_power_capped_instants_of_the_trace_come_out_flagged():
    backend = ReplayBackend(TRACE)
    capped = [i for i, frame in enumerate(backend.frames) if frame[0].clock_events == 0x4]
    collector = GpuCollector(interval=1.0, backend=backend)
    backend.open()
    flags = []
    for _ in range(len(backend.frames)):
        flags.append({s.signal: s.value for s in collector.poll() if s.labels["gpu"] == "0"}["gpu_clock_power_cap"])
    assert [i for i, f in enumerate(flags) if f == 1.0] == capped


def _nvml_missing_backend() -> NvmlBackend:
    """The real NvmlBackend where this machine has no driver (the case under test); on a GPU
    machine, pynvml's own 'library not found' error raised from init."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return NvmlBackend()
    pynvml.nvmlShutdown()

    class NoLibrary:
        def __getattr__(self, name):
            return getattr(pynvml, name)

        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    return NvmlBackend(nvml=NoLibrary())


def test_without_nvml_it_says_unavailable_once_records_coverage_and_does_not_raise(caplog):
    collector = GpuCollector(interval=0.05, backend=_nvml_missing_backend())
    with caplog.at_level(logging.WARNING):
        samples = run_collector(collector, 0.3)
        collector.stop()  # a second stop is harmless
    assert samples == []
    messages = [r.getMessage() for r in caplog.records if "GPU signals unavailable" in r.getMessage()]
    assert len(messages) == 1
    cov = collector.coverage()
    assert cov.source == "gpu" and cov.enabled is False
    assert "NVML" in cov.error and cov.ok_samples == 0


def test_default_collector_uses_nvml_every_250_ms():
    collector = GpuCollector()
    assert collector.interval == 0.25 and isinstance(collector.backend, NvmlBackend)


def test_works_inside_a_gevent_patched_process():
    # Like `loadlab run`: locust patches threading and time.sleep into greenlets.
    code = f"""
from gevent import monkey; monkey.patch_all()
import json, time
from loadlab.collect.gpu import GpuCollector, ReplayBackend
got = []
c = GpuCollector(interval=0.05, backend=ReplayBackend({str(TRACE)!r}))
c.start(got.extend)
time.sleep(0.5)
c.stop()
print(json.dumps({{"ticks": len({{s.time for s in got}}), "ok": c.coverage().ok_samples}}))
"""
    result = python_json("-c", code)
    assert result["ticks"] >= 4 and result["ok"] == result["ticks"]
