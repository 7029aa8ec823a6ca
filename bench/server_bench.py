"""Reference-server engine benchmarks (CPU or CUDA); prints Markdown tables.

    .venv/bin/python bench/server_bench.py decode      # decode tokens/s at batch 1, 8, 32
    .venv/bin/python bench/server_bench.py batching    # continuous vs static on mixed lengths
    .venv/bin/python bench/server_bench.py kv          # paged vs contiguous: capacity and gather cost
    .venv/bin/python bench/server_bench.py tp          # tensor parallel 1 vs 2: step and collective time
    .venv/bin/python bench/server_bench.py prefix      # prefix caching on vs off on the shared-prefix workload

Measures through AsyncEngine (scheduler, sampler and thread hand-off included), not the bare model.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import dataclass, replace

from loadlab.config import LengthDist, WorkloadConfig
from loadlab.workload import make_workload
from reference_server.config import EngineConfig
from reference_server.engine import AsyncEngine
from reference_server.engine.runner import DTYPES
from reference_server.interface import SamplingParams
from reference_server.shapes import PRESETS, ModelShape
from reference_server.tokenizer import ByteTokenizer


@dataclass
class Request:
    prompt_len: int
    output_len: int
    delay: float = 0.0  # seconds after the start at which it is sent
    prompt: list[int] | None = None  # the prompt's token ids (default: one letter, prompt_len times)


@dataclass
class RunStats:
    wall: float  # first send to last token
    output_tokens: int
    decode_tokens_per_s: float  # tokens after each request's first, over the common decode window
    mean_e2e: float
    mean_ttft: float
    ttfts: list[float]  # per request, seconds
    prefill_tokens: float  # prompt tokens the engine computed (not those read from the prefix cache)
    prefix_hit_rate: float  # prefix-cache hits / queries, in tokens
    max_running: int
    step_ms: dict[str, float]  # mean step time by phase
    collective_ms_per_step: float
    preemptions: float


def _metric(engine: AsyncEngine, name: str, **labels: str) -> float:
    value = engine.registry.get_sample_value(name, {"model_name": engine.model_name, "engine": "0", **labels})
    return value or 0.0


async def _run(config: EngineConfig, requests: list[Request], warmup: bool = True) -> RunStats:
    engine = AsyncEngine(config)
    await engine.start()
    try:
        if warmup:  # one short request so first-call costs stay out of the figures
            async for _ in engine.add_request("warmup", [65] * 8, SamplingParams(max_tokens=4, ignore_eos=True)):
                pass
        before = {
            ph: (
                _metric(engine, "loadlab_server_step_seconds_sum", phase=ph),
                _metric(engine, "loadlab_server_step_seconds_count", phase=ph),
            )
            for ph in ("prefill", "decode", "mixed")
        }
        coll_before = (
            _metric(engine, "loadlab_server_collective_seconds_sum"),
            _metric(engine, "loadlab_server_collective_seconds_count"),
        )
        counters = (
            "vllm:iteration_tokens_total_sum",
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total",
        )
        counted_before = [_metric(engine, name) for name in counters]
        max_running = 0
        start = time.monotonic()

        async def one(i: int, r: Request) -> tuple[float, float, float]:
            await asyncio.sleep(r.delay)
            sent = time.monotonic()
            params = SamplingParams(max_tokens=r.output_len, temperature=0, ignore_eos=True)
            times = []
            async for _ in engine.add_request(f"r{i}", r.prompt or [65 + i % 26] * r.prompt_len, params):
                times.append(time.monotonic())
            return sent, times[0], times[-1]

        async def watch() -> None:
            nonlocal max_running
            while True:
                max_running = max(max_running, int(_metric(engine, "vllm:num_requests_running")))
                await asyncio.sleep(0.002)

        watcher = asyncio.ensure_future(watch())
        spans = await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))
        watcher.cancel()
        wall = max(s[2] for s in spans) - start
        window = min(s[2] for s in spans) - max(s[1] for s in spans)
        decoded = sum(r.output_len - 1 for r in requests)
        step_ms = {}
        for ph, (s0, c0) in before.items():
            n = _metric(engine, "loadlab_server_step_seconds_count", phase=ph) - c0
            if n:
                step_ms[ph] = 1000 * (_metric(engine, "loadlab_server_step_seconds_sum", phase=ph) - s0) / n
        computed, queries, hits = (
            _metric(engine, name) - before for name, before in zip(counters, counted_before, strict=True)
        )
        steps = _metric(engine, "loadlab_server_collective_seconds_count") - coll_before[1]
        coll = _metric(engine, "loadlab_server_collective_seconds_sum") - coll_before[0]
        return RunStats(
            wall=wall,
            output_tokens=sum(r.output_len for r in requests),
            decode_tokens_per_s=decoded / window
            if window > 0 and len(set(r.output_len for r in requests)) == 1
            else float("nan"),
            mean_e2e=sum(s[2] - s[0] for s in spans) / len(spans),
            mean_ttft=sum(s[1] - s[0] for s in spans) / len(spans),
            ttfts=[s[1] - s[0] for s in spans],
            prefill_tokens=computed - sum(r.output_len - 1 for r in requests),  # the rest were decodes
            prefix_hit_rate=hits / queries if queries else 0.0,
            max_running=max_running,
            step_ms=step_ms,
            collective_ms_per_step=1000 * coll / steps if steps else 0.0,
            preemptions=_metric(engine, "vllm:num_preemptions_total"),
        )
    finally:
        await engine.shutdown()


def run(config: EngineConfig, requests: list[Request]) -> RunStats:
    return asyncio.run(_run(config, requests))


def roofline_tokens_per_s(shape: ModelShape, dtype: str, batch: int, context: int, tbps: float) -> float:
    """Decode tokens/s if each step only had to read the weights and the batch's KV once from memory."""
    d, hd, size = shape.hidden_size, shape.head_dim, DTYPES[dtype].itemsize
    per_layer = d * hd * (2 * shape.num_heads + 2 * shape.num_kv_heads) + 3 * d * shape.intermediate_size
    weights = shape.num_layers * per_layer + shape.vocab_size * d * (1 if shape.tie_embeddings else 2)
    kv_per_token = 2 * shape.num_layers * shape.num_kv_heads * hd * size
    step_bytes = weights * size + batch * context * kv_per_token
    return batch / (step_bytes / (tbps * 1e12))


def bench_decode(base: EngineConfig, presets: list[str], batches: list[int], hbm_tbps: float = 0.0) -> None:
    roof = f" {hbm_tbps} TB/s roofline tokens/s |" if hbm_tbps else ""
    print(f"| preset | batch | decode tokens/s | mean decode step (ms) |{roof}\n|---|---|---|---|{'---|' * bool(roof)}")
    for preset in presets:
        for b in batches:
            stats = run(replace(base, preset=preset, max_num_seqs=max(b, 1)), [Request(32, 64)] * b)
            bound = f" {roofline_tokens_per_s(PRESETS[preset], base.dtype, b, 64, hbm_tbps):.0f} |" if roof else ""
            print(f"| {preset} | {b} | {stats.decode_tokens_per_s:.0f} | {stats.step_ms.get('decode', 0):.1f} |{bound}")


def mixed_workload(n: int, seed: int = 0) -> list[Request]:
    """Prompts of 16..128 tokens; most outputs short (8..32), one in eight long (160..256); sent over ~1 s."""
    rng = random.Random(seed)
    return [
        Request(
            rng.randint(16, 128),
            rng.randint(160, 256) if rng.random() < 0.125 else rng.randint(8, 32),
            delay=rng.uniform(0, 1.0),
        )
        for _ in range(n)
    ]


def bench_batching(base: EngineConfig) -> None:
    print("| batching | wall (s) | output tokens/s | mean E2E (s) | mean TTFT (s) |\n|---|---|---|---|---|")
    workload = mixed_workload(96)
    for batching in ("continuous", "static"):
        s = run(replace(base, batching=batching, max_num_seqs=16), workload)
        print(f"| {batching} | {s.wall:.2f} | {s.output_tokens / s.wall:.0f} | {s.mean_e2e:.2f} | {s.mean_ttft:.2f} |")


def bench_kv(base: EngineConfig) -> None:
    print(
        "Capacity: 128 KV blocks x 16 tokens (2048 slots), max_model_len 512, max_num_seqs 16, "
        "32 requests of 48 + 48 tokens.\n"
    )
    print("| kv | most sequences running at once | output tokens/s | preemptions |\n|---|---|---|---|")
    for kv in ("paged", "contiguous"):
        s = run(replace(base, kv=kv, num_kv_blocks=128, max_model_len=512, max_num_seqs=16), [Request(48, 48)] * 32)
        print(f"| {kv} | {s.max_running} | {s.output_tokens / s.wall:.0f} | {s.preemptions:.0f} |")
    print("\nGather cost: batch 32 decoding at ~500-token contexts (ample KV memory for both).\n")
    print("| kv | mean decode step (ms) | decode tokens/s |\n|---|---|---|")
    for kv in ("paged", "contiguous"):
        s = run(
            replace(base, kv=kv, num_kv_blocks=32 * 33, max_model_len=528, max_num_seqs=32), [Request(480, 32)] * 32
        )
        print(f"| {kv} | {s.step_ms.get('decode', 0):.1f} | {s.decode_tokens_per_s:.0f} |")


def shared_prefix_requests(n: int, rate: float, seed: int = 0) -> list[Request]:
    """loadlab's shared_prefix workload: 4 prefixes of 384 tokens x 8 suffixes of 32; 16 output tokens;
    n requests sent at `rate` per second (Poisson)."""
    cfg = WorkloadConfig(
        kind="shared_prefix",
        num_prefixes=4,
        prefix_len=384,
        suffixes_per_prefix=8,
        input_len=LengthDist(mean=32),
        output_len=LengthDist(mean=16),
        seed=seed,
    )
    workload = make_workload(cfg, "completions")
    tokenizer, rng, at = ByteTokenizer(), random.Random(seed), 0.0
    requests = []
    for _ in range(n):
        spec = workload.next_request()
        ids = tokenizer.encode(spec.prompt)
        requests.append(Request(len(ids), spec.max_tokens, delay=at, prompt=ids))
        at += rng.expovariate(rate)
    return requests


def bench_prefix(base: EngineConfig, n: int, rate: float) -> None:
    requests = shared_prefix_requests(n, rate)
    prompt_tokens = sum(r.prompt_len for r in requests)
    print(
        f"{n} requests at {rate:g}/s, {prompt_tokens} prompt tokens (loadlab's shared_prefix workload: "
        "4 prefixes of 384 tokens x 8 suffixes of 32, 16 output tokens)\n"
    )
    print(
        "| prefix caching | prefill tokens computed | hit rate (tokens) | TTFT mean (ms) | TTFT p50 (ms) "
        "| TTFT p90 (ms) | mean E2E (s) |\n|---|---|---|---|---|---|---|"
    )
    for caching in (False, True):
        s = run(replace(base, prefix_caching=caching, max_num_seqs=16), requests)
        ttft = sorted(s.ttfts)
        p50, p90 = ttft[len(ttft) // 2], ttft[int(0.9 * len(ttft))]
        print(
            f"| {'on' if caching else 'off'} | {s.prefill_tokens:.0f} | {s.prefix_hit_rate:.0%} "
            f"| {1000 * s.mean_ttft:.0f} | {1000 * p50:.0f} | {1000 * p90:.0f} | {s.mean_e2e:.2f} |"
        )


def bench_tp(base: EngineConfig, preset: str, batch: int) -> None:
    print(
        "| tensor_parallel | mean decode step (ms) | collective per step (ms) | collective share |\n|---|---|---|---|"
    )
    for tp in (1, 2):
        s = run(replace(base, preset=preset, tensor_parallel=tp, max_num_seqs=batch), [Request(32, 64)] * batch)
        step = s.step_ms.get("decode", 0)
        print(f"| {tp} | {step:.1f} | {s.collective_ms_per_step:.2f} | {s.collective_ms_per_step / step:.0%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["decode", "batching", "kv", "tp", "prefix", "all"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--presets", default="tiny,small", help="decode: comma-separated presets")
    parser.add_argument("--batches", default="1,8,32", help="decode: comma-separated batch sizes")
    parser.add_argument("--preset", default="tiny", help="batching / kv / tp: the preset")
    parser.add_argument("--kv-memory-gb", type=float, default=0.25)
    parser.add_argument("--requests", type=int, default=64, help="prefix: how many requests")
    parser.add_argument("--rate", type=float, default=8.0, help="prefix: requests per second")
    parser.add_argument("--hbm-tbps", type=float, default=0.0, help="decode: add a memory-bandwidth roofline column")
    args = parser.parse_args()
    base = EngineConfig(
        preset=args.preset, device=args.device, dtype=args.dtype, kv_memory_gb=args.kv_memory_gb, max_model_len=1024
    )
    if args.what in ("decode", "all"):
        bench_decode(base, args.presets.split(","), [int(b) for b in args.batches.split(",")], args.hbm_tbps)
    if args.what in ("batching", "all"):
        bench_batching(base)
    if args.what in ("kv", "all"):
        bench_kv(base)
    if args.what in ("tp", "all"):
        bench_tp(base, args.preset, 8)
    if args.what in ("prefix", "all"):
        bench_prefix(base, args.requests, args.rate)


if __name__ == "__main__":
    main()
