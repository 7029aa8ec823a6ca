"""What to change, per binding constraint and per server kind, naming the actual knobs.

The server kind is read from the samples: canonical signals only the reference server exports
(`batch_size`, `collective_time`), else the prefix of the raw series names that no mapping knew
(every engine exports some: `vllm:request_success_total`, `sglang:num_used_tokens`, `tgi_request_count`,
`trtllm_num_paused_requests`).
"""

from __future__ import annotations

from loadlab.analyze.histograms import SampleIndex
from loadlab.collect import signals as sig
from loadlab.metrics.verdicts import (
    CLIENT,
    COMPUTE,
    ENGINE_OVERHEAD,
    INSUFFICIENT_DATA,
    KV_CAPACITY,
    MEMORY_BANDWIDTH,
    NETWORK,
    SCHEDULING,
)

VLLM, SGLANG, TGI, TRTLLM, REFERENCE, UNKNOWN_SERVER = "vLLM", "SGLang", "TGI", "TensorRT-LLM", "reference server", ""
LLAMACPP = "llama.cpp"
RAW_PREFIXES = {
    "vllm:": VLLM,
    "sglang:": SGLANG,
    "tgi_": TGI,
    "trtllm_": TRTLLM,
    "trtllm:": TRTLLM,
    "llamacpp:": LLAMACPP,
}

# constraint -> server kind -> advice lines. UNKNOWN_SERVER holds the advice for any server.
ADVICE: dict[str, dict[str, list[str]]] = {
    CLIENT: {
        UNKNOWN_SERVER: [
            "the load generator limited this run: add processes (--processes N) or hosts (distributed mode), "
            "then rerun; no server verdict is trusted until then"
        ]
    },
    KV_CAPACITY: {
        VLLM: [
            "raise --gpu-memory-utilization (more KV blocks)",
            "lower --max-num-seqs or --max-num-batched-tokens",
            "--kv-cache-dtype fp8 halves KV memory",
            "more --tensor-parallel-size spreads the KV cache",
        ],
        SGLANG: [
            "raise --mem-fraction-static",
            "lower --max-running-requests",
            "--kv-cache-dtype fp8_e5m2",
            "more --tp-size",
        ],
        TGI: [
            "lower --max-batch-total-tokens / --max-total-tokens to what fits, or shard over more GPUs (--num-shard)"
        ],
        TRTLLM: [
            "raise kv_cache_config.free_gpu_memory_fraction",
            "lower max_batch_size / max_num_tokens",
            "FP8 KV cache (kv_cache_config.dtype)",
        ],
        REFERENCE: ["raise --num-kv-blocks (or --kv-memory-gb)", "lower --max-num-seqs"],
        LLAMACPP: ["raise --ctx-size with --parallel (each slot gets ctx-size / parallel)", "--cache-type-k/-v q8_0"],
        UNKNOWN_SERVER: ["give the KV cache more memory, or admit fewer sequences at once"],
    },
    MEMORY_BANDWIDTH: {
        VLLM: [
            "bigger batches if KV allows (--max-num-seqs)",
            "weight quantization (FP8/AWQ) or --kv-cache-dtype fp8",
            "speculative decoding (--speculative-config)",
        ],
        SGLANG: [
            "bigger batches (--max-running-requests)",
            "--quantization fp8",
            "speculative decoding (--speculative-algorithm)",
        ],
        TGI: ["bigger batches (--max-batch-size)", "--quantize fp8/awq", "speculative decoding (--speculate)"],
        TRTLLM: ["bigger max_batch_size", "FP8 weights and KV cache", "speculative decoding"],
        REFERENCE: ["bigger batches (--max-num-seqs)", "a smaller --dtype (bfloat16)"],
        LLAMACPP: ["more slots (--parallel, --ctx-size with it)", "a quantized GGUF (Q4_K_M, Q8_0)", "--model-draft"],
        UNKNOWN_SERVER: ["bigger batches, weight/KV quantization, speculative decoding"],
    },
    COMPUTE: {
        VLLM: [
            "more replicas or GPUs",
            "FP8",
            "tune --max-num-batched-tokens (chunked prefill)",
            "prefill/decode disaggregation",
        ],
        SGLANG: ["more replicas (--dp-size) or GPUs", "--quantization fp8", "tune --chunked-prefill-size"],
        TGI: ["more shards or replicas", "--quantize fp8", "lower --max-batch-prefill-tokens"],
        TRTLLM: ["more GPUs or replicas", "FP8", "tune max_num_tokens"],
        REFERENCE: ["--device cuda", "lower --max-num-batched-tokens or set --long-prefill-token-threshold"],
        LLAMACPP: ["offload layers to a GPU (--n-gpu-layers)", "more --threads-batch", "tune --ubatch-size"],
        UNKNOWN_SERVER: ["more replicas or GPUs, lower precision, smaller prefill chunks"],
    },
    SCHEDULING: {
        VLLM: [
            "raise --max-num-seqs",
            "keep CUDA graphs on (no --enforce-eager)",
            "more API server processes (--api-server-count)",
        ],
        SGLANG: ["raise --max-running-requests", "lower --schedule-conservativeness"],
        TGI: ["raise --max-concurrent-requests and --max-batch-size"],
        TRTLLM: ["raise max_batch_size", "scheduler_config capacity_scheduler_policy MAX_UTILIZATION"],
        REFERENCE: ["raise --max-num-seqs", "raise --max-num-batched-tokens"],
        LLAMACPP: ["raise --parallel (slots), and --ctx-size with it: each slot gets ctx-size / parallel"],
        UNKNOWN_SERVER: ["raise the cap on running sequences; check the server's admission policy"],
    },
    NETWORK: {
        VLLM: [
            "less --tensor-parallel-size, more data-parallel replicas (--data-parallel-size)",
            "check NVLink/P2P is used (NCCL_P2P_DISABLE unset)",
        ],
        SGLANG: ["less --tp-size, more --dp-size", "check NVLink/P2P is used"],
        TGI: ["fewer --num-shard, more replicas"],
        TRTLLM: ["less tensor parallelism, more replicas", "check NVLink/P2P is used"],
        REFERENCE: ["lower --tensor-parallel (gloo over loopback is slow on CPU)"],
        UNKNOWN_SERVER: ["less tensor parallelism in favour of data-parallel replicas"],
    },
    # The engine's own work per step (host side: scheduling, sampling, detokenising, kernel
    # launches, the API server) sets the step time: make it cheaper or spread it over more tokens.
    ENGINE_OVERHEAD: {
        VLLM: [
            "keep CUDA graphs on (no --enforce-eager): one launch per step instead of one per kernel",
            "--async-scheduling: schedule the next step while this one runs",
            "more API server processes (--api-server-count) to tokenize and stream off the engine's core",
            "larger batches (raise --max-num-seqs, more concurrent users): the per-step cost is shared",
        ],
        SGLANG: [
            "keep CUDA graphs on (no --disable-cuda-graph; raise --cuda-graph-max-bs to the batch you run)",
            "--enable-torch-compile for small batches",
            "overlap scheduling stays on (no --disable-overlap-schedule)",
            "larger batches (--max-running-requests)",
        ],
        TGI: [
            "CUDA graphs for the batch sizes you run (--cuda-graphs 1,2,4,8,...)",
            "larger batches (--max-batch-size, --max-concurrent-requests)",
        ],
        TRTLLM: [
            "CUDA graphs on (cuda_graph_config) with batch sizes up to max_batch_size",
            "overlap scheduling on (no disable_overlap_scheduler)",
            "larger max_batch_size",
        ],
        LLAMACPP: [
            "more parallel slots (--parallel) so one step decodes more sequences",
            "offload every layer to the GPU (--n-gpu-layers 999) and keep --flash-attn on",
        ],
        REFERENCE: [
            "larger batches (--max-num-seqs, more users): its Python work per step is shared by more tokens",
            "--device cuda, or a larger model: the engine's per-step work is the same, the useful work larger",
        ],
        UNKNOWN_SERVER: [
            "the engine's own per-step work binds: CUDA graphs, asynchronous scheduling, more API-server "
            "processes, larger batches; a faster device will not help"
        ],
    },
    INSUFFICIENT_DATA: {UNKNOWN_SERVER: []},
}
MFU_HINT = "rerun vLLM with --enable-mfu-metrics: its FLOP and byte estimates decide compute vs memory bandwidth"


def server_kind(samples: SampleIndex) -> str:
    """Which server produced the samples (UNKNOWN_SERVER when none of them tells)."""
    if samples.has(sig.BATCH_SIZE + "_count") or samples.has(sig.COLLECTIVE_TIME + "_count"):
        return REFERENCE
    for name in samples.names():
        for prefix, kind in RAW_PREFIXES.items():
            if name.startswith(prefix):
                return kind
    return UNKNOWN_SERVER


def advice_for(constraint: str, kind: str, has_mfu: bool) -> list[str]:
    """The advice lines for a verdict on a server of `kind`, each naming the server."""
    table = ADVICE.get(constraint, {})
    lines = table.get(kind) or table.get(UNKNOWN_SERVER, [])
    label = f"{kind}: " if kind and kind in table else ""
    out = [label + line for line in lines]
    if kind == VLLM and not has_mfu and constraint in (MEMORY_BANDWIDTH, COMPUTE, ENGINE_OVERHEAD):
        out.append(f"{VLLM}: {MFU_HINT}")
    return out
