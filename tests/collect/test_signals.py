"""Each server family's metric names land on the canonical signals of docs/signals.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadlab.collect.prom_text import parse_metrics_text
from loadlab.collect.signals import canonical_name
from loadlab.store.schema import Sample

FIXTURES = Path(__file__).parent / "fixtures"


def scrape(fixture: str) -> list[Sample]:
    return parse_metrics_text((FIXTURES / fixture).read_text(), time=100.0, source="server")


def value(samples: list[Sample], signal: str, **labels: str) -> float:
    """The value of the one sample with this signal and (at least) these labels."""
    found = [s for s in samples if s.signal == signal and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{signal} {labels}: {len(found)} samples"
    return found[0].value


def signals(samples: list[Sample]) -> set[str]:
    return {s.signal for s in samples}


HISTOGRAM_PARTS = ("", "_sum", "_count")


def test_vllm_current_names():
    samples = scrape("vllm.txt")
    assert value(samples, "requests_running") == 12
    assert value(samples, "requests_waiting") == 3
    assert value(samples, "kv_usage") == 0.4375
    assert value(samples, "preemptions") == 2
    assert value(samples, "prompt_tokens") == 20480
    assert value(samples, "generation_tokens") == 15360
    for hist in ("ttft", "itl", "e2e", "queue_time", "prefill_time", "decode_time", "tokens_per_step"):
        assert {hist + part for part in HISTOGRAM_PARTS} <= signals(samples), hist
    assert value(samples, "tokens_per_step", le="16.0") == 1200
    assert value(samples, "itl_count") == 15240
    assert value(samples, "prefix_cache_queries") == 20480  # tokens
    assert value(samples, "prefix_cache_hits") == 12288


def test_vllm_work_estimates_of_enable_mfu_metrics_are_canonical_counters():
    samples = scrape("vllm.txt")
    assert value(samples, "estimated_flops") == 3.2e15
    assert value(samples, "estimated_read_bytes") == 1.6e13
    assert value(samples, "estimated_write_bytes") == 4.0e11
    assert not any(s.signal.startswith("vllm:estimated") for s in samples)


def test_vllm_older_names_map_to_the_same_signals():
    samples = scrape("vllm_old.txt")
    assert value(samples, "kv_usage") == 0.91
    assert value(samples, "itl", le="0.025") == 90
    assert value(samples, "itl_sum") == 1.5
    assert value(samples, "preemptions") == 7


def test_created_timestamps_are_dropped():
    names = signals(scrape("vllm_old.txt"))
    assert not any(n.endswith("_created") for n in names)


def test_labels_are_kept():
    samples = scrape("vllm.txt")
    running = next(s for s in samples if s.signal == "requests_running")
    assert running.labels == {"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}
    assert running.time == 100.0 and running.source == "server"


def test_unknown_series_keep_their_raw_names():
    samples = scrape("vllm.txt")
    assert value(samples, "python_gc_objects_collected_total", generation="0") == 7741
    assert value(samples, "vllm:request_success_total", finished_reason="length") == 120


def test_sglang():
    samples = scrape("sglang.txt")
    assert value(samples, "requests_running") == 24
    assert value(samples, "requests_waiting") == 5
    assert value(samples, "kv_usage") == 0.28
    # The cumulative counter is the preemption signal; the per-batch gauge keeps its raw name.
    assert value(samples, "preemptions") == 48
    assert value(samples, "sglang:num_retracted_reqs") == 1
    assert value(samples, "generation_tokens") == 7.557572e06
    for hist in ("ttft", "itl", "e2e", "queue_time"):
        assert {hist + part for part in HISTOGRAM_PARTS} <= signals(samples), hist


def test_tgi():
    samples = scrape("tgi.txt")
    assert value(samples, "requests_running") == 16
    assert value(samples, "requests_waiting") == 6
    assert value(samples, "queue_time_count") == 300
    assert value(samples, "itl", le="0.05") == 295
    assert value(samples, "e2e_sum") == 1200
    assert value(samples, "step_time_count", method="decode") == 24010
    assert value(samples, "step_time", method="prefill", le="+Inf") == 300
    assert "kv_usage" not in signals(samples)  # TGI has none: absent, not invented


def test_tensorrt_llm():
    samples = scrape("trtllm.txt")
    assert value(samples, "requests_running") == 32
    assert value(samples, "requests_waiting") == 9
    assert value(samples, "kv_usage") == 0.97
    assert value(samples, "ttft_count") == 50
    assert value(samples, "itl_sum") == 16
    assert value(samples, "queue_time", le="0.1") == 45
    assert value(samples, "step_time_count") == 1000
    assert value(samples, "trtllm_num_paused_requests") == 0


def test_reference_server():
    samples = scrape("reference.txt")
    assert value(samples, "requests_running") == 8
    assert value(samples, "kv_usage") == 0.5
    assert value(samples, "step_time_count", phase="decode") == 400
    assert value(samples, "step_time_sum", phase="prefill") == 0.16
    assert value(samples, "batch_size", le="8.0") == 420
    assert value(samples, "tokens_per_step_sum") == 5200
    assert value(samples, "collective_time_sum") == 0.5
    assert value(samples, "collective_time", le="0.001") == 300


def test_dcgm_series_become_gpu_signals_in_ratios_and_bytes():
    samples = parse_metrics_text((FIXTURES / "dcgm.txt").read_text(), time=1.0, source="prometheus")
    assert value(samples, "gpu_util", gpu="1") == pytest.approx(0.91)
    assert value(samples, "gpu_sm_active") == 0.62
    assert value(samples, "gpu_tensor_active") == 0.21
    assert value(samples, "gpu_dram_active") == 0.71
    assert value(samples, "gpu_mem_used") == 74000 * 1024 * 1024
    assert value(samples, "DCGM_FI_DEV_SM_CLOCK") == 1980


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("vllm:iteration_tokens_total_bucket", "tokens_per_step"),
        ("vllm:iteration_tokens_total_sum", "tokens_per_step_sum"),
        ("vllm:num_preemptions_total", "preemptions"),
        ("vllm:prefix_cache_hits_total", "prefix_cache_hits"),
        ("vllm:num_preemptions", "preemptions"),
        ("trtllm:kv_cache_utilization", "kv_usage"),
        ("vllm:ttft_made_up", "vllm:ttft_made_up"),
        ("vllm:num_requests_running_bucket", "requests_running"),
    ],
)
def test_canonical_name_strips_counter_and_histogram_suffixes(raw, expected):
    assert canonical_name(raw).signal == expected


def test_histogram_count_is_not_scaled():
    # A scaled metric's sum carries the scale; its count stays a count.
    assert canonical_name("DCGM_FI_DEV_GPU_UTIL_count").scale == 1.0
    assert canonical_name("DCGM_FI_DEV_GPU_UTIL_sum").scale == 0.01


def test_two_raw_names_for_one_signal_give_one_series():
    # vLLM exported the old and new KV names side by side for a while; the first one wins.
    text = (
        'vllm:kv_cache_usage_perc{model_name="m"} 0.5\n'
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
        'vllm:kv_cache_usage_perc{model_name="other"} 0.25\n'
    )
    samples = parse_metrics_text(text, time=1.0, source="server")
    assert sorted((s.labels["model_name"], s.value) for s in samples) == [("m", 0.5), ("other", 0.25)]
