"""EngineCore driven step by step, without asyncio: outputs, prefix caching, and block accounting
under random traffic (hypothesis)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from reference_server.config import EngineConfig
from reference_server.engine import EngineCore
from reference_server.engine.block_manager import PagedBlocks
from reference_server.engine.sequence import Sequence
from reference_server.interface import SamplingParams, StepFailed

GREEDY = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
SHARED = [ord(c) for c in "You are a helpful assistant. Answer briefly and kindly: "]  # 56 tokens


def config(**overrides) -> EngineConfig:
    return EngineConfig(**{"preset": "tiny", "max_model_len": 128, "num_kv_blocks": 32, "block_size": 8, **overrides})


def run_to_end(core: EngineCore, max_steps: int = 2000) -> dict[str, list[int]]:
    """Step until every request has ended; the tokens of each request."""
    tokens: dict[str, list[int]] = {}
    for _ in range(max_steps):
        result = core.step()
        for out in result.outputs:
            assert not isinstance(out.output, StepFailed), out.output
            if out.output.token_id >= 0:
                tokens.setdefault(out.request_id, []).append(out.output.token_id)
        if not core.scheduler.running and not core.scheduler.waiting:
            return tokens
    raise AssertionError("requests still running after max_steps")


def metric(core: EngineCore, name: str) -> float:
    value = core.metrics.registry.get_sample_value(name, {"model_name": core.config.model_name, "engine": "0"})
    return value or 0.0


def assert_blocks_consistent(blocks: PagedBlocks, tables: list[list[int]]) -> None:
    """Reference counts match the block tables; free blocks are exactly those nobody holds; the
    prefix cache maps each hash to a block that remembers that hash."""
    held = Counter(b for table in tables for b in table)
    assert all(blocks._refs[b] == held.get(b, 0) for b in range(blocks.total)), "reference counts drifted"
    assert set(blocks._free) == {b for b in range(blocks.total) if held.get(b, 0) == 0}, "leaked or double-freed"
    assert all(blocks._hash[b] == h for h, b in blocks._cached.items())
    for table in tables:
        assert len(table) == len(set(table)), "a sequence holds a block twice"


def test_the_core_runs_requests_step_by_step_without_asyncio() -> None:
    core = EngineCore(config())
    try:
        for i in range(3):
            core.add(core.new_sequence(f"r{i}", [65 + i] * 10, GREEDY))
        tokens = run_to_end(core)
        assert sorted(tokens) == ["r0", "r1", "r2"] and all(len(t) == 6 for t in tokens.values())
        assert core.blocks.num_free == core.blocks.total
        assert metric(core, "vllm:generation_tokens_total") == 18
    finally:
        core.shutdown()


def shared_prefix_run(prefix_caching: bool) -> tuple[dict[str, list[int]], float, float, float]:
    core = EngineCore(config(prefix_caching=prefix_caching))
    try:
        outputs: dict[str, list[int]] = {}
        for i, suffix in enumerate(["first question?", "second one, longer?", "third"]):
            core.add(core.new_sequence(f"r{i}", SHARED + [ord(c) for c in suffix], GREEDY))
            outputs.update(run_to_end(core))  # one after the other: each finds the others' blocks cached
        computed = metric(core, "vllm:iteration_tokens_total_sum")
        return (
            outputs,
            computed,
            metric(core, "vllm:prefix_cache_queries_total"),
            metric(core, "vllm:prefix_cache_hits_total"),
        )
    finally:
        core.shutdown()


def test_a_shared_prefix_is_computed_once_and_gives_the_same_tokens() -> None:
    cached, computed_cached, queries, hits = shared_prefix_run(prefix_caching=True)
    plain, computed_plain, plain_queries, plain_hits = shared_prefix_run(prefix_caching=False)
    assert cached == plain  # reused KV, same greedy tokens
    assert hits == 2 * 56  # 7 full blocks of the shared 56 tokens, twice
    assert queries == plain_queries > hits and plain_hits == 0
    assert computed_plain - computed_cached == hits


def test_a_prompt_entirely_cached_still_computes_its_last_token() -> None:
    core = EngineCore(config())
    try:
        for i in range(2):
            core.add(core.new_sequence(f"r{i}", SHARED[:48], GREEDY))  # 6 full blocks exactly
            run_to_end(core)
        # The second run reuses 5 blocks: the 6th holds the last token, whose logits start the output.
        assert metric(core, "vllm:prefix_cache_hits_total") == 40
    finally:
        core.shutdown()


def test_cached_blocks_are_evicted_tail_first_and_never_while_held() -> None:
    blocks = PagedBlocks(num_blocks=5, block_size=2)

    def seq(tokens: list[int]) -> Sequence:
        return Sequence("s", tokens, GREEDY, 0.0)

    a, b = seq([1, 2, 3, 4, 5]), seq([7, 8, 9])
    for s in (a, b):
        blocks.allocate(s, s.num_tokens, blocks.cached_prefix(s))
        blocks.cache_blocks(s, 0, s.num_tokens)
    a_blocks = list(a.block_table)
    blocks.free(a)  # a's two full blocks stay cached; its partial third is handed out first
    again = seq([1, 2, 3, 4, 6])
    assert blocks.cached_prefix(again) == a_blocks[:2]
    c = seq([9] * 4)  # two blocks: the partial one, then a's second (a prefix's tail goes first)
    blocks.allocate(c, 4, [])
    assert blocks.cached_prefix(again) == a_blocks[:1]
    prefix = blocks.cached_prefix(again)
    assert not blocks.can_allocate(again, 5, prefix)  # a cached block nobody holds counts as taken once reused
    blocks.free(c)
    blocks.allocate(again, 5, prefix)
    assert again.block_table[0] == a_blocks[0]
    assert_blocks_consistent(blocks, [b.block_table, again.block_table])
    freed = list(b.block_table)
    blocks.free(b)
    b.block_table = freed
    with pytest.raises(RuntimeError, match="freed twice"):
        blocks.free(b)


# ---- random traffic ------------------------------------------------------------------------------

prompt = st.tuples(
    st.sampled_from([[], SHARED[:8], SHARED[:20], SHARED]), st.lists(st.integers(32, 126), min_size=1, max_size=30)
).map(lambda p: p[0] + p[1])
add = st.tuples(st.just("add"), prompt, st.integers(1, 40))
operation = st.one_of(
    add, add, st.tuples(st.just("abort"), st.integers(0, 20)), st.tuples(st.just("step"), st.integers(1, 4))
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    operations=st.lists(operation, min_size=5, max_size=40),
    block_size=st.sampled_from([4, 8]),
    spare_blocks=st.sampled_from([0, 8]),
    budget=st.sampled_from([16, 64]),
    prefix_caching=st.booleans(),
)
def test_random_traffic_never_leaks_or_double_frees_a_block(
    core_cache, operations, block_size, spare_blocks, budget, prefix_caching
) -> None:
    # Room for one full-length sequence and a little more: preemption, eviction and sharing all
    # happen; aborts hit waiting and running sequences.
    core = core_cache(
        config(
            block_size=block_size,
            num_kv_blocks=128 // block_size + spare_blocks,
            max_num_batched_tokens=budget,
            prefix_caching=prefix_caching,
            max_num_seqs=6,
        )
    )
    added = 0
    for op in operations:
        if op[0] == "add":
            core.add(
                core.new_sequence(f"r{added}", op[1], SamplingParams(max_tokens=op[2], temperature=0, ignore_eos=True))
            )
            added += 1
        elif op[0] == "abort":
            core.abort(f"r{op[1]}")
        else:
            for _ in range(op[1]):
                core.step()
                assert_blocks_consistent(core.blocks, [s.block_table for s in core.scheduler.running])
    run_to_end(core)
    assert_blocks_consistent(core.blocks, [])
    assert core.blocks.num_free == core.blocks.total


@pytest.fixture(scope="module")
def core_cache():
    """EngineCores by configuration, built once (loading the model dominates an example's time)."""
    cores: dict[tuple, EngineCore] = {}

    def get(cfg: EngineConfig) -> EngineCore:
        key = (cfg.block_size, cfg.num_kv_blocks, cfg.max_num_batched_tokens, cfg.prefix_caching)
        if key not in cores:
            cores[key] = EngineCore(cfg)
        return cores[key]

    yield get
    for core in cores.values():
        core.shutdown()


def test_the_real_engine_counts_each_steps_estimated_work_as_vllm_does() -> None:
    """vLLM's --enable-mfu-metrics counters, from the accounting the twin keeps time with."""
    from reference_server.accounting import ChunkWork, ModelCost
    from reference_server.shapes import PRESETS

    core = EngineCore(config())
    core.add(core.new_sequence("a", [65] * 10, GREEDY))
    run_to_end(core)
    cost = ModelCost(PRESETS["tiny"], tp=1, dtype_bytes=4)  # float32 on one rank
    steps = [cost.step([ChunkWork(10, 0, True)])] + [cost.step([ChunkWork(1, 10 + i, True)]) for i in range(5)]
    labels = {"model_name": "loadlab-reference", "engine": "0"}
    registry = core.metrics.registry
    assert registry.get_sample_value("vllm:estimated_flops_per_gpu_total", labels) == sum(s.flops for s in steps)
    assert registry.get_sample_value("vllm:estimated_read_bytes_per_gpu_total", labels) == sum(
        s.read_bytes for s in steps
    )
    assert registry.get_sample_value("vllm:estimated_write_bytes_per_gpu_total", labels) == sum(
        s.write_bytes for s in steps
    )


def test_the_gauges_show_the_batch_a_step_runs_not_the_one_that_just_finished() -> None:
    # A pool of 4 blocks holds two 12-token sequences (2 blocks each); they finish in the same
    # step and the next two are admitted. A scrape during that next (prefill) step must see them
    # running, not "0 running, 2 waiting" left over from the previous step's end.
    core = EngineCore(config(num_kv_blocks=4, max_model_len=16))
    seen: list[tuple[float, float, float]] = []
    execute = core.runner.execute

    def observed(step):
        seen.append(
            (
                metric(core, "vllm:num_requests_running"),
                metric(core, "vllm:num_requests_waiting"),
                metric(core, "vllm:kv_cache_usage_perc"),
            )
        )
        return execute(step)

    core.runner.execute = observed
    try:
        for i in range(4):
            core.add(
                core.new_sequence(f"r{i}", [65 + i] * 10, SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))
            )
        run_to_end(core)
        assert seen and all(running > 0 and kv > 0 for running, _, kv in seen), seen
        assert seen[0][:2] == (2, 2)
    finally:
        core.shutdown()
