"""The twin engine, stepped directly (no HTTP): it keeps the modelled time or says how late it is,
a batch costs what the roofline says, and KV runs out at the token count its memory allows.

The timing checks hold on a loaded machine: a step never ends before its modelled time, and any
time beyond it is counted in `loadlab_twin_lag_seconds_total`.
"""

from __future__ import annotations

import time

import pytest

from reference_server.config import EngineConfig
from reference_server.engine import EngineCore
from reference_server.interface import SamplingParams, StepFailed
from reference_server.twin.executor import CATCH_UP

LENGTH = SamplingParams(max_tokens=40, ignore_eos=True, temperature=0)


ENGINE = {"model_name": "loadlab-reference", "engine": "0"}


def value(core: EngineCore, name: str, **labels: str) -> float:
    """A sample of the engine's registry (0 when absent)."""
    return core.metrics.registry.get_sample_value(name, labels) or 0.0


def run_until_done(core: EngineCore, max_steps: int = 5000) -> dict[str, list[int]]:
    tokens: dict[str, list[int]] = {}
    for _ in range(max_steps):
        for out in core.step().outputs:
            assert not isinstance(out.output, StepFailed), out.output
            tokens.setdefault(out.request_id, []).append(out.output.token_id)
        if not core.scheduler.running and not core.scheduler.waiting:
            return tokens
    raise AssertionError("requests still running after max_steps")


def timed_run(core: EngineCore, num_requests: int) -> tuple[float, float, float, int]:
    """Wall seconds (from the executor's first step's call to its last step's return), modelled
    seconds, lag seconds and tokens of num_requests 100-token prompts."""
    for i in range(num_requests):
        core.add(core.new_sequence(f"r{i}", [33 + i % 90] * 100, LENGTH))
    calls, returns = [], []
    run = core.runner.run

    def timed(*args, **kwargs):
        calls.append(time.perf_counter())
        try:
            return run(*args, **kwargs)
        finally:
            returns.append(time.perf_counter())

    core.runner.run = timed
    tokens = run_until_done(core)
    wall = returns[-1] - calls[0]
    return (
        wall,
        value(core, "loadlab_twin_modelled_seconds_total"),
        value(core, "loadlab_twin_lag_seconds_total"),
        sum(map(len, tokens.values())),
    )


@pytest.mark.parametrize("batch", [1, 32])
def test_the_twin_keeps_the_modelled_time_or_counts_its_lag(batch: int) -> None:
    core = EngineCore(EngineConfig(twin="h100:llama-3-8b", max_num_seqs=32))
    wall, modelled, lag, tokens = timed_run(core, batch)
    assert tokens == 40 * batch
    # Never faster than the simulated GPU; slower only by what it reports and one uncounted catch-up.
    # The host's work between steps is inside the chain of modelled steps (the next step's time starts
    # when the last one's ended), so it holds however this host schedules the engine. (The host work
    # before the first step and after the last is not the executor's to count: it is left out.)
    assert modelled - CATCH_UP <= wall <= modelled + lag + CATCH_UP
    # One prefill step (it samples the first token), then 39 decode steps.
    assert value(core, "loadlab_server_step_seconds_count", **ENGINE, phase="decode") == 39


def test_batch_32_decodes_at_twenty_times_the_tokens_per_second_of_batch_1() -> None:
    """On the GPU model (modelled seconds: no host noise), batching is nearly free until the ridge point."""
    rates = []
    for batch in (1, 32):
        core = EngineCore(EngineConfig(twin="h100:llama-3-8b", max_num_seqs=32))
        _, modelled, _, tokens = timed_run(core, batch)
        rates.append(tokens / modelled)
    # A 100-token prefill still reads more than it computes: 40 steps of ~6.5 ms, 154 tokens/s.
    assert rates[0] == pytest.approx(40 / (40 * 6.5e-3), rel=0.03)
    assert rates[1] / rates[0] > 20


def qwen_pool_of(tokens: int) -> EngineConfig:
    """qwen2.5-0.5b on an H100 with memory for exactly `tokens` tokens of KV (12,288 bytes each)."""
    weights = 494_032_768 * 2
    activations = 512 * (2 * 896 + 2 * 4864) * 2 + 4 * 151_936 * 4 + 1.5 * 2**30
    memory = 81559 * 2**20
    return EngineConfig(
        twin="h100:qwen2.5-0.5b",
        max_num_batched_tokens=512,
        max_num_seqs=4,
        block_size=16,
        gpu_memory_utilization=(weights + activations + tokens * 12_288 + 6000) / memory,
    )


def test_kv_capacity_and_preemption_onset_at_the_computed_token_count() -> None:
    core = EngineCore(qwen_pool_of(640))
    assert core.blocks.total == 640 // 16
    # Four 96-token prompts (6 blocks each) decode in lockstep; at 160 tokens each the pool (40 blocks) is
    # full, and the next token of every sequence needs an eleventh block: the first preemption.
    for i in range(4):
        core.add(core.new_sequence(f"s{i}", [40 + i] * 96, SamplingParams(max_tokens=100, ignore_eos=True)))
    held_at_onset = None
    for _ in range(200):
        held = sum(s.num_computed for s in core.scheduler.running)
        core.step()
        if value(core, "vllm:num_preemptions_total", **ENGINE) > 0:
            held_at_onset = held
            break
    assert held_at_onset == 640


def test_a_tensor_parallel_twin_exports_gpu_signals_work_and_collective_time() -> None:
    core = EngineCore(EngineConfig(twin="a100:qwen2.5-0.5b:tp2", max_num_seqs=4))
    timed_run(core, 2)
    assert value(core, "vllm:estimated_flops_per_gpu_total", **ENGINE) > 0
    # Named as dcgm-exporter names a GPU (modelName): the analyzer finds its data sheet by it.
    gpu = {"gpu": "1", "uuid": "GPU-twin-a100-1", "modelName": "A100 SXM4 80GB"}
    assert value(core, "loadlab_gpu_mem_total", **gpu) == 81920 * 2**20
    # Two all-reduces a layer between the two simulated A100s.
    assert value(core, "loadlab_server_collective_seconds_sum", **ENGINE) > 0


def test_a_host_slower_than_the_simulated_gpu_is_counted_and_logged(monkeypatch, caplog) -> None:
    from reference_server.twin import executor

    monkeypatch.setattr(executor, "LOG_EVERY", 0.05)
    core = EngineCore(EngineConfig(twin="h100:qwen2.5-0.5b", max_num_seqs=4))  # ~0.9 ms a step
    core.add(core.new_sequence("r", [65] * 10, LENGTH))
    with caplog.at_level("WARNING", logger="reference_server.twin"):
        while core.scheduler.running or core.scheduler.waiting:
            core.step()
            time.sleep(0.005)  # the host's own work between steps: 5x the modelled step
    assert value(core, "loadlab_twin_lag_seconds_total") > 30 * 0.003
    assert value(core, "loadlab_twin_late_steps_total") >= 30
    assert any("the host CPU is behind the simulated H100" in r.getMessage() for r in caplog.records)
