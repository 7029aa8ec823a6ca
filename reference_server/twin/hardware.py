"""Published GPU figures the twin keeps time with (sources and calibration in docs/twin.md)."""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
MIB = 2**20
TFLOPS = 1e12


@dataclass(frozen=True)
class Gpu:
    """One accelerator's datasheet figures; rates in bytes/s and FLOP/s, dense (no sparsity)."""

    name: str
    memory: float  # bytes the driver reports as total (what --gpu-memory-utilization is a share of)
    hbm_bandwidth: float
    bf16_flops: float
    link_bandwidth: float  # GPU-to-GPU, one direction (what a ring all-reduce moves per step)
    link_latency: float  # seconds per small all-reduce between GPUs of one node
    tdp: float  # watts
    idle_power: float  # watts
    sm_clock: float  # boost clock, MHz


GPUS: dict[str, Gpu] = {
    "h100": Gpu(
        "H100 SXM5 80GB",
        memory=81559 * MIB,
        hbm_bandwidth=3350 * GB,
        bf16_flops=989 * TFLOPS,
        link_bandwidth=450 * GB,
        link_latency=10e-6,
        tdp=700,
        idle_power=70,
        sm_clock=1980,
    ),
    "h200": Gpu(
        "H200 SXM 141GB",
        memory=143771 * MIB,
        hbm_bandwidth=4800 * GB,
        bf16_flops=989 * TFLOPS,
        link_bandwidth=450 * GB,
        link_latency=10e-6,
        tdp=700,
        idle_power=75,
        sm_clock=1980,
    ),
    "a100": Gpu(
        "A100 SXM4 80GB",
        memory=81920 * MIB,
        hbm_bandwidth=2039 * GB,
        bf16_flops=312 * TFLOPS,
        link_bandwidth=300 * GB,
        link_latency=12e-6,
        tdp=400,
        idle_power=55,
        sm_clock=1410,
    ),
    "a100-40gb": Gpu(
        "A100 SXM4 40GB",
        memory=40960 * MIB,
        hbm_bandwidth=1555 * GB,
        bf16_flops=312 * TFLOPS,
        link_bandwidth=300 * GB,
        link_latency=12e-6,
        tdp=400,
        idle_power=50,
        sm_clock=1410,
    ),
    "l40s": Gpu(
        "L40S 48GB",
        memory=46068 * MIB,
        hbm_bandwidth=864 * GB,
        bf16_flops=362 * TFLOPS,
        link_bandwidth=32 * GB,
        link_latency=25e-6,
        tdp=350,
        idle_power=35,
        sm_clock=2520,
    ),
    "mi300x": Gpu(
        "MI300X 192GB",
        memory=196592 * MIB,
        hbm_bandwidth=5300 * GB,
        bf16_flops=1307 * TFLOPS,
        link_bandwidth=448 * GB,
        link_latency=12e-6,
        tdp=750,
        idle_power=120,
        sm_clock=2100,
    ),
}
