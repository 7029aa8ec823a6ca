"""The twin's step times and KV capacity against rooflines worked out by hand (figures: docs/twin.md)."""

from __future__ import annotations

import pytest

from reference_server.accounting import ChunkWork
from reference_server.twin.spec import TwinSpec, parse_twin
from reference_server.twin.timing import TimingModel

MIB = 2**20


def test_batch_1_decode_of_llama_3_8b_on_h100_is_weight_read_bound() -> None:
    model = TimingModel(TwinSpec("h100", "llama-3-8b"))
    t = model.step_time(model.cost.step([ChunkWork(1, 1000, True)]))
    # Bytes: 15,009,841,152 of weights + 131,072,000 of KV read + 131,072 written, at 0.75 x 3.35 TB/s.
    assert t.memory == pytest.approx(15_141_044_224 / (0.75 * 3.35e12))  # 6.026 ms
    # 15.53 GFLOP at 0.75 x 989 TFLOP/s: far below the memory time.
    assert t.compute == pytest.approx(15_534_129_152 / (0.75 * 989e12))  # 0.021 ms
    assert t.collective == 0
    assert t.total == pytest.approx(6.02629e-3 + 0.5e-3 + 5e-6, rel=1e-5)  # 6.53 ms: vLLM measures 6.5


def test_prefill_of_llama_3_70b_on_four_h100s_is_compute_bound_with_all_reduces() -> None:
    model = TimingModel(parse_twin("H100:llama-3-70b:tp4"))
    t = model.step_time(model.cost.step([ChunkWork(2048, 0, True)]))
    flops = (2 * 68_451_041_280 * 2048 + 2 * 128_256 * 8192 + 4 * 80 * 64 * 128 * 2_098_176) / 4
    assert t.compute == pytest.approx(flops / (0.75 * 989e12))  # 96 ms
    assert t.memory < t.compute
    # 2 all-reduces x 80 layers of 2048 x 8192 bf16 values: 10 us + ring 2*3/4 x 33.5 MB at 0.8 x 450 GB/s.
    assert t.collective == pytest.approx(160 * (10e-6 + 1.5 * 33_554_432 / (0.8 * 450e9)))  # 24 ms
    assert t.total == pytest.approx(t.compute + t.collective + 0.5e-3 + 5e-6)


def test_decode_stays_nearly_flat_in_batch_size_until_the_kv_reads_add_up() -> None:
    model = TimingModel(TwinSpec("h100", "llama-3-8b"))
    one = model.step_time(model.cost.step([ChunkWork(1, 500, True)])).total
    many = model.step_time(model.cost.step([ChunkWork(1, 500, True)] * 32)).total
    assert many / one < 1.3  # 32x the tokens for < 1.3x the time: where continuous batching wins


def test_kv_capacity_of_llama_3_8b_on_h100() -> None:
    model = TimingModel(TwinSpec("h100", "llama-3-8b"))
    budget = 81559 * MIB * 0.9  # 76.97 GB
    weights = 8_030_261_248 * 2
    activations = 2048 * (2 * 4096 + 2 * 14336) * 2 + 32 * 128_256 * 4 + 1.5 * 2**30
    assert model.kv_capacity_tokens(0.9, 2048, 32) == int((budget - weights - activations) // 131_072) == 451_127


def test_a_model_that_does_not_fit_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="141.1 GB of weights per GPU .* use more GPUs"):
        TimingModel(TwinSpec("h100", "llama-3-70b")).kv_capacity_tokens(0.9, 2048, 32)
    with pytest.raises(ValueError, match="cannot be split over 3 GPUs"):
        TimingModel(TwinSpec("h100", "llama-3-8b", tp=3))


@pytest.mark.parametrize(
    "text, message",
    [
        ("h100", "GPU:MODEL"),
        ("v100:llama-3-8b", "unknown GPU 'v100'; choose from h100"),
        ("h100:gpt-4", "unknown model 'gpt-4'"),
        ("h100:llama-3-8b:tp0", "tpN with N in 1..8"),
        ("h100:llama-3-8b:x2", "tpN"),
    ],
)
def test_a_bad_twin_spec_names_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_twin(text)
