"""Model runner: step building, KV sizing, and tensor parallel over torch.distributed (gloo on CPU)."""

from __future__ import annotations

import asyncio

import psutil
import pytest
import torch

from reference_server.config import CHOICES, EngineConfig
from reference_server.engine.runner import DTYPES, EngineFault, ModelRunner, Worker, build_step, kv_layout
from reference_server.engine.scheduler import ScheduledChunk
from reference_server.engine.sequence import Sequence
from reference_server.interface import SamplingParams
from tests.support.engine import collect, run_engine

PROMPTS = ["tensor parallel ", "two ranks, one answer: ", "x"]


def test_every_dtype_the_config_accepts_has_a_torch_dtype() -> None:
    assert tuple(DTYPES) == CHOICES["dtype"]


def test_step_puts_decodes_first_and_samples_only_completed_prompts() -> None:
    params = SamplingParams()
    decode = Sequence("d", [1, 2, 3], params, 0.0, output_ids=[4], num_computed=3, block_table=[7])
    chunk = Sequence("c", list(range(40)), params, 0.0, num_computed=16, block_table=[2, 5, 9])
    step, sampled = build_step([ScheduledChunk(chunk, 16), ScheduledChunk(decode, 1)], block_size=16)
    assert step.input_ids.tolist() == [4] + list(range(16, 32))
    assert step.positions.tolist() == [3] + list(range(16, 32))
    assert step.meta.slot_mapping.tolist() == [7 * 16 + 3] + list(range(5 * 16, 6 * 16))
    assert step.sample_rows.tolist() == [0] and sampled == [decode]  # the chunk does not end the prompt
    assert step.meta.decode_mask.tolist() == [[[[True] * 4]]]
    assert step.meta.prefills[0].mask.shape == (16, 32)
    finishing = Sequence("f", list(range(32)), params, 0.0, num_computed=16, block_table=[2, 5])
    _, sampled = build_step([ScheduledChunk(finishing, 16), ScheduledChunk(decode, 1)], block_size=16)
    assert sampled == [decode, finishing]  # row order, not scheduling order


@pytest.mark.parametrize(
    "error, fatal",
    [
        (RuntimeError("a bug"), False),
        (torch.OutOfMemoryError("no memory"), False),
        (torch.AcceleratorError("CUDA error: an illegal memory access"), True),
    ],
)
def test_only_a_broken_device_is_an_engine_fault(monkeypatch, error, fatal) -> None:
    def broken(self, step):
        raise error

    config = EngineConfig(preset="tiny", max_model_len=64, num_kv_blocks=8)
    runner = ModelRunner(config, kv_layout(config))
    monkeypatch.setattr(Worker, "execute", broken)
    step, _ = build_step([ScheduledChunk(Sequence("s", [1, 2], SamplingParams(), 0.0, block_table=[0]), 2)], 16)
    with pytest.raises(EngineFault if fatal else type(error)):
        runner.execute(step)


def test_kv_budget_sets_the_number_of_blocks_and_caps_the_default_context() -> None:
    # tiny: 4 layers x 2 kv heads x 64 dims x 2 (K and V) x 4 bytes = 4 KiB per token
    layout = kv_layout(EngineConfig(preset="tiny", kv_memory_gb=0.004096 * 16, block_size=16))
    assert (layout.num_blocks, layout.max_model_len, layout.blocks_per_slab) == (1000, 1024, 0)
    assert kv_layout(EngineConfig(preset="tiny", tensor_parallel=2, kv_memory_gb=0.004096 * 16)).num_blocks == 2000
    small_pool = kv_layout(EngineConfig(preset="tiny", num_kv_blocks=40, block_size=16))
    assert small_pool.max_model_len == 640  # the preset's 1024 would not fit: capped
    contiguous = kv_layout(EngineConfig(preset="tiny", kv="contiguous", num_kv_blocks=200, max_model_len=1000))
    assert contiguous.blocks_per_slab == 63
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        kv_layout(EngineConfig(preset="tiny", num_kv_blocks=40, max_model_len=1000))
    with pytest.raises(ValueError, match="beyond the tiny preset's context"):
        kv_layout(EngineConfig(preset="tiny", max_model_len=4096))


def greedy_texts_and_collective(tp: int) -> tuple[list[str], float, float]:
    async def scenario(engine):
        params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
        streams = [engine.add_request(f"r{i}", engine.tokenizer.encode(p), params) for i, p in enumerate(PROMPTS)]
        texts = [r.text for r in await asyncio.gather(*map(collect, streams))]
        labels = {"model_name": engine.model_name, "engine": "0"}
        count = engine.registry.get_sample_value("loadlab_server_collective_seconds_count", labels)
        total = engine.registry.get_sample_value("loadlab_server_collective_seconds_sum", labels)
        return texts, count, total

    return run_engine(
        EngineConfig(preset="tiny", max_model_len=64, num_kv_blocks=32, tensor_parallel=tp, seed=11),
        scenario,
        timeout=120,
    )


def test_tensor_parallel_2_gives_the_same_greedy_output_and_measures_collectives() -> None:
    single, steps1, collective1 = greedy_texts_and_collective(1)
    double, steps2, collective2 = greedy_texts_and_collective(2)
    assert double == single
    assert steps2 == steps1 > 0
    assert collective1 == 0.0 and collective2 > 0.0
    ranks = [p for p in psutil.Process().children() if "spawn_main" in " ".join(p.cmdline())]
    assert not ranks  # the worker rank ended with the engine


def test_contiguous_decodes_in_neighbouring_slabs_are_read_as_one_view() -> None:
    import torch

    from reference_server.attention import KVCache

    params = SamplingParams()
    seqs = [
        Sequence(str(i), [1, 2], params, 0.0, output_ids=[3], num_computed=2, block_table=[b, b + 1])
        for i, b in ((0, 4), (1, 2))
    ]
    step, sampled = build_step([ScheduledChunk(s, 1) for s in seqs], block_size=4, blocks_per_slab=2)
    assert sampled == seqs[::-1] and step.meta.decode_first_slab == 1  # sorted: slabs 1, 2
    cache = KVCache(1, 8, 4, 1, 2, torch.float32, torch.device("cpu"), blocks_per_slab=2)
    cache.k.copy_(torch.randn_like(cache.k))
    view, _ = cache.gather(0, step.meta.decode_tables, 3, first_slab=1)
    copied, _ = cache.gather(0, step.meta.decode_tables, 3)
    torch.testing.assert_close(view, copied)
    apart, _ = build_step(
        [ScheduledChunk(seqs[0], 1)]
        + [ScheduledChunk(Sequence("x", [1, 2], params, 0.0, output_ids=[3], num_computed=2, block_table=[0, 1]), 1)],
        4,
        2,
    )
    assert apart.meta.decode_first_slab == -1  # slabs 0 and 2
    assert build_step([ScheduledChunk(s, 1) for s in seqs], 4)[0].meta.decode_first_slab == -1  # paged


@pytest.mark.serial  # the second rank's start-up (torch, the model) must fit in the rendezvous's timeout
def test_tensor_parallel_engine_survives_idling_past_the_collective_timeout(monkeypatch) -> None:
    from reference_server.engine import runner

    # The timeout bounds the rendezvous too: 3 s was too short for a rank to start on a busy host.
    monkeypatch.setattr(runner, "COLLECTIVE_TIMEOUT", 10)
    monkeypatch.setattr(runner, "KEEPALIVE_EVERY", 0.5)

    async def scenario(engine):
        await asyncio.sleep(12)  # without keepalives the idle worker rank times out here
        result = await collect(engine.add_request("late", [65] * 4, SamplingParams(max_tokens=4)))
        return result.finish_reason, engine.healthy

    config = EngineConfig(preset="tiny", max_model_len=64, num_kv_blocks=16, tensor_parallel=2)
    assert run_engine(config, scenario, timeout=60) == ("length", True)


def embeddings_then_text(tp: int) -> tuple[list[list[float]], str]:
    """Embeddings of PROMPTS, then a greedy answer (the ranks must still be in step after pooling)."""

    async def scenario(engine):
        vectors = await engine.pool([engine.tokenizer.encode(p) for p in PROMPTS])
        params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
        answer = await collect(engine.add_request("r", engine.tokenizer.encode(PROMPTS[0]), params))
        return vectors, answer.text

    return run_engine(
        EngineConfig(preset="tiny", max_model_len=64, num_kv_blocks=32, tensor_parallel=tp, seed=11),
        scenario,
        timeout=120,
    )


@pytest.mark.serial  # the second rank's start-up (torch, the model) must fit in the rendezvous's timeout
def test_pooling_on_two_ranks_gives_the_single_ranks_embeddings_and_keeps_them_in_step() -> None:
    single, text1 = embeddings_then_text(1)
    double, text2 = embeddings_then_text(2)
    assert len(single) == len(PROMPTS) and all(len(v) == 256 for v in single)
    for a, b in zip(single, double, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
    assert text2 == text1
