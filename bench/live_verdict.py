"""The live verdict's cost: CPU per update of the judge process, and what forwarding the
records and samples costs the run's process, at several request rates. Run:
    .venv/bin/python bench/live_verdict.py [--rates 10,100,1000] [--gpus 8] [--repeat 5]
Each rate fills a LiveWindow as a steady run would (closed loop, requests of 1 s with 20 tokens)
with a vLLM-like server scraped every second (gauges, counters, histograms) and `--gpus` GPUs
sampled 4 times a second, then times `answer()` (what the judge process runs every EVERY_S s).
Goal: the judging well under 5 % of a core (CPU per update / EVERY_S).
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadlab.conductor.liveverdict import EVERY_S, WINDOW_S, LiveWindow, answer
from loadlab.store.schema import RequestRecord, Sample, StepInfo

T0 = 1_800_000_000.0
BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0]
HISTOGRAMS = ("ttft", "itl", "queue_time", "step_time", "tokens_per_step", "batch_size")
GPU_SIGNALS = ("gpu_util", "gpu_sm_active", "gpu_tensor_active", "gpu_dram_active", "gpu_clock_slowdown")


def record(i: int, send: float) -> RequestRecord:
    tokens = [send + 0.1 + 0.9 * k / 19 for k in range(20)]
    return RequestRecord(
        request_id=f"r{i}",
        worker="w",
        step=0,
        warmup=False,
        api="chat",
        scheduled_time=send,
        send_time=send,
        first_token_time=tokens[0],
        end_time=tokens[-1],
        token_times=tokens,
        token_clock="kernel",
        completion_tokens=20,
        client_tokens=20,
        max_tokens=20,
        status=200,
    )


def scrape(t: float, k: int, gpus: int) -> list[Sample]:
    """One second of samples: a server scrape, the client self-check, 4 GPU samples per GPU."""
    engine = {"engine": "0"}
    out = [
        Sample(t, "server", "kv_usage", 0.97, engine),
        Sample(t, "server", "requests_waiting", 22, engine),
        Sample(t, "server", "requests_running", 16, engine),
        Sample(t, "server", "preemptions", 0.0, engine),
    ]
    for name in HISTOGRAMS:
        out += [
            Sample(t, "server", name, 10.0 * k * (i + 1) / len(BUCKETS), {**engine, "le": str(le)})
            for i, le in enumerate(BUCKETS)
        ]
        out += [
            Sample(t, "server", name + "_sum", 0.05 * k, engine),
            Sample(t, "server", name + "_count", 10.0 * k, engine),
        ]
    out += [Sample(t, "client", "client_cpu", 0.2, {"worker": "w"})]
    out += [Sample(t + q / 10, "client", "client_loop_lag", 0.001, {"worker": "w"}) for q in range(10)]
    out += [
        Sample(t + q / 4, "gpu", name, 0.5, {"gpu": str(g)})
        for q in range(4)
        for g in range(gpus)
        for name in GPU_SIGNALS
    ]
    return out


def bench(rate: int, gpus: int, repeat: int) -> dict[str, float]:
    users = rate  # requests of 1 s back to back: `rate` users make `rate` requests/s
    seconds = int(2 * WINDOW_S + 10)  # what the buffers hold at most
    window = LiveWindow()
    records = [record(u * seconds + k, T0 + k) for k in range(seconds) for u in range(users)]
    samples = [s for k in range(seconds) for s in scrape(T0 + k, k, gpus)]
    # The run's process: each record copied without its token times, then pickled into the pipe
    # (here one second of traffic at a time, as the run's ticks send it).
    cpu = time.process_time()
    for k in range(seconds):
        batch = [dataclasses.replace(r, token_times=[]) for r in records[k * users : (k + 1) * users]]
        pickle.dumps(("add", batch, samples[k * len(samples) // seconds : (k + 1) * len(samples) // seconds]))
    forward = (time.process_time() - cpu) / seconds
    for r in records:
        window.add_record(dataclasses.replace(r, token_times=[]))
    window.add_samples(samples)
    step = StepInfo(0, f"concurrency={users}", "closed", users, T0)
    answer(window, step, T0 + seconds, {})  # the first pays for lazy imports, as the judge process does once
    costs, line = [], ""
    for _ in range(repeat):
        a = answer(window, step, T0 + seconds, {})
        costs.append(a.cpu_s)
        line = a.line or a.error
    per_update = statistics.median(costs)
    return {
        "rate": rate,
        "records": len([r for r in records if r.end_time >= T0 + seconds - 2 * WINDOW_S]),
        "samples": len(samples),
        "update_ms": per_update * 1000,
        "core_share": per_update / EVERY_S,
        "forward_share": forward,
        "line": line,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="10,100,1000")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        f"| req/s | records held | samples held | CPU per update (median of {args.repeat}) | judge: share of a core "
        f"(every {EVERY_S:g} s) | run's process: forwarding, share of a core |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for rate in (int(r) for r in args.rates.split(",")):
        b = bench(rate, args.gpus, args.repeat)
        print(
            f"| {rate} | {b['records']} | {b['samples']} | {b['update_ms']:.0f} ms | {b['core_share']:.1%} "
            f"| {b['forward_share']:.2%} |",
            flush=True,
        )
    print(f"\nlast line: {b['line']}")


if __name__ == "__main__":
    main()
