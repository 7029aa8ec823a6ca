"""The server kind from the metric names present, and advice naming its knobs."""

from __future__ import annotations

import pytest

from loadlab.analyze.advice import LLAMACPP, REFERENCE, SGLANG, TGI, TRTLLM, VLLM, advice_for, server_kind
from loadlab.analyze.histograms import SampleIndex
from loadlab.store.schema import Sample
from loadlab.store.tables import samples_table
from tests.support.records import T


def kind_of(*names: str) -> str:
    samples = [Sample(T, "server", n, 1.0, {}) for n in ("kv_usage", *names)]
    return server_kind(SampleIndex(samples_table(samples).to_pandas()))


@pytest.mark.parametrize(
    "names, kind",
    [
        (("vllm:request_success_total",), VLLM),
        (("sglang:num_used_tokens",), SGLANG),
        (("tgi_request_count",), TGI),
        (("trtllm_num_paused_requests",), TRTLLM),
        (("llamacpp:n_tokens_max",), LLAMACPP),
        (("batch_size_count", "vllm:request_success_total"), REFERENCE),  # speaks vLLM's names, plus its own
        ((), ""),
    ],
)
def test_server_kind_from_the_names_present(names, kind):
    assert kind_of(*names) == kind


def test_advice_names_the_knob_of_the_server():
    assert any("--gpu-memory-utilization" in a for a in advice_for("kv_capacity", VLLM, False))
    assert any("--mem-fraction-static" in a for a in advice_for("kv_capacity", SGLANG, False))
    assert any("--num-kv-blocks" in a for a in advice_for("kv_capacity", REFERENCE, False))
    assert advice_for("scheduling", REFERENCE, False)[0] == "reference server: raise --max-num-seqs"
    assert any("--enable-mfu-metrics" in a for a in advice_for("memory_bandwidth", VLLM, False))
    assert not any("--enable-mfu-metrics" in a for a in advice_for("memory_bandwidth", VLLM, True))
    assert advice_for("compute", "", False) == ["more replicas or GPUs, lower precision, smaller prefill chunks"]


def test_engine_overhead_advice_makes_the_engines_own_work_cheaper_not_the_device_faster():
    vllm = " ".join(advice_for("engine_overhead", VLLM, True))
    for knob in ("--enforce-eager", "--async-scheduling", "--api-server-count", "--max-num-seqs"):
        assert knob in vllm
    assert not any("quantization" in a for a in advice_for("engine_overhead", VLLM, True))
    assert any("--cuda-graph-max-bs" in a for a in advice_for("engine_overhead", SGLANG, True))
    assert any("--cuda-graphs" in a for a in advice_for("engine_overhead", TGI, True))
    assert any("--parallel" in a for a in advice_for("engine_overhead", LLAMACPP, True))
    assert advice_for("engine_overhead", REFERENCE, True)[0].startswith("reference server: larger batches")
    assert any("--enable-mfu-metrics" in a for a in advice_for("engine_overhead", VLLM, False))
