"""The engine the HTTP API talks to: an asyncio front over one background engine-loop thread.

The loop thread owns the scheduler, the KV blocks and the model; it runs one step at a time and
hands each new token to the request's asyncio stream with `loop.call_soon_threadsafe`, so the event
loop never waits for the model.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

import torch

from reference_server.config import CHOICES, EngineConfig
from reference_server.engine import stopping
from reference_server.engine.block_manager import BlockManager
from reference_server.engine.metrics import EngineMetrics
from reference_server.engine.runner import EngineFault, ModelRunner, build_step, kv_layout
from reference_server.engine.sampler import Sampler
from reference_server.engine.scheduler import ScheduledChunk, Scheduler
from reference_server.engine.sequence import Sequence, Status
from reference_server.engine.work import step_work
from reference_server.interface import EngineDead, QueueFull, SamplingParams, StepFailed, TokenOutput
from reference_server.model import PRESETS
from reference_server.tokenizer import ByteTokenizer

log = logging.getLogger("reference_server.engine")
IDLE_WAIT = 0.5          # seconds the loop sleeps with nothing to do (woken at once by new work)
STATIC_POLL = 0.005      # static batching: how often to re-check whether a batch is due


class RequestStream:
    """Async iterator of one request's TokenOutputs; the last one carries finish_reason."""

    def __init__(self, request_id: str, engine: "AsyncEngine") -> None:
        self.request_id = request_id
        self._engine = engine
        self._queue: asyncio.Queue[TokenOutput | Exception] = asyncio.Queue()
        self.finished = False

    def _put(self, item: TokenOutput | Exception) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> "RequestStream":
        return self

    async def __anext__(self) -> TokenOutput:
        if self.finished:
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, Exception):
            self.finished = True
            raise item
        if item.finish_reason is not None:
            self.finished = True
        return item

    def abort(self) -> None:
        """Stop generating (client went away); the blocks are freed by the next step."""
        self._engine.abort(self.request_id)


class AsyncEngine:
    """Continuous-batching engine with a paged KV cache (static batching / contiguous KV as A/B modes)."""

    def __init__(self, config: EngineConfig) -> None:
        _validate(config)
        self.config = config
        self.shape = PRESETS[config.preset]
        self.tokenizer = ByteTokenizer()
        self.model_name = config.model_name
        layout = kv_layout(config)
        self.max_model_len = layout.max_model_len
        self._layout = layout
        self.blocks = BlockManager(layout.num_blocks, layout.block_size, layout.blocks_per_slab)
        self.scheduler = Scheduler(config, self.blocks)
        self.sampler = Sampler(self.tokenizer.eos_token_id, config.seed)
        self.metrics = EngineMetrics(config.model_name, self.max_model_len)
        self.registry = self.metrics.registry
        self._lock = threading.Condition()
        self._inbox: list[Sequence] = []              # accepted, not yet seen by the loop
        self._aborts: set[str] = set()
        self._streams: dict[str, RequestStream] = {}  # every unfinished request
        self._num_waiting = 0                         # inbox + scheduler.waiting, for QueueFull
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dead: BaseException | None = None

    # ---- the asyncio side -------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._dead is None

    @property
    def kv_blocks_total(self) -> int:
        return self.blocks.total

    @property
    def kv_blocks_free(self) -> int:
        return self.blocks.num_free

    async def start(self) -> None:
        """Load the model (in the loop thread) and return once it is ready to serve."""
        self._loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="engine-loop", daemon=True)
        self._thread.start()
        await ready

    async def shutdown(self) -> None:
        """Stop the loop thread and the tensor-parallel workers; unfinished requests end with "abort"."""
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> RequestStream:
        """Queue a request; its tokens arrive on the returned stream. Call from the event loop."""
        return self.add_requests([(request_id, prompt_ids)], params)[0]

    def add_requests(self, prompts: list[tuple[str, list[int]]], params: SamplingParams) -> list[RequestStream]:
        """Queue (request id, prompt ids) pairs sharing params, all or none: a batch never takes part
        of the queue and then gives up, failing other clients' requests meanwhile."""
        if not self.healthy:
            raise EngineDead("the engine loop is not running")
        if len(prompts) > self.config.max_waiting:   # it could never be queued: a 400, not a 429
            raise ValueError(f"the request has {len(prompts)} prompts; this server queues at most "
                             f"{self.config.max_waiting} (--max-waiting)")
        seqs = [self._sequence(request_id, prompt_ids, params) for request_id, prompt_ids in prompts]
        streams = [RequestStream(seq.request_id, self) for seq in seqs]
        with self._lock:
            ids = [seq.request_id for seq in seqs]
            taken = [i for i in ids if i in self._streams] or [i for i in ids if ids.count(i) > 1]
            if taken:
                raise ValueError(f"request id {taken[0]!r} is already in use")
            if self._num_waiting + len(seqs) > self.config.max_waiting:
                raise QueueFull(f"{self._num_waiting} requests are already waiting")
            self._num_waiting += len(seqs)
            self._inbox += seqs
            self._streams.update(zip(ids, streams))
            self._lock.notify()
        return streams

    def _sequence(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Sequence:
        """A new sequence for a prompt, which must fit the context and the vocabulary."""
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        if len(prompt_ids) >= self.max_model_len:
            raise ValueError(f"the prompt has {len(prompt_ids)} tokens; this model's context is "
                             f"{self.max_model_len} tokens, including at least one output token")
        if min(prompt_ids) < 0 or max(prompt_ids) >= self.shape.vocab_size:
            raise ValueError(f"prompt token ids must be in 0..{self.shape.vocab_size - 1}")
        generator = None if params.seed is None else torch.Generator().manual_seed(params.seed)
        return Sequence(request_id, list(prompt_ids), params, time.monotonic(), generator)

    def abort(self, request_id: str) -> None:
        """End a request early; its KV blocks are freed before the next step runs."""
        with self._lock:
            if request_id in self._streams:
                self._aborts.add(request_id)
                self._lock.notify()

    # ---- the loop thread --------------------------------------------------------------------

    def _run(self, ready: asyncio.Future) -> None:
        try:
            runner = ModelRunner(self.config, self._layout)
        except BaseException as e:  # report to start(), then the engine is simply not healthy
            self._dead = e
            self._loop.call_soon_threadsafe(ready.set_exception, e)
            return
        self._loop.call_soon_threadsafe(ready.set_result, None)
        try:
            while self._next_step(runner):
                pass
        except BaseException as e:
            log.exception("engine loop died")
            self._dead = e
        finally:
            self._end_all(runner)

    def _next_step(self, runner: ModelRunner) -> bool:
        """Run one step (or wait for work); False when shutting down."""
        with self._lock:
            if self._stopping:
                return False
            new, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, set()
        for seq in new:
            self.scheduler.add(seq)
        outputs: list[tuple[RequestStream, TokenOutput | Exception]] = []
        for request_id in aborts:
            seq = self._find(request_id)
            if seq is not None:
                outputs.append(self._finish(seq, "abort", TokenOutput(-1, "")))
        now = time.monotonic()
        chunks = self.scheduler.schedule(now)
        self._update_gauges()
        try:
            if chunks:
                self._run_step(runner, chunks, outputs)
        finally:  # even when the engine dies in this step, the streams already ended hear of it
            self._deliver(outputs)
        if not chunks:
            with self._lock:
                if not self._inbox and not self._aborts and not self._stopping:
                    self._lock.wait(STATIC_POLL if self.scheduler.waiting else IDLE_WAIT)
            runner.keepalive()
        return True

    def _find(self, request_id: str) -> Sequence | None:
        for seq in [*self.scheduler.running, *self.scheduler.waiting]:
            if seq.request_id == request_id:
                return seq
        return None

    def _run_step(self, runner: ModelRunner, chunks: list[ScheduledChunk],
                  outputs: list[tuple[RequestStream, TokenOutput | Exception]]) -> None:
        """Run a step; if it fails, fail its sequences (freeing their blocks) and go on serving.

        Only a broken device or a lost tensor-parallel peer (EngineFault) ends the loop.
        """
        try:
            self._execute(runner, chunks, outputs)
        except EngineFault:
            raise
        except Exception as e:
            log.exception("an engine step failed; failing its %d sequences", len(chunks))
            error = StepFailed(f"the engine step failed: {e!r}")
            outputs += [self._fail(c.seq, error) for c in chunks if c.seq.status is not Status.FINISHED]

    def _execute(self, runner: ModelRunner, chunks: list[ScheduledChunk],
                 outputs: list[tuple[RequestStream, TokenOutput | Exception]]) -> None:
        start = time.perf_counter()
        step, sampled = build_step(chunks, self.blocks.block_size, self.blocks.blocks_per_slab)
        logits, collective = runner.execute(step)
        tokens = self.sampler.sample(logits, sampled)
        elapsed = time.perf_counter() - start
        now = time.monotonic()
        for c in chunks:
            c.seq.num_computed += c.num_tokens
        for seq, token in zip(sampled, tokens):  # appended one by one: a later failure keeps these
            outputs.append(self._append(seq, token, now))
        self._record_step(chunks, elapsed, collective, len(tokens))

    def _append(self, seq: Sequence, token: int, now: float) -> tuple[RequestStream, TokenOutput]:
        """Add a sampled token to seq and turn it into the stream's next TokenOutput."""
        m = self.metrics
        if seq.first_token is None:
            seq.first_token = now
            m.ttft.observe(now - seq.arrival)
            m.prompt_tokens.inc(len(seq.prompt_ids))
        else:
            m.itl.observe(now - seq.last_token)
        seq.last_token = now
        seq.output_ids.append(token)
        text, reason = stopping.advance(seq, token, self.tokenizer, self.max_model_len)
        out = TokenOutput(token, text)
        if reason is not None:
            return self._finish(seq, reason, out)
        return self._streams[seq.request_id], _counted(seq, out)

    def _finish(self, seq: Sequence, reason: str, out: TokenOutput) -> tuple[RequestStream, TokenOutput]:
        """Free seq's blocks, record its metrics and mark `out` as its final output."""
        self.scheduler.remove(seq)
        out.finish_reason = reason
        self.metrics.request_finished(seq, reason, time.monotonic())
        with self._lock:
            stream = self._streams.pop(seq.request_id)
        return stream, _counted(seq, out)

    def _fail(self, seq: Sequence, error: StepFailed) -> tuple[RequestStream, StepFailed]:
        """Free seq's blocks, count it as an error and hand its stream the error."""
        self.scheduler.remove(seq)
        self.metrics.request_finished(seq, "error", time.monotonic())
        with self._lock:
            return self._streams.pop(seq.request_id), error

    def _record_step(self, chunks: list[ScheduledChunk], elapsed: float, collective: float,
                     generated: int) -> None:
        m = self.metrics
        num_tokens = sum(c.num_tokens for c in chunks)
        decodes = sum(1 for c in chunks if c.num_tokens == 1 and c.seq.num_computed > len(c.seq.prompt_ids))
        phase = "decode" if decodes == len(chunks) else "prefill" if decodes == 0 else "mixed"
        m.step_seconds[phase].observe(elapsed)
        m.batch_size.observe(len(chunks))
        m.iteration_tokens.observe(num_tokens)
        m.collective_seconds.observe(collective)
        # num_computed already counts this step's tokens: the context before a chunk is the rest.
        work = step_work(self.shape, self.config.dtype, self.config.tensor_parallel,
                         [(c.num_tokens, c.seq.num_computed - c.num_tokens) for c in chunks], generated)
        m.estimated_flops.inc(work.flops)
        m.estimated_read_bytes.inc(work.read_bytes)
        m.estimated_write_bytes.inc(work.write_bytes)
        m.generation_tokens.inc(generated)
        m.preemptions.inc(self.scheduler.take_preemptions())
        self._update_gauges()

    def _update_gauges(self) -> None:
        m = self.metrics
        m.running.set(len(self.scheduler.running))
        with self._lock:
            self._num_waiting = len(self._inbox) + len(self.scheduler.waiting)
            m.waiting.set(self._num_waiting)
        m.kv_usage.set(1.0 - self.blocks.num_free / self.blocks.total)

    def _deliver(self, outputs: list[tuple[RequestStream, TokenOutput | Exception]]) -> None:
        """Hand a step's outputs to the event loop in one call."""
        if outputs:
            self._loop.call_soon_threadsafe(_put_all, outputs)

    def _end_all(self, runner: ModelRunner) -> None:
        """On shutdown or death: end every open stream (abort / EngineDead) and stop the workers."""
        outputs: list[tuple[RequestStream, TokenOutput | Exception]] = []
        for seq in [*self.scheduler.running, *self.scheduler.waiting]:
            if self._dead is None:
                outputs.append(self._finish(seq, "abort", TokenOutput(-1, "")))
            else:
                self.scheduler.remove(seq)
        with self._lock:
            if self._dead is None:   # the streams left are those of requests still in the inbox
                outputs += [(s, TokenOutput(-1, "", "abort")) for s in self._streams.values()]
            else:
                outputs += [(s, EngineDead(f"engine loop died: {self._dead!r}")) for s in self._streams.values()]
            self._inbox = []
            self._streams.clear()
        try:
            self._deliver(outputs)
        except RuntimeError:   # the event loop is already closed
            pass
        runner.shutdown()


def _validate(config: EngineConfig) -> None:
    """Refuse a bad configuration with one clear ValueError before anything is loaded."""
    if config.preset not in PRESETS:
        raise ValueError(f"unknown preset {config.preset!r}; choose from {', '.join(PRESETS)}")
    for name, allowed in CHOICES.items():
        value = getattr(config, name)
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "tensor_parallel", "max_waiting"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be at least 1, not {getattr(config, name)}")
    for name in ("max_model_len", "long_prefill_token_threshold", "num_kv_blocks", "kv_memory_gb",
                 "static_batch_timeout", "cpu_threads"):
        if getattr(config, name) < 0:
            raise ValueError(f"{name} must not be negative, not {getattr(config, name)}")
    if config.weights and not os.path.isfile(config.weights):
        raise ValueError(f"weights file {config.weights!r} does not exist")
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda: PyTorch sees no CUDA GPU here")
    if config.device == "cuda" and config.tensor_parallel > torch.cuda.device_count():
        raise ValueError(f"tensor_parallel={config.tensor_parallel} needs that many CUDA devices; "
                         f"{torch.cuda.device_count()} found")


def _counted(seq: Sequence, out: TokenOutput) -> TokenOutput:
    out.prompt_tokens = len(seq.prompt_ids)
    out.output_tokens = len(seq.output_ids)
    return out


def _put_all(outputs: list[tuple[RequestStream, TokenOutput | Exception]]) -> None:
    for stream, out in outputs:
        stream._put(out)
