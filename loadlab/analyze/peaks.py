"""The device's peak FLOP/s and memory bandwidth, for a roofline: its ridge point in FLOPs per byte.

A GPU's come from its data sheet (loadlab.analyze.roofline.GPU_SPECS). A CPU has no such table
that fits every part, so its figures are given (`loadlab analyze --peak-tflops --peak-gbps`) or
measured here by a short calibration: the best of a few float32 matrix products (numpy's BLAS)
and of a few copies of an array larger than the caches, each timed in CPU seconds, not wall
seconds, so that other work on a busy host does not count as slowness: FLOPs per CPU-second
times the cores the server may run on (its process's affinity, where `loadlab run --server-pid`
sampled it, else all of this host's), and one core's copy bandwidth (a lower bound of the
socket's on a large host, where the ridge then reads high: give the figures there). Measured on
the machine that analyzes, which is the server's when the analysis runs at the end of `loadlab
run` beside a CPU server; elsewhere give the figures.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from loadlab.numbers import format_number

MATMUL_N = 1024  # float32 matrices of 4 MB: 2.1 GFLOP a product, large enough for BLAS's best (judgement)
COPY_BYTES = 64 << 20  # larger than the caches of the CPUs we run on (judgement)
REPEATS = 3  # best of: one disturbed run on a shared host must not lower the peak


@dataclass(frozen=True)
class Peaks:
    """Peak FLOP/s and bytes/s of one device, and where the figures came from."""

    flops: float
    bandwidth: float
    source: str

    @property
    def ridge(self) -> float:
        """FLOPs per byte at the roofline's corner: below it a step is bandwidth-bound."""
        return self.flops / self.bandwidth


def given(tflops: float, gbps: float) -> Peaks:
    """Peaks given on the command line (TFLOP/s and GB/s)."""
    return Peaks(tflops * 1e12, gbps * 1e9, f"given: {tflops:g} TFLOP/s, {gbps:g} GB/s")


def calibrate(cores: int | None = None) -> Peaks:
    """This host's peaks over the server's `cores` cores (None: all of this host's), measured once
    per process (about 0.3 CPU-seconds)."""
    per_core, bandwidth = _measure()
    on = f"the server's {cores} core{'s' if cores > 1 else ''}" if cores else f"{os.cpu_count() or 1} cores"
    flops = (cores or os.cpu_count() or 1) * per_core
    return Peaks(
        flops,
        bandwidth,
        f"calibrated on this host: {format_number(flops / 1e9)} GFLOP/s on {on}, {format_number(bandwidth / 1e9)} GB/s",
    )


@functools.cache
def _measure() -> tuple[float, float]:
    """FLOP/s per core (per CPU-second) and one core's copy bandwidth in bytes/s."""
    rng = np.random.default_rng(0)
    a = rng.random((MATMUL_N, MATMUL_N), dtype=np.float32)
    b = rng.random((MATMUL_N, MATMUL_N), dtype=np.float32)
    per_core = 2 * MATMUL_N**3 / _best(lambda: a @ b, time.process_time)
    src = np.ones(COPY_BYTES // 4, dtype=np.float32)
    dst = np.empty_like(src)
    # The copy runs on this thread alone, timed on its clock: the BLAS threads still spinning after
    # the product would count in the process's CPU time and halve the figure (seen: 14-17 GB/s
    # against 25-35 in the same host's other runs).
    return per_core, 2 * COPY_BYTES / _best(lambda: np.copyto(dst, src), time.thread_time)  # read once, written once


def _best(work: Callable[[], object], clock: Callable[[], float]) -> float:
    """The shortest CPU time on `clock` (the process's: all threads; or this thread's) of a few runs of `work`."""
    work()  # warm: first-touch page faults and BLAS thread start-up are not the device's speed
    times = []
    for _ in range(REPEATS):
        t0 = clock()
        work()
        times.append(clock() - t0)
    return max(min(times), 1e-9)
