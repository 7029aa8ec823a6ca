"""Device check: GpuCollector with the real NvmlBackend while a torch load runs on GPU 0.

Phases (seconds each, --phase): idle, matmul (compute-bound bf16 GEMM), decode (memory-bound:
a batch of 8 vectors times large weight matrices, like decode), idle. Prints each phase's mean
of every signal per GPU, checks that the signals move the right way, reports the sampler's own
CPU cost, records the readings as a replay trace, and scrapes `loadlab gpu-exporter` once.
Exit code 1 if a check fails. Needs: CUDA torch, an NVIDIA driver. Run via gpu_sampler_check.sh.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadlab.collect.gpu import GpuCollector, NvmlBackend

LOAD = r"""
import sys, time, torch
phase = float(sys.argv[1])
dev = torch.device("cuda:0")
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
weights = [torch.randn(8192, 28672, device=dev, dtype=torch.bfloat16) for _ in range(4)]  # ~1.9 GB
x = torch.randn(8, 8192, device=dev, dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(phase)                                       # idle
end = time.time() + phase
while time.time() < end:                                # compute-bound
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
end = time.time() + phase
while time.time() < end:                                # memory-bound, decode-like
    for w in weights:
        x @ w
    torch.cuda.synchronize()
print("done", flush=True)
time.sleep(phase)                                       # idle again
"""


class Recording(NvmlBackend):
    """NvmlBackend that also keeps every reading with its time, for a replay trace."""

    def __init__(self, nvml=None) -> None:
        super().__init__(nvml)
        self.rows: list[dict] = []
        self.unsupported: dict[int, list[str]] = {}
        self.t0 = time.monotonic()

    def close(self) -> None:
        self.unsupported = self.unsupported_queries()  # before close() forgets the GPUs
        super().close()

    def read(self):
        readings = super().read()
        t = round(time.monotonic() - self.t0, 3)
        self.rows.extend({"t": t, **asdict(r)} for r in readings)
        return readings


def phase_means(samples, start: float, phase: float) -> dict[str, dict[str, dict[str, float]]]:
    names = ["idle", "matmul", "decode", "idle2"]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for i, name in enumerate(names):
        lo, hi = start + i * phase + 1.0, start + (i + 1) * phase - 0.5  # skip the edges
        acc: dict[tuple[str, str], list[float]] = {}
        for s in samples:
            if lo <= s.time <= hi:
                acc.setdefault((s.labels["gpu"], s.signal), []).append(s.value)
        for (gpu, signal), values in acc.items():
            out.setdefault(name, {}).setdefault(gpu, {})[signal] = sum(values) / len(values)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", type=float, default=15.0)
    ap.add_argument("--trace", default="bench/results/gpu_trace_device.jsonl")
    args = ap.parse_args()

    import pynvml

    pynvml.nvmlInit()
    print(
        "driver",
        pynvml.nvmlSystemGetDriverVersion(),
        "GPUs",
        pynvml.nvmlDeviceGetCount(),
        [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())],
    )
    pynvml.nvmlShutdown()

    load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.phase)], stdout=subprocess.PIPE, text=True)
    assert load.stdout.readline().strip() == "ready", "load process failed to start"
    backend = Recording()
    collector = GpuCollector(interval=0.25, backend=backend)
    samples = []
    from loadlab.clock import now

    start = now()
    cpu0, wall0 = time.process_time(), time.monotonic()
    collector.start(samples.extend)
    load.wait(timeout=6 * args.phase + 60)
    collector.stop()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    cov = collector.coverage()
    print(f"coverage: {cov}")
    print(f"unsupported queries per GPU: {backend.unsupported}")
    ticks = cov.ok_samples
    print(
        f"sampler CPU: {100 * cpu / wall:.2f}% of a core over {wall:.1f} s, "
        f"{1000 * cpu / max(1, ticks):.2f} ms CPU per tick, {ticks} ticks, {len(samples)} samples"
    )

    means = phase_means(samples, start, args.phase)
    for phase, per_gpu in means.items():
        for gpu, signals in sorted(per_gpu.items()):
            shown = {k: round(v, 3) for k, v in sorted(signals.items()) if k != "gpu_mem_total"}
            print(f"{phase:>7} gpu{gpu}: {json.dumps(shown)}")

    Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
    with open(args.trace, "w") as f:
        for row in backend.rows:
            f.write(json.dumps(row) + "\n")
    print(f"trace: {len(backend.rows)} readings -> {args.trace}")

    g0 = {p: means.get(p, {}).get("0", {}) for p in ("idle", "matmul", "decode")}
    checks = {
        "idle util < 0.2": g0["idle"].get("gpu_util", 1) < 0.2,
        "matmul util > 0.9": g0["matmul"].get("gpu_util", 0) > 0.9,
        "decode util > 0.9": g0["decode"].get("gpu_util", 0) > 0.9,
        "matmul power > idle power": g0["matmul"].get("gpu_power", 0) > g0["idle"].get("gpu_power", 1e9),
        "clock events sampled": "gpu_clock_events" in g0["matmul"],
    }
    if "gpu_sm_active" in g0["matmul"]:  # GPM (Hopper+)
        checks["matmul tensor_active > 0.3"] = g0["matmul"].get("gpu_tensor_active", 0) > 0.3
        checks["decode dram_active > decode tensor_active"] = g0["decode"].get("gpu_dram_active", 0) > g0["decode"].get(
            "gpu_tensor_active", 1
        )
        checks["decode dram_active > matmul dram_active"] = g0["decode"].get("gpu_dram_active", 0) > g0["matmul"].get(
            "gpu_dram_active", 1
        )
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'} {name}")

    exporter = scrape_exporter()
    print(exporter)
    return 0 if all(checks.values()) else 1


def scrape_exporter() -> str:
    """Start `loadlab gpu-exporter` on NVML, scrape once, return its loadlab_gpu_util lines."""
    port = 19400
    proc = subprocess.Popen([str(Path(sys.executable).parent / "loadlab"), "gpu-exporter", "--port", str(port)])
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
                lines = [ln for ln in text.splitlines() if ln.startswith(("loadlab_gpu_util", "loadlab_gpu_sm_active"))]
                return "exporter:\n" + "\n".join(lines)
            except OSError:
                time.sleep(0.1)
        return "exporter: FAIL no answer"
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
