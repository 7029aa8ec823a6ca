"""The engine core: synchronous, one step at a time, as nano-vllm's LLMEngine.

`step()` schedules, runs the model, samples, appends the tokens, finishes the sequences that are
done and records the metrics; it returns the outputs of the requests it touched. No thread and no
asyncio here: `AsyncEngine` drives the core from its loop thread, a test drives it directly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from reference_server.accounting import DTYPE_BYTES, ChunkWork, ModelCost
from reference_server.config import EngineConfig
from reference_server.engine import stopping
from reference_server.engine.block_manager import BlockManager, ContiguousBlocks, PagedBlocks
from reference_server.engine.clock import Clock, RealClock
from reference_server.engine.metrics import EngineMetrics
from reference_server.engine.runner import EngineFault, Executor, KVLayout, ModelRunner, kv_layout
from reference_server.engine.scheduler import ScheduledChunk, Scheduler
from reference_server.engine.sequence import Sequence, Status
from reference_server.interface import SamplingParams, StepFailed, TokenOutput
from reference_server.shapes import PRESETS
from reference_server.tokenizer import ByteTokenizer

log = logging.getLogger("reference_server.engine")


@dataclass
class RequestOutput:
    """What a step says to one request: its next token (the last one has a finish_reason) or its failure."""

    request_id: str
    output: TokenOutput | StepFailed

    @property
    def final(self) -> bool:
        """Whether the request ends with this output."""
        return isinstance(self.output, StepFailed) or self.output.finish_reason is not None


@dataclass
class StepResult:
    """One step's outputs, and whether it ran anything (the caller may wait for work when not)."""

    outputs: list[RequestOutput]
    num_scheduled: int  # sequences that ran in the step; 0 when there was nothing to do yet


def make_block_manager(config: EngineConfig, layout: KVLayout) -> BlockManager:
    """The KV block manager of this configuration: contiguous slabs, or paged blocks (prefix-cached or not)."""
    if layout.blocks_per_slab:
        return ContiguousBlocks(layout.num_blocks, layout.block_size, layout.blocks_per_slab)
    return PagedBlocks(layout.num_blocks, layout.block_size, config.prefix_caching)


def model_cost(config: EngineConfig) -> ModelCost:
    """The per-GPU work accounting of what this engine serves: the twin's GPUs in bf16, or the real ranks."""
    if config.twin:
        spec = config.twin_spec
        return ModelCost(PRESETS[spec.model], spec.tp, DTYPE_BYTES["bfloat16"])
    return ModelCost(PRESETS[config.preset], config.tensor_parallel, DTYPE_BYTES[config.dtype])


def make_executor(
    config: EngineConfig, layout: KVLayout, metrics: EngineMetrics, eos_token_id: int, clock: Clock
) -> Executor:
    """The model on its ranks, or with --twin the timing model of the simulated GPUs (keeping `clock`'s time)."""
    if config.twin:
        from reference_server.twin.executor import TwinExecutor

        return TwinExecutor(
            config.twin_spec, config.gpu_memory_utilization, metrics.registry, eos_token_id, config.seed, clock
        )
    return ModelRunner(config, layout)


class EngineCore:
    """Scheduler, KV blocks, executor (the model runner and its sampler, or the twin) and metrics, stepped
    by the caller.

    Construction validates the configuration and loads the model (one process per tensor-parallel rank),
    or with --twin sets up the simulated GPUs instead. Every timestamp comes from `clock`: the real
    one when serving, a virtual one in a simulation (twin only: a real model takes real time).
    """

    def __init__(self, config: EngineConfig, clock: Clock | None = None) -> None:
        config.validate()
        if clock is not None and not isinstance(clock, RealClock) and not config.twin:
            raise ValueError("only the twin runs on a virtual clock: a real model takes real time")
        self.config = config
        self.clock = clock or RealClock()
        self.shape = PRESETS[config.model_preset]
        self.tokenizer = ByteTokenizer()
        layout = kv_layout(config)
        self.max_model_len = layout.max_model_len
        self.blocks = make_block_manager(config, layout)
        self.scheduler = Scheduler(config, self.blocks)
        self.metrics = EngineMetrics(config.model_name, self.max_model_len, config.max_num_seqs)
        self.cost = model_cost(config)
        self.runner = make_executor(config, layout, self.metrics, self.tokenizer.eos_token_id, self.clock)

    # ---- requests ------------------------------------------------------------------------------

    def new_sequence(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Sequence:
        """A sequence for a prompt, which must fit the context and the vocabulary (ValueError otherwise)."""
        self.check_prompt(prompt_ids)
        generator = None if params.seed is None else torch.Generator().manual_seed(params.seed)
        return Sequence(request_id, list(prompt_ids), params, self.clock.now(), generator)

    def check_prompt(self, prompt_ids: list[int]) -> None:
        """ValueError unless the prompt fits the context (with one output token) and the vocabulary."""
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        if len(prompt_ids) >= self.max_model_len:
            raise ValueError(
                f"the prompt has {len(prompt_ids)} tokens; this model's context is "
                f"{self.max_model_len} tokens, including at least one output token"
            )
        if min(prompt_ids) < 0 or max(prompt_ids) >= self.shape.vocab_size:
            raise ValueError(f"prompt token ids must be in 0..{self.shape.vocab_size - 1}")

    def add(self, seq: Sequence) -> None:
        """Queue a sequence; the next steps run it."""
        self.scheduler.add(seq)

    def abort(self, request_id: str) -> RequestOutput | None:
        """End a request now, freeing its blocks; None when it is not here (already finished)."""
        for seq in [*self.scheduler.running, *self.scheduler.waiting]:
            if seq.request_id == request_id:
                return self._finish(seq, "abort", TokenOutput(-1, ""))
        return None

    def abort_all(self) -> None:
        """End every request (shutting down), freeing every block."""
        for seq in [*self.scheduler.running, *self.scheduler.waiting]:
            self._finish(seq, "abort", TokenOutput(-1, ""))

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    def shutdown(self) -> None:
        """Stop the tensor-parallel ranks."""
        self.runner.shutdown()

    # ---- pooling ---------------------------------------------------------------------------------

    def pool(self, prompts: list[list[int]]) -> list[list[float]]:
        """Embeddings of checked prompts: each prefilled whole, its final hidden states averaged and
        L2-normalised. Runs between steps, outside the scheduler: it takes no KV blocks and no batch
        slot, and the sequences waiting meanwhile wait for it as they would for a step. EngineFault
        propagates; other errors fail this job only."""
        work = self.cost.step([ChunkWork(len(p), 0, False) for p in prompts])
        start = self.clock.now()
        vectors = self.runner.pool(prompts, work)
        m = self.metrics
        m.step_seconds["prefill"].observe(self.clock.now() - start)
        m.batch_size["prefill"].observe(len(prompts))
        m.iteration_tokens.observe(work.tokens)
        m.prompt_tokens.inc(work.tokens)
        m.record_work(work)
        return [v.tolist() for v in vectors]

    # ---- one step --------------------------------------------------------------------------------

    def step(self) -> StepResult:
        """Schedule, run, sample, append, finish, record. A failing step fails its own requests only;
        EngineFault (a broken device, a lost rank) propagates."""
        chunks = self.scheduler.schedule(self.clock.now())
        # The gauges show the batch this step runs: updated only at the step's end, a scrape during
        # a long step would read the state before its admissions (0 running when the last batch
        # finished together, while the new one prefills).
        self._update_gauges()
        outputs: list[RequestOutput] = []
        if chunks:
            try:
                self._execute(chunks, outputs)
            except EngineFault:
                raise
            except Exception as e:
                log.exception("an engine step failed; failing its %d sequences", len(chunks))
                error = StepFailed(f"the engine step failed: {e!r}")
                outputs += [self._fail(c.seq, error) for c in chunks if c.seq.status is not Status.FINISHED]
        else:
            self.runner.keepalive()
        self._update_gauges()
        return StepResult(outputs, len(chunks))

    def _execute(self, chunks: list[ScheduledChunk], outputs: list[RequestOutput]) -> None:
        start = self.clock.now()
        work = self.cost.step([ChunkWork(c.num_tokens, c.seq.num_computed, c.completes) for c in chunks])
        executed = self.runner.run(chunks, work)
        now = self.clock.now()
        elapsed = now - start
        decodes = 0  # chunks that were one output token's decode
        for c in chunks:
            seq, n = c.seq, c.num_tokens
            self.blocks.cache_blocks(seq, seq.num_computed, seq.num_computed + n)
            seq.num_computed += n
            decodes += n == 1 and seq.num_computed > len(seq.prompt_ids)
        # The sequences that decoded in the last step share one gap: each distinct gap is observed
        # once, with its count (a per-token cost).
        gaps: dict[float, int] = {}
        try:
            self._append(executed.sampled, executed.tokens, now, gaps, outputs)
        finally:
            for gap, count in gaps.items():
                self.metrics.itl.observe(gap, count)
        phase = "decode" if decodes == len(chunks) else "prefill" if decodes == 0 else "mixed"
        self._record_step(phase, len(chunks), work.tokens, elapsed, executed.collective, len(executed.tokens))
        self.metrics.record_work(work)

    def _append(
        self, seqs: list[Sequence], tokens: list[int], now: float, gaps: dict[float, int], outputs: list[RequestOutput]
    ) -> None:
        """Add each sampled token to its sequence and turn it into the request's next output, one by
        one (a later failure keeps these); count the inter-token gaps in `gaps`. Once per token: the
        engine's hot loop."""
        m, advance, tokenizer, max_model_len = self.metrics, stopping.advance, self.tokenizer, self.max_model_len
        for seq, token in zip(seqs, tokens, strict=True):
            last = seq.last_token_time
            if seq.first_token_time is None:
                seq.first_token_time = now
                m.ttft.observe(now - seq.arrival)
                m.prompt_tokens.inc(len(seq.prompt_ids))
            elif last is not None:
                gaps[now - last] = gaps.get(now - last, 0) + 1
            seq.last_token_time = now
            seq.output_ids.append(token)
            text, reason = advance(seq, token, tokenizer, max_model_len)
            if reason is not None:
                outputs.append(self._finish(seq, reason, TokenOutput(token, text)))
            else:
                out = TokenOutput(token, text, None, len(seq.prompt_ids), len(seq.output_ids), seq.cached_tokens)
                outputs.append(RequestOutput(seq.request_id, out))

    def _finish(self, seq: Sequence, reason: str, out: TokenOutput) -> RequestOutput:
        """Free seq's blocks, record its metrics and mark `out` as its final output."""
        self.scheduler.remove(seq)
        out.finish_reason = reason
        self.metrics.request_finished(seq, reason, self.clock.now())
        return RequestOutput(seq.request_id, _counted(seq, out))

    def _fail(self, seq: Sequence, error: StepFailed) -> RequestOutput:
        """Free seq's blocks and count it as an error."""
        self.scheduler.remove(seq)
        self.metrics.request_finished(seq, "error", self.clock.now())
        return RequestOutput(seq.request_id, error)

    def _record_step(
        self, phase: str, sequences: int, num_tokens: int, elapsed: float, collective: float, generated: int
    ) -> None:
        m = self.metrics
        m.step_seconds[phase].observe(elapsed)
        m.batch_size[phase].observe(sequences)
        m.iteration_tokens.observe(num_tokens)
        m.collective_seconds.observe(collective)
        m.generation_tokens.inc(generated)
        stats = self.scheduler.take_stats()
        m.preemptions.inc(stats.preemptions)
        m.prefix_cache_queries.inc(stats.prefix_queries)
        m.prefix_cache_hits.inc(stats.prefix_hits)

    def _update_gauges(self) -> None:
        m = self.metrics
        m.running.set(len(self.scheduler.running))
        m.waiting.set(len(self.scheduler.waiting))
        m.kv_usage.set(1.0 - self.blocks.num_free / self.blocks.total)


def _counted(seq: Sequence, out: TokenOutput) -> TokenOutput:
    out.prompt_tokens = len(seq.prompt_ids)
    out.cached_tokens = seq.cached_tokens
    out.output_tokens = len(seq.output_ids)
    return out
