"""AsyncEngine end to end on the tiny preset: streams, finish reasons, stop strings, aborts,
preemption, static vs continuous batching, paged vs contiguous KV, queue limits, engine death."""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import replace

import pytest
import torch

from reference_server.accounting import ModelCost
from reference_server.config import EngineConfig
from reference_server.engine import AsyncEngine, EngineCore
from reference_server.engine.runner import EngineFault, ModelRunner, Worker
from reference_server.engine.sampler import Sampler
from reference_server.interface import EngineDead, QueueFull, SamplingParams, StepFailed
from tests.support.engine import Result, collect, run_engine

# Seeded sampling rather than greedy: batches of different sizes round differently, which can flip
# an argmax between near-tied tokens, but almost never moves a seeded draw across a boundary.
SEEDED = SamplingParams(max_tokens=24, temperature=1.0, seed=7, ignore_eos=True)
PROMPTS = [f"Request number {i}: " + "abc" * i for i in range(8)]


def config(**overrides) -> EngineConfig:
    return EngineConfig(**{"preset": "tiny", "max_model_len": 128, "num_kv_blocks": 64, **overrides})


async def generate_all(engine: AsyncEngine, prompts: list[str], params: SamplingParams) -> list[Result]:
    """Send all prompts at once (a seeded request i gets seed + i) and collect every stream."""
    streams = [
        engine.add_request(
            f"r{i}",
            engine.tokenizer.encode(p),
            params if params.seed is None else replace(params, seed=params.seed + i),
        )
        for i, p in enumerate(prompts)
    ]
    return list(await asyncio.gather(*map(collect, streams)))


def metric(engine: AsyncEngine, name: str, **labels: str) -> float:
    value = engine.registry.get_sample_value(name, {"model_name": engine.model_name, "engine": "0", **labels})
    return 0.0 if value is None else value


def all_phases(engine: AsyncEngine, name: str, **labels: str) -> float:
    """A per-step histogram's sample added up over its `phase` series."""
    return sum(metric(engine, name, phase=phase, **labels) for phase in ("prefill", "decode", "mixed"))


@pytest.fixture(scope="module")
def reference() -> list[str]:
    """Outputs of PROMPTS with ample KV memory and continuous batching."""
    return [r.text for r in run_engine(config(), lambda e: generate_all(e, PROMPTS, SEEDED))]


def test_a_request_streams_one_printable_byte_per_token_then_finishes_by_length(reference) -> None:
    async def scenario(engine):
        prompt = engine.tokenizer.encode("Hello")
        return await collect(engine.add_request("one", prompt, SamplingParams(max_tokens=10, ignore_eos=True)))

    result = run_engine(config(), scenario)
    assert [o.output_tokens for o in result.outputs] == list(range(1, 11))
    assert all(o.prompt_tokens == 5 for o in result.outputs)
    assert [o.finish_reason for o in result.outputs] == [None] * 9 + ["length"]
    assert len(result.text) == 10 and result.text.isascii()
    assert all(len(o.text) == 1 and 0 <= o.token_id < 256 for o in result.outputs)
    assert len(set(reference)) == len(reference)  # different prompts, different outputs


def test_preemption_by_recompute_keeps_outputs_identical(reference) -> None:
    # 12 blocks of 16 tokens: 8 requests of up to ~65 tokens cannot all stay resident.
    async def scenario(engine):
        results = await generate_all(engine, PROMPTS, SEEDED)
        return results, metric(engine, "vllm:num_preemptions_total")

    results, preemptions = run_engine(config(num_kv_blocks=12), scenario)
    assert preemptions > 0
    assert [r.text for r in results] == reference
    assert all(r.finish_reason == "length" for r in results)


def test_chunked_prefill_under_a_small_budget_gives_the_same_tokens(reference) -> None:
    async def scenario(engine):
        results = await generate_all(engine, PROMPTS, SEEDED)
        return (
            [r.text for r in results],
            metric(engine, "vllm:iteration_tokens_total_bucket", le="32.0"),
            metric(engine, "vllm:iteration_tokens_total_count"),
        )

    texts, small_steps, steps = run_engine(config(max_num_batched_tokens=32, long_prefill_token_threshold=8), scenario)
    assert texts == reference
    assert small_steps == steps  # no step went over the 32-token budget


def test_static_batching_gives_the_same_tokens_and_runs_each_batch_to_completion(reference) -> None:
    async def scenario(engine):
        assert [r.text for r in await generate_all(engine, PROMPTS, SEEDED)] == reference
        long = engine.add_request("long", [65] * 8, SamplingParams(max_tokens=60, temperature=0, ignore_eos=True))
        first = await long.__anext__()  # the long request's batch is running
        late = asyncio.ensure_future(collect(engine.add_request("late", [66] * 8, SEEDED)))
        rest = await collect(long)
        return first, rest, await late

    for batching in ("static", "continuous"):
        first, long, late = run_engine(config(batching=batching, max_num_seqs=4, static_batch_timeout=0.05), scenario)
        assert long.finish_reason == "length" and late.finish_reason == "length"
        if batching == "static":
            assert late.times[0] >= long.times[-1]  # the late request waited for the whole batch
        else:
            assert late.times[0] < long.times[-1]  # it joined the running batch


def test_contiguous_kv_fits_fewer_sequences_in_the_same_memory(reference) -> None:
    async def scenario(engine):
        results = await generate_all(engine, PROMPTS, SEEDED)
        steps = all_phases(engine, "loadlab_server_batch_size_count")
        at_most_two = all_phases(engine, "loadlab_server_batch_size_bucket", le="2.0")
        return [r.text for r in results], steps, at_most_two

    # 16 blocks = 256 token slots; contiguous reserves max_model_len=128 per sequence: 2 at a time.
    texts, steps, at_most_two = run_engine(config(kv="contiguous", num_kv_blocks=16), scenario)
    assert texts == reference and steps > 0 and at_most_two == steps
    _, steps, at_most_two = run_engine(config(kv="paged", num_kv_blocks=16), scenario)
    assert at_most_two < steps


def test_stop_string_ends_the_text_before_it(reference) -> None:
    stop = reference[0][12:15]
    params = SamplingParams(max_tokens=24, temperature=1.0, seed=7, ignore_eos=True, stop=["never-appears", stop])
    result = run_engine(config(), lambda e: generate_all(e, PROMPTS[:1], params))[0]
    assert result.finish_reason == "stop"
    assert result.text == reference[0][: reference[0].find(stop)]
    assert result.outputs[-1].output_tokens == reference[0].find(stop) + len(stop)


def test_seeded_sampling_is_reproducible_across_batches() -> None:
    params = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, seed=1234, ignore_eos=True)

    async def scenario(engine):
        prompt = engine.tokenizer.encode(PROMPTS[0])
        alone = await collect(engine.add_request("alone", prompt, params))
        crowd = await asyncio.gather(*(collect(engine.add_request(f"c{i}", prompt, params)) for i in range(4)))
        others = await generate_all(engine, PROMPTS[:1] * 4, replace(params, seed=None))
        return alone.text, [r.text for r in crowd], {r.text for r in others}

    alone, crowd, unseeded = run_engine(config(), scenario)
    assert crowd == [alone] * 4  # same seed, same text, whatever the batch around it
    assert len(unseeded) > 1


def test_min_tokens_holds_eos_back() -> None:
    async def scenario(engine):
        params = SamplingParams(max_tokens=40, min_tokens=30, temperature=3.0, seed=3)
        return await generate_all(engine, ["x"] * 6, params)

    for r in run_engine(config(), scenario):
        assert len(r.outputs) >= 30
        assert r.finish_reason in ("stop", "length")


def test_abort_ends_the_stream_and_frees_blocks_at_once() -> None:
    async def scenario(engine):
        stream = engine.add_request("a", [65] * 40, SamplingParams(max_tokens=100, ignore_eos=True))
        waiting = engine.add_request("w", [65] * 40, SamplingParams(max_tokens=100, ignore_eos=True))
        outputs = []
        async for out in stream:
            outputs.append(out)
            if len(outputs) == 3:
                assert engine.kv_blocks_free < engine.kv_blocks_total
                stream.abort()
                engine.abort("w")
        rest = await collect(waiting)
        return outputs, rest

    outputs, rest = run_engine(config(max_num_seqs=1), scenario)
    assert outputs[-1].finish_reason == "abort" and len(outputs) < 10
    assert rest.finish_reason == "abort"


def test_queue_limit_and_bad_prompts_are_refused() -> None:
    async def scenario(engine):
        params = SamplingParams(max_tokens=4)
        with pytest.raises(ValueError, match="--max-waiting"):  # could never be queued: a 400, not a 429
            engine.add_requests([(f"b{i}", [65]) for i in range(3)], params)
        streams = [engine.add_request("r0", [65], params)]
        with pytest.raises(QueueFull):  # fits the queue, not now: none of the batch is queued...
            engine.add_requests([("b0", [65]), ("b1", [65])], params)
        streams.append(engine.add_request("r1", [65], params))  # ...so it takes no seat from others
        with pytest.raises(QueueFull):
            engine.add_request("r2", [65], params)
        with pytest.raises(ValueError, match="context"):
            engine.add_request("long", [65] * engine.max_model_len, params)
        with pytest.raises(ValueError, match="empty"):
            engine.add_request("empty", [], params)
        with pytest.raises(ValueError, match="token ids"):
            engine.add_request("bad", [100_000], params)
        return streams

    # A static batch that never fills and never times out keeps both requests waiting; shutdown aborts them.
    async def run_and_shutdown():
        engine = AsyncEngine(config(batching="static", static_batch_timeout=1000, max_waiting=2))
        await engine.start()
        streams = await scenario(engine)
        await engine.shutdown()
        return [await collect(s) for s in streams], engine

    results, engine = asyncio.run(run_and_shutdown())
    assert [r.finish_reason for r in results] == ["abort", "abort"]
    assert engine.kv_blocks_free == engine.kv_blocks_total and not engine.healthy


def test_metrics_use_vllm_names_and_labels() -> None:
    async def scenario(engine):
        await generate_all(engine, PROMPTS[:3], SEEDED)
        return engine

    engine = run_engine(config(), scenario)
    text = __import__("prometheus_client").generate_latest(engine.registry).decode()
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:iteration_tokens_total_bucket",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:request_queue_time_seconds_bucket",
        "vllm:request_prefill_time_seconds_bucket",
        "vllm:request_decode_time_seconds_bucket",
        "vllm:request_inference_time_seconds_bucket",
        "vllm:request_success_total",
        "loadlab_server_step_seconds_bucket",
        "loadlab_server_batch_size_bucket",
        "loadlab_server_collective_seconds_bucket",
        "loadlab_server_max_num_seqs",
    ]:
        assert f'{name}{{engine="0",' in text, name
    assert 'model_name="loadlab-reference"' in text
    assert metric(engine, "vllm:request_success_total", finished_reason="length") == 3
    assert metric(engine, "vllm:generation_tokens_total") == 3 * 24
    assert metric(engine, "vllm:prompt_tokens_total") == sum(len(p) for p in PROMPTS[:3])
    assert metric(engine, "vllm:time_to_first_token_seconds_count") == 3
    assert metric(engine, "vllm:inter_token_latency_seconds_count") == 3 * 23
    steps = all_phases(engine, "loadlab_server_step_seconds_count")
    assert steps == all_phases(engine, "loadlab_server_batch_size_count") > 0
    decode_steps = metric(engine, "loadlab_server_step_seconds_count", phase="decode")
    assert decode_steps == metric(engine, "loadlab_server_batch_size_count", phase="decode") > 0
    # A decode step carries one token per sequence: its sequences are the tokens of 3 x 23 decodes
    # (each request's first token comes from a prefill or mixed step).
    assert metric(engine, "loadlab_server_batch_size_sum", phase="decode") <= 3 * 23
    assert metric(engine, "vllm:kv_cache_usage_perc") == 0.0 and metric(engine, "vllm:num_requests_running") == 0
    assert metric(engine, "loadlab_server_max_num_seqs") == engine.core.config.max_num_seqs == 32
    # vLLM's --enable-mfu-metrics counters from the engine's shapes: every step reads all weights.
    weight_bytes = ModelCost(engine.core.shape, 1, 4).read_weight_bytes_per_gpu
    assert metric(engine, "vllm:estimated_read_bytes_per_gpu_total") >= steps * weight_bytes
    assert metric(engine, "vllm:estimated_flops_per_gpu_total") > 0
    assert metric(engine, "vllm:estimated_write_bytes_per_gpu_total") > 0


def test_no_value_is_exported_twice_under_two_names() -> None:
    # loadlab_server_tokens_per_step once repeated vllm:iteration_tokens_total, observation for observation.
    engine = run_engine(config(), _generate_and_return_engine)
    histograms = {}
    for family in engine.registry.collect():
        if family.type == "histogram":
            histograms[family.name] = tuple(
                (s.name.removeprefix(family.name), tuple(sorted(s.labels.items())), s.value)
                for s in family.samples
                if not s.name.endswith("_created")
            )
    seen: dict[tuple, str] = {}
    for name, values in histograms.items():
        assert values not in seen, f"{name} repeats {seen.get(values)}"
        seen[values] = name


async def _generate_and_return_engine(engine: AsyncEngine) -> AsyncEngine:
    await generate_all(engine, PROMPTS[:3], SEEDED)
    return engine


def test_a_failed_step_fails_its_requests_and_the_engine_serves_the_next(monkeypatch) -> None:
    execute, failures = Worker.execute, [1]

    def fails_once(self, step):
        if failures:
            failures.pop()
            raise RuntimeError("simulated bug in a step")
        return execute(self, step)

    monkeypatch.setattr(Worker, "execute", fails_once)

    async def scenario(engine):
        # Two requests in the failing step, a third arriving after it.
        first = [engine.add_request(f"r{i}", [65 + i], SamplingParams(max_tokens=4)) for i in range(2)]
        for stream in first:
            with pytest.raises(StepFailed):
                await collect(stream)
        assert engine.healthy
        result = await collect(engine.add_request("next", [67], SamplingParams(max_tokens=4, ignore_eos=True)))
        return result, metric(engine, "vllm:request_success_total", finished_reason="error")

    result, errors = run_engine(config(), scenario)  # run_engine checks every block is free again
    assert result.finish_reason == "length" and len(result.outputs) == 4
    assert errors == 2


def test_a_sampler_failure_is_a_failed_step_too(monkeypatch) -> None:
    def broken(self, logits, seqs):
        raise RuntimeError("invalid multinomial distribution")

    monkeypatch.setattr(Sampler, "sample", broken)

    async def scenario(engine):
        with pytest.raises(StepFailed):
            await collect(engine.add_request("a", [65], SamplingParams()))
        return engine.healthy

    assert run_engine(config(), scenario)


def test_a_broken_device_ends_the_engine_loop_and_fails_streams_and_new_requests(monkeypatch) -> None:
    def broken(self, step):
        raise EngineFault("simulated device fault")

    monkeypatch.setattr(ModelRunner, "execute", broken)

    async def scenario():
        engine = AsyncEngine(config())
        await engine.start()
        with pytest.raises(EngineDead):
            await collect(engine.add_request("a", [65], SamplingParams()))
        assert not engine.healthy
        with pytest.raises(EngineDead):
            engine.add_request("b", [65], SamplingParams())
        await engine.shutdown()

    asyncio.run(scenario())


def test_a_request_still_in_the_inbox_when_the_loop_dies_gets_engine_dead_too(monkeypatch) -> None:
    entered, release = threading.Event(), threading.Event()

    def broken(self, step):
        entered.set()
        release.wait(10)
        raise EngineFault("simulated device fault")

    monkeypatch.setattr(ModelRunner, "execute", broken)

    async def scenario():
        engine = AsyncEngine(config())
        await engine.start()
        running = engine.add_request("a", [65], SamplingParams())
        assert await asyncio.to_thread(entered.wait, 10)
        queued = engine.add_request("b", [66], SamplingParams())  # the loop is inside the step
        release.set()
        for stream in (running, queued):
            with pytest.raises(EngineDead):
                await collect(stream)
        await engine.shutdown()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"preset": "gpt-5"}, "unknown preset"),
        ({"batching": "dynamic"}, "batching must be one of"),
        ({"num_kv_blocks": 2}, "cannot hold one sequence"),
        ({"dtype": "int4"}, "dtype must be one of"),
        ({"max_num_seqs": 0}, "max_num_seqs must be at least 1"),
        ({"weights": "/nonexistent/model.safetensors"}, "does not exist"),
        ({"tensor_parallel": 4}, "does not divide num_kv_heads"),
        pytest.param(
            {"device": "cuda"},
            "no CUDA GPU",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here"),
        ),
    ],
)
def test_configuration_errors_are_clear_and_come_before_the_model_loads(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        EngineCore(config(**overrides))


def test_the_async_engine_refuses_a_bad_setting_at_once() -> None:
    with pytest.raises(ValueError, match="max_num_seqs must be at least 1"):
        AsyncEngine(config(max_num_seqs=0))


@pytest.mark.parametrize("trial", range(6))
def test_random_configurations_finish_every_request_and_return_every_block(trial: int) -> None:
    rng = random.Random(trial)
    block_size = rng.choice([4, 8, 16])
    cfg = config(
        block_size=block_size,
        num_kv_blocks=rng.randint(128 // block_size, 512 // block_size),
        max_num_batched_tokens=rng.choice([8, 16, 64, 256]),
        long_prefill_token_threshold=rng.choice([0, 4, 16]),
        max_num_seqs=rng.choice([1, 3, 8]),
        batching=rng.choice(["continuous", "static"]),
        kv=rng.choice(["paged", "contiguous"]),
        static_batch_timeout=0.01,
    )
    requests = [
        (
            [rng.randint(0, 255) for _ in range(rng.randint(1, 127))],
            SamplingParams(
                max_tokens=rng.randint(1, 30),
                temperature=rng.choice([0, 1.0]),
                min_tokens=rng.choice([0, 5]),
                stop=rng.choice([[], ["a"], ["xy", "~"]]),
            ),
            rng.random() < 0.2,
        )
        for _ in range(10)
    ]

    async def one(engine, i, prompt, params, abort):
        await asyncio.sleep(i * 0.005)
        stream = engine.add_request(f"r{i}", prompt, params)
        outputs = []
        async for out in stream:
            outputs.append(out)
            if abort and len(outputs) == 2:
                stream.abort()
        return len(prompt), params, outputs[-1]

    async def scenario(engine):
        return await asyncio.gather(*(one(engine, i, *r) for i, r in enumerate(requests)))

    for prompt_len, params, last in run_engine(cfg, scenario):
        assert last.finish_reason in ("stop", "length", "abort")
        if last.finish_reason == "length":
            assert last.output_tokens == params.max_tokens or prompt_len + last.output_tokens == 128
        if last.finish_reason == "stop" and not params.stop:
            assert last.output_tokens > params.min_tokens  # EOS only after min_tokens


def test_pooling_between_steps_leaves_the_generations_around_it_unchanged() -> None:
    """Embeddings asked while requests generate are computed between steps, in their own scratch KV:
    the generations give the same tokens as without them, and the vectors those of a quiet engine."""

    async def with_pooling(engine: AsyncEngine) -> tuple[list[str], list[list[list[float]]]]:
        generating = asyncio.ensure_future(generate_all(engine, PROMPTS[:4], SEEDED))
        pooled = [await engine.pool([engine.tokenizer.encode(p) for p in PROMPTS[4:]]) for _ in range(3)]
        return [r.text for r in await generating], pooled

    async def quiet(engine: AsyncEngine) -> tuple[list[str], list[list[float]]]:
        texts = [r.text for r in await generate_all(engine, PROMPTS[:4], SEEDED)]
        return texts, await engine.pool([engine.tokenizer.encode(p) for p in PROMPTS[4:]])

    texts, pooled = run_engine(config(), with_pooling)
    alone_texts, alone = run_engine(config(), quiet)
    assert texts == alone_texts
    for vectors in pooled:
        for a, b in zip(vectors, alone, strict=True):
            assert a == pytest.approx(b, abs=1e-4)


def test_a_pooling_prompt_beyond_the_context_is_a_value_error() -> None:
    async def scenario(engine: AsyncEngine) -> None:
        with pytest.raises(ValueError, match="context"):
            await engine.pool([[1] * 200])

    run_engine(config(), scenario)


def test_pooling_requests_sent_together_each_get_their_own_vectors() -> None:
    """Jobs queued together may share one forward: each still gets its own prompts' vectors."""

    async def scenario(engine: AsyncEngine) -> tuple[list[list[list[float]]], list[list[list[float]]]]:
        asks = [[engine.tokenizer.encode(p) for p in PROMPTS[i : i + 2]] for i in range(0, 8, 2)]
        together = await asyncio.gather(*(engine.pool(ask) for ask in asks))
        alone = [await engine.pool(ask) for ask in asks]
        return list(together), alone

    together, alone = run_engine(config(), scenario)
    for got, expected in zip(together, alone, strict=True):
        assert len(got) == 2
        for a, b in zip(got, expected, strict=True):
            assert a == pytest.approx(b, abs=1e-4)
    assert alone[0][0] != pytest.approx(alone[1][0], abs=1e-3)
