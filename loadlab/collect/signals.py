"""Canonical signal names, and the tables that map each server's metric names onto them.

Analysis code only knows the canonical names (documented in docs/signals.md), so a verdict
reads the same whether the server was vLLM, SGLang, TGI, TensorRT-LLM or the reference server.
A metric absent from these tables keeps its raw name.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadlab.collect.gpu.reading import signal_names as gpu_signal_names

# Canonical signals from serving engines. Histograms become one sample per bucket (label `le`)
# plus `<signal>_sum` and `<signal>_count`.
REQUESTS_RUNNING = "requests_running"  # gauge: requests in the running batch
REQUESTS_WAITING = "requests_waiting"  # gauge: requests queued, not yet scheduled
RUNNING_CAP = "running_cap"  # gauge: the most requests the engine runs at once, as configured (max_num_seqs)
KV_USAGE = "kv_usage"  # gauge: KV-cache blocks in use, 0..1
PREEMPTIONS = "preemptions"  # counter: requests preempted / retracted
PROMPT_TOKENS = "prompt_tokens"  # counter: prefill tokens processed
GENERATION_TOKENS = "generation_tokens"  # counter: tokens generated
PREFIX_CACHE_QUERIES = "prefix_cache_queries"  # counter: tokens of requests looked up in the prefix cache
PREFIX_CACHE_HITS = "prefix_cache_hits"  # counter: of those, tokens whose KV was reused
TOKENS_PER_STEP = "tokens_per_step"  # histogram: tokens carried by one engine step
BATCH_SIZE = "batch_size"  # histogram (or gauge): sequences in one engine step
TTFT = "ttft"  # histogram, seconds
ITL = "itl"  # histogram, seconds
E2E = "e2e"  # histogram, seconds
QUEUE_TIME = "queue_time"  # histogram, seconds
PREFILL_TIME = "prefill_time"  # histogram, seconds
DECODE_TIME = "decode_time"  # histogram, seconds
STEP_TIME = "step_time"  # histogram, seconds (label `phase` when known)
COLLECTIVE_TIME = "collective_time"  # histogram, seconds of collectives per step
# vLLM's own analytic estimate of each step's work, per GPU (only with --enable-mfu-metrics).
ESTIMATED_FLOPS = "estimated_flops"  # counter: FLOPs
ESTIMATED_READ_BYTES = "estimated_read_bytes"  # counter: bytes read from device memory
ESTIMATED_WRITE_BYTES = "estimated_write_bytes"  # counter: bytes written to device memory
REQUESTS_WAITING_BY_REASON = "requests_waiting_by_reason"  # gauge, label `reason` (capacity | deferred)
REQUESTS_IN_FLIGHT = "requests_in_flight"  # gauge: at a front end, queued and running together
PROMPT_TOKENS_CACHED = "prompt_tokens_cached"  # counter: prompt tokens served from the prefix cache
PREFIX_CACHE_HIT_RATE = "prefix_cache_hit_rate"  # gauge 0..1, for engines that export only a rate
PREFILL_COMPUTED_TOKENS = "prefill_computed_tokens"  # histogram: prompt tokens a request computed (cache excluded)
STAGE_TIME = "stage_time"  # histogram, seconds, label `stage`: one stage of a request's life
BATCH_SIZE_MEAN = "batch_size_mean"  # gauge: mean sequences per engine step since start
GENERATION_THROUGHPUT = "generation_throughput"  # gauge: the engine's own tokens/s figure
PROMPT_THROUGHPUT = "prompt_throughput"  # gauge: the engine's own prefill tokens/s figure
ENGINE_STEPS = "engine_steps"  # counter: engine steps (llama_decode calls)
KV_BLOCK_LIFETIME = "kv_block_lifetime"  # histogram, seconds: a KV block from allocation to eviction
KV_BLOCK_IDLE_BEFORE_EVICT = "kv_block_idle_before_evict"  # histogram, seconds
KV_BLOCK_REUSE_GAP = "kv_block_reuse_gap"  # histogram, seconds between reuses of a block
SPEC_DRAFTS = "spec_drafts"  # counter: speculative verification steps
SPEC_DRAFT_TOKENS = "spec_draft_tokens"  # counter: draft tokens proposed
SPEC_ACCEPTED_TOKENS = "spec_accepted_tokens"  # counter: draft tokens accepted
SPEC_ACCEPTED_PER_POSITION = "spec_accepted_per_position"  # counter, label `position`

# GPU signals, ratios 0..1. The NVML collector (loadlab.collect.gpu, `GpuReading`) owns their
# full list; these are the ones DCGM exporter series map onto, named as NVML's.
GPU_UTIL = "gpu_util"  # share of time at least one kernel ran
GPU_MEM_UTIL = "gpu_mem_util"  # share of time device memory was read or written
GPU_MEM_USED = "gpu_mem_used"  # bytes
GPU_SM_ACTIVE = "gpu_sm_active"
GPU_SM_OCCUPANCY = "gpu_sm_occupancy"
GPU_TENSOR_ACTIVE = "gpu_tensor_active"
GPU_DRAM_ACTIVE = "gpu_dram_active"
GPU_GR_ENGINE_ACTIVE = "gpu_gr_engine_active"  # DCGM only


@dataclass(frozen=True)
class SignalMapping:
    """A raw metric name's canonical signal; `scale` converts its unit (e.g. percent -> 0..1)."""

    signal: str
    scale: float = 1.0


def _table(pairs: dict[str, str]) -> dict[str, SignalMapping]:
    return {raw: SignalMapping(signal) for raw, signal in pairs.items()}


# Keys are metric family names as exposed: counters without the `_total` that prometheus_client
# appends, histograms without `_bucket`/`_sum`/`_count` (see `canonical_name`).
# vLLM's names as its current release (0.32) exports them; the estimates only with --enable-mfu-metrics.
VLLM_CURRENT = {
    "vllm:num_requests_running": REQUESTS_RUNNING,
    "vllm:num_requests_waiting": REQUESTS_WAITING,
    "vllm:kv_cache_usage_perc": KV_USAGE,  # a fraction despite the name
    "vllm:num_preemptions": PREEMPTIONS,
    "vllm:prompt_tokens": PROMPT_TOKENS,
    "vllm:generation_tokens": GENERATION_TOKENS,
    "vllm:prefix_cache_queries": PREFIX_CACHE_QUERIES,
    "vllm:prefix_cache_hits": PREFIX_CACHE_HITS,
    "vllm:iteration_tokens_total": TOKENS_PER_STEP,  # a histogram whose name ends in _total
    "vllm:time_to_first_token_seconds": TTFT,
    "vllm:inter_token_latency_seconds": ITL,
    "vllm:e2e_request_latency_seconds": E2E,
    "vllm:request_queue_time_seconds": QUEUE_TIME,
    "vllm:request_prefill_time_seconds": PREFILL_TIME,
    "vllm:request_decode_time_seconds": DECODE_TIME,
    "vllm:estimated_flops_per_gpu": ESTIMATED_FLOPS,
    "vllm:estimated_read_bytes_per_gpu": ESTIMATED_READ_BYTES,
    "vllm:estimated_write_bytes_per_gpu": ESTIMATED_WRITE_BYTES,
    "vllm:num_requests_waiting_by_reason": REQUESTS_WAITING_BY_REASON,
    "vllm:prompt_tokens_cached": PROMPT_TOKENS_CACHED,
    "vllm:request_prefill_kv_computed_tokens": PREFILL_COMPUTED_TOKENS,
}
# Families a current vLLM exports only when asked: with --kv-cache-metrics (sampled blocks,
# recorded at eviction) and with speculative decoding.
VLLM_ON_REQUEST = {
    "vllm:kv_block_lifetime_seconds": KV_BLOCK_LIFETIME,
    "vllm:kv_block_idle_before_evict_seconds": KV_BLOCK_IDLE_BEFORE_EVICT,
    "vllm:kv_block_reuse_gap_seconds": KV_BLOCK_REUSE_GAP,
    "vllm:spec_decode_num_drafts": SPEC_DRAFTS,
    "vllm:spec_decode_num_draft_tokens": SPEC_DRAFT_TOKENS,
    "vllm:spec_decode_num_accepted_tokens": SPEC_ACCEPTED_TOKENS,
    "vllm:spec_decode_num_accepted_tokens_per_pos": SPEC_ACCEPTED_PER_POSITION,
}
# Older releases' names for the same signals, absent from a current vLLM's /metrics: why each is gone.
VLLM_RETIRED = {
    "vllm:gpu_cache_usage_perc": (
        KV_USAGE,
        "renamed vllm:kv_cache_usage_perc (deprecated mid-2025, removed late 2025)",
    ),
    "vllm:time_per_output_token_seconds": (ITL, "renamed vllm:inter_token_latency_seconds (the per-gap histogram)"),
}
VLLM = _table({**VLLM_CURRENT, **VLLM_ON_REQUEST, **{raw: signal for raw, (signal, _) in VLLM_RETIRED.items()}})

SGLANG = _table(
    {
        "sglang:num_running_reqs": REQUESTS_RUNNING,
        "sglang:num_queue_reqs": REQUESTS_WAITING,
        "sglang:token_usage": KV_USAGE,
        # The counter; `sglang:num_retracted_reqs` is a per-batch gauge and keeps its raw name.
        "sglang:num_retracted_requests": PREEMPTIONS,
        "sglang:prompt_tokens": PROMPT_TOKENS,
        "sglang:generation_tokens": GENERATION_TOKENS,
        "sglang:time_to_first_token_seconds": TTFT,
        "sglang:inter_token_latency_seconds": ITL,
        "sglang:e2e_request_latency_seconds": E2E,
        "sglang:queue_time_seconds": QUEUE_TIME,
        "sglang:per_stage_req_latency_seconds": STAGE_TIME,
        "sglang:cached_tokens": PROMPT_TOKENS_CACHED,  # label cache_source (device, host, storage_*)
        "sglang:cache_hit_rate": PREFIX_CACHE_HIT_RATE,
        "sglang:gen_throughput": GENERATION_THROUGHPUT,
    }
)

# llama.cpp's server (`--metrics`). Its prompt-token counter excludes cached tokens; it has no KV
# gauge and no latency histograms; the busy-slot figure is an average since start. Its slot cap
# is not on the page: GET /props says it (loadlab/collect/slots.py).
LLAMACPP_CURRENT = {
    "llamacpp:requests_processing": REQUESTS_RUNNING,
    "llamacpp:requests_deferred": REQUESTS_WAITING,
    "llamacpp:prompt_tokens": PROMPT_TOKENS,
    "llamacpp:prompt_tokens_cached": PROMPT_TOKENS_CACHED,
    "llamacpp:tokens_predicted": GENERATION_TOKENS,
    "llamacpp:n_decode": ENGINE_STEPS,
    "llamacpp:n_busy_slots_per_decode": BATCH_SIZE_MEAN,
    "llamacpp:prompt_tokens_seconds": PROMPT_THROUGHPUT,
    "llamacpp:predicted_tokens_seconds": GENERATION_THROUGHPUT,
    "llamacpp:spec_decode_num_drafts": SPEC_DRAFTS,  # (zero without a draft model)
    "llamacpp:spec_decode_num_draft_tokens": SPEC_DRAFT_TOKENS,
    "llamacpp:spec_decode_num_accepted_tokens": SPEC_ACCEPTED_TOKENS,
}
# Only once a draft model's tokens were accepted (one series per draft position).
LLAMACPP_ON_REQUEST = {
    "llamacpp:spec_decode_num_accepted_tokens_per_pos": SPEC_ACCEPTED_PER_POSITION,
}
LLAMACPP = _table({**LLAMACPP_CURRENT, **LLAMACPP_ON_REQUEST})

TGI = _table(
    {
        "tgi_batch_current_size": REQUESTS_RUNNING,
        "tgi_queue_size": REQUESTS_WAITING,
        "tgi_request_queue_duration": QUEUE_TIME,
        # Per request mean, not per gap: the closest TGI has to an inter-token latency.
        "tgi_request_mean_time_per_token_duration": ITL,
        "tgi_request_duration": E2E,
        "tgi_batch_forward_duration": STEP_TIME,  # label method="prefill"|"decode"
    }
)

# trtllm-serve exposes `trtllm_*`; some front ends (Dynamo) re-export them as `trtllm:*`.
_TRTLLM = {
    "num_requests_running": REQUESTS_RUNNING,
    "num_requests_waiting": REQUESTS_WAITING,
    "kv_cache_utilization": KV_USAGE,
    "time_to_first_token_seconds": TTFT,
    "time_per_output_token_seconds": ITL,
    "e2e_request_latency_seconds": E2E,
    "request_queue_time_seconds": QUEUE_TIME,
    "iteration_latency_seconds": STEP_TIME,
    "request_prefill_time_seconds": PREFILL_TIME,
    "request_decode_time_seconds": DECODE_TIME,
    "prompt_tokens": PROMPT_TOKENS,
    "generation_tokens": GENERATION_TOKENS,
    "prompt_cached_tokens": PROMPT_TOKENS_CACHED,
    "kv_cache_hit_rate": PREFIX_CACHE_HIT_RATE,
    "spec_decode_num_draft_tokens": SPEC_DRAFT_TOKENS,
    "spec_decode_num_accepted_tokens": SPEC_ACCEPTED_TOKENS,
}
TRTLLM = _table({f"trtllm{sep}{name}": signal for name, signal in _TRTLLM.items() for sep in ("_", ":")})

# NVIDIA Dynamo's HTTP front end (its engines' own pages are scraped apart). "Queued" lasts until
# a request's first token, prefill included; "in flight" counts queued and running together
# (`inflight_requests` was renamed `active_requests`).
DYNAMO = _table(
    {
        "dynamo_frontend_queued_requests": REQUESTS_WAITING,
        "dynamo_frontend_inflight_requests": REQUESTS_IN_FLIGHT,
        "dynamo_frontend_active_requests": REQUESTS_IN_FLIGHT,
        "dynamo_frontend_time_to_first_token_seconds": TTFT,
        "dynamo_frontend_inter_token_latency_seconds": ITL,
        "dynamo_frontend_request_duration_seconds": E2E,
        "dynamo_frontend_output_tokens": GENERATION_TOKENS,
        "dynamo_frontend_model_max_num_seqs": RUNNING_CAP,
    }
)

# The bundled reference server speaks vLLM's names (tokens per step too) plus these engine-internal histograms.
REFERENCE = _table(
    {
        "loadlab_server_step_seconds": STEP_TIME,  # label phase="prefill"|"decode"|"mixed"
        "loadlab_server_batch_size": BATCH_SIZE,  # label phase, as step time
        "loadlab_server_collective_seconds": COLLECTIVE_TIME,
        "loadlab_server_max_num_seqs": RUNNING_CAP,
    }
)

# dcgm-exporter, as scraped by a Prometheus server. Profiling fields are already 0..1.
DCGM = {
    "DCGM_FI_DEV_GPU_UTIL": SignalMapping(GPU_UTIL, scale=0.01),  # percent
    "DCGM_FI_DEV_MEM_COPY_UTIL": SignalMapping(GPU_MEM_UTIL, scale=0.01),  # percent
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": SignalMapping(GPU_GR_ENGINE_ACTIVE),
    "DCGM_FI_PROF_SM_ACTIVE": SignalMapping(GPU_SM_ACTIVE),
    "DCGM_FI_PROF_SM_OCCUPANCY": SignalMapping(GPU_SM_OCCUPANCY),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": SignalMapping(GPU_TENSOR_ACTIVE),
    "DCGM_FI_PROF_DRAM_ACTIVE": SignalMapping(GPU_DRAM_ACTIVE),
    "DCGM_FI_DEV_FB_USED": SignalMapping(GPU_MEM_USED, scale=1024 * 1024),  # MiB
}

# `loadlab gpu-exporter` on a remote GPU host serves each `gpu_<x>` signal of GpuCollector as
# `loadlab_gpu_<x>`: scraped back, it is the same canonical signal.
GPU_EXPORTER_PREFIX = "loadlab_"
GPU_EXPORTER = {GPU_EXPORTER_PREFIX + name: SignalMapping(name) for name in gpu_signal_names()}

SERVER_FAMILIES: dict[str, dict[str, SignalMapping]] = {
    "vllm": VLLM,
    "sglang": SGLANG,
    "tgi": TGI,
    "trtllm": TRTLLM,
    "llamacpp": LLAMACPP,
    "dynamo": DYNAMO,
    "reference": REFERENCE,
}
ALL_MAPPINGS: dict[str, SignalMapping] = {
    raw: m for table in (*SERVER_FAMILIES.values(), DCGM, GPU_EXPORTER) for raw, m in table.items()
}

# Sample-name suffixes of counters and histograms, and what they become on the canonical name.
_SUFFIXES = {"_bucket": "", "_sum": "_sum", "_count": "_count", "_total": ""}


def canonical_name(sample_name: str) -> SignalMapping:
    """Where one exposed sample (e.g. `vllm:e2e_request_latency_seconds_bucket`) lands: its
    signal and the factor applied to its value. Unknown names come back unchanged, scale 1.
    """
    mapping = ALL_MAPPINGS.get(sample_name)
    if mapping is not None:
        return mapping
    for suffix, canonical_suffix in _SUFFIXES.items():
        if sample_name.endswith(suffix):
            mapping = ALL_MAPPINGS.get(sample_name[: -len(suffix)])
            if mapping is not None:
                # Histogram sums are in the metric's own unit; counts are never scaled.
                scale = 1.0 if canonical_suffix == "_count" else mapping.scale
                return SignalMapping(mapping.signal + canonical_suffix, scale)
    return SignalMapping(sample_name)


# Families every Prometheus client library adds: never an engine's own signal.
RUNTIME_FAMILIES = ("python_", "process_", "go_", "promhttp_", "http_", "tokio_")
# The canonical signals an engine's page can land on (GPU exporters excluded).
ENGINE_SIGNALS = frozenset(m.signal for table in SERVER_FAMILIES.values() for m in table.values())


def family_of(sample_name: str) -> str:
    """The metric family a stored raw sample name belongs to: without `_bucket`, `_sum`,
    `_count`, `_total` or `_created`."""
    for suffix in ("_bucket", "_sum", "_count", "_total", "_created"):
        if sample_name.endswith(suffix):
            return sample_name[: -len(suffix)]
    return sample_name


def unused_families(signal_names: list[str]) -> list[str] | None:
    """The engine families of one server's samples when none maps onto a canonical signal
    (sorted, runtime families left out); None when at least one does, so the maps were used."""
    if any(family_of(name) in ENGINE_SIGNALS for name in signal_names):
        return None
    families = {family_of(name) for name in signal_names}
    return sorted(f for f in families if not f.startswith(RUNTIME_FAMILIES))


def unused_families_line(signal_names: list[str], shown: int = 5) -> str | None:
    """One line naming what a server's metrics page held that loadlab does not map, or None."""
    families = unused_families(signal_names)
    if families is None:
        return None
    if not families:
        return "server metrics: only runtime families (python_*, process_*, ...), no engine signal loadlab maps"
    more = f" and {len(families) - shown} more" if len(families) > shown else ""
    return (
        f"server metrics: {len(families)} families loadlab does not map ({', '.join(families[:shown])}{more}): "
        "not used; the verdict rests on the client's curves"
    )
