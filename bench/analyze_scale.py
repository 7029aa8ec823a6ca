"""`loadlab analyze` at scale: a synthetic run folder of 1,000,000 requests x
128 tokens (every token's time stored) and one hour of 1 s samples from 8 GPUs and a vLLM-like
server (gauges, counters, histograms), analyzed by the real CLI in a child process; wall time and
peak memory (max RSS of the child, from /usr/bin/time -v). Run:
    .venv/bin/python bench/analyze_scale.py [--requests 1000000] [--tokens 128] [--hours 1] [--gpus 8]
Goal: under 30 s and 3 GB on the 2-core development VM.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadlab.clock import ClockAnchor
from loadlab.config import RunConfig
from loadlab.store.meta import RunMeta, write_json_atomic
from loadlab.store.schema import Coverage, StepInfo
from loadlab.store.tables import REQUEST_SCHEMA, SAMPLE_SCHEMA

T0 = 1_800_000_000.0
STEPS = (64, 128, 256, 512)  # closed-loop users per step; the hour is split evenly
GPU_SIGNALS = (
    "gpu_util",
    "gpu_mem_util",
    "gpu_sm_active",
    "gpu_sm_occupancy",
    "gpu_tensor_active",
    "gpu_dram_active",
    "gpu_power",
    "gpu_sm_clock",
    "gpu_clock_power_cap",
    "gpu_clock_thermal",
    "gpu_clock_hw_slowdown",
    "gpu_clock_slowdown",
)
HISTOGRAMS = {  # signal -> bucket bounds (vLLM's)
    "ttft": [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0],
    "itl": [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0],
    "e2e": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0],
    "queue_time": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0],
    "tokens_per_step": [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
}


def write_requests(folder: Path, n: int, tokens: int, seconds: float, rng: np.random.Generator) -> None:
    """n requests spread over the steps, each with `tokens` token times, in row groups of 100k."""
    path = folder / "requests" / "part-000001.parquet"
    per_step = seconds / len(STEPS)
    with pq.ParquetWriter(path, REQUEST_SCHEMA) as writer:
        for first in range(0, n, 100_000):
            m = min(100_000, n - first)
            index = np.arange(first, first + m)
            step = index * len(STEPS) // n
            send = T0 + step * per_step + np.sort(rng.uniform(0, per_step - 5, m))
            ttft = rng.gamma(2.0, 0.05, m)
            gap = rng.gamma(4.0, 0.005, (m, tokens))
            times = send[:, None] + ttft[:, None] + np.cumsum(gap, axis=1) - gap[:, :1]
            token_times = pa.ListArray.from_arrays(
                pa.array(np.arange(m + 1) * tokens, pa.int32()), pa.array(times.ravel())
            )
            end = times[:, -1]
            columns = {
                "request_id": pa.array([f"r{i}" for i in index]),
                "worker": pa.array(["host:1"] * m),
                "step": pa.array(step, pa.int64()),
                "warmup": pa.array(np.zeros(m, bool)),
                "api": pa.array(["chat"] * m),
                "scheduled_time": pa.array(send),
                "send_time": pa.array(send),
                "first_token_time": pa.array(times[:, 0]),
                "end_time": pa.array(end),
                "token_times": token_times,
                "token_clock": pa.array(["kernel"] * m),
                "prompt_tokens": pa.array(np.full(m, 512), pa.int64()),
                "completion_tokens": pa.array(np.full(m, tokens), pa.int64()),
                "client_tokens": pa.array(np.full(m, tokens), pa.int64()),
                "input_tokens": pa.array(np.full(m, 512), pa.int64()),
                "max_tokens": pa.array(np.full(m, tokens), pa.int64()),
                "finish_reason": pa.array(["length"] * m),
                "status": pa.array(np.full(m, 200), pa.int64()),
                "error": pa.array([""] * m),
                "error_detail": pa.array([""] * m),
                "conversation": pa.array([""] * m),
                "turn": pa.array(np.full(m, -1), pa.int64()),
            }
            writer.write_table(pa.table([columns[f.name] for f in REQUEST_SCHEMA], schema=REQUEST_SCHEMA))


def write_samples(folder: Path, seconds: int, gpus: int, rng: np.random.Generator) -> int:
    """One sample a second per GPU signal and GPU, and per server series; returns the row count."""
    t = T0 + np.arange(seconds, dtype=float)
    times, sources, signals, labels, values = [], [], [], [], []

    def add(source: str, signal: str, label: str, v: np.ndarray) -> None:
        times.append(t)
        sources.append(np.full(seconds, source, object))
        signals.append(np.full(seconds, signal, object))
        labels.append(np.full(seconds, label, object))
        values.append(v)

    for g in range(gpus):
        for name in GPU_SIGNALS:
            add("gpu", name, json.dumps({"gpu": str(g), "uuid": f"GPU-{g}"}), rng.uniform(0, 1, seconds))
    engine = json.dumps({"engine": "0"})
    load = np.repeat(np.arange(1, len(STEPS) + 1), -(-seconds // len(STEPS)))[:seconds]
    add("server", "requests_running", engine, 60.0 * load)
    add("server", "requests_waiting", engine, np.maximum(0, 40.0 * (load - 2)))
    add("server", "kv_usage", engine, np.minimum(0.99, 0.3 * load))
    add("server", "preemptions", engine, np.cumsum(load >= 4) * 0.1)
    add("server", "generation_tokens", engine, np.cumsum(np.full(seconds, 35_000.0)))
    for name, bounds in HISTOGRAMS.items():
        per_s = rng.uniform(200, 400, (seconds, len(bounds) + 1))
        cumulative = np.cumsum(np.cumsum(per_s, axis=1), axis=0)
        for i, le in enumerate([*map(str, bounds), "+Inf"]):
            add("server", name, json.dumps({"engine": "0", "le": le}), cumulative[:, i])
        add("server", name + "_count", engine, cumulative[:, -1])
        add("server", name + "_sum", engine, cumulative[:, -1] * float(np.median(bounds)))
    table = pa.table(
        {
            "time": np.concatenate(times),
            "source": np.concatenate(sources),
            "signal": np.concatenate(signals),
            "labels": np.concatenate(labels),
            "value": np.concatenate(values),
        },
        schema=SAMPLE_SCHEMA,
    )
    pq.write_table(table, folder / "samples" / "part-000002.parquet")
    return table.num_rows


def write_meta(folder: Path, seconds: float) -> None:
    per_step = seconds / len(STEPS)
    steps = [
        StepInfo(i, f"concurrency={u}", "closed", float(u), T0 + i * per_step, T0 + (i + 1) * per_step)
        for i, u in enumerate(STEPS)
    ]
    meta = RunMeta(
        status="finished",
        config=RunConfig(concurrency=list(STEPS)),
        versions={},
        host={},
        anchor=ClockAnchor(T0, 0.0),
        started_at=T0,
        ended_at=T0 + seconds,
        steps=steps,
        coverage=[Coverage("server", True, ok_samples=int(seconds))],
    )
    write_json_atomic(folder / "run.json", meta.to_dict())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    seconds = int(args.hours * 3600)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="analyze-scale-") as tmp:
        folder = Path(tmp)
        (folder / "requests").mkdir()
        (folder / "samples").mkdir()
        began = time.monotonic()
        write_meta(folder, seconds)
        write_requests(folder, args.requests, args.tokens, seconds, rng)
        rows = write_samples(folder, seconds, args.gpus, rng)
        size = sum(p.stat().st_size for p in folder.rglob("*.parquet")) / 2**20
        print(
            f"synthetic run: {args.requests} requests x {args.tokens} tokens, {rows} samples, "
            f"{size:.0f} MiB of parquet, written in {time.monotonic() - began:.0f} s"
        )
        command = ["/usr/bin/time", "-v", sys.executable, "-m", "loadlab.cli", "analyze", str(folder), "--json"]
        began = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        wall = time.monotonic() - began
        if result.returncode != 0:
            sys.exit(f"analyze failed: {result.stderr[-2000:]}")
        rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr)[1])
        cpu = sum(
            float(re.search(rf"{kind} time \(seconds\): ([\d.]+)", result.stderr)[1]) for kind in ("User", "System")
        )
        overall = json.loads(result.stdout)["overall"]
        print(
            f"loadlab analyze: {wall:.1f} s wall, {cpu:.1f} s CPU, peak RSS {rss_kib / 2**20:.2f} GiB; "
            f"verdict {overall['constraint']} / {overall['saturation']}, knee step {overall['knee_step']}"
        )


if __name__ == "__main__":
    main()
