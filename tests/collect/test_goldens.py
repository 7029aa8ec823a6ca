"""Each engine's metric map against an exposition text taken from that engine's own source.

The goldens in tests/collect/goldens/ say in their header which repository, file and commit they
were built from. Every family a golden holds is either mapped onto a canonical signal or listed
here as kept raw, so a new engine version with a new family forces a decision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loadlab.collect.prom_text import parse_metrics_text
from loadlab.collect.signals import RUNTIME_FAMILIES, canonical_name, unused_families, unused_families_line
from loadlab.store.schema import Sample

GOLDENS = Path(__file__).parent / "goldens"


@dataclass
class Golden:
    """What one engine's page must give: canonical signals with values (labels narrow the
    series), and the families deliberately left under their raw names."""

    values: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    histograms: tuple[str, ...] = ()
    kept_raw: frozenset[str] = field(default_factory=frozenset)


def at(signal: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return signal, tuple(sorted(labels.items()))


EXPECTED = {
    "sglang-main-2026-12.txt": Golden(
        {
            at("requests_running"): 48,
            at("requests_waiting"): 17,
            at("kv_usage"): 0.75,
            at("preemptions"): 31,
            at("prompt_tokens"): 1024000,
            at("generation_tokens"): 256000,
            at("prompt_tokens_cached", cache_source="device"): 400000,
            at("prefix_cache_hit_rate"): 0.42,
            at("generation_throughput"): 2150.5,
            at("stage_time_count", stage="prefill_waiting"): 500,
            at("queue_time_count"): 500,
        },
        histograms=("ttft", "itl", "e2e", "queue_time", "stage_time"),
        kept_raw=frozenset(
            {
                "sglang:num_used_tokens",
                "sglang:num_grammar_queue_reqs",
                "sglang:max_total_num_tokens",
                "sglang:spec_accept_length",
                "sglang:num_retracted_reqs",
                "sglang:num_requests",
                "sglang:num_aborted_requests",
                "sglang:num_retractions",
            }
        ),
    ),
    "llamacpp-master-2026-12.txt": Golden(
        {
            at("requests_running"): 4,
            at("requests_waiting"): 11,
            at("prompt_tokens"): 52311,
            at("prompt_tokens_cached"): 20480,
            at("generation_tokens"): 16384,
            at("engine_steps"): 5120,
            at("batch_size_mean"): 3.2,
            at("prompt_throughput"): 1267.35,
            at("generation_throughput"): 52.77,
            at("spec_draft_tokens"): 900,
            at("spec_accepted_tokens"): 610,
            at("spec_drafts"): 300,
            at("spec_accepted_per_position", position="1"): 200,
        },
        kept_raw=frozenset(
            {"llamacpp:prompt_seconds_total", "llamacpp:tokens_predicted_seconds_total", "llamacpp:n_tokens_max"}
        ),
    ),
    "tgi-3.3-2026-01.txt": Golden(
        {
            at("requests_running"): 16,
            at("requests_waiting"): 6,
            at("queue_time_count"): 300,
            at("e2e_sum"): 1200,
            at("step_time_count", method="decode"): 24010,
            at("step_time", method="prefill", le="+Inf"): 300,
        },
        histograms=("queue_time", "itl", "e2e", "step_time"),
        kept_raw=frozenset(
            {
                "tgi_request_count",
                "tgi_request_success",
                "tgi_batch_current_max_tokens",
                "tgi_request_inference_duration",
            }
        ),
    ),
    "trtllm-main-2026.txt": Golden(
        {
            at("requests_running"): 32,
            at("requests_waiting"): 9,
            at("kv_usage"): 0.97,
            at("prefix_cache_hit_rate"): 0.4,
            at("prompt_tokens"): 51200,
            at("generation_tokens"): 12800,
            at("prompt_tokens_cached"): 20480,
            at("ttft_count"): 50,
            at("itl_sum"): 1.6,
            at("queue_time", le="0.3"): 45,
            at("step_time_count"): 1000,
        },
        histograms=("ttft", "itl", "e2e", "queue_time", "prefill_time", "decode_time", "step_time"),
        kept_raw=frozenset({"trtllm_request_success", "trtllm_num_paused_requests", "trtllm_max_num_active_requests"}),
    ),
    "dynamo-frontend-2026.txt": Golden(
        {
            at("requests_waiting"): 7,
            at("requests_in_flight"): 10,
            at("generation_tokens"): 153600,
            at("running_cap"): 3,
            at("ttft_count"): 1200,
            at("e2e_sum"): 4100,
        },
        histograms=("ttft", "itl", "e2e"),
        kept_raw=frozenset(
            {
                "dynamo_frontend_requests",
                "dynamo_frontend_disconnected_clients",
                "dynamo_frontend_input_sequence_tokens",
                "dynamo_frontend_output_sequence_tokens",
                "dynamo_frontend_cached_tokens",
                "dynamo_frontend_model_total_kv_blocks",
                "dynamo_frontend_model_context_length",
            }
        ),
    ),
    "vllm-0.32-live.txt": Golden(
        {
            at("requests_running"): 0,
            at("requests_waiting_by_reason", reason="capacity"): 0,
            at("kv_usage"): 0.0,
            at("prompt_tokens"): 14016,
            at("generation_tokens"): 2048,
            at("prefix_cache_queries"): 14016,
            at("prefix_cache_hits"): 0,
            at("prompt_tokens_cached"): 0,
            at("preemptions"): 0,
            at("prefill_computed_tokens_count"): 64,
            at("kv_block_lifetime_count"): 98,
            at("estimated_flops"): 9.025355776e10,
        },
        histograms=(
            "ttft",
            "itl",
            "e2e",
            "queue_time",
            "prefill_time",
            "decode_time",
            "tokens_per_step",
            "prefill_computed_tokens",
            "kv_block_lifetime",
            "kv_block_idle_before_evict",
            "kv_block_reuse_gap",
        ),
        kept_raw=frozenset(
            {
                "vllm:admission_rejections_total",
                "vllm:cache_config_info",
                "vllm:engine_sleep_state",
                "vllm:external_prefix_cache_hits_total",
                "vllm:external_prefix_cache_queries_total",
                "vllm:mm_cache_hits_total",
                "vllm:mm_cache_queries_total",
                "vllm:prompt_tokens_by_source_total",
                "vllm:prompt_tokens_cached_by_source_total",
                "vllm:request_generation_tokens",
                "vllm:request_inference_time_seconds",
                "vllm:request_max_num_generation_tokens",
                "vllm:request_num_preemptions",
                "vllm:request_params_max_tokens",
                "vllm:request_params_n",
                "vllm:request_prompt_tokens",
                "vllm:request_success_total",
                "vllm:request_time_per_output_token_seconds",
            }
        ),
    ),
    "vllm-0.32-spec-decode.txt": Golden(
        {
            at("spec_drafts"): 300,
            at("spec_draft_tokens"): 900,
            at("spec_accepted_tokens"): 610,
            at("spec_accepted_per_position", position="2"): 130,
        }
    ),
}


def scrape(name: str) -> list[Sample]:
    return parse_metrics_text((GOLDENS / name).read_text(), time=1.0, source="server")


def families(name: str) -> set[str]:
    """The engine families a golden declares (its TYPE lines): without the client library's own
    (python_*, process_*, http_*) and without `_created` gauges (the parser drops their samples)."""
    declared = re.findall(r"^# TYPE (\S+) ", (GOLDENS / name).read_text(), flags=re.MULTILINE)
    return {f for f in declared if not f.startswith(RUNTIME_FAMILIES) and not f.endswith("_created")}


def test_every_golden_is_checked_and_says_where_it_came_from():
    assert {p.name for p in GOLDENS.glob("*.txt")} == set(EXPECTED)
    for path in GOLDENS.glob("*.txt"):
        header = path.read_text().splitlines()[:6]
        assert any(line.startswith("# source: ") for line in header), path.name
        assert any(line.startswith("# commit: ") for line in header), path.name


@pytest.mark.parametrize("golden", sorted(EXPECTED))
def test_canonical_values(golden):
    samples = scrape(golden)
    for (signal, labels), expected in EXPECTED[golden].values.items():
        found = [s for s in samples if s.signal == signal and all(s.labels.get(k) == v for k, v in labels)]
        assert len(found) == 1, f"{golden}: {signal} {dict(labels)}: {len(found)} samples"
        assert found[0].value == pytest.approx(expected), f"{golden}: {signal}"


@pytest.mark.parametrize("golden", sorted(EXPECTED))
def test_histograms_come_whole(golden):
    names = {s.signal for s in scrape(golden)}
    for histogram in EXPECTED[golden].histograms:
        assert {histogram, histogram + "_sum", histogram + "_count"} <= names, f"{golden}: {histogram}"


@pytest.mark.parametrize("golden", sorted(EXPECTED))
def test_every_family_is_mapped_or_deliberately_raw(golden):
    unmapped = {f for f in families(golden) if canonical_name(f).signal == f}
    assert unmapped == EXPECTED[golden].kept_raw


@pytest.mark.parametrize("golden", sorted(EXPECTED))
def test_a_mapped_engine_leaves_no_unused_line(golden):
    names = [s.signal for s in scrape(golden)]
    assert unused_families(names) is None
    assert unused_families_line(names) is None


def test_a_page_of_unknown_families_gets_one_line_naming_them():
    text = (
        "# TYPE ollama_requests gauge\nollama_requests 3\n"
        "# TYPE ollama_load_seconds histogram\n"
        'ollama_load_seconds_bucket{le="+Inf"} 2\nollama_load_seconds_sum 1.5\nollama_load_seconds_count 2\n'
        "python_gc_objects_collected_total 10\n"
    )
    names = [s.signal for s in parse_metrics_text(text, time=1.0, source="server")]
    assert unused_families(names) == ["ollama_load_seconds", "ollama_requests"]
    line = unused_families_line(names)
    assert line is not None and "\n" not in line
    assert "2 families" in line and "ollama_load_seconds, ollama_requests" in line


def test_only_runtime_families_are_named_as_such():
    line = unused_families_line(["process_cpu_seconds_total", "python_info"])
    assert line is not None and "only runtime families" in line
