"""Scheduler: token budget, max_num_seqs, chunked prefill, preemption by recompute, static batching."""

from reference_server.config import EngineConfig
from reference_server.engine.block_manager import PagedBlocks
from reference_server.engine.scheduler import ScheduledChunk, Scheduler
from reference_server.engine.sequence import Sequence, Status
from reference_server.interface import SamplingParams


def make(num_blocks: int = 100, **overrides) -> Scheduler:
    config = EngineConfig(block_size=4, **overrides)
    return Scheduler(config, PagedBlocks(num_blocks, config.block_size))


def request(name: str, prompt_len: int, arrival: float = 0.0, max_tokens: int = 100) -> Sequence:
    return Sequence(name, [7] * prompt_len, SamplingParams(max_tokens=max_tokens), arrival)


def advance(chunks: list[ScheduledChunk]) -> None:
    """What the engine does after a step: tokens are computed, finished prompts get a new token."""
    for c in chunks:
        completes = c.completes
        c.seq.num_computed += c.num_tokens
        if completes:
            c.seq.output_ids.append(65)


def test_budget_and_max_num_seqs_bound_every_step() -> None:
    s = make(max_num_batched_tokens=20, max_num_seqs=3)
    for i in range(6):
        s.add(request(f"r{i}", 8))
    for _ in range(30):
        chunks = s.schedule(0.0)
        assert sum(c.num_tokens for c in chunks) <= 20
        assert len(s.running) <= 3 and len(chunks) <= 3
        advance(chunks)
    assert len(s.running) == 3 and all(seq.num_computed == seq.num_tokens - 1 for seq in s.running)


def test_running_requests_go_first_then_waiting_ones_fill_the_budget() -> None:
    s = make(max_num_batched_tokens=10)
    s.add(request("a", 6))
    advance(s.schedule(0.0))
    s.add(request("b", 30))
    chunks = s.schedule(0.0)
    assert [(c.seq.request_id, c.num_tokens) for c in chunks] == [("a", 1), ("b", 9)]  # b chunked


def test_long_prompt_is_chunked_by_the_threshold_and_finishes() -> None:
    s = make(max_num_batched_tokens=64, long_prefill_token_threshold=16)
    s.add(request("long", 40))
    sizes = []
    while not s.running or s.running[0].num_computed < 40:
        chunks = s.schedule(0.0)
        sizes.append(chunks[0].num_tokens)
        advance(chunks)
    assert sizes == [16, 16, 8]
    assert s.running[0].output_ids == [65]  # sampled only after the last chunk


def test_preemption_by_recompute_when_blocks_run_out() -> None:
    s = make(num_blocks=6)  # 24 token slots
    a, b = request("a", 8), request("b", 8)
    s.add(a)
    s.add(b)
    advance(s.schedule(0.0))  # both prefilled: 2 blocks each, 2 free
    for _ in range(4):  # decode to 12 tokens each: 3 blocks each -> full
        advance(s.schedule(0.0))
    assert s.blocks.num_free == 0
    chunks = s.schedule(0.0)  # a needs a 4th block: b (newest) is preempted
    assert [c.seq for c in chunks] == [a]
    assert s.take_stats().preemptions == 1
    assert b.status is Status.WAITING and b.num_computed == 0 and b.block_table == []
    assert s.waiting[0] is b and len(b.output_ids) == 5  # keeps its tokens, recomputes them later
    advance(chunks)
    s.remove(a)
    chunks = s.schedule(0.0)
    assert chunks[0].seq is b and chunks[0].num_tokens == b.num_tokens  # prompt + outputs recomputed
    s.remove(b)
    assert s.blocks.num_free == s.blocks.total


def test_sequence_that_cannot_fit_preempts_itself_last() -> None:
    s = make(num_blocks=3)
    a = request("a", 12)
    s.add(a)
    advance(s.schedule(0.0))  # 12 tokens + 1 sampled = 13 -> needs a 4th block
    assert s.schedule(0.0) == [] and a.status is Status.WAITING and s.blocks.num_free == 3


def test_static_batching_waits_for_a_full_batch_or_the_timeout() -> None:
    s = make(batching="static", max_num_seqs=3, static_batch_timeout=0.05)
    s.add(request("a", 4, arrival=0.0))
    s.add(request("b", 4, arrival=0.01))
    assert s.schedule(0.02) == []  # neither full nor timed out
    assert len(s.schedule(0.06)) == 2  # timed out: run what is there


def test_static_batch_runs_to_completion_before_admitting_more() -> None:
    s = make(batching="static", max_num_seqs=2, static_batch_timeout=10.0)
    first = [request("a", 4, max_tokens=2), request("b", 4, max_tokens=3)]
    for r in first:
        s.add(r)
    advance(s.schedule(0.0))
    s.add(request("c", 4))
    s.add(request("d", 4))
    s.remove(first[0])  # a finished; b still running
    chunks = s.schedule(100.0)
    assert [c.seq.request_id for c in chunks] == ["b"]  # continuous batching would admit c here
    s.remove(first[1])
    assert {c.seq.request_id for c in s.schedule(100.0)} == {"c", "d"}


def test_continuous_batching_admits_into_free_slots_at_once() -> None:
    s = make(max_num_seqs=2)
    a, b = request("a", 4), request("b", 4)
    s.add(a)
    s.add(b)
    advance(s.schedule(0.0))
    s.add(request("c", 4))
    s.remove(a)
    assert {c.seq.request_id for c in s.schedule(0.0)} == {"b", "c"}
