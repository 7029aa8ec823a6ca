"""NvmlBackend: every query guarded, rates from counters, GPM on Hopper+.

Without a GPU here, NVML itself is stood in for by `FakeNvml` (pynvml's real constants,
structs and error classes, canned device answers). The last test uses the real NVML and runs
only where a GPU and driver are present.
"""

import time

import pynvml
import pytest

from loadlab.collect.gpu import GpuCollector, NvmlBackend
from loadlab.collect.gpu.nvml import GPM_MIN_INTERVAL
from tests.support.fake_nvml import FakeNvml


def open_backend() -> tuple[NvmlBackend, FakeNvml]:
    fake = FakeNvml()
    backend = NvmlBackend(nvml=fake)
    backend.open()
    return backend, fake


def test_basic_counters_are_converted_to_loadlab_units():
    backend, _ = open_backend()
    hopper = backend.read()[0]
    assert (hopper.index, hopper.uuid) == (0, "GPU-fake-0")
    assert hopper.util == 0.97 and hopper.mem_util == 0.64
    assert hopper.mem_used == 70 * 2**30 and hopper.mem_total == 80 * 2**30
    assert hopper.power == pytest.approx(512.345)
    assert hopper.sm_clock == 1755 and hopper.clock_events == 0x5


def test_gpm_metrics_become_ratios_and_bytes_per_second_on_hopper():
    backend, _ = open_backend()
    assert backend.read()[0].sm_active is None  # right after open: a GPM window would be noise
    time.sleep(GPM_MIN_INTERVAL)
    hopper = backend.read()[0]
    assert hopper.sm_active == pytest.approx(0.61) and hopper.sm_occupancy == pytest.approx(0.23)
    assert hopper.tensor_active == pytest.approx(0.18) and hopper.dram_active == pytest.approx(0.74)
    assert hopper.pcie_tx == 50 * 2**20 and hopper.pcie_rx == 100 * 2**20


def test_unsupported_queries_are_skipped_and_not_asked_again():
    backend, fake = open_backend()
    for _ in range(3):
        older = backend.read()[1]
        assert older.power is None and older.sm_active is None and older.nvlink_tx is None
        assert older.util == 0.97  # the rest of the GPU is still read
    assert fake.calls["power1"] == 1  # not supported: asked once only
    assert older.clock_events == 0x40  # fell back to the old "throttle" call
    assert backend.errors == 0


def test_rates_come_from_counter_deltas_and_the_first_read_has_none():
    backend, fake = open_backend()
    first = backend.read()
    assert first[0].nvlink_tx is None and first[1].pcie_tx is None
    fake.clock_us += 500_000
    second = backend.read()
    assert second[0].nvlink_tx == pytest.approx(2 * 2**20) and second[0].nvlink_rx == pytest.approx(4 * 2**20)
    assert second[1].pcie_tx == pytest.approx(10e6) and second[1].pcie_rx == pytest.approx(20e6)


def test_opening_twice_keeps_one_entry_per_gpu():
    backend, _ = open_backend()
    backend.open()
    assert [r.index for r in backend.read()] == [0, 1]


def test_close_frees_gpm_samples():
    backend, fake = open_backend()
    backend.read()
    backend.close()
    assert fake.calls["gpm_free"] == 2


def test_collector_over_fake_nvml_emits_gpm_and_decoded_clock_signals():
    collector = GpuCollector(interval=0.05, backend=NvmlBackend(nvml=FakeNvml()))
    got = []
    collector.start(got.extend)
    time.sleep(0.4)
    collector.stop()
    hopper = {s.signal: s.value for s in got if s.labels["gpu"] == "0"}
    assert hopper["gpu_sm_active"] == pytest.approx(0.61)
    assert hopper["gpu_clock_power_cap"] == 1.0 and hopper["gpu_clock_thermal"] == 0.0
    assert collector.coverage().enabled and collector.coverage().error == ""


def _nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.gpu
@pytest.mark.skipif(not _nvml_works(), reason="no NVIDIA driver/GPU: NVML cannot initialise")
def test_real_nvml_reads_every_gpu():
    collector = GpuCollector(interval=0.2)
    got = []
    collector.start(got.extend)
    time.sleep(1.5)
    collector.stop()
    assert collector.coverage().enabled, collector.coverage().error
    gpus = {s.labels["gpu"] for s in got}
    assert gpus and gpus == {str(i) for i in range(len(gpus))}
    for gpu in gpus:
        mine = {}
        for s in got:
            if s.labels["gpu"] == gpu:
                mine.setdefault(s.signal, []).append(s.value)
        assert all(0.0 <= v <= 1.0 for v in mine["gpu_util"] + mine["gpu_mem_util"])
        assert 0 < max(mine["gpu_mem_used"]) <= mine["gpu_mem_total"][0]
        assert min(mine["gpu_sm_clock"]) > 0
        assert "gpu_clock_events" in mine
        for ratio in ("gpu_sm_active", "gpu_sm_occupancy", "gpu_tensor_active", "gpu_dram_active"):
            assert all(0.0 <= v <= 1.0 for v in mine.get(ratio, []))
